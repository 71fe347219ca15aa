package cluster

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
)

func msg(body string) Message { return Message{RoutingKey: "q", Body: []byte(body)} }

func bodies(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%s", d.Consumer, d.Msg.Body))
	}
	return out
}

func reasons(ds []DeadLetter) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%s", d.Reason, d.Msg.Body))
	}
	return out
}

// TestFifoDeliversInOrderRoundRobin: messages go out in order, shared
// round robin by consumers with room, within their prefetch.
func TestFifoDeliversInOrderRoundRobin(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	for i := 1; i <= 5; i++ {
		if e := f.Apply(Enqueue(int64(i), msg(fmt.Sprint(i)))); !e.Accepted || len(e.Deliveries) != 0 {
			t.Fatalf("enqueue %d: %+v", i, e)
		}
	}
	e := f.Apply(Checkout("a", 2))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:1", "a:2"}) {
		t.Fatalf("checkout a (prefetch 2) got %v", got)
	}
	e = f.Apply(Checkout("b", 0))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"b:3", "b:4", "b:5"}) {
		t.Fatalf("checkout b (no prefetch) got %v", got)
	}
	f.Apply(Settle("a", 1))
	e = f.Apply(Enqueue(6, msg("6")))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:6"}) {
		t.Fatalf("after a settles, 6 went %v, want to a (next in turn, with room)", got)
	}
	if f.Len() != 5 || f.Ready() != 0 {
		t.Errorf("len %d ready %d, want 5 and 0", f.Len(), f.Ready())
	}
	// Settling another consumer's message, or an unknown one, does nothing.
	f.Apply(Settle("a", 3, 99))
	if f.Len() != 5 {
		t.Errorf("a settled b's message: len %d", f.Len())
	}
}

// TestFifoReturnAndDeliveryLimit: a returned message goes back to the head,
// redelivered with its count; past the delivery limit it is dead-lettered.
func TestFifoReturnAndDeliveryLimit(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: 2})
	f.Apply(Enqueue(1, msg("x")))
	f.Apply(Enqueue(2, msg("y")))
	e := f.Apply(Checkout("a", 1))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:x"}) {
		t.Fatalf("got %v", got)
	}
	for round := 1; round <= 2; round++ {
		e = f.Apply(Return("a", e.Deliveries[0].ID))
		if len(e.Deliveries) != 1 || string(e.Deliveries[0].Msg.Body) != "x" || !e.Deliveries[0].Redelivered || e.Deliveries[0].Count != uint32(round) {
			t.Fatalf("return %d: redelivered %+v, want x again, redelivered, count %d", round, e.Deliveries, round)
		}
	}
	e = f.Apply(Return("a", e.Deliveries[0].ID))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"delivery_limit:x"}) {
		t.Fatalf("third return dead-lettered %v, want x for delivery_limit", got)
	}
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:y"}) || e.Deliveries[0].Redelivered {
		t.Fatalf("then delivered %v, want y, first delivery", got)
	}
	e = f.Apply(Discard("a", e.Deliveries[0].ID))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"rejected:y"}) {
		t.Errorf("discard dead-lettered %v", got)
	}
	if f.Len() != 0 || f.Bytes() != 0 {
		t.Errorf("left %d messages, %d bytes", f.Len(), f.Bytes())
	}
}

// TestFifoCancelReturnsCheckedOut: a consumer that goes (its channel
// closed, its node lost) gives its unsettled messages back, redelivered,
// ahead of the rest and in their order.
// TestFifoCancelKeepsCheckedOut: as rabbit_fifo, a cancelled consumer
// gets nothing more, but what it had checked out stays so: its channel
// may still ack it (settled) or requeue it; a Down of its node returns
// the rest, redelivered.
func TestFifoCancelKeepsCheckedOut(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	for i := 1; i <= 5; i++ {
		f.Apply(Enqueue(int64(i), msg(fmt.Sprint(i))))
	}
	f.Apply(Checkout("n1/a", 3)) // 1, 2, 3
	f.Apply(Cancel("n1/a"))
	e := f.Apply(Checkout("n2/b", 0))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"n2/b:4", "n2/b:5"}) {
		t.Fatalf("b got %v, want 4 5: 1 to 3 stay with the cancelled a", got)
	}
	f.Apply(Settle("n1/a", 1)) // acked after the cancel
	e = f.Apply(Return("n1/a", 2))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"n2/b:2"}) || !e.Deliveries[0].Redelivered {
		t.Fatalf("after a's requeue of 2: %v, want 2 to b, redelivered", got)
	}
	e = f.Apply(Down("n1/", ""))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"n2/b:3"}) || !e.Deliveries[0].Redelivered {
		t.Fatalf("after n1 went down: %v, want 3 to b, redelivered", got)
	}
	if f.Len() != 4 || f.Unacked() != 4 {
		t.Fatalf("len %d unacked %d, want 4 and 4", f.Len(), f.Unacked())
	}
}

// TestFifoLimitsAndTTL: drop-head and reject-publish at x-max-length, and
// expiry at the head by the leader's tick.
func TestFifoLimitsAndTTL(t *testing.T) {
	f := NewFifo(FifoConfig{MaxLength: 2, DeliveryLimit: -1})
	f.Apply(Enqueue(1, msg("1")))
	f.Apply(Enqueue(2, msg("2")))
	e := f.Apply(Enqueue(3, msg("3")))
	if !e.Accepted || !reflect.DeepEqual(reasons(e.DeadLetters), []string{"maxlen:1"}) {
		t.Errorf("drop-head: %+v", e)
	}
	// reject-publish as RabbitMQ's quorum queues: the publish that takes
	// the queue over its limit is taken, the next ones refused (3.10.8,
	// x-max-length 2, confirms one by one: ack, ack, ack, nack;
	// fifo_overflow.go).
	r := NewFifo(FifoConfig{MaxLength: 2, RejectPublish: true})
	r.Apply(Enqueue(1, msg("1")))
	r.Apply(Enqueue(2, msg("2")))
	if e := r.Apply(Enqueue(3, msg("3"))); !e.Accepted || len(e.DeadLetters) != 0 || r.Len() != 3 {
		t.Errorf("reject-publish refused the third (RabbitMQ takes it): %+v, len %d", e, r.Len())
	}
	if e := r.Apply(Enqueue(4, msg("4"))); e.Accepted || len(e.DeadLetters) != 0 || r.Len() != 3 {
		t.Errorf("reject-publish accepted a fourth: %+v, len %d", e, r.Len())
	}
	rb := NewFifo(FifoConfig{MaxLength: 2, RejectPublish: true})
	if e := rb.Apply(EnqueueBatch(1, []Message{msg("a"), msg("b"), msg("c"), msg("d")})); e.Accepted || fmt.Sprint(e.Refused) != "[3]" || rb.Len() != 3 {
		t.Errorf("a batch of 4 into 2 places: %+v, len %d; want the fourth refused", e, rb.Len())
	}
	x := NewFifo(FifoConfig{MessageTTL: 1000})
	x.Apply(Enqueue(100, msg("a")))
	x.Apply(Enqueue(200, Message{Body: []byte("b"), TTL: 50})) // its own, shorter
	x.Apply(Enqueue(300, msg("c")))
	if e := x.Apply(Tick(1099)); len(e.DeadLetters) != 0 {
		t.Errorf("expired too early: %v", reasons(e.DeadLetters))
	}
	// a expires at 1100, then b (expired at 250, behind a) goes with it.
	if e := x.Apply(Tick(1100)); !reflect.DeepEqual(reasons(e.DeadLetters), []string{"expired:a", "expired:b"}) {
		t.Errorf("tick 1100 expired %v", reasons(e.DeadLetters))
	}
	if x.Len() != 1 {
		t.Errorf("left %d, want c", x.Len())
	}
	p := NewFifo(FifoConfig{})
	p.Apply(Enqueue(1, msg("1")))
	p.Apply(Enqueue(2, msg("2")))
	if e := p.Apply(Purge()); e.Purged != 2 || p.Len() != 0 {
		t.Errorf("purge: %+v, len %d", e, p.Len())
	}
}

// randomLog is a log of commands as a queue sees them: enqueues,
// consumers arriving and leaving, settles, returns, discards, ticks.
func randomLog(seed int64, n int) []Command {
	rnd := rand.New(rand.NewSource(seed))
	var log []Command
	f := NewFifo(FifoConfig{DeliveryLimit: 3, MaxLength: 50, MessageTTL: 500})
	out := map[string][]uint64{}
	now := int64(0)
	for len(log) < n {
		now += int64(rnd.Intn(20))
		var c Command
		tag := fmt.Sprintf("c%d", rnd.Intn(3))
		switch k := rnd.Intn(13); {
		case k < 3:
			c = Enqueue(now, Message{RoutingKey: "q", Body: []byte(fmt.Sprint(len(log))), TTL: int64(rnd.Intn(2) * 200)})
		case k == 3:
			var ms []Message
			for j := rnd.Intn(5); j >= 0; j-- {
				ms = append(ms, Message{RoutingKey: "q", Body: []byte(fmt.Sprint(len(log), "/", j))})
			}
			c = EnqueueBatch(now, ms)
		case k == 4:
			c = Checkout(tag, rnd.Intn(4))
		case k == 5:
			c = Cancel(tag) // what it has out stays so
		case k == 6:
			c = Tick(now)
		case k == 10:
			c = Dequeue(tag, rnd.Intn(2) == 0)
		case k == 11:
			c = Down(tag, "")
			delete(out, tag)
		case k == 12:
			c = Batch([]Command{Enqueue(now, Message{RoutingKey: "q", Body: []byte("b")}), Checkout(tag, 2), Tick(now)})
		default:
			ids := out[tag]
			if len(ids) == 0 {
				continue
			}
			j := rnd.Intn(len(ids))
			id := ids[j]
			out[tag] = append(ids[:j], ids[j+1:]...)
			c = []Command{Settle(tag, id), Return(tag, id), Discard(tag, id), Release(tag, id)}[rnd.Intn(4)]
		}
		e := f.Apply(c)
		for _, d := range e.Deliveries {
			if c.Kind == cmdDequeue && c.Prefetch == 1 {
				continue // taken with no ack
			}
			out[d.Consumer] = append(out[d.Consumer], d.ID)
		}
		log = append(log, c)
	}
	return log
}

// TestFifoDeterministic: members applying the same log (decoded from its
// encoding, as the Raft log carries it) reach the same state with the
// same effects; a member restored from a snapshot taken midway, then fed
// the rest, too. This is what lets any member take over as leader.
func TestFifoDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		log := randomLog(seed, 2000)
		a, b := NewFifo(FifoConfig{DeliveryLimit: 3, MaxLength: 50, MessageTTL: 500}), NewFifo(FifoConfig{DeliveryLimit: 3, MaxLength: 50, MessageTTL: 500})
		var restored *Fifo
		for i, c := range log {
			dc, err := DecodeCommand(c.Encode(nil))
			if err != nil {
				t.Fatalf("seed %d entry %d: %v", seed, i, err)
			}
			ea, eb := a.Apply(c), b.Apply(dc)
			if fmt.Sprint(bodies(ea.Deliveries), reasons(ea.DeadLetters), ea.Accepted) != fmt.Sprint(bodies(eb.Deliveries), reasons(eb.DeadLetters), eb.Accepted) {
				t.Fatalf("seed %d entry %d: effects differ: %+v vs %+v", seed, i, ea, eb)
			}
			if restored != nil {
				er := restored.Apply(dc)
				if fmt.Sprint(bodies(ea.Deliveries), reasons(ea.DeadLetters)) != fmt.Sprint(bodies(er.Deliveries), reasons(er.DeadLetters)) {
					t.Fatalf("seed %d entry %d: the restored member's effects differ", seed, i)
				}
			}
			if i == len(log)/2 {
				restored = restoreCopy(t, a)
			}
		}
		if !sameState(t, a, restored) {
			t.Fatalf("seed %d: the restored member's final state differs", seed)
		}
		if a.Bytes() != restored.Bytes() || a.Len() != restored.Len() {
			t.Fatalf("seed %d: counts differ", seed)
		}
	}
}

// Every kind of command refuses bytes after its end: a log entry is one
// command, whole, or it is not applied.
func TestDecodeCommandRefusesTrailingBytes(t *testing.T) {
	for _, c := range randomLog(11, 200) {
		p := c.Encode(nil)
		if _, err := DecodeCommand(p); err != nil {
			t.Fatalf("kind %d: %v", c.Kind, err)
		}
		if _, err := DecodeCommand(append(p, 0)); err == nil {
			t.Fatalf("kind %d with a trailing byte decoded", c.Kind)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range randomLog(7, 50) {
		f.Add(c.Encode(nil))
	}
	// A dequeue whose no-ack byte is neither 0 nor 1 is malformed (it
	// once decoded as 0 and re-encoded differently).
	dq := (&Command{Kind: cmdDequeue, Consumer: "c"}).Encode(nil)
	f.Add(append(dq[:len(dq)-1:len(dq)-1], 0x30))
	// A command with bytes after its end is malformed (it once decoded,
	// dropping them, and re-encoded shorter).
	f.Add(append((&Command{Kind: cmdPurge}).Encode(nil), 0))
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := DecodeCommand(p)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes, and applies.
		if q := c.Encode(nil); !bytes.Equal(q, p) {
			t.Fatalf("re-encoded %x, was %x", q, p)
		}
		NewFifo(FifoConfig{DeliveryLimit: 1}).Apply(c)
	})
}

// restoreCopy is f snapshotted and restored: another member's state.
func restoreCopy(t *testing.T, f *Fifo) *Fifo {
	t.Helper()
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := RestoreFifo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameState reports whether a and b snapshot to the same bytes.
func sameState(t *testing.T, a, b *Fifo) bool {
	t.Helper()
	var sa, sb bytes.Buffer
	if err := a.Snapshot(&sa); err != nil {
		t.Fatal(err)
	}
	if err := b.Snapshot(&sb); err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(sa.Bytes(), sb.Bytes())
}
