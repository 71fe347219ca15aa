package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/railmq/railmq/queue"
)

// streamSeries is a collector of the stream series alone, for a stream's
// figures given as they are.
type streamSeries struct {
	st        queue.StreamStats
	perObject bool
}

func (*streamSeries) Describe(chan<- *prometheus.Desc) {}

func (s *streamSeries) Collect(ch chan<- prometheus.Metric) {
	e := emitter{ch}
	if s.perObject {
		collectStream(e, &s.st, []string{"vhost", "/", "queue", "s1"})
		return
	}
	var f streamFigures
	f.add(&s.st)
	f.add(&queue.StreamStats{Segments: 1, Bytes: 10, Published: 1, Consumers: []queue.StreamConsumer{{Tag: "x", Lag: 2}}})
	f.emit(e)
}

func expose(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	b, _ := io.ReadAll(w.Body)
	return string(b)
}

// TestStreamSeries: a stream's figures as series, per object (one per
// stream, one per consumer tag: two consumers that share a tag make one,
// the one further behind, so that the scrape does not fail on a
// duplicate) and summed. The families and types RabbitMQ 4.3.5 has
// (rabbitmq_stream_segments counter, rabbitmq_stream_consumer_max_offset_lag
// gauge: prometheus_rabbitmq_core_metrics_collector.erl) keep them.
func TestStreamSeries(t *testing.T) {
	st := queue.StreamStats{First: 100, Next: 250, Segments: 3, Bytes: 4096, FirstTimestamp: 1700000000123, LastTimestamp: 1700000005000,
		Published: 150, SegmentsDeleted: 2, Consumers: []queue.StreamConsumer{
			{Tag: "a", Offset: 240, Lag: 10}, {Tag: "b", Offset: 100, Lag: 150, Tracking: "svc"}, {Tag: "a", Offset: 200, Lag: 50}}}
	out := expose(t, &streamSeries{st: st, perObject: true})
	for _, want := range []string{
		"# TYPE rabbitmq_stream_segments counter",
		`rabbitmq_stream_segments{queue="s1",vhost="/"} 3`,
		"# TYPE rabbitmq_stream_consumer_max_offset_lag gauge",
		`rabbitmq_stream_consumer_max_offset_lag{queue="s1",vhost="/"} 150`,
		`railmq_stream_disk_bytes{queue="s1",vhost="/"} 4096`,
		`railmq_stream_published_total{queue="s1",vhost="/"} 150`,
		`railmq_stream_segments_deleted_total{queue="s1",vhost="/"} 2`,
		`railmq_stream_first_offset{queue="s1",vhost="/"} 100`,
		`railmq_stream_next_offset{queue="s1",vhost="/"} 250`,
		`railmq_stream_first_timestamp_seconds{queue="s1",vhost="/"} 1.700000000123e+09`,
		`railmq_stream_last_timestamp_seconds{queue="s1",vhost="/"} 1.700000005e+09`,
		`railmq_stream_consumer_offset{consumer_tag="a",queue="s1",vhost="/"} 200`,
		`railmq_stream_consumer_offset_lag{consumer_tag="a",queue="s1",vhost="/"} 50`,
		`railmq_stream_consumer_offset{consumer_tag="b",queue="s1",vhost="/"} 100`,
		`railmq_stream_consumer_offset_lag{consumer_tag="b",queue="s1",vhost="/"} 150`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("per object: no %q in\n%s", want, out)
		}
	}
	// An empty stream has no timestamps to show.
	if out := expose(t, &streamSeries{st: queue.StreamStats{First: 7, Next: 7}, perObject: true}); strings.Contains(out, "timestamp") {
		t.Errorf("an empty stream's timestamps:\n%s", out)
	}
	out = expose(t, &streamSeries{st: st})
	for _, want := range []string{
		"rabbitmq_stream_segments 4", "rabbitmq_stream_consumer_max_offset_lag 150", "railmq_stream_disk_bytes 4106",
		"railmq_stream_published_total 151", "railmq_stream_segments_deleted_total 2",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("summed: no %q in\n%s", want, out)
		}
	}
}
