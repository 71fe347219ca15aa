package queue

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/railmq/railmq/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Sink that takes up to limit deliveries per consumer.
type recorder struct {
	mu        sync.Mutex
	got       map[*Consumer][]Delivery
	limit     int
	cancelled []*Consumer
}

func newRecorder(limit int) *recorder {
	return &recorder{got: map[*Consumer][]Delivery{}, limit: limit}
}

func (r *recorder) Deliver(c *Consumer, q *Queue, d Delivery) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.limit > 0 && len(r.got[c]) >= r.limit {
		return false
	}
	r.got[c] = append(r.got[c], d)
	return true
}

func (r *recorder) Cancelled(c *Consumer) {
	r.mu.Lock()
	r.cancelled = append(r.cancelled, c)
	r.mu.Unlock()
}

func (r *recorder) bodies(c *Consumer) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.got[c] {
		out = append(out, string(d.Msg.Body))
	}
	return out
}

func msg(s string) *Message { return &Message{Body: []byte(s)} }

func newQueue(t *testing.T, cfg Config) *Queue {
	q := New(cfg)
	t.Cleanup(func() { _, _ = q.Delete(false, false); <-q.Done() })
	return q
}

func TestFIFOAndRequeueOrder(t *testing.T) {
	q := newQueue(t, Config{Name: "q"})
	for i := 1; i <= 5; i++ {
		q.Publish(msg(fmt.Sprint(i)))
	}
	var held []Delivery
	for range 3 {
		d, ok, _, err := q.Get(false)
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		held = append(held, d)
	}
	q.Requeue([]Delivery{held[2]}, nil)
	q.Requeue([]Delivery{held[0], held[1]}, nil)
	for _, want := range []string{"1", "2", "3", "4", "5"} {
		d, ok, _, _ := q.Get(true)
		if !ok || string(d.Msg.Body) != want || d.Redelivered != (want <= "3") {
			t.Fatalf("want %s, got %q redelivered=%v", want, d.Msg.Body, d.Redelivered)
		}
		if want <= "3" && d.Count != 1 {
			t.Fatalf("count %d", d.Count)
		}
	}
}

func TestRoundRobinAndPriority(t *testing.T) {
	rec := newRecorder(0)
	q := newQueue(t, Config{Name: "q"})
	a := &Consumer{Tag: "a", Sink: rec}
	b := &Consumer{Tag: "b", Sink: rec}
	for _, c := range []*Consumer{a, b} {
		if err := q.Consume(c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		q.Publish(msg(fmt.Sprint(i)))
	}
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(a))+len(rec.bodies(b)) == 6 }, "6 deliveries")
	if len(rec.bodies(a)) != 3 {
		t.Fatalf("a %v b %v", rec.bodies(a), rec.bodies(b))
	}
	// A higher-priority consumer with room takes everything.
	hi := &Consumer{Tag: "hi", Priority: 5, Sink: rec}
	if err := q.Consume(hi); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		q.Publish(msg(fmt.Sprint("p", i)))
	}
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(hi)) == 4 }, "hi deliveries")
	if len(rec.bodies(a))+len(rec.bodies(b)) != 6 {
		t.Fatal("low priority consumers got messages while hi had room")
	}
}

func TestBlockedConsumerWaitsForKick(t *testing.T) {
	rec := newRecorder(1)
	q := newQueue(t, Config{Name: "q"})
	c := &Consumer{Tag: "c", Sink: rec}
	c.Hold()
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	q.Publish(msg("1"))
	q.Publish(msg("2"))
	if m, _, _ := q.Stats(); m != 2 {
		t.Fatalf("held consumer got deliveries: ready %d", m)
	}
	q.Kick(c, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(c)) == 1 }, "first delivery")
	if m, _, _ := q.Stats(); m != 1 {
		t.Fatalf("ready %d", m)
	}
	rec.mu.Lock()
	rec.limit = 2
	rec.mu.Unlock()
	q.Kick(c, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(c)) == 2 }, "second delivery")
}

func TestExclusiveConsumer(t *testing.T) {
	rec := newRecorder(0)
	q := newQueue(t, Config{Name: "q"})
	if err := q.Consume(&Consumer{Tag: "x", Exclusive: true, Sink: rec}); err != nil {
		t.Fatal(err)
	}
	if err := q.Consume(&Consumer{Tag: "y", Sink: rec}); err != ErrExclusiveConsumer {
		t.Fatalf("got %v", err)
	}
}

func TestDeleteCancelsConsumers(t *testing.T) {
	rec := newRecorder(0)
	q := New(Config{Name: "q"})
	c := &Consumer{Tag: "c", Sink: rec}
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Delete(true, false); err != ErrInUse {
		t.Fatalf("if-unused: %v", err)
	}
	n, err := q.Delete(false, false)
	if err != nil || n != 0 {
		t.Fatal(n, err)
	}
	<-q.Done()
	if len(rec.cancelled) != 1 || rec.cancelled[0] != c {
		t.Fatalf("cancelled %v", rec.cancelled)
	}
	if q.Publish(msg("late")) {
		t.Fatal("publish to a deleted queue accepted")
	}
	if _, err := q.Purge(); err != ErrDeleted {
		t.Fatalf("purge: %v", err)
	}
}

func TestAutoDelete(t *testing.T) {
	var deleted atomic.Bool
	q := New(Config{Name: "q", AutoDelete: true, OnEmptyOfConsumers: func(*Queue) { deleted.Store(true) }})
	rec := newRecorder(0)
	a, b := &Consumer{Tag: "a", Sink: rec}, &Consumer{Tag: "b", Sink: rec}
	_ = q.Consume(a)
	_ = q.Consume(b)
	q.Cancel(a)
	if deleted.Load() {
		t.Fatal("deleted with a consumer left")
	}
	q.Cancel(b)
	if !deleted.Load() {
		t.Fatal("not deleted after the last consumer")
	}
	<-q.Done()
}

func TestMemoryAccounting(t *testing.T) {
	var mem atomic.Int64
	q := newQueue(t, Config{Name: "q", Memory: &mem})
	for range 10 {
		q.Publish(&Message{Body: make([]byte, 100)})
	}
	d, _, _, _ := q.Get(false)
	if mem.Load() != 10*(100+msgOverhead) {
		t.Fatalf("memory %d with one unacked", mem.Load())
	}
	q.Ack([]Delivery{d}, nil)
	if _, err := q.Purge(); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() bool { return mem.Load() == 0 }, "memory released")
	q.Publish(&Message{Body: make([]byte, 100)})
	_, _, _, _ = q.Get(false)
	_, _ = q.Delete(false, false)
	<-q.Done()
	if mem.Load() != 0 {
		t.Fatalf("memory %d after delete with an unacked message", mem.Load())
	}
}

// What the memory count charges a small message is what holding it costs:
// the heap grown by a queue of 100,000 messages of 16-byte bodies, beside
// their count, within a fifth either way. (Bodies and properties are
// allocated apart here, as the reader does.)
func TestMessageOverhead(t *testing.T) {
	const n = 100_000
	var mem atomic.Int64
	q := newQueue(t, Config{Name: "q", Memory: &mem})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range n {
		q.Publish(&Message{RoutingKey: "orders", Props: make([]byte, 12), Body: make([]byte, 16), Priority: uint8(i)})
	}
	poll.Eventually(t, 5*time.Second, func() bool { m, _, _ := q.Stats(); return m == n }, "messages queued")
	grown := int64(heap() - before)
	counted := mem.Load()
	t.Logf("heap grew %d B per message, counted %d", grown/n, counted/n)
	if counted < grown*4/5 || counted > grown*6/5 {
		t.Fatalf("counted %d bytes for %d messages holding %d", counted, n, grown)
	}
	runtime.KeepAlive(q)
}

// A message with a TTL of 0 goes to a consumer with room at once, or
// expires; ops batched in one drain count as applied in order, so a
// consumer that a kick earlier in the batch unblocked takes it.
func TestZeroTTL(t *testing.T) {
	var mu sync.Mutex
	var dead []string
	var mem atomic.Int64
	pol := NoPolicy
	pol.DeadLetter = func(_ *Queue, d Delivery, reason string, _ func()) {
		mu.Lock()
		dead = append(dead, string(d.Msg.Body)+" "+reason)
		mu.Unlock()
	}
	q := newQueue(t, Config{Name: "q", Policy: &pol, Memory: &mem})
	zero := func(s string) *Message {
		now := Now()
		return &Message{Body: []byte(s), Enqueued: now, Expires: now}
	}
	rec := newRecorder(2)
	c := &Consumer{Tag: "c", Sink: rec}
	c.Hold()
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	// No consumer ready: expired at once.
	q.Publish(zero("held"))
	// One batch: the kick, a message without TTL and one with TTL 0.
	q.exec.Lock()
	q.cfg.Memory.Add(2)
	q.enqueue(op{kind: opKick, consumer: c})
	q.enqueue(op{kind: opPublish, msg: msg("a")})
	q.enqueue(op{kind: opPublish, msg: zero("b")})
	q.drain(nil, true)
	q.exec.Unlock()
	if got := rec.bodies(c); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("delivered %v", got)
	}
	// The consumer is at its limit now.
	q.Publish(zero("full"))
	if m, _, _ := q.Stats(); m != 0 {
		t.Fatalf("ready %d", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 2 || dead[0] != "held expired" || dead[1] != "full expired" {
		t.Fatalf("dead-lettered %v", dead)
	}
	if n := mem.Load(); n != 2 {
		t.Fatalf("memory %d with two unacked bytes", n)
	}
}

// logStore is a Store that applies commits in order to a set of entries.
type logStore struct {
	mu      sync.Mutex
	id      atomic.Uint64
	entries map[uint64]bool // by sequence (one queue)
}

func (s *logStore) NewMessageID() uint64 { return s.id.Add(1) }

func (s *logStore) Commit(w *Writes, done func(error)) {
	s.mu.Lock()
	for _, op := range w.Ops {
		switch op.Kind {
		case PutEntry:
			s.entries[op.Seq] = true
		case DeleteEntry:
			delete(s.entries, op.Seq)
		}
	}
	s.mu.Unlock()
	if done != nil {
		done(nil)
	}
}

func (s *logStore) LoadEntries(_, _ uint64, _ int, _ int64, done func([]StoredEntry, error)) {
	done(nil, nil)
}

func (s *logStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// A stored message dead-lettered in the drain that wrote its entry, with
// no copy to wait for, leaves no entry behind (else it would come back
// at a restart).
func TestDeadLetterRightAfterPut(t *testing.T) {
	ttl0, maxLen0 := NoPolicy, NoPolicy
	ttl0.MessageTTL = 0
	maxLen0.MaxLength = 0
	for name, pol := range map[string]Policy{"ttl 0": ttl0, "max-length 0": maxLen0} {
		t.Run(name, func(t *testing.T) {
			st := &logStore{entries: map[uint64]bool{}}
			var dead atomic.Int32
			pol.DeadLetter = func(_ *Queue, _ Delivery, _ string, done func()) {
				dead.Add(1)
				done() // the copy went to a transient queue: nothing to wait for
			}
			q := newQueue(t, Config{Name: "q", ID: 1, Durable: true, Store: st, Policy: &pol})
			for range 3 {
				q.Publish(&Message{Body: []byte("x"), Persistent: true, ID: st.NewMessageID(), Inline: true, Enqueued: Now()})
			}
			poll.Eventually(t, 5*time.Second, func() bool { return dead.Load() == 3 }, "dead-lettering")
			poll.Eventually(t, 5*time.Second, func() bool { return st.len() == 0 }, "entries deleted")
		})
	}
}

func BenchmarkPublishDeliver(b *testing.B) {
	rec := &countSink{}
	q := New(Config{Name: "bench"})
	defer func() { _, _ = q.Delete(false, false); <-q.Done() }()
	c := &Consumer{Tag: "c", NoAck: true, Sink: rec}
	_ = q.Consume(c)
	m := &Message{Body: make([]byte, 1024)}
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		q.Publish(m)
	}
	for rec.n.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPublishDeliverAck is S5's path through a queue: each publish
// is delivered inline to a manual-ack consumer, which acks it.
func BenchmarkPublishDeliverAck(b *testing.B) {
	s := &lastSink{}
	q := New(Config{Name: "bench"})
	defer func() { _, _ = q.Delete(false, false); <-q.Done() }()
	c := &Consumer{Tag: "c", Sink: s, Out: &outlet{}}
	_ = q.Consume(c)
	var fl Flushes
	ds := make([]Delivery, 1)
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		q.PublishConfirm(&Message{Body: make([]byte, 1024)}, nil, &fl)
		ds[0] = s.last
		q.Ack(ds, &fl)
		fl.Flush()
	}
}

// lastSink keeps the latest delivery (for use under the queue's exec).
type lastSink struct{ last Delivery }

func (s *lastSink) Deliver(_ *Consumer, _ *Queue, d Delivery) bool { s.last = d; return true }
func (s *lastSink) Cancelled(*Consumer)                            {}

type countSink struct{ n atomic.Int64 }

func (s *countSink) Deliver(*Consumer, *Queue, Delivery) bool { s.n.Add(1); return true }
func (s *countSink) Cancelled(*Consumer)                      {}

// outlet counts what a consumer was delivered and not yet written out
// (Wake or Flush).
type outlet struct {
	unwritten atomic.Int64
}

func (o *outlet) Wake()  { o.unwritten.Store(0) }
func (o *outlet) Flush() { o.unwritten.Store(0) }

// ackingSink takes deliveries up to a prefetch and hands them to the
// consumer's acker goroutine.
type ackingSink struct {
	mu       sync.Mutex
	order    []string // every delivery, in the order the queue made them
	pending  map[*Consumer][]Delivery
	prefetch int
	out      map[*Consumer]*outlet
	ready    chan *Consumer
}

func (s *ackingSink) Deliver(c *Consumer, q *Queue, d Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending[c]) >= s.prefetch {
		c.NeedKick = true
		return false
	}
	s.pending[c] = append(s.pending[c], d)
	s.order = append(s.order, string(d.Msg.Body))
	s.out[c].unwritten.Add(1)
	select {
	case s.ready <- c:
	default:
	}
	return true
}

func (s *ackingSink) Cancelled(*Consumer) {}

// Publishers and ackers on their own goroutines apply the queue's ops
// inline or leave them to the queue's goroutine, whichever is free: every
// message is delivered once, in each publisher's order, acked, and every
// delivery's outlet is written out.
func TestInlineDrainConcurrent(t *testing.T) {
	const publishers, perPublisher, consumers = 4, 2000, 2
	q := newQueue(t, Config{Name: "q"})
	s := &ackingSink{pending: map[*Consumer][]Delivery{}, prefetch: 50,
		out: map[*Consumer]*outlet{}, ready: make(chan *Consumer, 1)}
	var cs []*Consumer
	for i := range consumers {
		c := &Consumer{Tag: fmt.Sprint("c", i), Sink: s, Out: &outlet{}}
		s.out[c] = c.Out.(*outlet)
		if err := q.Consume(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range consumers { // ackers
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fl Flushes
			for {
				select {
				case <-stop:
					return
				case <-s.ready:
				case <-time.After(time.Millisecond):
				}
				for _, c := range cs {
					s.mu.Lock()
					ds := s.pending[c]
					s.pending[c] = nil
					kick := c.NeedKick
					c.NeedKick = false
					s.mu.Unlock()
					for _, d := range ds {
						q.Ack([]Delivery{d}, &fl)
						acked.Add(1)
					}
					if kick {
						q.Kick(c, &fl)
					}
					fl.Flush()
				}
			}
		}()
	}
	var pub sync.WaitGroup
	for p := range publishers {
		pub.Add(1)
		go func() {
			defer pub.Done()
			var fl Flushes
			for i := range perPublisher {
				q.PublishConfirm(msg(fmt.Sprintf("%d-%d", p, i)), nil, &fl)
				fl.Flush()
			}
		}()
	}
	pub.Wait()
	poll.Eventually(t, 5*time.Second, func() bool { return acked.Load() == publishers*perPublisher }, "every message acked")
	close(stop)
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) != publishers*perPublisher {
		t.Fatalf("%d deliveries, want %d", len(s.order), publishers*perPublisher)
	}
	next := make([]int, publishers)
	for _, b := range s.order {
		var p, i int
		fmt.Sscanf(b, "%d-%d", &p, &i)
		if i != next[p] {
			t.Fatalf("publisher %d: got message %d, want %d", p, i, next[p])
		}
		next[p]++
	}
	for _, c := range cs {
		if n := s.out[c].unwritten.Load(); n != 0 {
			t.Fatalf("consumer %s: %d deliveries never written out", c.Tag, n)
		}
	}
	poll.Eventually(t, 5*time.Second, func() bool { return q.Ready() == 0 && q.Unacked() == 0 }, "counts published")
}

// x-expires with a consumer attached arms no timer: the queue is in use,
// so nothing can fire. It used to re-arm itself every millisecond once
// lastUsed+Expires had passed (416 ticks in 500 ms measured), and every
// message-TTL tick started one more such chain. Once the consumer leaves,
// the queue expires one period later.
func TestExpiresTimerQuietWithConsumer(t *testing.T) {
	expired := make(chan struct{})
	q := New(Config{Name: "exp", Policy: &Policy{MessageTTL: 20 * time.Millisecond, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1,
		Expires: 50 * time.Millisecond, OnExpire: func(*Queue) { close(expired) }}})
	t.Cleanup(func() { _, _ = q.Delete(false, false); <-q.Done() })
	// The consumer takes one message: the others expire (TTL ticks too).
	c := &Consumer{Tag: "c", Sink: newRecorder(1)}
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		q.Publish(msg(fmt.Sprint(i)))
	}
	before := q.ticks.Load()
	time.Sleep(300 * time.Millisecond) // the behaviour under test is time itself: 6 periods
	if n := q.ticks.Load() - before; n > 10 {
		t.Fatalf("%d timer ticks in 300 ms with a consumer attached", n)
	}
	start := time.Now()
	q.Cancel(c)
	select {
	case <-expired:
		if el := time.Since(start); el < 40*time.Millisecond {
			t.Fatalf("expired %v after the last consumer left (x-expires 50 ms)", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not expired after the last consumer left")
	}
}
