package queue

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
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
		d := r.Hold(1)
		if d < 750*time.Millisecond || d > 1250*time.Millisecond {
			t.Fatalf("hold %v outside [750ms, 1250ms]", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo > 760*time.Millisecond || hi < 1240*time.Millisecond {
		t.Fatalf("holds spread over [%v, %v] only", lo, hi)
	}
	if d := (&Retry{Delay: time.Second}).Hold(2); d != 2*time.Second {
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

// lostHoldStore is a Store whose reads of held messages find their record
// missing, or corrupt.
type lostHoldStore struct {
	logStore
	corrupt bool
}

func (s *lostHoldStore) LoadEntries(_, after uint64, _ int, _ int64, done func([]StoredEntry, error)) {
	if !s.corrupt {
		done(nil, nil)
		return
	}
	done([]StoredEntry{{Seq: after + 1, Msg: 1, Inline: true, Record: []byte{0xff}}}, nil)
}

// chanConf reports its outcome on a channel.
type chanConf chan error

func (c chanConf) Done(err error) { c <- err }

// A paged hold whose stored record is missing or corrupt when it comes
// due is dropped; its deduplication id leaves the queue with it, as for
// any message that leaves: a message with that id is taken again.
func TestPagedHoldLostFreesDedupID(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "missing", true: "corrupt"}[corrupt], func(t *testing.T) {
			st := &lostHoldStore{logStore: logStore{entries: map[uint64]bool{}}, corrupt: corrupt}
			pol := NoPolicy
			pol.Dedup = true
			pol.Retry = Retry{Delay: 20 * time.Millisecond}
			// A window of 2 keeps one hold in memory: the second is paged.
			q := newQueue(t, Config{Name: "q", ID: 1, Durable: true, Store: st, Window: 2, WindowBytes: 1 << 20, Policy: &pol})
			publish := func(id string) error {
				t.Helper()
				p := amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{DedupHeader: id}}
				conf := make(chanConf, 1)
				q.PublishConfirm(&Message{Props: p.Append(nil), Body: []byte(id), Persistent: true, ID: st.NewMessageID(), Inline: true,
					Enqueued: Now()}, conf, nil)
				select {
				case err := <-conf:
					return err
				case <-time.After(5 * time.Second):
					t.Fatal("no confirm")
				}
				return nil
			}
			for _, id := range []string{"a", "b"} {
				if err := publish(id); err != nil {
					t.Fatalf("publish %s: %v", id, err)
				}
			}
			var ds []Delivery
			for range 2 {
				d, ok, _, err := q.Get(false)
				if err != nil || !ok {
					t.Fatalf("get: %v %v", ok, err)
				}
				ds = append(ds, d)
			}
			q.RequeueNacked(ds, nil)
			// "a" comes back from memory; "b", paged, is lost when read.
			poll.Eventually(t, 5*time.Second, func() bool {
				n, _, _ := q.Stats()
				return n == 1 && q.Held() == 0
			}, "one message back, the lost one dropped")
			if err := publish("a"); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("a duplicate of a queued message: %v, want ErrDuplicate", err)
			}
			if err := publish("b"); err != nil {
				t.Fatalf("the id of the lost message: %v, want it taken", err)
			}
		})
	}
}
