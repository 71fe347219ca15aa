package cluster

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
)

var aloConfig = FifoConfig{DeliveryLimit: 1, MaxLength: 3, RejectPublish: true, MessageTTL: 1000, AtLeastOnce: true}

func held(dls []DeadLetter) []string {
	var out []string
	for _, d := range dls {
		out = append(out, fmt.Sprintf("%s:%s:%d:%v", d.Reason, d.Msg.Body, d.ID, d.Held))
	}
	return out
}

// TestFifoAtLeastOnceHoldsDeadLetters: with the at-least-once strategy a
// message dead-lettered for any reason (rejected, over the delivery
// limit, expired) stays in the state until DeadSettled, as RabbitMQ's
// rabbit_fifo_dlx (v4.3.5) keeps it in its discards: counted in the
// queue's messages and toward x-max-length (rabbit_fifo:is_over_limit),
// not in its ready or unacknowledged ones; a DeadSettled removes it, one
// of an id that is not held does nothing.
func TestFifoAtLeastOnceHoldsDeadLetters(t *testing.T) {
	f := NewFifo(aloConfig)
	f.Apply(Enqueue(0, msg("r")))
	f.Apply(Enqueue(0, msg("d")))
	e := f.Apply(Checkout("a", 2)) // r and d
	f.Apply(Discard("a", e.Deliveries[0].ID))
	e = f.Apply(Return("a", e.Deliveries[1].ID)) // d back, delivered again (count 1): not over the limit of 1
	if len(e.DeadLetters) != 0 || len(e.Deliveries) != 1 {
		t.Fatalf("first return: %+v", e)
	}
	e = f.Apply(Return("a", e.Deliveries[0].ID)) // count 2: over
	if got := held(e.DeadLetters); !reflect.DeepEqual(got, []string{"delivery_limit:d:2:true"}) {
		t.Fatalf("second return dead-lettered %v", got)
	}
	f.Apply(Cancel("a"))
	f.Apply(Enqueue(100, msg("x")))
	e = f.Apply(Tick(1100)) // x expires
	if got := held(e.DeadLetters); !reflect.DeepEqual(got, []string{"expired:x:3:true"}) {
		t.Fatalf("tick dead-lettered %v", got)
	}
	if n, b := f.Discarded(); n != 3 || b != 3 || f.Len() != 3 || f.Ready() != 0 || f.Unacked() != 0 || f.Bytes() != 3 {
		t.Fatalf("discarded %d (%d bytes), len %d, ready %d, unacked %d, bytes %d; want 3 held of 3 bytes, none ready or unacked",
			n, b, f.Len(), f.Ready(), f.Unacked(), f.Bytes())
	}
	var order []string
	f.EachDiscard(func(dl DeadLetter) bool {
		order = append(order, fmt.Sprintf("%s:%s", dl.Reason, dl.Msg.Body))
		return true
	})
	if !reflect.DeepEqual(order, []string{"rejected:r", "delivery_limit:d", "expired:x"}) {
		t.Fatalf("discards in order %v", order)
	}
	// Three held count toward x-max-length 3 (rabbit_fifo is_over_limit:
	// ready plus held): with reject-publish's soft limit (RabbitMQ 4.3,
	// fifo_overflow.go) the publish that crosses it is taken, the next
	// refused.
	if e := f.Apply(Enqueue(2000, msg("n"))); !e.Accepted {
		t.Fatal("the publish crossing x-max-length 3 (3 dead letters held) was refused")
	}
	if e := f.Apply(Enqueue(2000, msg("o"))); e.Accepted {
		t.Fatal("a publish was taken with 3 dead letters held, one ready and x-max-length 3")
	}
	// A DeadSettled of ids not held (unknown, or a ready message's)
	// changes nothing.
	f.Apply(DeadSettled(99))
	if n, _ := f.Discarded(); n != 3 {
		t.Fatalf("DeadSettled(99) left %d held", n)
	}
	f.Apply(DeadSettled(1, 3))
	if n, b := f.Discarded(); n != 1 || b != 1 || f.Len() != 2 || f.IsDiscard(1) || !f.IsDiscard(2) {
		t.Fatalf("after settling 1 and 3: %d held (%d bytes), len %d", n, b, f.Len())
	}
	e = f.Apply(Enqueue(2001, msg("n")))
	if !e.Accepted {
		t.Fatal("a publish was refused with 1 dead letter held")
	}
	f.Apply(Checkout("b", 0))
	if f.Unacked() != 2 || f.Ready() != 0 || f.Len() != 3 {
		t.Fatalf("unacked %d, ready %d, len %d; want 2, 0, 3", f.Unacked(), f.Ready(), f.Len())
	}
	// The purge takes the held ones too, and counts them (rabbit_fifo's
	// purge: NumReady + NumDlx).
	f.Apply(Cancel("b"))
	f.Apply(Down("b", ""))
	if e := f.Apply(Purge()); e.Purged != 3 || f.Len() != 0 || f.Bytes() != 0 {
		t.Fatalf("purge: %d purged, len %d, bytes %d; want 3, 0, 0", e.Purged, f.Len(), f.Bytes())
	}
	if n, b := f.Discarded(); n != 0 || b != 0 {
		t.Fatalf("purge left %d held", n)
	}
}

// TestFifoAtMostOnceDropsDeadLetters: without the strategy a dead letter
// leaves the state at once, its effect not held (what the leader
// republishes once, and forgets); maxlen, which RabbitMQ never holds
// (rabbit_fifo_dlx:discard's guard), neither.
func TestFifoAtMostOnceDropsDeadLetters(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: 1})
	f.Apply(Enqueue(1, msg("r")))
	e := f.Apply(Checkout("a", 1))
	e = f.Apply(Discard("a", e.Deliveries[0].ID))
	if got := held(e.DeadLetters); !reflect.DeepEqual(got, []string{"rejected:r:0:false"}) || f.Len() != 0 {
		t.Fatalf("dead-lettered %v, len %d", got, f.Len())
	}
	if n, _ := f.Discarded(); n != 0 {
		t.Fatalf("%d held at most once", n)
	}
	g := NewFifo(FifoConfig{MaxLength: 1, AtLeastOnce: true})
	g.Apply(Enqueue(1, msg("a")))
	e = g.Apply(Enqueue(2, msg("b")))
	if got := held(e.DeadLetters); !reflect.DeepEqual(got, []string{"maxlen:a:0:false"}) || g.Len() != 1 {
		t.Fatalf("drop-head dead-lettered %v, len %d", got, g.Len())
	}
}

// TestFifoDeadLettersSnapshot: the held dead letters are in the
// snapshot, in order, with their reasons: a member restored from it (a
// new leader among them) holds the same, sends the same again, and
// settles them with the same DeadSettled.
func TestFifoDeadLettersSnapshot(t *testing.T) {
	f := NewFifo(aloConfig)
	f.Apply(Enqueue(1, msg("a")))
	f.Apply(Enqueue(1, msg("b")))
	e := f.Apply(Checkout("c", 0))
	f.Apply(Discard("c", e.Deliveries[1].ID, e.Deliveries[0].ID))
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := RestoreFifo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	list := func(f *Fifo) []string {
		var out []string
		f.EachDiscard(func(dl DeadLetter) bool {
			out = append(out, fmt.Sprintf("%d:%s:%s", dl.ID, dl.Reason, dl.Msg.Body))
			return true
		})
		return out
	}
	if want := []string{"2:rejected:b", "1:rejected:a"}; !reflect.DeepEqual(list(g), want) || !reflect.DeepEqual(list(f), want) {
		t.Fatalf("restored holds %v, the original %v; want %v", list(g), list(f), want)
	}
	if n, b := g.Discarded(); n != 2 || b != 2 || g.Unacked() != 0 || g.Len() != 2 {
		t.Fatalf("restored: %d held (%d bytes), unacked %d, len %d", n, b, g.Unacked(), g.Len())
	}
	g.Apply(DeadSettled(2))
	if !reflect.DeepEqual(list(g), []string{"1:rejected:a"}) {
		t.Fatalf("after DeadSettled(2) the restored one holds %v", list(g))
	}
}

// TestFifoDeadLettersDeterministic: members applying the same log with
// dead letters held and settled, one of them restored from a snapshot
// midway, reach the same state: whichever leads next holds the same.
func TestFifoDeadLettersDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		rnd := rand.New(rand.NewSource(seed))
		a, b := NewFifo(aloConfig), NewFifo(aloConfig)
		out := map[uint64]bool{}
		var held []uint64
		most := 0
		for i := 0; i < 1500; i++ {
			var c Command
			switch k := rnd.Intn(8); {
			case k < 3:
				c = Enqueue(int64(i), msg(fmt.Sprint(i)))
			case k == 3:
				c = Checkout("c", rnd.Intn(3))
			case k == 4:
				c = Tick(int64(i))
			case k == 5 && len(held) > 0:
				j := rnd.Intn(len(held))
				c = DeadSettled(held[j], held[rnd.Intn(len(held))])
			default:
				var id uint64
				for x := range out {
					if id == 0 || x < id {
						id = x
					}
				}
				if id == 0 {
					continue
				}
				delete(out, id)
				c = []Command{Settle("c", id), Return("c", id), Discard("c", id)}[rnd.Intn(3)]
			}
			c, err := DecodeCommand(c.Encode(nil))
			if err != nil {
				t.Fatal(err)
			}
			ea, eb := a.Apply(c), b.Apply(c)
			if !reflect.DeepEqual(held2(ea.DeadLetters), held2(eb.DeadLetters)) {
				t.Fatalf("seed %d: effects differ", seed)
			}
			for _, d := range ea.Deliveries {
				out[d.ID] = true
			}
			held = held[:0]
			a.EachDiscard(func(dl DeadLetter) bool { held = append(held, dl.ID); return true })
			most = max(most, len(held))
			if i == 700 {
				b = restoreCopy(t, a)
			}
		}
		if !sameState(t, a, b) {
			t.Fatalf("seed %d: the states differ", seed)
		}
		if most < 2 {
			t.Fatalf("seed %d: the log held at most %d dead letters at once", seed, most)
		}
	}
}

func held2(dls []DeadLetter) []string { return held(dls) }

// TestDeadSettledFormat: DeadSettled's bytes in the Raft log (kind 16,
// then the fields Settle has) must not change.
func TestDeadSettledFormat(t *testing.T) {
	const want = "1000000000000000000000000000000002000000000000000300000000000000ff"
	c := DeadSettled(3, 255)
	if got := hex.EncodeToString(c.Encode(nil)); got != want {
		t.Fatalf("DeadSettled(3, 255) encodes to %s, want %s", got, want)
	}
	p, _ := hex.DecodeString(want)
	d, err := DecodeCommand(p)
	if err != nil || d.Kind != cmdDeadSettled || !reflect.DeepEqual(d.IDs, []uint64{3, 255}) {
		t.Fatalf("decodes to %+v, %v", d, err)
	}
}
