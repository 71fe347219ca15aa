package cluster

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
)

// idKey is a test DedupKey: the id is the message's props, if any.
func idKey(props []byte) ([]byte, bool) { return props, len(props) > 0 }

func idMsg(id, body string) Message {
	return Message{RoutingKey: "q", Props: []byte(id), Body: []byte(body)}
}

// TestFifoDedup: a deduplicating queue refuses a message whose id a
// held message has (Effects.Duplicate, not Accepted), in a batch too;
// the id is free again once its message leaves (settled, dequeued
// without ack, dead-lettered, purged); a message without an id is never
// a duplicate; a queue that does not deduplicate takes everything.
func TestFifoDedup(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: 0})
	f.setDedupKey(idKey)
	enq := func(id string) Effects { return f.Apply(Enqueue(1, idMsg(id, id))) }
	if e := enq("a"); !e.Accepted || e.Duplicate {
		t.Fatalf("first a: %+v", e)
	}
	if e := enq("a"); e.Accepted || !e.Duplicate {
		t.Fatalf("second a: %+v, want a duplicate", e)
	}
	if e := enq(""); !e.Accepted {
		t.Fatalf("no id: %+v", e)
	}
	if e := enq(""); !e.Accepted {
		t.Fatalf("no id again: %+v", e)
	}
	// In a batch, each enqueue has its answer.
	e := f.Apply(Batch([]Command{Enqueue(2, idMsg("b", "b")), Enqueue(2, idMsg("a", "a2")), Enqueue(2, idMsg("b", "b2"))}))
	if !e.Results[0].Accepted || !e.Results[1].Duplicate || !e.Results[2].Duplicate {
		t.Fatalf("batch: %+v", e.Results)
	}
	if f.Len() != 4 {
		t.Fatalf("%d messages held, want 4", f.Len())
	}
	// Checked out: still held, still a duplicate; settled: free.
	d := f.Apply(Checkout("c", 1)).Deliveries
	if len(d) != 1 || string(d[0].Msg.Body) != "a" {
		t.Fatalf("checked out %v", bodies(d))
	}
	if e := enq("a"); !e.Duplicate {
		t.Fatal("a checked out: not a duplicate")
	}
	f.Apply(Cancel("c"))
	f.Apply(Settle("c", d[0].ID))
	if e := enq("a"); !e.Accepted {
		t.Fatalf("a settled: %+v, want taken", e)
	}
	// Rejected (dead-lettered): free.
	d = f.Apply(Dequeue("g", false)).Deliveries
	f.Apply(Discard("g", d[0].ID))
	// Purged: free.
	f.Apply(Purge())
	for _, id := range []string{"a", "b"} {
		if e := enq(id); !e.Accepted {
			t.Fatalf("%s after a purge: %+v", id, e)
		}
	}
	// Dequeued without ack: free.
	for f.Ready() > 0 {
		f.Apply(Dequeue("g", true))
	}
	if e := enq("a"); !e.Accepted {
		t.Fatalf("a after a no-ack get: %+v", e)
	}
	if len(f.dedup) != 1 {
		t.Fatalf("%d ids kept, want 1: %v", len(f.dedup), f.dedup)
	}

	plain := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	for range 2 {
		if e := plain.Apply(Enqueue(1, idMsg("a", "a"))); !e.Accepted || e.Duplicate {
			t.Fatalf("a queue without dedup refused: %+v", e)
		}
	}
}

// TestFifoDedupSnapshot: the ids are rebuilt from a snapshot's messages
// by the member that restores it (QueueFSM.Restore keeps its DedupKey):
// a retry of a message the snapshot holds is a duplicate there too.
func TestFifoDedupSnapshot(t *testing.T) {
	q := NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	q.SetDedupKey(idKey)
	for i, id := range []string{"a", "b", "c"} {
		c := Enqueue(1, idMsg(id, id))
		q.Apply(&raft.Log{Index: uint64(i + 1), Data: c.Encode(nil)})
	}
	snap, err := q.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	r := NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	r.SetDedupKey(idKey)
	if err := r.Restore(readCloser{&sink.Buffer}); err != nil {
		t.Fatal(err)
	}
	c := Enqueue(1, idMsg("b", "b2"))
	e := r.Apply(&raft.Log{Index: 4, Data: c.Encode(nil)}).(Effects)
	if !e.Duplicate {
		t.Fatalf("retry of b after a restore: %+v, want a duplicate", e)
	}
	c = Enqueue(1, idMsg("d", "d"))
	if e := r.Apply(&raft.Log{Index: 5, Data: c.Encode(nil)}).(Effects); !e.Accepted {
		t.Fatalf("d after a restore: %+v", e)
	}
}

type readCloser struct{ *bytes.Buffer }

func (readCloser) Close() error { return nil }
