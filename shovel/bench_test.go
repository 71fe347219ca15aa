package shovel_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/shovel"
)

// BenchmarkShovelOnConfirm moves a backlog of 1 KiB persistent messages
// (100,000 unless SHOVEL_BENCH_N says otherwise) on-confirm from one
// durable queue to another: on one railmq, and between two. It reports
// msgs/s and the process's CPU time per message (user+system: both
// brokers and the shovel run in this process), the figures to set beside
// RabbitMQ's shovel doing the same (issue 41, Measured). One iteration
// is one whole backlog: run with -benchtime=1x.
func BenchmarkShovelOnConfirm(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("SHOVEL_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	for _, name := range []string{"one-node", "two-nodes"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			src := startNode(b, "127.0.0.1:0", b.TempDir())
			dst := src
			if name == "two-nodes" {
				dst = startNode(b, "127.0.0.1:0", b.TempDir())
			}
			var elapsed, cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				q := "bench-" + strconv.Itoa(i)
				fill(b, src.url("/"), q, n, 1024)
				declare(b, dst.url("/"), q+"-dst")
				b.StartTimer()
				cpu0, t0 := cpuTime(), time.Now()
				cfg, err := shovel.Parse(map[string]any{"src-uri": src.url("/"), "src-queue": q, "dest-uri": dst.url("/"), "dest-queue": q + "-dst"})
				if err != nil {
					b.Fatal(err)
				}
				s := shovel.New(cfg, shovel.Options{Name: q, Vhost: "/"})
				s.Start()
				poll.Eventually(b, 10*time.Minute, func() bool { return s.Status().Moved == uint64(n) }, "moved")
				elapsed += time.Since(t0)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				s.Stop()
				if got := queueLen(b, dst.url("/"), q+"-dst"); got != n {
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

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
