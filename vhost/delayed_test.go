package vhost

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// delayedMsg is a persistent message published to ex with key and an
// x-delay header of delay ms.
func delayedMsg(ex, key string, delay int32) *queue.Message {
	p := amqp.Properties{Flags: amqp.FlagHeaders | amqp.FlagDeliveryMode, DeliveryMode: 2,
		Headers: amqp.Table{"x-delay": delay}}
	return &queue.Message{Exchange: ex, RoutingKey: key, Props: p.Append(nil), Body: []byte(key),
		Persistent: true, Enqueued: queue.Now()}
}

// storeDue writes delayed messages of vhost vh's exchange ex straight to
// the store, due now (as if the broker had stopped with them pending).
func storeDue(t *testing.T, s *persist.Store, vh, ex string, ms ...*queue.Message) {
	t.Helper()
	b := &persist.Batch{}
	for _, m := range ms {
		b.PutDelayed(DefName(vh, ex), time.Now().UnixMilli(), s.NewMessageID(), false, encodeDelayed(m, nil))
	}
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
}

// The policies stored with a vhost are in force before recovery routes
// any delayed message: a message already due when the broker starts is
// routed under the delayed exchange's policy (its alternate exchange)
// and its target queue's (a length limit that rejects it), not under the
// definitions' arguments alone.
func TestRecoverDelayedUnderPolicies(t *testing.T) {
	dir := t.TempDir()
	open := func() (*persist.Store, *VHost) { return openStoreVHost(t, dir, nil) }
	s, v := open()
	for _, d := range []ExchangeDecl{
		{Name: "dx", Type: "x-delayed-message", Durable: true, Args: amqp.Table{"x-delayed-type": "direct"}},
		{Name: "ae", Type: "fanout", Durable: true},
	} {
		if err := v.DeclareExchange(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"q", "ae-q"} {
		if _, _, _, err := v.DeclareQueue(QueueDecl{Name: q, Durable: true}, queue.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Bind(0, "q", false, "dx", "k", nil); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind(0, "ae-q", false, "ae", "", nil); err != nil {
		t.Fatal(err)
	}
	v.Close()
	// Due when the vhost is recovered: routed at once.
	storeDue(t, s, "v", "dx", delayedMsg("dx", "k", 1000), delayedMsg("dx", "none", 1000)) // to q; unroutable
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, v = open()
	defer func() {
		v.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	pAE, err := NewPolicyDef("ae", "^dx$", "exchanges", 0, map[string]any{"alternate-exchange": "ae"}, false)
	if err != nil {
		t.Fatal(err)
	}
	pQ, err := NewPolicyDef("full", "^q$", "queues", 0, map[string]any{"max-length": float64(0), "overflow": "reject-publish"}, false)
	if err != nil {
		t.Fatal(err)
	}
	v.SetPolicies([]*PolicyDef{pAE, pQ}, nil) // as the broker does before recovery
	if err := v.Recover(queue.Config{}); err != nil {
		t.Fatal(err)
	}
	count := func(name string) int {
		q, err := v.Queue(0, name)
		if err != nil {
			t.Fatal(err)
		}
		n, _, err := q.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	dx := v.exchanges["dx"]
	poll.Eventually(t, 10*time.Second, func() bool { return dx.MessagesDelayed() == 0 }, "the delayed messages routed")
	poll.Eventually(t, 5*time.Second, func() bool { return count("ae-q") == 1 },
		"the unroutable delayed message reached the alternate exchange of dx's policy (ae-q has %d)", count("ae-q"))
	if n := count("q"); n != 0 {
		t.Fatalf("q, full by its policy, took %d messages", n)
	}
}

// lockProbe is a Confirmer that records its outcome and whether the
// delayer's lock was free when it was called.
type lockProbe struct {
	d      *delayer
	calls  int
	err    error
	locked bool
}

func (p *lockProbe) Done(err error) {
	p.calls++
	p.err = err
	if p.d.mu.TryLock() {
		p.d.mu.Unlock()
	} else {
		p.locked = true
	}
}

// A delayed message offered once the store is closed is refused (its
// confirm gets the store's error) with the delayer's lock released: a
// confirm takes the channel's and the connection's locks, which come
// before it (LOCKS.md).
func TestDelayOnClosedStoreConfirmsOutsideLock(t *testing.T) {
	s, err := persist.Open(persist.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	v := New("v", new(atomic.Int64), nil, s, 0, 0)
	defer v.Close()
	if err := v.DeclareExchange(ExchangeDecl{Name: "dx", Type: "x-delayed-message", Durable: true,
		Args: amqp.Table{"x-delayed-type": "direct"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dx := v.exchanges["dx"]
	p := &lockProbe{d: v.delays}
	v.Delay(dx, delayedMsg("dx", "k", 60_000), nil, 60_000, p)
	if p.calls != 1 || !errors.Is(p.err, persist.ErrClosed) {
		t.Fatalf("confirm: %d calls, %v; want one with ErrClosed", p.calls, p.err)
	}
	if p.locked {
		t.Fatal("the confirm ran under the delayer's lock")
	}
	if n := dx.MessagesDelayed(); n != 0 {
		t.Fatalf("%d delayed messages counted", n)
	}
}
