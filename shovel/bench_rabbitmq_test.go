package shovel_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// BenchmarkRabbitMQShovel is BenchmarkShovelOnConfirm's one-node case
// done by RabbitMQ's own shovel, to set side by side: a backlog of 1 KiB
// persistent messages moved on-confirm between two durable classic
// queues of one RabbitMQ, through a dynamic shovel made with PUT
// /api/parameters/shovel. It runs only with SHOVEL_BENCH_RABBITMQ_PID
// set to the beam.smp process (its CPU time is read from /proc), against
// amqp://guest:guest@localhost:5672 and http://localhost:15672, in a
// vhost of its own that it deletes.
func BenchmarkRabbitMQShovel(b *testing.B) {
	pid := os.Getenv("SHOVEL_BENCH_RABBITMQ_PID")
	if pid == "" {
		b.Skip("SHOVEL_BENCH_RABBITMQ_PID is not set")
	}
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("SHOVEL_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	const vh = "shovel-bench"
	amqpURL := "amqp://guest:guest@localhost:5672/" + vh
	api := func(method, path, body string) {
		req, err := http.NewRequest(method, "http://localhost:15672/api/"+path, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Close = true // no idle connection outlives the benchmark (goleak)
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 && !(method == http.MethodDelete && resp.StatusCode == 404) {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out.String())
		}
	}
	api(http.MethodPut, "vhosts/"+vh, "")
	api(http.MethodPut, "permissions/"+vh+"/guest", `{"configure":".*","write":".*","read":".*"}`)
	defer api(http.MethodDelete, "vhosts/"+vh, "")
	var elapsed time.Duration
	var ticks int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		q := "bench-" + strconv.Itoa(i)
		fill(b, amqpURL, q, n, 1024)
		declare(b, amqpURL, q+"-dst")
		b.StartTimer()
		t0, c0 := time.Now(), procTicks(b, pid)
		api(http.MethodPut, "parameters/shovel/"+vh+"/"+q, fmt.Sprintf(
			`{"value":{"src-uri":"amqp:///%s","src-queue":"%s","dest-uri":"amqp:///%s","dest-queue":"%s-dst"}}`, vh, q, vh, q))
		poll.Eventually(b, 30*time.Minute, func() bool { return queueLen(b, amqpURL, q+"-dst") == n }, "moved")
		elapsed += time.Since(t0)
		ticks += procTicks(b, pid) - c0
		b.StopTimer()
		api(http.MethodDelete, "parameters/shovel/"+vh+"/"+q, "")
	}
	total := float64(n * b.N)
	b.ReportMetric(total/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(ticks)*1e4/total, "cpu-µs/msg") // a tick is 10 ms (CLK_TCK 100)
	b.ReportMetric(0, "ns/op")
}

// procTicks is a process's user+system CPU time in clock ticks.
func procTicks(b *testing.B, pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + st
}
