package vhost

import (
	"errors"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// dedupProps are a message's properties with x-deduplication-header id.
func dedupProps(id string) []byte {
	p := amqp.Properties{Flags: amqp.FlagHeaders | amqp.FlagDeliveryMode, DeliveryMode: 2,
		Headers: amqp.Table{"x-deduplication-header": id}}
	return p.Append(nil)
}

// routeDedup routes a publish of id to exchange dx, holding its new
// entry as a channel does (Scratch.HoldDedup).
func routeDedup(t *testing.T, v *VHost, sc *Scratch, id string, hold bool) []*queue.Queue {
	t.Helper()
	props := dedupProps(id)
	sc.RawHeaders, sc.Props, sc.HoldDedup = amqp.PropsHeaders(props), props, hold
	qs, err := v.Route("dx", "", sc)
	sc.HoldDedup = false
	if err != nil {
		t.Fatal(err)
	}
	return append([]*queue.Queue(nil), qs...)
}

// TestDedupEntryFollowsMessage: a durable deduplication exchange stores
// a publish's new id only after its message, so that a crash between
// the two never leaves an id whose message is lost (the publisher's retry
// would be dropped as a duplicate of nothing):
//   - held, message never stored (the crash came first): after a restart
//     the id is new, the retry is routed;
//   - message stored, entry never released (the crash came between):
//     recovery takes the id back from the stored message, the retry is a
//     duplicate (the queue holds it once);
//   - released after the message: stored, a duplicate after a restart.
func TestDedupEntryFollowsMessage(t *testing.T) {
	dir := t.TempDir()
	s, v := openStoreVHost(t, dir, nil)
	if err := v.DeclareExchange(ExchangeDecl{Name: "dx", Type: "x-message-deduplication", Durable: true,
		Args: amqp.Table{"x-cache-size": int32(100)}}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := v.DeclareQueue(QueueDecl{Name: "q", Durable: true}, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind(0, "q", false, "dx", "", nil); err != nil {
		t.Fatal(err)
	}
	var sc Scratch
	publish := func(id string) (held []DedupHold) {
		qs := routeDedup(t, v, &sc, id, true)
		if len(qs) != 1 || len(sc.DedupHeld) != 1 || sc.DedupWrote {
			t.Fatalf("%s: routed to %d queues, %d held, wrote %v", id, len(qs), len(sc.DedupHeld), sc.DedupWrote)
		}
		held = append(held, sc.DedupHeld...)
		conf := &countConf{all: make(chan struct{})}
		m := &queue.Message{Exchange: "dx", Props: dedupProps(id), Body: []byte(id), Persistent: true, Enqueued: queue.Now()}
		FanOut(v.Store(), m, qs, false, func(n int) queue.Confirmer { conf.want = int32(n); return conf }, nil)
		select {
		case <-conf.all:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: message not stored", id)
		}
		return held
	}
	storedNow := func() {
		if err := s.CommitSync(&persist.Batch{}); err != nil { // a round: the flushers run
			t.Fatal(err)
		}
	}
	// Held, and its message never stored.
	if qs := routeDedup(t, v, &sc, "lost", true); len(qs) != 1 || len(sc.DedupHeld) != 1 {
		t.Fatalf("lost: routed to %d, %d held", len(qs), len(sc.DedupHeld))
	}
	if qs := routeDedup(t, v, &sc, "lost", true); len(qs) != 0 {
		t.Fatal("lost: not a duplicate in memory")
	}
	// Stored, its entry never released.
	publish("between")
	// Stored, then released.
	done := make(chan error, 1)
	v.ReleaseDedup(publish("both"), func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	storedNow()
	v.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, v = openStoreVHost(t, dir, nil)
	defer func() {
		v.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := v.Recover(queue.Config{}); err != nil {
		t.Fatal(err)
	}
	for id, dup := range map[string]bool{"lost": false, "between": true, "both": true} {
		if qs := routeDedup(t, v, &sc, id, false); (len(qs) == 0) != dup {
			t.Errorf("%s after a restart: duplicate %v, want %v", id, len(qs) == 0, dup)
		}
	}
}

// TestDedupDuplicateWaitsForOriginal: the ack of a duplicate whose
// original is not stored yet (its entry held) waits for the original's
// release, or gets the original's error when it failed.
func TestDedupDuplicateWaitsForOriginal(t *testing.T) {
	s, v := openStoreVHost(t, t.TempDir(), nil)
	defer func() {
		v.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := v.DeclareExchange(ExchangeDecl{Name: "dx", Type: "x-message-deduplication", Durable: true,
		Args: amqp.Table{"x-cache-size": int32(100)}}); err != nil {
		t.Fatal(err)
	}
	var sc Scratch
	for _, fail := range []bool{false, true} {
		id := map[bool]string{false: "ok", true: "failed"}[fail]
		routeDedup(t, v, &sc, id, true)
		held := append([]DedupHold(nil), sc.DedupHeld...)
		if len(held) != 1 {
			t.Fatalf("%s: %d held", id, len(held))
		}
		routeDedup(t, v, &sc, id, true)
		if len(sc.DupHeld) != 1 || len(sc.DedupHeld) != 0 {
			t.Fatalf("%s again: %d held originals, %d new", id, len(sc.DupHeld), len(sc.DedupHeld))
		}
		done := make(chan error, 1)
		v.AfterDuplicate(sc.DupHeld, func(err error) { done <- err })
		if err := s.CommitSync(&persist.Batch{}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("%s: duplicate confirmed (%v) before its original was stored", id, err)
		default:
		}
		if fail {
			v.AbandonDedup(held, errTestStore)
		} else {
			v.ReleaseDedup(held, nil)
		}
		select {
		case err := <-done:
			if (err != nil) != fail {
				t.Fatalf("%s: duplicate confirmed with %v", id, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: duplicate never confirmed", id)
		}
	}
}

var errTestStore = errors.New("not stored")
