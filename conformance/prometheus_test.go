package conformance

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// overviewPanels are the PromQL expressions of Grafana's RabbitMQ-Overview
// dashboard (grafana.com 10991), every panel's, as rabbitmq-server
// v3.10.8 ships it in deps/rabbitmq_prometheus/docker/grafana/dashboards/
// RabbitMQ-Overview.json; $rabbitmq_cluster and $namespace are the
// dashboard's variables (label_values(rabbitmq_identity_info, ...)).
var overviewPanels = []struct{ title, expr string }{
	{"Ready messages", `sum(rabbitmq_queue_messages_ready * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Incoming messages / s", `sum(rate(rabbitmq_global_messages_received_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Publishers", `sum(rabbitmq_channels * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - sum(rabbitmq_channel_consumers * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Connections", `sum(rabbitmq_connections * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Queues", `sum(rabbitmq_queues * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Unacknowledged messages", `sum(rabbitmq_queue_messages_unacked * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Outgoing messages / s", `sum(rate(rabbitmq_global_messages_redelivered_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) + sum(rate(rabbitmq_global_messages_delivered_consume_auto_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) + sum(rate(rabbitmq_global_messages_delivered_consume_manual_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) + sum(rate(rabbitmq_global_messages_delivered_get_auto_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) + sum(rate(rabbitmq_global_messages_delivered_get_manual_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Consumers", `sum(rabbitmq_consumers * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Channels", `sum(rabbitmq_channels * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Nodes", `sum(rabbitmq_build_info * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Nodes (table)", `rabbitmq_build_info * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`},
	{"Memory available before publishers blocked", `(rabbitmq_resident_memory_limit_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - (rabbitmq_process_resident_memory_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Disk space available before publishers blocked", `rabbitmq_disk_space_available_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`},
	{"File descriptors available", `(rabbitmq_process_max_fds * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - (rabbitmq_process_open_fds * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"TCP sockets available", `(rabbitmq_process_max_tcp_sockets * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - (rabbitmq_process_open_tcp_sockets * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`},
	{"Messages ready to be delivered to consumers", `sum(rabbitmq_queue_messages_ready * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages pending consumer acknowledgement", `sum(rabbitmq_queue_messages_unacked * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages published / s", `sum(rate(rabbitmq_global_messages_received_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages confirmed to publishers / s", `sum(rate(rabbitmq_global_messages_confirmed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages routed to queues / s", `sum(rate(rabbitmq_global_messages_routed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages unconfirmed to publishers / s", `sum(rate(rabbitmq_global_messages_received_confirm_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"} - rate(rabbitmq_global_messages_confirmed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"} ) by(rabbitmq_node)`},
	{"Unroutable messages dropped / s", `sum(rate(rabbitmq_global_messages_unroutable_dropped_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Unroutable messages returned to publishers / s", `sum(rate(rabbitmq_global_messages_unroutable_returned_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages delivered / s", `sum( (rate(rabbitmq_global_messages_delivered_consume_auto_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) + (rate(rabbitmq_global_messages_delivered_consume_manual_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) ) by(rabbitmq_node)`},
	{"Messages redelivered / s", `sum(rate(rabbitmq_global_messages_redelivered_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages delivered with manual ack / s", `sum(rate(rabbitmq_global_messages_delivered_consume_manual_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages delivered auto ack / s", `sum(rate(rabbitmq_global_messages_delivered_consume_auto_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Messages acknowledged / s", `sum(rate(rabbitmq_global_messages_acknowledged_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Polling operations with auto ack / s", `sum(rate(rabbitmq_global_messages_delivered_get_auto_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Polling operations that yield no result / s", `sum(rate(rabbitmq_global_messages_get_empty_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Polling operations with manual ack / s", `sum(rate(rabbitmq_global_messages_delivered_get_manual_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Total queues", `rabbitmq_queues * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`},
	{"Queues declared / s", `sum(rate(rabbitmq_queues_declared_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Queues created / s", `sum(rate(rabbitmq_queues_created_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Queues deleted / s", `sum(rate(rabbitmq_queues_deleted_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Total channels", `rabbitmq_channels * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`},
	{"Channels opened / s", `sum(rate(rabbitmq_channels_opened_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Channels closed / s", `sum(rate(rabbitmq_channels_closed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Total connections", `rabbitmq_connections * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`},
	{"Connections opened / s", `sum(rate(rabbitmq_connections_opened_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
	{"Connections closed / s", `sum(rate(rabbitmq_connections_closed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`},
}

// positivePanels must be above zero after promLoad (it publishes, confirms,
// routes, returns, drops, consumes with both ack modes, gets, redelivers,
// acks, and leaves messages ready and unacked on open connections).
var positivePanels = map[string]bool{
	"Ready messages": true, "Incoming messages / s": true, "Connections": true, "Queues": true,
	"Unacknowledged messages": true, "Outgoing messages / s": true, "Consumers": true, "Channels": true,
	"Nodes": true, "Messages published / s": true, "Messages confirmed to publishers / s": true,
	"Messages routed to queues / s": true, "Unroutable messages dropped / s": true,
	"Unroutable messages returned to publishers / s": true, "Messages delivered / s": true,
	"Messages redelivered / s": true, "Messages delivered with manual ack / s": true,
	"Messages delivered auto ack / s": true, "Messages acknowledged / s": true,
	"Polling operations with auto ack / s": true, "Polling operations that yield no result / s": true,
	"Polling operations with manual ack / s": true, "Total queues": true, "Queues declared / s": true,
	"Queues created / s": true, "Channels opened / s": true, "Connections opened / s": true,
	"Memory available before publishers blocked": true, "Disk space available before publishers blocked": true,
	"File descriptors available": true, "TCP sockets available": true,
}

// TestPrometheusOverviewDashboard scrapes the broker with the real
// Prometheus (Debian's) while a load runs, and evaluates every query of
// the RabbitMQ-Overview dashboard: each must answer, and those the load
// moves must be above zero. With RAILMQ_TEST_URL (RabbitMQ) it scrapes
// RAILMQ_TEST_PROMETHEUS_TARGET (default 127.0.0.1:15693) instead.
func TestPrometheusOverviewDashboard(t *testing.T) {
	promBin := requireTool(t, "prometheus")
	b := testutil.Start(t, broker.Options{})
	target := os.Getenv("RAILMQ_TEST_PROMETHEUS_TARGET")
	if testutil.ExternalURL() == "" {
		hs := httptest.NewServer(b.PrometheusHandler())
		t.Cleanup(hs.Close)
		target = strings.TrimPrefix(hs.URL, "http://")
	} else if target == "" {
		target = "127.0.0.1:15693"
	}
	prom := startPrometheus(t, promBin, target)

	// The dashboard's variables, as Grafana fills them in; then the load,
	// once Prometheus has the counters from before it (rate() compares
	// scrapes).
	var cluster string
	testutil.Eventually(t, 60*time.Second, func() bool {
		vs := prom.labelValues("rabbitmq_cluster")
		if len(vs) > 0 {
			cluster = vs[0]
		}
		return cluster != ""
	}, "prometheus never saw rabbitmq_identity_info")
	promLoad(t, b)

	exprs := make([]string, len(overviewPanels))
	for i, p := range overviewPanels {
		exprs[i] = strings.NewReplacer("$rabbitmq_cluster", cluster, "$namespace", "").Replace(p.expr)
	}
	got := make([][]float64, len(overviewPanels))
	answered := func(i int) bool {
		return len(got[i]) > 0 && (!positivePanels[overviewPanels[i].title] || got[i][0] > 0)
	}
	// Until every panel answers (the scrapes after the load come in).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		all := true
		for i := range overviewPanels {
			if !answered(i) {
				got[i] = prom.query(exprs[i])
				all = all && answered(i)
			}
		}
		if all || time.Now().After(deadline) {
			break
		}
	}
	for i, p := range overviewPanels {
		if !answered(i) {
			t.Errorf("panel %q: %s\n  = %v, want a result%s", p.title, exprs[i], got[i], map[bool]string{true: " above 0"}[positivePanels[p.title]])
			continue
		}
		t.Logf("panel %q = %v", p.title, got[i])
	}
}

// requireTool finds an installed program the test drives. CI installs it
// (.ci/run) and sets RAILMQ_REQUIRE_TOOLS, so that it fails there rather
// than skips; elsewhere a missing tool skips the test, saying what to
// install.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("RAILMQ_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed (apt-get install %s)", name, name)
	}
	t.Skipf("%s is not installed (apt-get install %s)", name, name)
	return ""
}

type promServer struct {
	t   *testing.T
	url string
}

// startPrometheus runs Prometheus scraping target every second.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: rabbitmq-server\n    static_configs:\n      - targets: ['%s']\n", target)
	testutil.WriteFile(t, filepath.Join(dir, "prometheus.yml"), []byte(cfg))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{t: t, url: "http://" + addr}
	testutil.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "prometheus did not become ready on %s", addr)
	return p
}

func (p *promServer) get(path string, out any) {
	p.t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		p.t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		p.t.Fatalf("prometheus %s: %v", path, err)
	}
}

// query evaluates an instant PromQL query: the values of its vector (or
// scalar) result.
func (p *promServer) query(expr string) []float64 {
	var r struct {
		Status, Error string
		Data          struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		}
	}
	p.get("/api/v1/query?query="+url.QueryEscape(expr), &r)
	if r.Status != "success" {
		p.t.Fatalf("query %s: %s", expr, r.Error)
	}
	var out []float64
	if r.Data.ResultType == "scalar" {
		var v [2]any
		_ = json.Unmarshal(r.Data.Result, &v)
		var f float64
		fmt.Sscan(fmt.Sprint(v[1]), &f)
		return []float64{f}
	}
	var vec []struct {
		Value [2]any `json:"value"`
	}
	if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
		p.t.Fatalf("query %s: %v", expr, err)
	}
	for _, s := range vec {
		var f float64
		fmt.Sscan(fmt.Sprint(s.Value[1]), &f)
		out = append(out, f)
	}
	return out
}

func (p *promServer) labelValues(label string) []string {
	var r struct{ Data []string }
	p.get("/api/v1/label/"+label+"/values?match[]=rabbitmq_identity_info", &r)
	return r.Data
}

// promLoad makes every counter of the dashboard move, and leaves state
// for its gauges: connections, a consumer, ready and unacked messages.
func promLoad(t *testing.T, b *testutil.Broker) {
	t.Helper()
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	q := fmt.Sprintf("prom-%d", time.Now().UnixNano())
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	for _, n := range []string{q + "-ready", q + "-auto"} {
		_, err = ch.QueueDeclare(n, false, false, false, false, nil)
		must(t, err)
	}
	t.Cleanup(func() {
		if c, err := rmq.Dial(b.URL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_, _ = ch.QueueDelete(q+"-ready", false, false, false)
				_, _ = ch.QueueDelete(q+"-auto", false, false, false)
			}
			c.Close()
		}
	})
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 1000))
	returns := ch.NotifyReturn(make(chan rmq.Return, 100))
	pub := func(key string, mandatory bool, n int) {
		for i := 0; i < n; i++ {
			must(t, ch.Publish("", key, mandatory, false, rmq.Publishing{Body: []byte("hello prometheus")}))
		}
	}
	pub(q, false, 300)
	pub(q+"-auto", false, 100)
	pub(q+"-ready", false, 50)
	pub("nowhere", true, 5)  // returned
	pub("nowhere", false, 5) // dropped
	for i := 0; i < 460; i++ {
		select {
		case <-confirms:
		case <-time.After(10 * time.Second):
			t.Fatalf("confirm %d never came", i)
		}
	}
	for i := 0; i < 5; i++ {
		<-returns
	}
	// basic.get: manual ack, auto ack, empty.
	gch, err := conn.Channel()
	must(t, err)
	for i := 0; i < 20; i++ {
		d, ok, err := gch.Get(q, i%2 == 0)
		must(t, err)
		if !ok {
			t.Fatal("basic.get found the queue empty")
		}
		if i%2 != 0 {
			must(t, d.Ack(false))
		}
	}
	_, _, err = gch.Get("amq.gen-none-"+q, true)
	if err == nil {
		t.Fatal("basic.get on a missing queue succeeded")
	}
	gch, err = conn.Channel()
	must(t, err)
	_, err = gch.QueueDeclare(q+"-empty", false, true, false, false, nil)
	must(t, err)
	_, ok, err := gch.Get(q+"-empty", true)
	must(t, err)
	if ok {
		t.Fatal("basic.get on an empty queue got a message")
	}
	// Consumers: an auto-ack one, then a manual-ack one that nacks some
	// with requeue (redelivered), acks the rest and keeps the last unacked.
	cc := dial(t, b.URL)
	auto, err := cc.Channel()
	must(t, err)
	ds, err := auto.Consume(q+"-auto", "", true, false, false, false, nil)
	must(t, err)
	for i := 0; i < 100; i++ {
		<-ds
	}
	must(t, auto.Close())
	man, err := cc.Channel()
	must(t, err)
	must(t, man.Qos(50, 0, false))
	ds, err = man.Consume(q, "", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 290; i++ {
		d := recv(t, ds)
		switch {
		case i < 10:
			must(t, d.Nack(false, true))
		case i < 289:
			must(t, d.Ack(false))
		}
	}
}
