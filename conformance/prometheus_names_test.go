package conformance

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbitTypes are the types RabbitMQ 3.10.8's rabbitmq_prometheus gives
// the families railmq serves under the same names (its /metrics, read
// from a running node), and 4.x's message size histogram.
var rabbitTypes = map[string]string{"rabbitmq_alarms_file_descriptor_limit": "untyped", "rabbitmq_alarms_free_disk_space_watermark": "untyped", "rabbitmq_alarms_memory_used_watermark": "untyped", "rabbitmq_build_info": "untyped", "rabbitmq_channel_consumers": "gauge", "rabbitmq_channel_messages_unacked": "gauge", "rabbitmq_channel_messages_unconfirmed": "gauge", "rabbitmq_channels": "gauge", "rabbitmq_channels_closed_total": "counter", "rabbitmq_channels_opened_total": "counter", "rabbitmq_connections": "gauge", "rabbitmq_connections_closed_total": "counter", "rabbitmq_connections_opened_total": "counter", "rabbitmq_consumers": "gauge", "rabbitmq_disk_space_available_bytes": "gauge", "rabbitmq_disk_space_available_limit_bytes": "gauge", "rabbitmq_erlang_uptime_seconds": "gauge", "rabbitmq_global_consumers": "gauge", "rabbitmq_global_messages_acknowledged_total": "counter", "rabbitmq_global_messages_confirmed_total": "counter", "rabbitmq_global_messages_dead_lettered_delivery_limit_total": "counter", "rabbitmq_global_messages_dead_lettered_expired_total": "counter", "rabbitmq_global_messages_dead_lettered_maxlen_total": "counter", "rabbitmq_global_messages_dead_lettered_rejected_total": "counter", "rabbitmq_global_messages_delivered_consume_auto_ack_total": "counter", "rabbitmq_global_messages_delivered_consume_manual_ack_total": "counter", "rabbitmq_global_messages_delivered_get_auto_ack_total": "counter", "rabbitmq_global_messages_delivered_get_manual_ack_total": "counter", "rabbitmq_global_messages_delivered_total": "counter", "rabbitmq_global_messages_get_empty_total": "counter", "rabbitmq_global_messages_received_confirm_total": "counter", "rabbitmq_global_messages_received_total": "counter", "rabbitmq_global_messages_redelivered_total": "counter", "rabbitmq_global_messages_routed_total": "counter", "rabbitmq_global_messages_unroutable_dropped_total": "counter", "rabbitmq_global_messages_unroutable_returned_total": "counter", "rabbitmq_global_publishers": "gauge", "rabbitmq_identity_info": "untyped", "rabbitmq_process_max_fds": "gauge", "rabbitmq_process_max_tcp_sockets": "gauge", "rabbitmq_process_open_fds": "gauge", "rabbitmq_process_open_tcp_sockets": "gauge", "rabbitmq_process_resident_memory_bytes": "gauge", "rabbitmq_queues": "gauge", "rabbitmq_queues_created_total": "counter", "rabbitmq_queues_declared_total": "counter", "rabbitmq_queues_deleted_total": "counter", "rabbitmq_resident_memory_limit_bytes": "gauge", "rabbitmq_message_size_bytes": "histogram"}

// scrape is one Prometheus text exposition: the families' types, and each
// series' value by its name{labels} as written.
type scrape struct {
	types  map[string]string
	series map[string]float64
}

func getMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	s := scrape{types: map[string]string{}, series: map[string]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			s.types[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		s.series[line[:i]] = v
	}
	return s
}

// TestPrometheusNamesTypesAndLabels checks the families the issue lists
// are served with RabbitMQ's types, aggregated on /metrics and per queue
// (labels vhost, queue) on /metrics/per-object, with values that follow
// the broker: depth, the head message's timestamp and age, dead-lettered
// (expired, no DLX: strategy disabled) and the message size histogram.
func TestPrometheusNamesTypesAndLabels(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.PrometheusHandler())
	t.Cleanup(hs.Close)
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("prom-depth", false, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare("prom-ttl", false, false, false, false, rmq.Table{"x-message-ttl": int32(1)})
	must(t, err)
	for i := 0; i < 3; i++ {
		must(t, ch.Publish("", "prom-depth", false, false, rmq.Publishing{Body: make([]byte, 500)}))
	}
	must(t, ch.Publish("", "prom-ttl", false, false, rmq.Publishing{Body: []byte("x")}))

	const depth = `rabbitmq_queue_messages{queue="prom-depth",vhost="/"}`
	const age = `railmq_queue_oldest_message_age_seconds{queue="prom-depth",vhost="/"}`
	const expired = `rabbitmq_global_messages_dead_lettered_expired_total{dead_letter_strategy="disabled",queue_type="rabbit_classic_queue"}`
	var po scrape
	testutil.Eventually(t, 10*time.Second, func() bool {
		po = getMetrics(t, hs.URL+"/metrics/per-object")
		return po.series[depth] == 3 && po.series[age] >= 1 && po.series[expired] == 1
	}, "per-object: %s = %v, %s = %v, %s = %v", depth, po.series[depth], age, po.series[age], expired, po.series[expired])
	ts := po.series[`rabbitmq_queue_head_message_timestamp{queue="prom-depth",vhost="/"}`]
	if now := float64(time.Now().Unix()); ts < now-30 || ts > now {
		t.Errorf("rabbitmq_queue_head_message_timestamp = %v, want about %v", ts, now)
	}
	agg := getMetrics(t, hs.URL+"/metrics")
	for name, want := range map[string]float64{
		"rabbitmq_queue_messages":       3,
		"rabbitmq_queue_messages_ready": 3,
		"rabbitmq_queue_messages_bytes": 1500,
		"rabbitmq_queues":               2,
		"rabbitmq_connections":          1,
		"rabbitmq_channels":             1,
		`rabbitmq_global_messages_received_total{protocol="amqp091"}`:      4,
		`rabbitmq_global_messages_routed_total{protocol="amqp091"}`:        4,
		`rabbitmq_global_publishers{protocol="amqp091"}`:                   1,
		`rabbitmq_message_size_bytes_count{protocol="amqp091"}`:            4,
		`rabbitmq_message_size_bytes_bucket{protocol="amqp091",le="100"}`:  1,
		`rabbitmq_message_size_bytes_bucket{protocol="amqp091",le="1000"}`: 4,
		`rabbitmq_message_size_bytes_sum{protocol="amqp091"}`:              1501,
		"rabbitmq_queues_declared_total":                                   2,
		"rabbitmq_queues_created_total":                                    2,
		"rabbitmq_connections_opened_total":                                1,
		"rabbitmq_channels_opened_total":                                   1,
		"rabbitmq_identity_info{rabbitmq_cluster=\"" + b.Server.NodeName() + "\",rabbitmq_cluster_permanent_id=\"railmq-cluster-" + b.Server.NodeName() + "\",rabbitmq_node=\"" + b.Server.NodeName() + "\"}": 1,
	} {
		if got, ok := agg.series[name]; !ok || got != want {
			t.Errorf("/metrics: %s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	for s := range agg.series {
		if strings.Contains(s, `queue="`) {
			t.Errorf("/metrics has a per-queue series: %s", s)
		}
	}
	// Per queue only: they mean nothing summed.
	perQueue := map[string]bool{"rabbitmq_queue_head_message_timestamp": true, "rabbitmq_queue_consumer_utilisation": true}
	for i, sc := range []scrape{agg, po} {
		for name, want := range rabbitTypes {
			if i == 0 && perQueue[name] {
				continue
			}
			if got := sc.types[name]; got != want {
				t.Errorf("%s: # TYPE %s %s, want %s (RabbitMQ's)", []string{"/metrics", "/metrics/per-object"}[i], name, got, want)
			}
		}
	}
}
