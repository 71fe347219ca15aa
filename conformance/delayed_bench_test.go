package conformance

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// BenchmarkDelayedLoad loads delayed messages with delays spread evenly
// over [1 s, spread] into the real broker binary (a durable delayed
// exchange, persistent messages, a durable queue with a consumer), and
// reports the broker's peak RSS (VmHWM) and RSS once everything is loaded,
// and how late the messages reached the consumer: p50, p99 and max of
// (received - (sent + x-delay)), an upper bound of the broker's lateness
// (the broker starts the delay when it reads the publish, after "sent").
// Each size is one run (use -benchtime=1x).
//
// Sizes: RAILMQ_DELAYED_SIZES (comma-separated, e.g. "100000,1000000"),
// default 20000; the spread RAILMQ_DELAYED_SPREAD (a duration), default
// 5s. RAILMQ_DELAYED_LEAD (a duration, default none) makes every message
// due at start + lead + [1 s, spread] instead of [1 s, spread] after its
// publish: with a lead longer than the load, routing is measured apart
// from publishing (on a two-core machine the two compete).
// RAILMQ_DELAYED_BINARY runs that broker binary instead of building this
// tree's (to compare two revisions side by side). The figures in bench/RESULTS-features.md: RAILMQ_DELAYED_SIZES=100000,1000000
// RAILMQ_DELAYED_SPREAD=60s go test -run '^$' -bench BenchmarkDelayedLoad
// -benchtime=1x ./conformance
func BenchmarkDelayedLoad(b *testing.B) {
	sizes := []int{20000}
	if s := os.Getenv("RAILMQ_DELAYED_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	dur := func(env string, def time.Duration) time.Duration {
		if s := os.Getenv(env); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}
		return def
	}
	spread, lead := dur("RAILMQ_DELAYED_SPREAD", 5*time.Second), dur("RAILMQ_DELAYED_LEAD", 0)
	bin := os.Getenv("RAILMQ_DELAYED_BINARY") // a broker built elsewhere (another revision), side by side
	if bin == "" {
		bin = testutil.Binary(b)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				runDelayedLoad(b, bin, n, spread, lead)
			}
		})
	}
}

func runDelayedLoad(b *testing.B, bin string, n int, spread, lead time.Duration) {
	dir := b.TempDir()
	addr := testutil.FreePort(b)
	args := []string{"--listen", addr, "--data-dir", dir, "--log-level", "warn"}
	if d := os.Getenv("RAILMQ_DELAYED_DEBUG_LISTEN"); d != "" {
		args = append(args, "--debug-listen", d) // pprof, to profile a run
	}
	// The broker's metrics: its own histogram of how late it routed each
	// message (and the store's fsyncs, to watch during a run).
	prom := os.Getenv("RAILMQ_DELAYED_PROMETHEUS_LISTEN")
	if prom == "" {
		prom = testutil.FreePort(b)
	}
	args = append(args, "--prometheus-listen", prom)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testutil.WaitListening(b, addr, 20*time.Second)
	url := "amqp://guest:guest@" + addr + "/"
	c, err := rmq.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.ExchangeDeclare("bd", "x-delayed-message", true, false, false, false, rmq.Table{"x-delayed-type": "direct"}); err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueueDeclare("bd-q", true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.QueueBind("bd-q", "k", "bd", false, nil); err != nil {
		b.Fatal(err)
	}

	// The consumer, on a connection of its own.
	cc, err := rmq.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cch, err := cc.Channel()
	if err != nil {
		b.Fatal(err)
	}
	ds, err := cch.Consume("bd-q", "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	late := make([]time.Duration, 0, n)
	trace := os.Getenv("RAILMQ_DELAYED_TRACE") != "" // the worst lateness of each second, logged
	worst := map[int64]time.Duration{}
	got := make(chan struct{})
	go func() {
		defer close(got)
		for d := range ds {
			due := int64(binary.BigEndian.Uint64(d.Body))
			now := time.Now().UnixNano()
			late = append(late, time.Duration(now-due))
			if trace {
				worst[now/1e9] = max(worst[now/1e9], time.Duration(now-due))
			}
			if len(late) == n {
				return
			}
		}
	}()

	// RSS, sampled.
	var peakSample atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if r, _ := procKB(cmd.Process.Pid, "VmRSS:"); r > peakSample.Load() {
				peakSample.Store(r)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	// Publish with confirms, a window of 128 in flight, so that the
	// client's clock stays close to the broker's reading of each publish
	// (a publish waiting behind thousands would count as late).
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	window := make(chan *rmq.DeferredConfirmation, 128)
	confirmed := make(chan error, 1)
	go func() {
		for dc := range window {
			if !dc.Wait() {
				confirmed <- fmt.Errorf("nacked")
				return
			}
		}
		confirmed <- nil
	}()
	body := make([]byte, 100)
	span := int64(spread - time.Second)
	for i := range n {
		// Due 1 s to spread after the publish; or, with a lead, at
		// start + lead + 1 s to spread whenever it is published (so
		// that a lead longer than the load measures routing alone).
		offset := time.Second + time.Duration((int64(i)*7919%int64(n))*span/int64(n))
		now := time.Now()
		delay := offset
		if lead > 0 {
			delay = start.Add(lead + offset).Sub(now)
		}
		delay = max(delay.Truncate(time.Millisecond), time.Millisecond)
		binary.BigEndian.PutUint64(body, uint64(now.Add(delay).UnixNano()))
		dc, err := ch.PublishWithDeferredConfirm("bd", "k", false, false, rmq.Publishing{DeliveryMode: 2,
			Headers: rmq.Table{"x-delay": int64(delay / time.Millisecond)}, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		window <- dc
	}
	close(window)
	if err := <-confirmed; err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	loadedRSS, _ := procKB(cmd.Process.Pid, "VmRSS:")
	select {
	case <-got:
	case <-time.After(lead + spread + 2*time.Minute):
		b.Fatalf("only %d of %d delayed messages routed", len(late), n)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	hwm, _ := procKB(cmd.Process.Pid, "VmHWM:")
	if trace {
		var secs []int64
		for sec := range worst {
			secs = append(secs, sec)
		}
		slices.Sort(secs)
		for _, sec := range secs {
			b.Logf("%s worst lateness %v", time.Unix(sec, 0).UTC().Format("15:04:05"), worst[sec])
		}
	}
	slices.Sort(late)
	q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(n)/loaded.Seconds(), "published/s")
	b.ReportMetric(float64(loadedRSS)/1024, "rss-loaded-MB")
	b.ReportMetric(float64(max(hwm, peakSample.Load()))/1024, "rss-peak-MB")
	b.ReportMetric(q(0.5), "late-p50-ms")
	b.ReportMetric(q(0.99), "late-p99-ms")
	b.ReportMetric(q(1), "late-max-ms")
	// Routed (the measure): the broker's histogram, read once
	// everything arrived; absent from a broker built before it.
	if within, p99, ok := brokerLateness("http://" + prom + "/metrics"); ok {
		b.ReportMetric(within*100, "routed-within-10ms-%")
		b.ReportMetric(p99*1000, "routed-late-p99-ms")
	}
}

// brokerLateness reads railmq_delayed_routing_lateness_seconds from the
// broker's /metrics: the fraction of messages routed within 10 ms of
// their due time, and the 99th percentile (linear within its bucket).
func brokerLateness(url string) (within, p99 float64, ok bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	type bucket struct{ le, n float64 }
	var bs []bucket
	sc := bufio.NewScanner(resp.Body)
	const name = `railmq_delayed_routing_lateness_seconds_bucket{le="`
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) {
			continue
		}
		le, rest, _ := strings.Cut(l[len(name):], `"}`)
		n, err1 := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		v, err2 := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			v, err2 = math.Inf(1), nil
		}
		if err1 == nil && err2 == nil {
			bs = append(bs, bucket{v, n})
		}
	}
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0, 0, false
	}
	slices.SortFunc(bs, func(a, c bucket) int { return cmp.Compare(a.le, c.le) })
	total := bs[len(bs)-1].n
	prev := bucket{}
	p99 = math.Inf(1)
	for _, bk := range bs {
		if bk.le == 0.01 {
			within = bk.n / total
		}
		if p99 == math.Inf(1) && bk.n >= 0.99*total && !math.IsInf(bk.le, 1) {
			p99 = prev.le + (bk.le-prev.le)*(0.99*total-prev.n)/max(bk.n-prev.n, 1)
		}
		prev = bk
	}
	return within, p99, true
}

// procKB reads a kB field of /proc/pid/status (Linux).
func procKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field) {
			f := strings.Fields(l)
			if len(f) >= 2 {
				return strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}
