package conformance

import (
	"errors"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/testutil"
)

// rabbitNodeKeys are the keys of a node's entry in RabbitMQ 3.10.8's
// /api/nodes that railmq fills (curl -u guest:guest
// localhost:15672/api/nodes on this machine answered, among others:
// "name":"rabbit@vm","type":"disc","running":true,"os_pid":"1099",
// "mem_used":144740352,"mem_limit":10110463180,"mem_alarm":false,
// "mem_calculation_strategy":"rss","disk_free":38878588928,
// "disk_free_limit":50000000,"disk_free_alarm":false,"fd_used":44,
// "fd_total":1024,"sockets_used":0,"sockets_total":832,"proc_used":432,
// "proc_total":1048576,"uptime":3279100,"run_queue":1,"processors":2,
// "rates_mode":"basic","partitions":[],"cluster_links":[],"db_dir":...,
// "net_ticktime":60, plus Erlang's io_*, gc_*, mnesia_* counters).
var rabbitNodeKeys = []string{"name", "type", "running", "os_pid", "mem_used", "mem_used_details", "mem_limit", "mem_alarm",
	"mem_calculation_strategy", "disk_free", "disk_free_details", "disk_free_limit", "disk_free_alarm", "fd_used", "fd_used_details",
	"fd_total", "sockets_used", "sockets_total", "proc_used", "proc_total", "uptime", "run_queue", "processors", "rates_mode",
	"partitions", "contexts", "cluster_links", "exchange_types", "auth_mechanisms", "applications", "enabled_plugins", "db_dir", "net_ticktime"}

// nodesByName reads GET /api/nodes of a node's API.
func nodesByName(t *testing.T, url string) (map[string]map[string]any, []string) {
	t.Helper()
	var list []map[string]any
	if code := (&api{t: t, url: url}).call("GET", "/api/nodes", "guest", "guest", nil, &list); code != 200 {
		t.Fatalf("GET /api/nodes: %d", code)
	}
	out := map[string]map[string]any{}
	var names []string
	for _, n := range list {
		name, _ := n["name"].(string)
		out[name] = n
		names = append(names, name)
	}
	return out, names
}

// TestClusterNodesFigures: /api/nodes on one node of a three-node cluster
// lists every node with its own figures, as RabbitMQ's lists each node
// of its cluster (rabbit_mgmt_wm_nodes.erl, augmented from each node's
// stats): a memory alarm on rabbit2 is mem_alarm true in rabbit2's entry
// on rabbit1's API, and /api/health/checks/alarms of any node fails with
// it (RabbitMQ 3.10.8: 503 {"status":"failed","reason":"There are alarms
// in effect in the cluster","alarms":[{"node":...,"resource":"memory"}]},
// rabbit_alarm:get_alarms/1 being cluster-wide) while rabbit1's
// local-alarms passes. A node stopped is running false within seconds;
// one whose address accepts and never answers too, without holding up
// the list; RabbitMQ lists a node not running as name, type and running
// false. A node that answers the question with an error runs.
func TestClusterNodesFigures(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a1, a3 := &api{t: t, url: nodes[0].api}, &api{t: t, url: nodes[2].api}
	var ns map[string]map[string]any
	var names []string
	testutil.Eventually(t, 60*time.Second, func() bool {
		ns, names = nodesByName(t, nodes[0].api)
		for _, n := range nodes {
			if ns[n.name] == nil || ns[n.name]["running"] != true {
				return false
			}
		}
		return len(ns) == 3
	}, "rabbit1's /api/nodes lists the three nodes running")
	if !sort.StringsAreSorted(names) {
		t.Errorf("/api/nodes is not sorted by name (RabbitMQ's reply_list): %v", names)
	}
	local := ns[nodes[0].name]
	for _, n := range nodes[1:] {
		e := ns[n.name]
		for _, k := range rabbitNodeKeys {
			if _, ok := e[k]; !ok {
				t.Errorf("%s's entry on rabbit1 lacks RabbitMQ's %q: %v", n.name, k, e)
			}
		}
		for k := range local {
			if _, ok := e[k]; !ok {
				t.Errorf("%s's entry on rabbit1 lacks %q, which rabbit1's own has", n.name, k)
			}
		}
		for _, k := range []string{"mem_used", "mem_limit", "disk_free", "fd_used", "fd_total", "proc_used", "uptime", "processors"} {
			if v, _ := e[k].(float64); v <= 0 {
				t.Errorf("%s's %s on rabbit1 = %v, want a figure > 0", n.name, k, e[k])
			}
		}
		if e["type"] != "disc" || e["mem_alarm"] != false || e["disk_free_alarm"] != false || e["os_pid"] == "" {
			t.Errorf("%s on rabbit1: type %v mem_alarm %v disk_free_alarm %v os_pid %v", n.name, e["type"], e["mem_alarm"], e["disk_free_alarm"], e["os_pid"])
		}
	}

	// A memory alarm on rabbit2, seen from rabbit1 and rabbit3.
	if c := (&api{t: t, url: nodes[1].api}).call("PUT", "/api/vm-memory-high-watermark", "guest", "guest", map[string]any{"value": "0"}, nil); c/100 != 2 {
		t.Fatalf("PUT /api/vm-memory-high-watermark on rabbit2: %d", c)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		ns, _ = nodesByName(t, nodes[0].api)
		return ns[nodes[1].name]["mem_alarm"] == true
	}, "rabbit2's memory alarm in rabbit1's /api/nodes")
	if ns[nodes[0].name]["mem_alarm"] != false || ns[nodes[2].name]["mem_alarm"] != false {
		t.Errorf("the alarm is rabbit2's only: rabbit1 %v, rabbit3 %v", ns[nodes[0].name]["mem_alarm"], ns[nodes[2].name]["mem_alarm"])
	}
	if lim, _ := ns[nodes[1].name]["mem_limit"].(float64); lim >= 1 {
		t.Errorf("rabbit2's mem_limit on rabbit1 = %v after watermark 0", ns[nodes[1].name]["mem_limit"])
	}
	var one map[string]any
	if code := a1.call("GET", "/api/nodes/"+nodes[1].name, "guest", "guest", nil, &one); code != 200 || one["mem_alarm"] != true || one["running"] != true {
		t.Errorf("GET /api/nodes/%s on rabbit1: %d %v", nodes[1].name, code, one)
	}
	want := `{"node":"` + nodes[1].name + `","resource":"memory"}`
	for i, a := range []*api{a1, a3} {
		testutil.Eventually(t, 30*time.Second, func() bool {
			code, body := a.raw("GET", "/api/health/checks/alarms")
			return code == 503 && strings.Contains(body, want) && strings.Contains(body, "There are alarms in effect in the cluster")
		}, "/api/health/checks/alarms on node %d names rabbit2's memory alarm", []int{1, 3}[i])
	}
	if code, body := a1.raw("GET", "/api/health/checks/local-alarms"); code != 200 {
		t.Errorf("rabbit1's local-alarms with an alarm on rabbit2 only: %d %s", code, body)
	}

	// rabbit3 stopped: running false on rabbit1 within seconds, no figures.
	nodes[2].stop()
	testutil.Eventually(t, 20*time.Second, func() bool {
		ns, _ = nodesByName(t, nodes[0].api)
		return ns[nodes[2].name] != nil && ns[nodes[2].name]["running"] == false
	}, "the stopped rabbit3 is running false on rabbit1")
	if _, ok := ns[nodes[2].name]["mem_used"]; ok || ns[nodes[2].name]["type"] != "disc" {
		t.Errorf("a node not running is listed as RabbitMQ lists it (name, type, running false): %v", ns[nodes[2].name])
	}
	if code := a1.call("GET", "/api/nodes/"+nodes[2].name, "guest", "guest", nil, &one); code != 200 || one["running"] != false {
		t.Errorf("GET /api/nodes/%s on rabbit1 after stop: %d %v", nodes[2].name, code, one)
	}
	if code := a1.call("GET", "/api/nodes/rabbit9@nowhere", "guest", "guest", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET /api/nodes/rabbit9@nowhere: %d, want 404", code)
	}

	// rabbit3's address taken by a listener that accepts and never
	// answers (a node stuck): the list still comes, rabbit3 not running.
	hold := holdConnections(t, nodes[2].addr)
	defer hold()
	for range 2 {
		start := time.Now()
		ns, _ = nodesByName(t, nodes[0].api)
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("GET /api/nodes with a node that never answers took %v", took)
		}
		if ns[nodes[2].name]["running"] != false || ns[nodes[1].name]["running"] != true {
			t.Errorf("with rabbit3 stuck: rabbit3 running %v, rabbit2 running %v", ns[nodes[2].name]["running"], ns[nodes[1].name]["running"])
		}
	}

	// rabbit2 answering the question with an error, as a node that does
	// not know it answers ("unknown question"): it runs, without figures.
	nodes[1].b.Server.Cluster().SetQueryHandler(func(name string, _ []byte) ([]byte, error) {
		return nil, errors.New("unknown question " + name)
	})
	ns, _ = nodesByName(t, nodes[0].api)
	if e := ns[nodes[1].name]; e["running"] != true || e["mem_used"] != nil {
		t.Errorf("rabbit2 refusing the question: %v, want running without figures", e)
	}
}

// holdConnections listens on addr and holds every connection open
// without a byte; the returned func closes them all.
func holdConnections(t *testing.T, addr string) func() {
	t.Helper()
	var ln net.Listener
	testutil.Eventually(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, "listen on %s", addr)
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	return func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}
}
