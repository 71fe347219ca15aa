package queue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// A queue's part of a transaction: nothing of it shows until it is
// finished; ops that arrive meanwhile wait and come after it, in order;
// parts finish in the order they were prepared, whatever order their
// outcomes arrive in; a failed part is dropped.
func TestTxPartOrderAndStash(t *testing.T) {
	q := newQueue(t, Config{Name: "q"})
	q.Publish(msg("a"))
	prepared := 0
	part := func(bodies ...string) *TxPart {
		p := &TxPart{Prepared: func(*TxPart) { prepared++ }}
		for _, b := range bodies {
			p.Msgs = append(p.Msgs, msg(b))
		}
		if !q.PrepareTx(p, nil) {
			t.Fatal("queue gone")
		}
		return p
	}
	ready := func(want int64, what string) {
		t.Helper()
		poll.Eventually(t, 5*time.Second, func() bool { return q.Ready() == want }, "%s: %d ready, want %d", what, q.Ready(), want)
	}
	p1 := part("b", "c")
	q.Publish(msg("d")) // waits for p1
	p2 := part("e")
	p3 := part("x")
	p4 := part("f")
	if prepared != 4 {
		t.Fatalf("%d parts prepared, want 4", prepared)
	}
	ready(1, "all parts prepared, none finished")
	q.FinishTx(p2, nil) // after p1: waits for it
	q.FinishTx(p3, errors.New("store write failed"))
	ready(1, "later parts finished first")
	q.FinishTx(p1, nil)
	ready(4, "p1, then p2, then p3 dropped")
	q.FinishTx(p4, nil)
	ready(6, "p4 applied, then the publish that waited")
	var got []string
	for {
		d, ok, _, err := q.Get(true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(d.Msg.Body))
	}
	if want := "a b c e f d"; strings.Join(got, " ") != want {
		t.Fatalf("order %q, want %q", strings.Join(got, " "), want)
	}
}
