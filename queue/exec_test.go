package queue

import (
	"testing"
	"time"
)

// An inline drain (a poster holding exec) applies the inbox up to its
// first call and hands that call, and what follows it, to the queue's
// goroutine in order: callbacks that reach back into the registry never
// run on a poster's goroutine.
func TestInlineDrainHandsCallsToGoroutine(t *testing.T) {
	q := newQueue(t, Config{Name: "q"})
	reply := make(chan result, 1)
	q.exec.Lock()
	q.cfg.Memory.Add(2)
	q.enqueue(op{kind: opPublish, msg: msg("a")})
	q.enqueue(op{kind: opStats, reply: reply})
	q.enqueue(op{kind: opPublish, msg: msg("b")})
	q.drain(nil, true)
	if n := q.readyLen(); n != 1 {
		t.Errorf("the inline drain left %d ready, want 1 (only the op before the call)", n)
	}
	q.mu.Lock()
	left := len(q.inbox)
	q.mu.Unlock()
	if left != 2 {
		t.Errorf("%d ops handed back, want 2 (the call and the publish after it)", left)
	}
	q.exec.Unlock() // the goroutine, signalled, applies the rest
	select {
	case r := <-reply:
		if r.messages != 1 {
			t.Errorf("stats saw %d messages, want 1: ops were applied out of order", r.messages)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call handed back was never applied")
	}
	if m, _, _ := q.Stats(); m != 2 {
		t.Fatalf("ready %d, want 2", m)
	}
}

// heldStore is a Store whose reads land only when the test says so: the
// queue must go on without waiting for them, exec free.
type heldStore struct {
	logStore
	reads chan func([]StoredEntry, error)
}

func (s *heldStore) LoadEntries(_, _ uint64, _ int, _ int64, done func([]StoredEntry, error)) {
	s.reads <- done
}

// A read of a durable queue's paged messages is not done under exec: the
// queue counts them and takes publishes while the read is under way; a
// basic.get waits for it, and gets the oldest message.
func TestStoreReadOffExec(t *testing.T) {
	st := &heldStore{logStore: logStore{entries: map[uint64]bool{}}, reads: make(chan func([]StoredEntry, error), 4)}
	q := newQueue(t, Config{Name: "paged", Durable: true, Store: st, ID: 1, Window: 8, Recovered: &Recovered{Count: 3, MaxSeq: 3}})
	var land func([]StoredEntry, error)
	select {
	case land = <-st.reads:
	case <-time.After(5 * time.Second):
		t.Fatal("a recovered queue did not begin reading its messages")
	}
	if !q.exec.TryLock() {
		t.Fatal("exec is held while the read is under way")
	}
	q.exec.Unlock()
	if m, _, err := q.Stats(); err != nil || m != 3 {
		t.Fatalf("stats during the read: %d, %v; want 3", m, err)
	}
	got := make(chan Delivery, 1)
	go func() {
		d, ok, _, err := q.Get(true)
		if !ok || err != nil {
			t.Errorf("get: ok %v, %v", ok, err)
		}
		got <- d
	}()
	select {
	case d := <-got:
		t.Fatalf("get answered %q before the read landed", d.Msg.Body)
	case <-time.After(50 * time.Millisecond):
	}
	var ents []StoredEntry
	for i, b := range []string{"one", "two", "three"} {
		m := &Message{Body: []byte(b), Persistent: true, Enqueued: Now()}
		ents = append(ents, StoredEntry{Seq: uint64(i + 1), Msg: uint64(i + 1), Inline: true, Record: EncodeMessage(m)})
	}
	land(ents, nil)
	select {
	case d := <-got:
		if string(d.Msg.Body) != "one" {
			t.Fatalf("get returned %q, want the oldest, \"one\"", d.Msg.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("get still waiting after the read landed")
	}
	if m, _, _ := q.Stats(); m != 2 {
		t.Fatalf("ready %d after the get, want 2", m)
	}
}
