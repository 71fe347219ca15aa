package main

import (
	"encoding/json"
	"fmt"
)

// status prints the node's status in rabbitmq-diagnostics status's
// sections (Runtime, Alarms, Memory, File Descriptors, Free Disk Space,
// Totals, Listeners), from /api/nodes and /api/overview; sizes in gb as
// RabbitMQ prints them.
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
	num := func(k string) float64 { f, _ := n[k].(float64); return f }
	if s.json {
		b, _ := json.Marshal(map[string]any{"node_name": o.Node, "pid": n["os_pid"], "rabbitmq_version": o.ProductVersion, "product_name": "railmq",
			"uptime": int64(num("uptime") / 1000), "alarms": alarmNames(n), "memory": map[string]any{"total": map[string]any{"rss": num("mem_used")}},
			"vm_memory_high_watermark_limit": num("mem_limit"), "disk_free": num("disk_free"), "disk_free_limit": num("disk_free_limit"),
			"file_descriptors": map[string]any{"total_used": num("fd_used"), "total_limit": num("fd_total")},
			"totals":           map[string]any{"connection_count": o.ObjectTotals["connections"], "queue_count": o.ObjectTotals["queues"], "virtual_host_count": len(vhosts)},
			"data_directory":   n["db_dir"]})
		fmt.Fprintln(s.stdout, string(b))
		return nil
	}
	gb := func(b float64) string { return fmt.Sprintf("%.4f gb", b/1e9) }
	w := func(format string, a ...any) { fmt.Fprintf(s.stdout, format+"\n", a...) }
	s.banner("Status of node %s ...", o.Node)
	w("Runtime\n")
	w("OS PID: %v", n["os_pid"])
	w("Uptime (seconds): %d", int64(num("uptime")/1000))
	w("railmq version: %s", o.ProductVersion)
	w("Node name: %s", o.Node)
	w("\nData directory\n")
	w("Node data directory: %v", n["db_dir"])
	w("\nAlarms\n")
	if al := alarmNames(n); len(al) > 0 {
		for _, a := range al {
			w("%s", a)
		}
	} else {
		w("(none)")
	}
	w("\nMemory\n")
	w("Total memory used: %s", gb(num("mem_used")))
	w("Calculation strategy: %v", n["mem_calculation_strategy"])
	w("Memory high watermark: %s", gb(num("mem_limit")))
	w("\nFile Descriptors\n")
	w("Total: %d, limit: %d", int64(num("fd_used")), int64(num("fd_total")))
	w("\nFree Disk Space\n")
	w("Low free disk space watermark: %s", gb(num("disk_free_limit")))
	w("Free disk space: %s", gb(num("disk_free")))
	w("\nTotals\n")
	w("Connection count: %d", o.ObjectTotals["connections"])
	w("Queue count: %d", o.ObjectTotals["queues"])
	w("Virtual host count: %d", len(vhosts))
	w("\nListeners\n")
	for _, l := range s.nodeListeners(o) {
		w("%s", l)
	}
	return nil
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
