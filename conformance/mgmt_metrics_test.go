package conformance

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// channelTypes are the types RabbitMQ 3.10.8's rabbitmq_prometheus gives
// its channel and connection families (curl localhost:15692/metrics).
var channelTypes = map[string]string{
	"rabbitmq_channel_consumers": "gauge", "rabbitmq_channel_messages_unacked": "gauge",
	"rabbitmq_channel_messages_unconfirmed": "gauge", "rabbitmq_channel_messages_uncommitted": "gauge",
	"rabbitmq_channel_acks_uncommitted": "gauge", "rabbitmq_channel_prefetch": "gauge",
	"rabbitmq_channel_messages_published_total": "counter", "rabbitmq_channel_messages_confirmed_total": "counter",
	"rabbitmq_channel_messages_unroutable_returned_total": "counter", "rabbitmq_channel_messages_unroutable_dropped_total": "counter",
	"rabbitmq_channel_get_ack_total": "counter", "rabbitmq_channel_get_total": "counter",
	"rabbitmq_channel_messages_delivered_ack_total": "counter", "rabbitmq_channel_messages_delivered_total": "counter",
	"rabbitmq_channel_messages_redelivered_total": "counter", "rabbitmq_channel_messages_acked_total": "counter",
	"rabbitmq_channel_get_empty_total":         "counter",
	"rabbitmq_connection_incoming_bytes_total": "counter", "rabbitmq_connection_outgoing_bytes_total": "counter",
	"rabbitmq_connection_incoming_packets_total": "counter", "rabbitmq_connection_outgoing_packets_total": "counter",
	"rabbitmq_connection_channels": "gauge",
}

// The rabbitmq_channel_* families, as RabbitMQ 3.10.8 serves them for a
// pika connection with a confirm channel (6 publishes, one of them
// unroutable; a basic.get acked, one with no-ack) and a consumer's
// channel (basic.qos 7, global false: 3 deliveries unacked):
//
//	/metrics:
//	rabbitmq_channel_consumers 1
//	rabbitmq_channel_messages_unacked 3
//	rabbitmq_channel_prefetch 0
//	rabbitmq_channel_messages_published_total 6
//	rabbitmq_channel_messages_confirmed_total 6
//	rabbitmq_channel_messages_unroutable_dropped_total 1
//	rabbitmq_channel_get_ack_total 1
//	rabbitmq_channel_get_total 1
//	rabbitmq_channel_messages_delivered_ack_total 3
//	rabbitmq_channel_messages_acked_total 1
//	rabbitmq_connection_channels 2
//	/metrics/per-object:
//	rabbitmq_channel_messages_published_total{channel="<0.1129.0>",vhost="/",exchange=""} 6
//	rabbitmq_channel_messages_unacked{channel="<0.1139.0>"} 3
//
// Summed over the channels open (a closed channel's counts leave the
// sums, as its rows leave RabbitMQ's channel_metrics table); per object,
// one series per channel, labelled with its management API name (railmq
// has no Erlang pid to label it with) and, for the counters, its vhost.
func TestMgmtChannelMetrics(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.PrometheusHandler())
	t.Cleanup(hs.Close)
	conn := dial(t, b.URL)
	pub, _ := channelTraffic(t, conn, func(ch *rmq.Channel) (rmq.Queue, error) {
		return ch.QueueDeclare("chm-q", false, false, false, false, nil)
	},
		"chm-nowhere", "")

	want := map[string]float64{
		"rabbitmq_channel_consumers": 1, "rabbitmq_channel_messages_unacked": 3, "rabbitmq_channel_prefetch": 0,
		"rabbitmq_channel_messages_unconfirmed": 0, "rabbitmq_channel_messages_uncommitted": 0,
		"rabbitmq_channel_messages_published_total": 6, "rabbitmq_channel_messages_confirmed_total": 6,
		"rabbitmq_channel_messages_unroutable_dropped_total": 1, "rabbitmq_channel_messages_unroutable_returned_total": 0,
		"rabbitmq_channel_get_ack_total": 1, "rabbitmq_channel_get_total": 1, "rabbitmq_channel_get_empty_total": 0,
		"rabbitmq_channel_messages_delivered_ack_total": 3, "rabbitmq_channel_messages_delivered_total": 0,
		"rabbitmq_channel_messages_redelivered_total": 0, "rabbitmq_channel_messages_acked_total": 1,
		"rabbitmq_connection_channels": 2,
	}
	var agg scrape
	testutil.Eventually(t, 10*time.Second, func() bool {
		agg = getMetrics(t, hs.URL+"/metrics")
		return agg.series["rabbitmq_channel_messages_unacked"] == 3
	}, "rabbitmq_channel_messages_unacked = %v, want 3", agg.series["rabbitmq_channel_messages_unacked"])
	for name, v := range want {
		if got, ok := agg.series[name]; !ok || got != v {
			t.Errorf("/metrics: %s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	if agg.series["rabbitmq_connection_incoming_bytes_total"] <= 0 || agg.series["rabbitmq_connection_outgoing_bytes_total"] <= 0 {
		t.Errorf("connection bytes: in %v out %v", agg.series["rabbitmq_connection_incoming_bytes_total"], agg.series["rabbitmq_connection_outgoing_bytes_total"])
	}
	po := getMetrics(t, hs.URL+"/metrics/per-object")
	for i, sc := range []scrape{agg, po} {
		for name, typ := range channelTypes {
			if got := sc.types[name]; got != typ {
				t.Errorf("%s: # TYPE %s %s, want %s (RabbitMQ's)", []string{"/metrics", "/metrics/per-object"}[i], name, got, typ)
			}
		}
	}
	// Per object: the names /api/channels lists.
	name := conn.LocalAddr().String() + " -> " + conn.RemoteAddr().String()
	for series, v := range map[string]float64{
		`rabbitmq_channel_messages_published_total{channel="` + name + ` (1)",vhost="/"}`: 6,
		`rabbitmq_channel_messages_published_total{channel="` + name + ` (2)",vhost="/"}`: 0,
		`rabbitmq_channel_messages_unacked{channel="` + name + ` (2)"}`:                   3,
		`rabbitmq_channel_consumers{channel="` + name + ` (2)"}`:                          1,
		`rabbitmq_connection_channels{channel="` + name + `"}`:                            2,
	} {
		if got, ok := po.series[series]; !ok || got != v {
			t.Errorf("/metrics/per-object: %s = %v (present %v), want %v", series, got, ok, v)
		}
	}
	for s := range po.series {
		if strings.HasPrefix(s, "rabbitmq_channel_messages_published_total ") {
			t.Errorf("/metrics/per-object has an unlabelled sum: %s", s)
		}
	}
	// A closed channel leaves the sums.
	must(t, pub.Close())
	testutil.Eventually(t, 10*time.Second, func() bool {
		agg = getMetrics(t, hs.URL+"/metrics")
		return agg.series["rabbitmq_channel_messages_published_total"] == 0 && agg.series["rabbitmq_channels"] == 1
	}, "after the publishing channel closed: published_total %v", agg.series["rabbitmq_channel_messages_published_total"])
}
