package mgmt

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkListQueues measures GET /api/queues over many queues
// (RAILMQ_BENCH_QUEUES, default 10,000; the figure is for
// 100,000): the default answer, and one page of RabbitMQ's pagination.
func BenchmarkListQueues(b *testing.B) {
	n := 10000
	if s := os.Getenv("RAILMQ_BENCH_QUEUES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	s, err := broker.New(broker.Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	st := s.LookupVHost("/")
	for i := 0; i < n; i++ {
		if _, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: fmt.Sprintf("q-%06d", i)}, queue.Config{}); err != nil {
			b.Fatal(err)
		}
	}
	api := New(s, Options{StatsInterval: time.Hour}) // the rates sampler's allocations are not the list's
	defer api.Close()
	h := api.Handler()
	for _, tc := range []struct{ name, query string }{
		{"default", ""},
		{"page", "?page=3&page_size=100"},
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

type countingWriter struct {
	h    http.Header
	code int
	n    int64
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(c int)   { w.code = c }
func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := io.Discard.Write(p)
	w.n += int64(n)
	return n, err
}

// BenchmarkListExchangesAndBindings measures GET /api/exchanges and
// /api/bindings over RAILMQ_BENCH_QUEUES (default 10,000) durable
// exchanges, each bound to one queue: their objects are built as maps
// and encoded by the same writer as the queues'.
func BenchmarkListExchangesAndBindings(b *testing.B) {
	n := 10000
	if s := os.Getenv("RAILMQ_BENCH_QUEUES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	s, err := broker.New(broker.Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	st := s.LookupVHost("/")
	if _, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: "q", Durable: true}, queue.Config{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("x-%06d", i)
		if err := st.DeclareExchange(vhost.ExchangeDecl{Name: name, Type: "direct", Durable: true}); err != nil {
			b.Fatal(err)
		}
		if err := st.Bind(0, "q", false, name, "k", nil); err != nil {
			b.Fatal(err)
		}
	}
	api := New(s, Options{StatsInterval: time.Hour})
	defer api.Close()
	h := api.Handler()
	for _, path := range []string{"/api/exchanges", "/api/bindings"} {
		b.Run(path[5:], func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("GET", path, nil)
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
