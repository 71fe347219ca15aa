package shovel_test

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
)

// BenchmarkShovelParameter moves a backlog of 1 KiB persistent messages
// (100,000 unless SHOVEL_BENCH_N says otherwise) on-confirm from one
// durable queue to another on the same broker, with a shovel the broker
// runs from its runtime parameter: "local" with host-less URIs (the
// broker's direct connections over a Unix socket pair), "tcp" with the
// broker's own address (loopback TCP, login and all). msgs/s and the
// process's CPU per message; one iteration is one backlog
// (-benchtime=1x).
func BenchmarkShovelParameter(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("SHOVEL_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	for _, name := range []string{"local", "tcp"} {
		b.Run(name, func(b *testing.B) {
			nd := startNode(b, "127.0.0.1:0", b.TempDir())
			uri := "amqp://"
			if name == "tcp" {
				uri = nd.url("/")
			}
			var elapsed, cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				q := "bench-" + strconv.Itoa(i)
				fill(b, nd.url("/"), q, n, 1024)
				declare(b, nd.url("/"), q+"-dst")
				val, _ := json.Marshal(map[string]any{"src-uri": uri, "src-queue": q, "dest-uri": uri, "dest-queue": q + "-dst"})
				b.StartTimer()
				cpu0, t0 := cpuTime(), time.Now()
				if _, err := nd.srv.PutParameter(broker.Parameter{VHost: "/", Component: broker.ShovelComponent, Name: q, Value: val}); err != nil {
					b.Fatal(err)
				}
				poll.Eventually(b, 10*time.Minute, func() bool {
					s := nd.srv.Shovels("/")
					return len(s) == 1 && s[0].Moved == int64(n)
				}, "moved")
				elapsed += time.Since(t0)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				if _, err := nd.srv.DeleteParameter(broker.ShovelComponent, "/", q); err != nil {
					b.Fatal(err)
				}
				if got := queueLen(b, nd.url("/"), q+"-dst"); got != n {
					b.Fatalf("destination holds %d, want %d", got, n)
				}
			}
			total := float64(n * b.N)
			b.ReportMetric(total/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Microseconds())/total, "cpu-µs/msg")
			b.ReportMetric(0, "ns/op")
		})
	}
}
