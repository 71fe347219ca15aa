package queue

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// The n-th requeue waits Delay * Backoff^(n-1), capped at Max.
func TestRetryDelayFor(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Retry
		n    uint32
		want time.Duration
	}{
		{"first", Retry{Delay: time.Second}, 1, time.Second},
		{"default backoff 2", Retry{Delay: time.Second}, 3, 4 * time.Second},
		{"backoff 1.5", Retry{Delay: time.Second, Backoff: 1.5}, 3, 2250 * time.Millisecond},
		{"backoff 1: fixed", Retry{Delay: time.Second, Backoff: 1}, 9, time.Second},
		{"capped", Retry{Delay: time.Second, Max: 5 * time.Second}, 4, 5 * time.Second},
		{"below the cap", Retry{Delay: time.Second, Max: 5 * time.Second}, 3, 4 * time.Second},
		{"huge count: bounded", Retry{Delay: time.Second, Backoff: 10}, 4000, maxHold},
		{"count 0 (a returned message): as the first", Retry{Delay: time.Second}, 0, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.DelayFor(c.n); got != c.want {
				t.Fatalf("DelayFor(%d) = %v, want %v", c.n, got, c.want)
			}
		})
	}
}

// Jitter spreads a hold uniformly over [d*(1-j), d*(1+j)].
func TestRetryJitterBounds(t *testing.T) {
	r := Retry{Delay: time.Second, Jitter: 0.25}
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 10000 {
		d := r.hold(1)
		if d < 750*time.Millisecond || d > 1250*time.Millisecond {
			t.Fatalf("hold %v outside [750ms, 1250ms]", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo > 760*time.Millisecond || hi < 1240*time.Millisecond {
		t.Fatalf("holds spread over [%v, %v] only", lo, hi)
	}
	if d := (&Retry{Delay: time.Second}).hold(2); d != 2*time.Second {
		t.Fatalf("no jitter: %v", d)
	}
}

func TestHoldHeapOrder(t *testing.T) {
	var h holdHeap
	var want []int64
	for range 1000 {
		due := rand.Int64N(1 << 40)
		h.push(heldMsg{due: due})
		want = append(want, due)
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	for i, w := range want {
		if got := h.pop().due; got != w {
			t.Fatalf("pop %d: %d, want %d", i, got, w)
		}
	}
	if len(h) != 0 {
		t.Fatal("heap not empty")
	}
}

// A queue without a retry delay requeues a nack at once; with one it
// holds it (Held), then releases it to its place.
func TestRequeueNackedHolds(t *testing.T) {
	rec := newRecorder(0)
	pol := NoPolicy
	pol.Retry = Retry{Delay: 50 * time.Millisecond}
	q := newQueue(t, Config{Name: "q", Policy: &pol})
	q.Publish(msg("a"))
	d, ok, _, err := q.Get(false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	at := time.Now()
	q.RequeueNacked([]Delivery{d}, nil)
	if n, _, _ := q.Stats(); n != 0 || q.Held() != 1 {
		t.Fatalf("ready %d held %d, want 0 and 1", n, q.Held())
	}
	c := &Consumer{Sink: rec}
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(c)) == 1 }, "the release")
	if w := time.Since(at); w < 50*time.Millisecond {
		t.Fatalf("released after %v", w)
	}
	if q.Held() != 0 {
		t.Fatalf("held %d after release", q.Held())
	}
	rec.mu.Lock()
	got := rec.got[c][0]
	rec.mu.Unlock()
	if !got.Redelivered || got.Count != 1 {
		t.Fatalf("released %+v", got)
	}
}

// BenchmarkRequeueNackedNoRetry is BenchmarkRequeueRedeliver through
// RequeueNacked (a consumer's nack) on a queue without x-retry-delay: what
// the feature costs a queue that does not use it (one flag check).
func BenchmarkRequeueNackedNoRetry(b *testing.B) {
	s := &lastSink{}
	q := New(Config{Name: "bench"})
	defer func() { _, _ = q.Delete(false, false); <-q.Done() }()
	c := &Consumer{Tag: "c", Sink: s, Out: &outlet{}}
	_ = q.Consume(c)
	var fl Flushes
	q.PublishConfirm(&Message{Body: make([]byte, 1024)}, nil, &fl)
	fl.Flush()
	ds := make([]Delivery, 1)
	b.ReportAllocs()
	for b.Loop() {
		ds[0] = s.last
		q.RequeueNacked(ds, &fl)
		fl.Flush()
	}
}
