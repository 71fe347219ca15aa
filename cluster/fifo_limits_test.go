package cluster

import (
	"bytes"
	"reflect"
	"testing"
)

// applyCoded applies c to f after an encode/decode round trip: as a
// member applies the log's entry.
func applyCoded(t *testing.T, f *Fifo, c Command) Effects {
	t.Helper()
	dc, err := DecodeCommand(c.Encode(nil))
	if err != nil {
		t.Fatalf("decode %+v: %v", c, err)
	}
	return f.Apply(dc)
}

// TestFifoNackDoesNotCountRejectDoes: RabbitMQ 4.3's counting
// (rabbit_fifo.erl v4.3.5 incr_msg_headers, return_one): basic.nack with
// requeue (a return that did not fail) raises only the acquired count,
// so it never reaches the delivery limit; basic.reject with requeue (a
// failed delivery) raises the delivery count, and a message whose count
// goes past the limit is dead-lettered (delivery_limit). The header
// counts as the delivery shows them: Count (x-delivery-count) the failed
// ones, Acquired every return.
func TestFifoNackDoesNotCountRejectDoes(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: 2})
	f.Apply(Enqueue(1, msg("m")))
	e := f.Apply(Checkout("a", 1))
	if len(e.Deliveries) != 1 || e.Deliveries[0].Redelivered {
		t.Fatalf("first delivery %+v", e.Deliveries)
	}
	id := e.Deliveries[0].ID
	for i := 1; i <= 30; i++ {
		e = applyCoded(t, f, Modify("a", false, 0, id))
		if len(e.DeadLetters) != 0 || len(e.Deliveries) != 1 {
			t.Fatalf("nack %d: dead-lettered %v, delivered %d (a nack must never reach the limit)", i, reasons(e.DeadLetters), len(e.Deliveries))
		}
		d := e.Deliveries[0]
		if !d.Redelivered || d.Count != 0 || d.Acquired != uint32(i) {
			t.Fatalf("nack %d: redelivered %v count %d acquired %d, want true 0 %d", i, d.Redelivered, d.Count, d.Acquired, i)
		}
	}
	// Rejects: count 1 and 2 are redelivered (limit 2), the third goes.
	for i := 1; i <= 2; i++ {
		e = applyCoded(t, f, Modify("a", true, 0, id))
		if len(e.Deliveries) != 1 || e.Deliveries[0].Count != uint32(i) || e.Deliveries[0].Acquired != uint32(30+i) {
			t.Fatalf("reject %d: %+v", i, e)
		}
	}
	e = applyCoded(t, f, Modify("a", true, 0, id))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"delivery_limit:m"}) || len(e.Deliveries) != 0 || f.Len() != 0 {
		t.Fatalf("third reject: dead letters %v deliveries %d len %d, want delivery_limit:m, none, 0", got, len(e.Deliveries), f.Len())
	}
}

// TestFifoConsumerGoneCounts: a consumer that goes with messages checked
// out (its channel closed, its node down: rabbit_fifo handle_down,
// return_all with DeliveryFailed true) fails their delivery; an old
// log's cmdReturn counts too (every return did before Modify).
func TestFifoConsumerGoneCounts(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: 1})
	f.Apply(Enqueue(1, msg("m")))
	e := f.Apply(Checkout("n1/a", 1))
	id := e.Deliveries[0].ID
	f.Apply(Down("n1/", ""))
	e = f.Apply(Checkout("n2/b", 1))
	if len(e.Deliveries) != 1 || e.Deliveries[0].Count != 1 || e.Deliveries[0].Acquired != 1 {
		t.Fatalf("after the consumer went: %+v, want count 1 acquired 1", e.Deliveries)
	}
	e = applyCoded(t, f, Return("n2/b", id))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"delivery_limit:m"}) {
		t.Fatalf("a return past the limit: %v, want delivery_limit:m", got)
	}
}

// TestFifoConfigChangesLimitLive: a policy's delivery-limit reaches a
// live queue as a Config entry, applied in log order (rabbit_fifo
// update_config, rabbit_quorum_queue:policy_changed at v4.3.5): a
// lowered limit dead-letters at the next failed return a message whose
// count is past it; -1 takes the limit off.
func TestFifoConfigChangesLimitLive(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	f.Apply(Enqueue(1, msg("m")))
	id := f.Apply(Checkout("a", 1)).Deliveries[0].ID
	for i := 0; i < 3; i++ {
		f.Apply(Modify("a", true, 0, id))
	}
	applyCoded(t, f, Config(FifoConfig{DeliveryLimit: 2}))
	if f.Config().DeliveryLimit != 2 {
		t.Fatalf("limit %d after Config(FifoConfig{DeliveryLimit: 2})", f.Config().DeliveryLimit)
	}
	e := f.Apply(Modify("a", true, 0, id))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"delivery_limit:m"}) {
		t.Fatalf("after lowering the limit to 2, a 4th failed delivery: %v, want delivery_limit:m", got)
	}
	id = f.Apply(Enqueue(2, msg("n"))).Deliveries[0].ID // a has room again
	applyCoded(t, f, Config(FifoConfig{DeliveryLimit: -1}))
	for i := 1; i <= 50; i++ {
		if e := f.Apply(Modify("a", true, 0, id)); len(e.DeadLetters) != 0 {
			t.Fatalf("limit off (-1): reject %d dead-lettered %v", i, reasons(e.DeadLetters))
		}
	}
}

// TestFifoDelayedRetry: a return with a due time is held: neither ready
// nor checked out, not delivered, until a Tick at or after its due time
// (rabbit_fifo.erl v4.3.5 should_delay, delayed_in; the timer's tick
// promotes it to the returns); then it goes out first, redelivered. A
// purge takes held messages; a snapshot keeps them held.
func TestFifoDelayedRetry(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	f.Apply(Enqueue(1, msg("m1")))
	f.Apply(Enqueue(1, msg("m2")))
	e := f.Apply(Checkout("a", 1))
	id := e.Deliveries[0].ID
	e = applyCoded(t, f, Modify("a", true, 5000, id))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:m2"}) {
		t.Fatalf("with m1 held, delivered %v, want m2", got)
	}
	if f.Delayed() != 1 || f.Ready() != 0 || f.Unacked() != 1 || f.NextDue() != 5000 {
		t.Fatalf("delayed %d ready %d unacked %d next %d, want 1 0 1 5000", f.Delayed(), f.Ready(), f.Unacked(), f.NextDue())
	}
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := RestoreFifo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Fifo{f, g} {
		x.Apply(Settle("a", id+1))
		if e := x.Apply(Tick(4999)); len(e.Deliveries) != 0 {
			t.Fatalf("tick before due delivered %v", bodies(e.Deliveries))
		}
		e := x.Apply(Tick(5000))
		if len(e.Deliveries) != 1 || string(e.Deliveries[0].Msg.Body) != "m1" || !e.Deliveries[0].Redelivered || e.Deliveries[0].Count != 1 {
			t.Fatalf("tick at due: %+v, want m1 redelivered, count 1", e.Deliveries)
		}
		if x.Delayed() != 0 || x.NextDue() != 0 {
			t.Fatalf("after release: delayed %d", x.Delayed())
		}
	}
	// A purge takes a held message.
	f.Apply(Modify("a", false, 9000, id))
	if e := f.Apply(Purge()); e.Purged != 1 || f.Len() != 0 || f.Delayed() != 0 {
		t.Fatalf("purge with one held: purged %d len %d delayed %d", e.Purged, f.Len(), f.Delayed())
	}
}

// TestFifoDelayedOrder: held messages come due in due order, and a
// message due earlier but returned later goes first; ties by id.
func TestFifoDelayedOrder(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	for _, b := range []string{"1", "2", "3"} {
		f.Apply(Enqueue(1, msg(b)))
	}
	f.Apply(Checkout("a", 0))
	f.Apply(Modify("a", false, 300, 1))
	f.Apply(Modify("a", false, 100, 2))
	f.Apply(Modify("a", false, 100, 3))
	f.Apply(Cancel("a"))
	f.Apply(Checkout("b", 0))
	var got []string
	for _, now := range []int64{100, 300} {
		got = append(got, bodies(f.Apply(Tick(now)).Deliveries)...)
	}
	if want := []string{"b:2", "b:3", "b:1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

// TestLimitsCommandCodec: Modify and Config survive the log's encoding,
// and a malformed Modify does not decode.
func TestLimitsCommandCodec(t *testing.T) {
	for _, c := range []Command{Modify("tag", true, 1234, 1, 2, 3), Modify("t", false, 0), Config(FifoConfig{DeliveryLimit: -1}), Config(FifoConfig{DeliveryLimit: 20}), Config(FifoConfig{DeliveryLimit: 3, MaxLength: 0, MaxLengthOn: true, MaxLengthBytes: 1 << 40, MaxLengthBytesOn: true, RejectPublish: true, MessageTTL: 1500})} {
		got, err := DecodeCommand(c.Encode(nil))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if len(c.IDs) == 0 {
			c.IDs = nil
			if got.IDs != nil && len(got.IDs) == 0 {
				got.IDs = nil
			}
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip %+v -> %+v", c, got)
		}
	}
	mc, cc := Modify("t", true, 1, 7), Config(FifoConfig{DeliveryLimit: 1})
	b := mc.Encode(nil)
	b[1+8+4+1] = 2 // the failed flag: 0 or 1 only
	if _, err := DecodeCommand(b); err == nil {
		t.Error("a Modify with flag 2 decoded")
	}
	if _, err := DecodeCommand(cc.Encode(nil)[:12]); err == nil {
		t.Error("a short Config decoded")
	}
}
