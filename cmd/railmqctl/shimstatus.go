package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// status prints the node's status as rabbitmq-diagnostics status does
// (rabbitmq_cli status_command.ex; compared with RabbitMQ 3.10.8 on this
// machine), from /api/nodes, /api/overview and /api/vhosts: the sections
// railmq can fill truthfully (Runtime, Data directory, Config files, Log
// file(s), Alarms, Memory, File Descriptors, Free Disk Space, Totals,
// Listeners) and not the Erlang runtime's (Erlang configuration, crypto
// library, processes, run queue, net_ticktime, plugins, the memory
// breakdown by Erlang allocator). Sizes in gb as RabbitMQ prints them.
func (s *shim) status() error {
	o, err := s.hello()
	if err != nil {
		return err
	}
	raw, err := s.c.do("GET", "/api/nodes", nil)
	if err != nil {
		return err
	}
	var nodes []map[string]any
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return fmt.Errorf("/api/nodes: %w", err)
	}
	var n map[string]any
	for _, m := range nodes {
		if m["name"] == o.Node {
			n = m
		}
	}
	if n == nil {
		return &shimError{code: exitSoftware, msg: "node " + o.Node + " is not in /api/nodes"}
	}
	vraw, err := s.c.do("GET", "/api/vhosts", nil)
	if err != nil {
		return err
	}
	var vhosts []any
	_ = json.Unmarshal(vraw, &vhosts)
	st := s.statusFields(o, n, len(vhosts))
	if s.json {
		b, _ := json.Marshal(st)
		fmt.Fprintln(s.stdout, string(b))
		return nil
	}
	s.printStatus(o, st)
	return nil
}

// statusFields is the node's status under the keys of RabbitMQ's
// status --formatter json.
func (s *shim) statusFields(o *overview, n map[string]any, vhosts int) map[string]any {
	num := func(k string) float64 { f, _ := n[k].(float64); return f }
	st := map[string]any{"node_name": o.Node, "pid": n["os_pid"], "product_name": o.ProductName, "product_version": o.ProductVersion,
		"rabbitmq_version": o.RabbitMQVersion, "uptime": int64(num("uptime") / 1000), "is_under_maintenance": false,
		"alarms": alarmNames(n), "memory": map[string]any{"total": map[string]any{"rss": num("mem_used")}},
		"vm_memory_calculation_strategy": n["mem_calculation_strategy"], "vm_memory_high_watermark_limit": num("mem_limit"),
		"disk_free": num("disk_free"), "disk_free_limit": num("disk_free_limit"),
		"file_descriptors": map[string]any{"total_used": num("fd_used"), "total_limit": num("fd_total")},
		"totals":           map[string]any{"connection_count": o.ObjectTotals["connections"], "queue_count": o.ObjectTotals["queues"], "virtual_host_count": vhosts},
		"data_directory":   n["db_dir"], "log_files": stringList(n["log_files"])}
	if n["log_files"] == nil {
		// railmq logs to its standard error only (it has no log.file).
		st["log_files"] = []string{"<stderr>"}
	}
	if cf := stringList(n["config_files"]); cf != nil {
		st["config_files"] = cf
	}
	if s.local() {
		st["os"] = osName()
	}
	var ls []map[string]any
	for _, l := range s.nodeListeners(o) {
		ls = append(ls, map[string]any{"node": o.Node, "interface": l.ip, "port": l.port, "protocol": l.protocol, "purpose": l.purpose})
	}
	st["listeners"] = ls
	return st
}

// printStatus prints st as rabbitmq-diagnostics status's text.
func (s *shim) printStatus(o *overview, st map[string]any) {
	w := func(format string, a ...any) { fmt.Fprintf(s.stdout, format+"\n", a...) }
	num := func(k string) float64 { f, _ := st[k].(float64); return f }
	list := func(title, key string) {
		if l, ok := st[key].([]string); ok {
			w("\n%s\n", title)
			for _, p := range l {
				w(" * %s", p)
			}
		}
	}
	s.banner("Status of node %s ...", o.Node)
	w("Runtime\n")
	w("OS PID: %v", st["pid"])
	if os, ok := st["os"]; ok {
		w("OS: %v", os)
	}
	w("Uptime (seconds): %d", st["uptime"])
	w("Is under maintenance?: false")
	// As RabbitMQ: the product's name and version when the node gives them.
	if o.ProductName != "" {
		w("Product name: %s", o.ProductName)
	}
	if o.ProductVersion != "" {
		w("Product version: %s", o.ProductVersion)
	}
	if o.RabbitMQVersion != "" {
		w("RabbitMQ version: %s", o.RabbitMQVersion)
	}
	w("Node name: %s", o.Node)
	w("\nData directory\n")
	w("Node data directory: %v", st["data_directory"])
	list("Config files", "config_files")
	list("Log file(s)", "log_files")
	w("\nAlarms\n")
	if al := st["alarms"].([]string); len(al) > 0 {
		for _, a := range al {
			w("%s", a)
		}
	} else {
		w("(none)")
	}
	mem := st["memory"].(map[string]any)["total"].(map[string]any)["rss"].(float64)
	w("\nMemory\n")
	w("Total memory used: %s", gb(mem))
	w("Calculation strategy: %v", st["vm_memory_calculation_strategy"])
	w("Memory high watermark: computed to: %s", gb(num("vm_memory_high_watermark_limit")))
	fd := st["file_descriptors"].(map[string]any)
	w("\nFile Descriptors\n")
	w("Total: %d, limit: %d", int64(fd["total_used"].(float64)), int64(fd["total_limit"].(float64)))
	w("\nFree Disk Space\n")
	w("Low free disk space watermark: %s", gb(num("disk_free_limit")))
	w("Free disk space: %s", gb(num("disk_free")))
	t := st["totals"].(map[string]any)
	w("\nTotals\n")
	w("Connection count: %d", t["connection_count"])
	w("Queue count: %d", t["queue_count"])
	w("Virtual host count: %d", t["virtual_host_count"])
	w("\nListeners\n")
	ls := s.nodeListeners(o)
	if len(ls) == 0 {
		w("(none)")
	}
	for _, l := range ls {
		w("%s", l)
	}
}

// gb is b bytes in gigabytes as RabbitMQ's CLI prints them
// (information_unit.ex: Float.round(b / 1.0e9, 4), Elixir's shortest
// float text): 0.05 gb, 39.5917 gb, 0.0 gb.
func gb(b float64) string {
	v := math.Round(b/1e9*1e4) / 1e4
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s + " gb"
}

// stringList is v as a list of strings, or nil when it is none.
func stringList(v any) []string {
	l, ok := v.([]any)
	if !ok {
		return nil
	}
	out := []string{}
	for _, e := range l {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// local reports whether the node is this machine (its API on a loopback
// address or this host's name): only then is this machine's OS the node's.
func (s *shim) local() bool {
	u, err := url.Parse(s.c.base)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	me, _ := os.Hostname()
	short, _, _ := strings.Cut(me, ".")
	return h == "localhost" || h == me || h == short
}

// osName is the OS as RabbitMQ's status names it (rabbitmq_cli
// platform.ex os_name/1: macOS, FreeBSD, Windows, else the capitalized
// name: Linux).
func osName() string {
	switch runtime.GOOS {
	case "darwin":
		return "macOS"
	case "freebsd":
		return "FreeBSD"
	case "windows":
		return "Windows"
	}
	return strings.ToUpper(runtime.GOOS[:1]) + runtime.GOOS[1:]
}

// alarmNames are the node's alarms in effect, as status lists them.
func alarmNames(n map[string]any) []string {
	var out []string
	if n["mem_alarm"] == true {
		out = append(out, "Memory alarm on node "+fmt.Sprint(n["name"]))
	}
	if n["disk_free_alarm"] == true {
		out = append(out, "Free disk space alarm on node "+fmt.Sprint(n["name"]))
	}
	if out == nil {
		out = []string{}
	}
	return out
}
