package mgmt

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkQueueHistoryMemory measures what the rates sampler keeps per
// queue (its last sample and its history) over RAILMQ_BENCH_QUEUES
// queues (default 10,000): queues holding a message and taking traffic,
// and idle empty ones. bytes/queue is the live heap the sampler added,
// after a GC, divided by the queues; ns/op is one sample of them all.
func BenchmarkQueueHistoryMemory(b *testing.B) {
	n := 10000
	if s := os.Getenv("RAILMQ_BENCH_QUEUES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, traffic := range []bool{true, false} {
		name := "idle"
		if traffic {
			name = "traffic"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			s, err := broker.New(broker.Options{DataDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Shutdown(context.Background()) }()
			st := s.LookupVHost("/")
			qs := make([]*queue.Queue, n)
			for i := range qs {
				q, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: fmt.Sprintf("q-%06d", i)}, queue.Config{})
				if err != nil {
					b.Fatal(err)
				}
				qs[i] = q
			}
			if traffic {
				for _, q := range qs {
					q.Publish(&queue.Message{Body: []byte("x"), Enqueued: time.Now().UnixNano()})
				}
				deadline := time.Now().Add(time.Minute)
				for _, q := range qs {
					for q.Ready() == 0 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
			}
			api := New(s, Options{StatsInterval: time.Hour}) // sampled here, not by its ticker
			defer api.Close()
			for { // New's first sample
				api.qstats.mu.Lock()
				done := len(api.qstats.m) == n
				if done {
					api.qstats.m = nil // measured again below
				}
				api.qstats.mu.Unlock()
				if done {
					break
				}
				time.Sleep(time.Millisecond)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer() // ns/op and allocs/op are a sample's
			for i := 0; i < b.N; i++ {
				api.sample()
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "bytes/queue")
			runtime.KeepAlive(qs)
		})
	}
}
