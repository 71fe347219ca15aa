package mgmt

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkListStreams measures GET /api/queues over streams
// (RAILMQ_BENCH_STREAMS, default 1,000) beside as many classic queues:
// a stream's object is built as a map with its log's figures
// (stream.go), a classic queue's written straight (queuejson.go).
func BenchmarkListStreams(b *testing.B) {
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
		if _, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: fmt.Sprintf("c-%06d", i), Durable: true}, queue.Config{}); err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: fmt.Sprintf("s-%06d", i), Durable: true,
			Args: amqp.Table{"x-queue-type": "stream"}}, queue.Config{}); err != nil {
			b.Fatal(err)
		}
	}
	api := New(s, Options{StatsInterval: time.Hour})
	defer api.Close()
	h := api.Handler()
	for _, tc := range []struct{ name, query string }{
		{"classic", "?name=c-&use_regex=false&page=1&page_size=500"},
		{"streams", "?name=s-&use_regex=false&page=1&page_size=500"},
		{"all", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("GET", "/api/queues"+tc.query, nil)
				req.SetBasicAuth("guest", "guest")
				req.RemoteAddr = "127.0.0.1:1"
				w := &countingWriter{h: http.Header{}}
				h.ServeHTTP(w, req)
				if w.code != 0 && w.code != 200 {
					b.Fatalf("status %d", w.code)
				}
				size = w.n
			}
			b.ReportMetric(float64(size), "resp-bytes")
		})
	}
}
