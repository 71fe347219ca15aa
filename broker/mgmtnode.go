package broker

import (
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

// /api/overview and /api/nodes: the figures operators' tools read, under
// RabbitMQ's names. rabbitmq_version and management_version say which
// RabbitMQ's API this one follows (tools pick features by them);
// product_name and product_version say what answers.

const compatVersion = "3.10.8"

func (s *Server) nodeName() string {
	if c := s.opts.Cluster; c != nil {
		return c.Name
	}
	return "railmq@" + hostname
}

// NodeName is the node's name, as RabbitMQ's rabbit@host: the management
// API's and the metrics' node and cluster name.
func (s *Server) NodeName() string { return s.nodeName() }

var exchangeTypes = func() []map[string]any {
	var out []map[string]any
	for _, k := range []exchange.Kind{exchange.Direct, exchange.Fanout, exchange.Headers, exchange.Topic} {
		out = append(out, map[string]any{"name": k.String(), "description": "AMQP " + k.String() + " exchange, as per the AMQP specification", "enabled": true})
	}
	// Built in: described as the rabbitmq-message-deduplication plugin
	// describes it (description/0).
	out = append(out, map[string]any{"name": exchange.Dedup.String(), "description": "Message Deduplication Exchange.", "enabled": true})
	// Built in; RabbitMQ lists it so with its plugin enabled.
	return append(out, map[string]any{"name": exchange.ConsistentHash.String(), "description": "Consistent Hashing Exchange", "enabled": true})
}()

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	var ready, unacked, pub, dlv, ack, redel int64
	var nq, nx, ncons int
	vis := map[*queue.Queue]bool{}
	for _, st := range s.allVHosts() {
		if !s.canSee(u, st.v.Name()) {
			continue
		}
		nx += len(st.v.Exchanges()) + 1
		for _, q := range st.v.Queues() {
			nq++
			vis[q] = true
			ready += q.Ready()
			unacked += q.Unacked()
			ncons += int(q.Consumers())
			p, d, a, rd := q.Counters()
			pub, dlv, ack, redel = pub+p, dlv+d, ack+a, redel+rd
		}
	}
	nconn, nch := 0, 0
	for _, c := range s.openConns() {
		if seesAll(u) || c.user == u.Name {
			nconn++
			nch += int(c.nchan.Load())
		}
	}
	var listeners []map[string]any
	for _, p := range s.listenerPorts() {
		listeners = append(listeners, map[string]any{"node": s.nodeName(), "protocol": "amqp", "ip_address": "::", "port": p})
	}
	if listeners == nil {
		listeners = []map[string]any{}
	}
	rates := s.totalRates(func(q *queue.Queue) bool { return vis[q] })
	rate := func(v float64) map[string]float64 { return map[string]float64{"rate": float64(int64(v*10)) / 10} }
	m := map[string]any{
		"management_version": compatVersion, "rabbitmq_version": compatVersion, "rates_mode": "basic",
		"product_name": "railmq", "product_version": s.opts.Version,
		"cluster_name": s.nodeName(), "node": s.nodeName(), "erlang_version": runtime.Version(),
		"exchange_types": exchangeTypes, "disable_stats": false, "enable_queue_totals": false,
		"message_stats": map[string]any{"publish": pub, "publish_details": rate(rates[0]), "deliver_get": dlv, "deliver_get_details": rate(rates[1]),
			"ack": ack, "ack_details": rate(rates[2]), "redeliver": redel, "redeliver_details": rate(rates[3])},
		"queue_totals": map[string]any{"messages": ready + unacked, "messages_details": rate0, "messages_ready": ready,
			"messages_ready_details": rate0, "messages_unacknowledged": unacked, "messages_unacknowledged_details": rate0},
		"object_totals":             map[string]int{"connections": nconn, "channels": nch, "exchanges": nx, "queues": nq, "consumers": ncons},
		"statistics_db_event_queue": 0, "listeners": listeners, "contexts": []any{},
		"memory_used": s.memory.Load(),
	}
	// The totals' history is the whole broker's: for those who see it all.
	if age, incr, ok := historyParams(r); ok && seesAll(u) {
		qt := m["queue_totals"].(map[string]any)
		qt["message_stats"] = m["message_stats"] // addSamples adds the rates' samples to it
		addSamples(qt, s.overviewHistory(age, incr))
		delete(qt, "message_stats")
	}
	writeJSON(w, m)
}

// processRSS is the broker's resident memory (bytes), or 0.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var pages int64
	for i, f := range splitFields(string(b)) {
		if i == 1 {
			pages, _ = strconv.ParseInt(f, 10, 64)
		}
	}
	return pages * int64(os.Getpagesize())
}

func splitFields(s string) []string {
	var out []string
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' || s[i] == '\n' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	return out
}

func fdCounts() (used, total int) {
	if es, err := os.ReadDir("/proc/self/fd"); err == nil {
		used = len(es)
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		total = int(rl.Cur)
	}
	return used, total
}

func (s *Server) nodeJSON() map[string]any {
	fdUsed, fdTotal := fdCounts()
	bits := s.alarms.Load()
	return map[string]any{
		"name": s.nodeName(), "type": "disc", "running": true, "os_pid": strconv.Itoa(os.Getpid()),
		"mem_used": processRSS(), "mem_used_details": rate0, "mem_limit": s.watermark.Load(), "mem_alarm": bits&alarmMemory != 0,
		"mem_calculation_strategy": "rss",
		"disk_free":                s.diskFreeNow.Load(), "disk_free_details": rate0, "disk_free_limit": s.opts.DiskFreeLimit, "disk_free_alarm": bits&alarmDisk != 0,
		"fd_used": fdUsed, "fd_used_details": rate0, "fd_total": fdTotal,
		"sockets_used": len(s.openConns()), "sockets_used_details": rate0, "sockets_total": fdTotal * 9 / 10,
		"proc_used": runtime.NumGoroutine(), "proc_used_details": rate0, "proc_total": 1048576,
		"uptime": time.Since(s.startedAt).Milliseconds(), "run_queue": 0, "processors": runtime.NumCPU(),
		"rates_mode": "basic", "exchange_types": exchangeTypes, "auth_mechanisms": []map[string]any{
			{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
			{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
		},
		"partitions": []any{}, "contexts": []any{}, "cluster_links": []any{},
		"enabled_plugins": []string{"rabbitmq_management"},
		"applications":    []map[string]string{{"name": "rabbit", "description": "RabbitMQ (railmq " + s.opts.Version + ")", "version": compatVersion}},
		"net_ticktime":    60, "db_dir": s.opts.DataDir,
	}
}

func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{s.nodeJSON()}
	out = append(out, s.otherMembers()...)
	writeList(w, r, out)
}

// otherMembers are the cluster's other nodes as /api/nodes lists them:
// what this node knows of them, their name and whether their inter-node
// listener answers (a TCP connect within 300 ms). Their figures are on
// their own API.
func (s *Server) otherMembers() []map[string]any {
	if s.node == nil {
		return nil
	}
	var out []map[string]any
	for _, m := range s.node.Status().Members {
		if m.Name == s.nodeName() {
			continue
		}
		up := false
		if c, err := net.DialTimeout("tcp", m.Addr, 300*time.Millisecond); err == nil {
			c.Close()
			up = true
		}
		out = append(out, map[string]any{"name": m.Name, "type": "disc", "running": up, "cluster_links": []any{},
			"railmq_cluster_address": m.Addr, "railmq_voter": m.Voter})
	}
	return out
}

func (s *Server) apiNode(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("node") != s.nodeName() {
		notFound(w)
		return
	}
	writeJSON(w, s.nodeJSON())
}

// apiSetWatermark is PUT /api/vm-memory-high-watermark {"value": "0.4"}
// (railmq's own; rabbitmqctl set_vm_memory_high_watermark): a fraction
// of memory or an absolute size, as --vm-memory-high-watermark takes.
func (s *Server) apiSetWatermark(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "value") {
		return
	}
	var text string
	switch v := body["value"].(type) {
	case string:
		text = v
	case float64:
		text = strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(text, ".") && v < 1 {
			text += ".0"
		}
	}
	wm, err := ParseWatermark(text, TotalMemory())
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	if wm == 0 {
		wm = -1 // 0 keeps the alarm on, as RabbitMQ's watermark 0 does
	}
	s.SetMemoryHighWatermark(wm)
	w.WriteHeader(http.StatusNoContent)
}
