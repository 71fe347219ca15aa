package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/metrics"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkScrapeStreams measures a scrape of /metrics and
// /metrics/per-object over streams (RAILMQ_BENCH_STREAMS, default
// 1,000): each stream's series are read from its log when scraped.
func BenchmarkScrapeStreams(b *testing.B) {
	n := 1000
	if s := os.Getenv("RAILMQ_BENCH_STREAMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	s, err := broker.New(broker.Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	st := s.LookupVHost("/")
	for i := 0; i < n; i++ {
		if _, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: fmt.Sprintf("s-%06d", i), Durable: true,
			Args: amqp.Table{"x-queue-type": "stream"}}, queue.Config{}); err != nil {
			b.Fatal(err)
		}
	}
	h := metrics.Handler(s, metrics.Options{})
	for _, path := range []string{"/metrics", "/metrics/per-object"} {
		b.Run(path[1:], func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
				body, _ := io.ReadAll(w.Body)
				size = len(body)
			}
			b.ReportMetric(float64(size), "resp-bytes")
		})
	}
}
