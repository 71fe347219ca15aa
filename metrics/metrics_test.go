package metrics_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/metrics"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// scrape reads a text exposition into "name{labels}" → value (labels as
// the handler prints them, sorted by name).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCollector scrapes a broker holding a queue with messages, a
// consumer with unacked deliveries and a delayed exchange: the
// aggregated endpoint sums the queues, the per-object one has each queue
// and exchange, and both carry the node's and the counters' families.
func TestCollector(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(metrics.Handler(b.Server, metrics.Options{}))
	t.Cleanup(hs.Close)

	c, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 16))
	for _, q := range []string{"m-ready", "m-consumed"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.ExchangeDeclare("m-x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("m-ready", "", "m-x", false, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte("0123456789") // 10 bytes
	publish := func(x, key string) {
		t.Helper()
		if err := ch.Publish(x, key, false, false, rmq.Publishing{Body: body, DeliveryMode: rmq.Persistent}); err != nil {
			t.Fatal(err)
		}
		if conf := <-confirms; !conf.Ack {
			t.Fatal("nacked")
		}
	}
	for i := 0; i < 3; i++ {
		publish("m-x", "")
	}
	for i := 0; i < 2; i++ {
		publish("", "m-consumed")
	}
	cch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cch.Consume("m-consumed", "", false, false, false, false, nil); err != nil { // never acks
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() bool {
		return scrape(t, hs.URL+"/metrics")["rabbitmq_queue_messages_unacked"] == 2
	}, "the consumer holds both messages unacked")

	node := b.Server.NodeName()
	agg := scrape(t, hs.URL+"/metrics")
	per := scrape(t, hs.URL+"/metrics/per-object")
	for _, tc := range []struct {
		m    map[string]float64
		name string
		want float64
	}{
		{agg, `rabbitmq_identity_info{rabbitmq_cluster="` + node + `",rabbitmq_cluster_permanent_id="railmq-cluster-` + node + `",rabbitmq_node="` + node + `"}`, 1},
		{agg, "rabbitmq_queues", 2},
		{agg, "rabbitmq_queue_messages_ready", 3},
		{agg, "rabbitmq_queue_messages_unacked", 2},
		{agg, "rabbitmq_queue_messages", 5},
		{agg, "rabbitmq_queue_messages_bytes", 50},
		{agg, "rabbitmq_queue_consumers", 1},
		{agg, "rabbitmq_consumers", 1},
		{agg, "rabbitmq_connections", 1},
		{agg, "rabbitmq_channels", 2},
		{agg, "rabbitmq_channel_messages_unacked", 2},
		{agg, "rabbitmq_connections_opened_total", 1},
		{agg, "rabbitmq_queues_declared_total", 2},
		{agg, `rabbitmq_global_messages_received_total{protocol="amqp091"}`, 5},
		{agg, `rabbitmq_global_messages_received_confirm_total{protocol="amqp091"}`, 5},
		{agg, `rabbitmq_global_messages_confirmed_total{protocol="amqp091"}`, 5},
		{agg, `rabbitmq_global_messages_delivered_consume_manual_ack_total{protocol="amqp091",queue_type="rabbit_classic_queue"}`, 2},
		{agg, `rabbitmq_message_size_bytes_count{protocol="amqp091"}`, 5},
		{agg, `rabbitmq_message_size_bytes_sum{protocol="amqp091"}`, 50},
		{agg, "rabbitmq_alarms_memory_used_watermark", 0},
		{agg, "railmq_connections_blocked", 0},
		{per, `rabbitmq_queue_messages_ready{queue="m-ready",vhost="/"}`, 3},
		{per, `rabbitmq_queue_messages_unacked{queue="m-consumed",vhost="/"}`, 2},
		{per, `rabbitmq_queue_consumers{queue="m-consumed",vhost="/"}`, 1},
		{per, `rabbitmq_queue_messages_published_total{queue="m-ready",vhost="/"}`, 3},
		{per, `rabbitmq_queue_consumer_utilisation{queue="m-ready",vhost="/"}`, 0}, // no utilisation given: 0
		{per, `railmq_exchange_bindings{exchange="m-x",type="fanout",vhost="/"}`, 1},
	} {
		got, ok := tc.m[tc.name]
		switch {
		case !ok:
			t.Errorf("%s: missing", tc.name)
		case got != tc.want:
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Present, whatever their values.
	for _, name := range []string{"rabbitmq_erlang_uptime_seconds", "rabbitmq_process_resident_memory_bytes", "rabbitmq_resident_memory_limit_bytes",
		"rabbitmq_disk_space_available_bytes", "rabbitmq_process_open_fds", `railmq_store_size_bytes{part="lsm"}`, "railmq_store_fsync_seconds_count",
		"railmq_memory_held_bytes", "go_goroutines"} {
		if _, ok := agg[name]; !ok {
			t.Errorf("%s: missing", name)
		}
	}
	if _, ok := agg[`rabbitmq_queue_messages_ready{queue="m-ready",vhost="/"}`]; ok {
		t.Error("the aggregated endpoint has per-queue series")
	}
	if _, ok := agg["railmq_cluster_members"]; ok {
		t.Error("a node that is not clustered reports cluster figures")
	}
}

// TestUtilisationFromOptions: the per-queue consumer utilisation is what
// Options.Utilisation says (the management plane's sampler in a running
// broker).
func TestUtilisationFromOptions(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	if _, _, _, err := b.Server.VHost("/").DeclareQueue(vhost.QueueDecl{Name: "u-q"}, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(metrics.Handler(b.Server, metrics.Options{Utilisation: func(q *queue.Queue) float64 {
		if q.Name() == "u-q" {
			return 0.25
		}
		return 0
	}}))
	t.Cleanup(hs.Close)
	name := `rabbitmq_queue_consumer_utilisation{queue="u-q",vhost="/"}`
	if got := scrape(t, hs.URL+"/metrics/per-object")[name]; got != 0.25 {
		t.Errorf("%s = %v, want 0.25", name, got)
	}
	if resp, err := http.Post(hs.URL+"/metrics", "text/plain", nil); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want %d", resp.StatusCode, http.StatusMethodNotAllowed)
	}
}
