package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// dispatch runs one shim command. The texts are RabbitMQ 3.10.8's
// (recorded on this machine; shim_test.go quotes them).
func (s *shim) dispatch(cmd string, args []string) error {
	if !s.takes(cmd) {
		return s.unknownCommand(cmd)
	}
	switch cmd {
	case "ping":
		return s.ping()
	case "check_running", "is_running":
		return s.checkRunning()
	case "check_local_alarms":
		return s.checkAlarms()
	case "check_alarms":
		return s.checkAllAlarms()
	case "check_port_connectivity":
		return s.checkPorts()
	case "check_virtual_hosts":
		return s.checkVHosts()
	case "status":
		return s.status()
	case "listeners":
		return s.listeners()
	case "await_startup":
		return s.awaitStartup(args)
	case "list_queues":
		return s.listQueues(args)
	case "trace_on", "trace_off":
		return s.trace(cmd == "trace_on")
	case "version":
		fmt.Fprintln(s.stdout, version)
		return nil
	case "node_health_check":
		return s.checkAlarms()
	case "list_connections", "close_connection", "set_vm_memory_high_watermark":
		return s.legacy(cmd, args)
	}
	return s.unknownCommand(cmd)
}

// overview is what /api/overview says of the node.
type overview struct {
	Node            string `json:"node"`
	ProductName     string `json:"product_name"`
	ProductVersion  string `json:"product_version"`
	RabbitMQVersion string `json:"rabbitmq_version"`
	Listeners       []struct {
		Protocol string `json:"protocol"`
		IP       string `json:"ip_address"`
		Port     int    `json:"port"`
	} `json:"listeners"`
	ObjectTotals map[string]int `json:"object_totals"`
}

// hello asks the node for its overview; the node's own name replaces
// the guessed one (unless -n named it).
func (s *shim) hello() (*overview, error) {
	raw, err := s.c.do("GET", "/api/overview", nil)
	if err != nil {
		return nil, err
	}
	var o overview
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("/api/overview: %w", err)
	}
	if !s.nodeGiven && o.Node != "" {
		s.node = o.Node
	}
	return &o, nil
}

func (s *shim) ok(text string, jsonBody any) {
	if s.json {
		b, _ := json.Marshal(jsonBody)
		fmt.Fprintln(s.stdout, string(b))
		return
	}
	fmt.Fprintln(s.stdout, text)
}

// ping answers once the API answers and takes the user (a node still
// recovering answers 503 to everyone: its process is up, as RabbitMQ's
// ping says of a booting node).
func (s *shim) ping() error {
	_, err := s.hello()
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusServiceUnavailable {
		err = nil
	}
	s.banner("Will ping %s. This only checks if the node's management API answers and takes the CLI's user. Timeout: %d ms.", s.node, s.timeout.Milliseconds())
	if err != nil {
		if errors.As(err, &se) && se.Code != http.StatusUnauthorized && se.Code != http.StatusForbidden {
			return err
		}
		return &shimError{code: exitUnavailable, multiline: true, msg: fmt.Sprintf("Failed to connect and authenticate to %s in %d ms (%v)", s.node, s.timeout.Milliseconds(), err)}
	}
	s.ok("Ping succeeded", map[string]any{"result": "ok"})
	return nil
}

func (s *shim) checkRunning() error {
	_, err := s.hello()
	s.banner("Checking if RabbitMQ is running on node %s ...", s.node)
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusServiceUnavailable {
		return &shimError{code: exitUnavailable, multiline: true, msg: fmt.Sprintf("RabbitMQ on node %s is not running or has not fully booted yet (check with is_booting)", s.node)}
	}
	if err != nil {
		return err
	}
	s.ok(fmt.Sprintf("RabbitMQ on node %s is fully booted and running", s.node), map[string]any{"result": "ok"})
	return nil
}

// checkAlarms fails (69) naming each alarm in effect, as
// rabbitmq_cli's alarm_lines.
func (s *shim) checkAlarms() error {
	return s.alarmCheck("/api/health/checks/local-alarms", "local alarms", "reported local alarms")
}

// checkAllAlarms is check_alarms: local or cluster-wide. RabbitMQ
// 3.10.8: "Asking node rabbit@vm to report any local resource alarms
// ...", "Node rabbit@vm reported no alarms, local or clusterwide".
func (s *shim) checkAllAlarms() error {
	return s.alarmCheck("/api/health/checks/alarms", "alarms, local or clusterwide", "reported alarms")
}

// alarmCheck asks path; none is "Node N reported no " + none.
func (s *shim) alarmCheck(path, none, some string) error {
	if _, err := s.hello(); err != nil {
		return err
	}
	s.banner("Asking node %s to report any local resource alarms ...", s.node)
	_, err := s.c.do("GET", path, nil)
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusServiceUnavailable {
		var body struct {
			Alarms []struct{ Node, Resource string }
		}
		if json.Unmarshal(se.Body, &body) == nil && len(body.Alarms) > 0 {
			var lines []string
			for _, a := range body.Alarms {
				switch a.Resource {
				case "memory":
					lines = append(lines, "Memory alarm on node "+a.Node)
				case "disk space", "disk": // RabbitMQ 3.10.8 says "disk space"; older railmq nodes "disk"
					lines = append(lines, "Free disk space alarm on node "+a.Node)
				default:
					lines = append(lines, a.Resource+" alarm on node "+a.Node)
				}
			}
			if s.json {
				b, _ := json.Marshal(map[string]any{"result": "error", "local": lines, "message": "Node " + s.node + " " + some})
				fmt.Fprintln(s.stdout, string(b))
			}
			return &shimError{code: exitUnavailable, multiline: true, msg: strings.Join(lines, "\n")}
		}
	}
	if err != nil {
		return err
	}
	s.ok(fmt.Sprintf("Node %s reported no %s", s.node, none), map[string]any{"result": "ok"})
	return nil
}

func (s *shim) checkVHosts() error {
	if _, err := s.hello(); err != nil {
		return err
	}
	s.banner("Checking if all vhosts are running on node %s ...", s.node)
	if _, err := s.c.do("GET", "/api/health/checks/virtual-hosts", nil); err != nil {
		return err
	}
	s.ok(fmt.Sprintf("Node %s reported all vhosts as running", s.node), map[string]any{"result": "ok"})
	return nil
}

// listener is one of the node's listeners as RabbitMQ's listeners
// command prints it.
type listener struct {
	ip, protocol, purpose string
	port                  int
}

func (l listener) String() string {
	return fmt.Sprintf("Interface: %s, port: %d, protocol: %s, purpose: %s", l.ip, l.port, l.protocol, l.purpose)
}

// nodeListeners are the node's AMQP listeners (/api/overview) and the
// management API the CLI talks to, by port.
func (s *shim) nodeListeners(o *overview) []listener {
	var out []listener
	for _, l := range o.Listeners {
		ip := l.IP
		if ip == "::" {
			ip = "[::]"
		}
		out = append(out, listener{ip: ip, port: l.Port, protocol: l.Protocol, purpose: "AMQP 0-9-1"})
	}
	if u, err := url.Parse(s.c.base); err == nil {
		port, _ := strconv.Atoi(u.Port())
		proto := u.Scheme
		if port == 0 {
			port = map[string]int{"http": 80, "https": 443}[proto]
		}
		out = append(out, listener{ip: u.Hostname(), port: port, protocol: proto, purpose: "HTTP API"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].port < out[j].port })
	return out
}

func (s *shim) listeners() error {
	o, err := s.hello()
	if err != nil {
		return err
	}
	s.banner("Asking node %s to report its protocol listeners ...", s.node)
	ls := s.nodeListeners(o)
	if s.json {
		var js []map[string]any
		for _, l := range ls {
			js = append(js, map[string]any{"node": s.node, "interface": l.ip, "port": l.port, "protocol": l.protocol, "purpose": l.purpose})
		}
		b, _ := json.Marshal(map[string]any{"listeners": js})
		fmt.Fprintln(s.stdout, string(b))
		return nil
	}
	for _, l := range ls {
		fmt.Fprintln(s.stdout, l)
	}
	return nil
}

// checkPorts connects to each listener's port on the node's host (the
// management URL's, or --address).
func (s *shim) checkPorts() error {
	o, err := s.hello()
	if err != nil {
		return err
	}
	s.banner("Testing TCP connections to all active listeners on node %s ...", s.node)
	host := s.address
	if host == "" {
		u, _ := url.Parse(s.c.base)
		host = u.Hostname()
	}
	var ports []string
	var failed []string
	for _, l := range s.nodeListeners(o) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(l.port)), s.timeout)
		if err != nil {
			failed = append(failed, l.String())
			continue
		}
		c.Close()
		ports = append(ports, strconv.Itoa(l.port))
	}
	if len(failed) > 0 {
		return &shimError{code: exitUnavailable, multiline: true, msg: "Connection to ports of the following listeners on node " + s.node + " failed: \n" + strings.Join(failed, "\n")}
	}
	s.ok(fmt.Sprintf("Successfully connected to ports %s on node %s.", strings.Join(ports, ", "), s.node), map[string]any{"result": "ok", "node": s.node})
	return nil
}

// awaitStartup waits (--timeout, 300 s by default as RabbitMQ's) until
// the node has recovered and its API answers; a node not listening yet
// is waited for too. It prints nothing, as RabbitMQ's.
func (s *shim) awaitStartup(args []string) error {
	if len(args) > 0 {
		return &shimError{code: exitUsage, msg: "await_startup takes no arguments"}
	}
	limit := 300 * time.Second
	if s.timeout != 60*time.Second { // -t given
		limit = s.timeout
	}
	s.c.timeout = min(s.timeout, 10*time.Second)
	deadline := time.Now().Add(limit)
	for {
		_, err := s.hello()
		if err == nil {
			return nil
		}
		var se *statusError
		if errors.As(err, &se) && se.Code != http.StatusServiceUnavailable {
			return err // refused: waiting will not help
		}
		if se == nil && exitCode(err) != exitUnavailable {
			return err // not a node that is starting: a bad answer
		}
		if time.Now().After(deadline) {
			if se != nil {
				return &shimError{code: exitTempFail, msg: fmt.Sprintf("node %s has not finished starting after %v", s.node, limit)}
			}
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// trace turns the firehose (amq.rabbitmq.trace) on or off for -p's vhost:
// PUT /api/vhosts/{vhost} {"tracing": true|false}, the management API's
// field. RabbitMQ 3.10.8 answers a vhost that does not exist as one that
// does ("Trace enabled for vhost nope", exit 0); railmq's shim does
// the same and creates nothing.
func (s *shim) trace(on bool) error {
	verb, done := "Stopping", "disabled"
	if on {
		verb, done = "Starting", "enabled"
	}
	s.banner("%s tracing for vhost %q ...", verb, s.c.vhost)
	path := "/api/vhosts/" + url.PathEscape(s.c.vhost)
	_, err := s.c.do("GET", path, nil)
	var se *statusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
	case err != nil:
		return err
	default:
		if _, err := s.c.do("PUT", path, map[string]any{"tracing": on}); err != nil {
			return err
		}
	}
	s.ok(fmt.Sprintf("Trace %s for vhost %s", done, s.c.vhost), map[string]any{"result": "ok"})
	return nil
}

// queueInfoKeys are rabbitmqctl list_queues' info items (rabbitmq_cli
// ctl/commands/list_queues_command.ex); those railmq's API has no value
// for print empty, as RabbitMQ prints an item that does not apply.
var queueInfoKeys = strings.Fields(`name durable auto_delete arguments policy operator_policy effective_policy_definition
	pid owner_pid exclusive exclusive_consumer_pid exclusive_consumer_tag messages_ready messages_unacknowledged messages
	messages_ready_ram messages_unacknowledged_ram messages_ram messages_persistent message_bytes message_bytes_ready
	message_bytes_unacknowledged message_bytes_ram message_bytes_persistent head_message_timestamp disk_reads disk_writes
	consumers consumer_utilisation consumer_capacity memory state type leader members online`)

func (s *shim) listQueues(cols []string) error {
	if len(cols) == 0 {
		cols = []string{"name", "messages"}
	}
	var bad []string
	for i, c := range cols {
		cols[i] = strings.TrimSuffix(c, ",")
		if !slices.Contains(queueInfoKeys, cols[i]) {
			bad = append(bad, cols[i])
		}
	}
	if len(bad) > 0 {
		return &shimError{code: exitUsage, msg: fmt.Sprintf("(argument validation): Info key(s) %s are not supported (must be one of %s)", strings.Join(bad, ","), strings.Join(queueInfoKeys, ", "))}
	}
	raw, err := s.c.do("GET", "/api/queues/"+s.c.vh(), nil)
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		raw, err = []byte("[]"), nil // RabbitMQ lists nothing, exit 0
	}
	if err != nil {
		return err
	}
	var qs []map[string]any
	if err := json.Unmarshal(raw, &qs); err != nil {
		return fmt.Errorf("/api/queues: %w", err)
	}
	if s.json {
		return s.jsonRows(qs, cols)
	}
	s.banner("Timeout: %.1f seconds ...", s.timeout.Seconds())
	s.banner("Listing queues for vhost %s ...", s.c.vhost)
	if len(qs) > 0 && !s.noHeaders {
		fmt.Fprintln(s.stdout, strings.Join(cols, "\t"))
	}
	for _, q := range qs {
		vals := make([]string, len(cols))
		for i, c := range cols {
			vals[i] = erlangValue(q[c], true)
		}
		fmt.Fprintln(s.stdout, strings.Join(vals, "\t"))
	}
	return nil
}

// jsonRows prints rows as RabbitMQ's JSON formatter: one object per
// line, the columns in order, the array's brackets on lines of their own.
func (s *shim) jsonRows(rows []map[string]any, cols []string) error {
	fmt.Fprintln(s.stdout, "[")
	for i, r := range rows {
		var b strings.Builder
		b.WriteByte('{')
		for j, c := range cols {
			k, _ := json.Marshal(c)
			v, err := json.Marshal(r[c])
			if err != nil {
				return err
			}
			if j > 0 {
				b.WriteByte(',')
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		if i > 0 {
			fmt.Fprint(s.stdout, ",")
		}
		fmt.Fprintln(s.stdout, b.String())
	}
	fmt.Fprintln(s.stdout, "]")
	return nil
}

// erlangValue prints v as rabbitmqctl's table does: strings and atoms
// bare at the top (quoted inside a term), lists in brackets, tables as
// [{"key",value}].
func erlangValue(v any, top bool) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if top {
			return x
		}
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			if s, ok := e.(string); ok {
				parts[i] = s // node names are atoms
			} else {
				parts[i] = erlangValue(e, false)
			}
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "{" + strconv.Quote(k) + "," + erlangValue(x[k], false) + "}"
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// legacy are the shim's commands client test suites call, as before.
func (s *shim) legacy(cmd string, args []string) error {
	c := s.c
	switch cmd {
	case "set_vm_memory_high_watermark":
		if len(args) < 1 {
			return &shimError{code: exitUsage, msg: "usage: rabbitmqctl set_vm_memory_high_watermark FRACTION | absolute SIZE"}
		}
		v := args[0]
		if v == "absolute" && len(args) > 1 {
			v = args[1]
		}
		_, err := c.do("PUT", "/api/vm-memory-high-watermark", map[string]any{"value": v})
		return err
	case "list_connections":
		cols := args
		if len(cols) == 0 {
			cols = []string{"user", "peer_host", "peer_port", "state"}
		}
		raw, err := c.do("GET", "/api/connections", nil)
		if err != nil {
			return err
		}
		return c.show(raw, cols)
	default: // close_connection
		if len(args) < 1 {
			return &shimError{code: exitUsage, msg: "usage: rabbitmqctl close_connection NAME [REASON]"}
		}
		_, err := c.do("DELETE", "/api/connections/"+url.PathEscape(args[0]), nil)
		return err
	}
}
