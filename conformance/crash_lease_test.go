package conformance

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// kill -9 rounds for amq.railmq.retry: the real binary, a worker that
// retries some deliveries (x-delay), acks some and holds the rest, killed
// with SIGKILL while it works, restarted on the same data dir. Checked:
// every confirmed publish not acked comes back uncorrupted (nothing
// confirmed is lost); a delivery whose retry was confirmed is not
// delivered before its due time (the hold survived), then is, flagged
// redelivered.
func TestCrashLeaseRetry(t *testing.T) {
	for _, cq := range []crashQueue{{name: "crash-lease-q"}, {name: "crash-lease-qq", args: rmq.Table{"x-queue-type": "quorum"}}} {
		t.Run(cq.name, func(t *testing.T) { crashLeaseRetry(t, cq) })
	}
}

// retryLedger is what the worker knows for sure.
type retryLedger struct {
	mu        sync.Mutex
	confirmed map[uint64]bool      // publishes the broker confirmed
	acked     map[uint64]bool      // acks sent (durable or not: may come back)
	due       map[uint64]time.Time // retries confirmed: not redelivered before
	heldSeen  int                  // retried messages seen again after a kill
}

func crashLeaseRetry(t *testing.T, cq crashQueue) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	led := &retryLedger{confirmed: map[uint64]bool{}, acked: map[uint64]bool{}, due: map[uint64]time.Time{}}
	var next uint64
	rounds := crashRounds()
	for round := range rounds {
		cmd, url, logs := startBinary(t, bin, dir)
		if round > 0 {
			verifyRetryRound(t, url, cq, led, logs.String())
		}
		c := dial(t, url)
		ch, err := c.Channel()
		must(t, err)
		_, err = ch.QueueDeclare(cq.name, true, false, false, false, cq.args)
		must(t, err)
		// Publish a batch, confirmed.
		must(t, ch.Confirm(false))
		for range 40 {
			next++
			dc, err := ch.PublishWithDeferredConfirm("", cq.name, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: crashBody(next, 64)})
			must(t, err)
			if dc.Wait() {
				led.confirmed[next] = true
			}
		}
		// The worker: retry one in two, ack one in four, hold the rest;
		// killed while it works.
		wch, err := c.Channel()
		must(t, err)
		must(t, wch.Confirm(false))
		must(t, wch.Qos(200, 0, false))
		ds, err := wch.Consume(cq.name, "", false, false, false, false, nil)
		must(t, err)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ds {
				id, ok := parseCrashBody(d.Body)
				if !ok {
					t.Errorf("corrupt body %x", d.Body)
					return
				}
				switch id % 4 {
				case 0, 2:
					delay := time.Duration(1500+rand.IntN(1500)) * time.Millisecond
					at := time.Now()
					dc, err := wch.PublishWithDeferredConfirm(retryX, strconv.FormatUint(d.DeliveryTag, 10), false, false,
						rmq.Publishing{Headers: rmq.Table{"x-delay": int32(delay / time.Millisecond)}})
					if err != nil {
						return // killed
					}
					go func() {
						<-dc.Done()
						if dc.Acked() {
							led.mu.Lock()
							led.due[id] = at.Add(delay)
							led.mu.Unlock()
						}
					}()
				case 1:
					led.mu.Lock()
					led.acked[id] = true
					led.mu.Unlock()
					if d.Ack(false) != nil {
						return
					}
				}
			}
		}()
		time.Sleep(time.Duration(50+rand.IntN(400)) * time.Millisecond) // a random moment: what is tested
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		c.Close()
		wg.Wait()
	}
	cmd, url, logs := startBinary(t, bin, dir)
	verifyRetryRound(t, url, cq, led, logs.String())
	if led.heldSeen == 0 {
		t.Fatal("no retry was confirmed before a kill: the rounds tested no hold")
	}
	t.Logf("%d rounds, %d retried messages held across kill -9", rounds, led.heldSeen)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, 30*time.Second); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, logs)
	}
}

// verifyRetryRound drains the queue after a restart: every confirmed,
// unacked message comes back; none whose retry was confirmed comes
// before its due time. Everything read is acked (the next round starts
// from an empty queue) and forgotten.
func verifyRetryRound(t *testing.T, url string, cq crashQueue, led *retryLedger, logs string) {
	t.Helper()
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare(cq.name, true, false, false, false, cq.args)
	must(t, err)
	ds, err := ch.Consume(cq.name, "", false, false, false, false, nil)
	must(t, err)
	led.mu.Lock()
	defer led.mu.Unlock()
	want := map[uint64]bool{}
	for id := range led.confirmed {
		if !led.acked[id] {
			want[id] = true
		}
	}
	deadline := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case d := <-ds:
			id, ok := parseCrashBody(d.Body)
			if !ok {
				t.Fatalf("corrupt body after kill -9: %x", d.Body)
			}
			if due, held := led.due[id]; held {
				if now := time.Now(); now.Before(due) {
					t.Fatalf("message %d redelivered %v before its retry's due time\n%s", id, due.Sub(now), logs)
				}
				if !d.Redelivered {
					t.Fatalf("message %d after its retry not flagged redelivered", id)
				}
				led.heldSeen++
			}
			delete(want, id)
			must(t, d.Ack(false))
		case <-deadline:
			t.Fatalf("confirmed messages lost after kill -9: %d missing (%v)\n%s", len(want), someIDs(idKeys(want)), logs)
		}
	}
	// Settled: forget them. What is left (acked before the kill, not yet
	// durably) goes; any that still comes back later is not in the ledger.
	clear(led.confirmed)
	clear(led.acked)
	clear(led.due)
	_, err = ch.QueuePurge(cq.name, false)
	must(t, err)
}

func idKeys(m map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
