package main

import (
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBodyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		h    header
	}{
		{"zero", 0, header{}},
		{"header only", headerSize, header{producer: 1, seq: 2, sentNano: 3}},
		{"padded", 1024, header{producer: 7, seq: 1 << 40, sentNano: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano()}},
		{"extremes", 64, header{producer: math.MaxUint32, seq: math.MaxUint64, sentNano: math.MinInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBody(tc.size)
			if want := max(tc.size, headerSize); len(b) != want {
				t.Fatalf("len(newBody(%d)) = %d, want %d", tc.size, len(b), want)
			}
			putHeader(b, tc.h)
			got, err := parseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.h {
				t.Fatalf("parseHeader = %+v, want %+v", got, tc.h)
			}
			for i := headerSize; i < len(b); i++ {
				if b[i] != 'x' {
					t.Fatalf("padding byte %d = %q", i, b[i])
				}
			}
		})
	}
	t.Run("big-endian layout", func(t *testing.T) {
		b := newBody(headerSize)
		putHeader(b, header{producer: 0x01020304, seq: 0x05060708090a0b0c, sentNano: 0x0d0e0f1011121314})
		for i := range headerSize {
			if b[i] != byte(i+1) {
				t.Fatalf("byte %d = %#x, want %#x", i, b[i], i+1)
			}
		}
	})
	t.Run("short", func(t *testing.T) {
		if _, err := parseHeader(make([]byte, headerSize-1)); !errors.Is(err, errShortBody) {
			t.Fatalf("err = %v, want errShortBody", err)
		}
	})
}

func TestHistogramBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 123456, 1 << 40, math.MaxInt64, math.MaxUint64} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d out of range", v, i)
		}
		lo, hi := histBounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d with bounds [%d, %d]", v, i, lo, hi)
		}
		if lo >= histExact && float64(hi-lo+1)/float64(lo) > 1.0/64 {
			t.Fatalf("bucket %d [%d, %d] wider than 1/64", i, lo, hi)
		}
	}
	// Buckets tile the value range: each starts right after the previous.
	for i := 1; i < histBuckets; i++ {
		_, prevHi := histBounds(i - 1)
		lo, _ := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, lo, prevHi)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		var h histogram
		if q := h.quantile(0.5); q != 0 {
			t.Fatalf("quantile of empty = %d", q)
		}
	})
	t.Run("exact small values", func(t *testing.T) {
		var h histogram
		for v := int64(1); v <= 100; v++ {
			h.record(v)
		}
		for _, tc := range []struct {
			q    float64
			want int64
		}{{0.01, 1}, {0.5, 50}, {0.95, 95}, {0.99, 99}, {1, 100}} {
			if got := h.quantile(tc.q); got != tc.want {
				t.Errorf("quantile(%v) = %d, want %d", tc.q, got, tc.want)
			}
		}
	})
	t.Run("uniform within 1%", func(t *testing.T) {
		var h histogram
		const n = 1_000_000
		for v := int64(1); v <= n; v++ {
			h.record(v * 7) // 7 ns .. 7 ms
		}
		for _, q := range []float64{0.5, 0.95, 0.99, 0.999} {
			want := q * n * 7
			got := float64(h.quantile(q))
			if math.Abs(got-want)/want > 0.01 {
				t.Errorf("quantile(%v) = %.0f, want %.0f within 1%%", q, got, want)
			}
		}
		if h.max != n*7 {
			t.Errorf("max = %d, want %d", h.max, n*7)
		}
		if got := h.quantile(1); got != h.max {
			t.Errorf("quantile(1) = %d, want the max %d", got, h.max)
		}
	})
	t.Run("merge and negatives", func(t *testing.T) {
		var a, b histogram
		a.record(-5) // counts as 0
		for range 98 {
			a.record(1000)
		}
		b.record(5_000_000)
		a.merge(&b)
		if a.total != 100 || a.max != 5_000_000 {
			t.Fatalf("total %d max %d", a.total, a.max)
		}
		if got := a.quantile(0.01); got != 0 {
			t.Errorf("p1 = %d, want 0", got)
		}
		if got := a.quantile(0.5); math.Abs(float64(got)-1000) > 10 {
			t.Errorf("p50 = %d, want ~1000", got)
		}
		if got := a.quantile(1); got != 5_000_000 {
			t.Errorf("p100 = %d, want 5000000", got)
		}
	})
}

func TestSeqSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		add       []uint64
		dups      int // how many of add should be reported as duplicates
		spans     int
		published uint64
		skip      []uint64
		gaps      uint64
		tail      uint64
	}{
		{name: "in order", add: []uint64{0, 1, 2, 3}, spans: 1, published: 4},
		{name: "tail missing", add: []uint64{0, 1, 2}, spans: 1, published: 5, tail: 2},
		{name: "nothing arrived", published: 3, tail: 3},
		{name: "gap", add: []uint64{0, 1, 3, 4}, spans: 2, published: 5, gaps: 1},
		{name: "head missing", add: []uint64{2, 3}, spans: 1, published: 4, gaps: 2},
		{name: "gap filled late", add: []uint64{0, 2, 3, 1}, spans: 1, published: 4},
		{name: "fill joins next only", add: []uint64{0, 3, 2}, spans: 2, published: 4, gaps: 1},
		{name: "reverse", add: []uint64{5, 4, 3, 2, 1, 0}, spans: 1, published: 6},
		{name: "duplicates", add: []uint64{0, 1, 1, 2, 0, 2}, dups: 3, spans: 1, published: 3},
		{name: "duplicate inside a later span", add: []uint64{0, 5, 6, 7, 6}, dups: 1, spans: 2, published: 8, gaps: 4},
		{name: "skipped gap and tail", add: []uint64{0, 2, 3}, spans: 2, published: 6, skip: []uint64{1, 5, 99}, tail: 1},
		{name: "skipped but arrived anyway", add: []uint64{0, 1, 2}, spans: 1, published: 3, skip: []uint64{1}},
		{name: "arrivals beyond published", add: []uint64{0, 1, 2, 7}, spans: 2, published: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s seqSet
			dups := 0
			for _, seq := range tc.add {
				if !s.add(seq) {
					dups++
				}
			}
			if dups != tc.dups {
				t.Errorf("duplicates = %d, want %d", dups, tc.dups)
			}
			if len(s.spans) != tc.spans {
				t.Errorf("spans = %v, want %d of them", s.spans, tc.spans)
			}
			if want := uint64(len(tc.add) - tc.dups); s.count() != want {
				t.Errorf("count = %d, want %d", s.count(), want)
			}
			for _, seq := range tc.add {
				if !s.has(seq) {
					t.Errorf("has(%d) = false", seq)
				}
			}
			skip := map[uint64]struct{}{}
			for _, seq := range tc.skip {
				skip[seq] = struct{}{}
			}
			gaps, tail := s.missing(tc.published, skip)
			if gaps != tc.gaps || tail != tc.tail {
				t.Errorf("missing = (%d gaps, %d tail), want (%d, %d)", gaps, tail, tc.gaps, tc.tail)
			}
		})
	}
}

func TestOrderCheck(t *testing.T) {
	var o orderCheck
	for _, tc := range []struct {
		producer uint32
		seq      uint64
		want     bool
	}{
		{1, 0, true},
		{1, 1, true},
		{2, 0, true}, // producers are independent
		{1, 3, true}, // a gap is not disorder
		{1, 2, false},
		{2, 1, true},
		{1, 4, true},
	} {
		if got := o.inOrder(tc.producer, tc.seq); got != tc.want {
			t.Fatalf("inOrder(%d, %d) = %t, want %t", tc.producer, tc.seq, got, tc.want)
		}
	}
}

func TestQueueStateObserve(t *testing.T) {
	q := newQueueState("q")
	for _, tc := range []struct {
		producer uint32
		seq      uint64
		first    bool
	}{
		{0, 0, true}, {1, 0, true}, {0, 1, true}, {0, 0, false}, {1, 0, false}, {1, 1, true},
	} {
		if got := q.observe(tc.producer, tc.seq); got != tc.first {
			t.Fatalf("observe(%d, %d) = %t, want %t", tc.producer, tc.seq, got, tc.first)
		}
	}
	if u := q.unique.Load(); u != 4 {
		t.Fatalf("unique = %d, want 4", u)
	}
	if n := q.set(0).count(); n != 2 {
		t.Fatalf("producer 0 count = %d, want 2", n)
	}
	if n := q.set(9).count(); n != 0 {
		t.Fatalf("unknown producer count = %d, want 0", n)
	}
}

func TestParseProc(t *testing.T) {
	stat := []byte("4242 (rail mq) (x)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 1000000 2500 18446744073709551615\n")
	ticks, err := parseStatCPU(stat)
	if err != nil || ticks != 325 {
		t.Fatalf("parseStatCPU = %d, %v; want 325", ticks, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("short stat: no error")
	}
	status := []byte("Name:\trailmq\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n")
	rss, hwm, err := parseStatusMem(status)
	if err != nil || rss != 40960 || hwm != 51200 {
		t.Fatalf("parseStatusMem = %d, %d, %v; want 40960, 51200", rss, hwm, err)
	}
	if _, _, err := parseStatusMem([]byte("Name:\tkthread\n")); err == nil {
		t.Fatal("status without VmRSS: no error")
	}
}

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t.Run("unlimited", func(t *testing.T) {
		l := newLimiter(0)
		for range 3 {
			if d := l.delay(t0); d != 0 {
				t.Fatalf("delay = %v", d)
			}
		}
	})
	t.Run("paces", func(t *testing.T) {
		l := newLimiter(100) // one per 10ms
		if d := l.delay(t0); d != 0 {
			t.Fatalf("first delay = %v, want 0", d)
		}
		if d := l.delay(t0); d != 10*time.Millisecond {
			t.Fatalf("second delay = %v, want 10ms", d)
		}
		if d := l.delay(t0.Add(20 * time.Millisecond)); d != 0 {
			t.Fatalf("on schedule: delay = %v, want 0", d)
		}
	})
	t.Run("slack", func(t *testing.T) {
		l := newLimiter(10_000) // 100us apart: no sleep until 1ms ahead
		slept := 0
		for range 20 {
			if l.delay(t0) > 0 {
				slept++
			}
		}
		if slept != 10 {
			t.Fatalf("slept %d times of 20, want 10", slept)
		}
	})
	t.Run("burst capped", func(t *testing.T) {
		l := newLimiter(1000) // 1ms apart
		l.delay(t0)
		later := t0.Add(10 * time.Second) // long stall
		free := 0
		for l.delay(later) == 0 {
			free++
		}
		// 100ms of credit plus the slack millisecond.
		if free < 100 || free > 102 {
			t.Fatalf("%d messages without delay after a stall, want about 100", free)
		}
	})
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		ok    bool
		check func(*config) bool
	}{
		{"defaults", nil, true, func(c *config) bool {
			return c.timed && c.Duration == 10*time.Second && c.Queues == 1 && c.Verify && c.queueCount() == 1 && c.exchange() == "perf.direct"
		}},
		{"pmessages alone is untimed", []string{"--pmessages", "10"}, true, func(c *config) bool { return !c.timed && c.DurationS == 0 }},
		{"pmessages with duration", []string{"--pmessages", "10", "--duration", "3s"}, true, func(c *config) bool { return c.timed }},
		{"fanout takes --queues", []string{"--exchange-type", "fanout", "--queues", "3"}, true, func(c *config) bool {
			return c.queueCount() == 3 && c.exchange() == "perf.fanout" && c.queueName(2) == "perf-q-3"
		}},
		{"fanout queues", []string{"--exchange-type", "fanout", "--fanout-queues", "10"}, true, func(c *config) bool { return c.queueCount() == 10 }},
		{"drain", []string{"--drain", "--producers", "0", "--consumers", "4", "--predeclared"}, true, func(c *config) bool { return !c.timed }},
		{"drain needs no producers", []string{"--drain"}, false, nil},
		{"bad exchange type", []string{"--exchange-type", "topic"}, false, nil},
		{"bad uri", []string{"--uri", "http://x"}, false, nil},
		{"negative", []string{"--confirm", "-1"}, false, nil},
		{"nothing to do", []string{"--producers", "0", "--consumers", "0"}, false, nil},
		{"stray argument", []string{"extra"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%t", err, tc.ok)
			}
			if tc.check != nil && !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}
