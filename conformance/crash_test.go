package conformance

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// crashRounds is how many kill -9 rounds TestCrashRecovery runs: a few in
// `make test`, RAILMQ_CRASH_ROUNDS (200 in `make crash-test`) otherwise.
func crashRounds() int {
	if n, err := strconv.Atoi(os.Getenv("RAILMQ_CRASH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 4
}

// crashBody encodes a message id with a checksum, so that a corrupted
// body is caught.
func crashBody(id uint64, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, id)
	for i := 12; i < size; i++ {
		b[i] = byte(id>>(i%8)) ^ byte(i)
	}
	binary.BigEndian.PutUint32(b[8:], crc32.ChecksumIEEE(append(b[:8:8], b[12:]...)))
	return b
}

func parseCrashBody(b []byte) (uint64, bool) {
	if len(b) < 12 {
		return 0, false
	}
	id := binary.BigEndian.Uint64(b)
	return id, bytes.Equal(b, crashBody(id, len(b)))
}

// crashLedger is what the clients know for sure.
type crashLedger struct {
	mu sync.Mutex
	// confirmed: ids the broker confirmed (durable by its promise).
	confirmed map[uint64]bool
	// acked: ids acked, with when the broker was known to have processed
	// the ack (a synchronous round trip on the channel after it).
	acked map[uint64]time.Time
	// horizon: the latest send time of a confirmed publish. The broker
	// commits a queue's changes in order, so an ack processed before a
	// later publish to the same queue was confirmed is durable too.
	horizon time.Time
}

// confirm records a confirmed publish sent at sent.
func (l *crashLedger) confirm(id uint64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed[id] = true
	if sent.After(l.horizon) {
		l.horizon = sent
	}
}

// TestCrashRecovery runs the real binary under publishers with confirms
// and consumers acking, kills it with SIGKILL at random moments, restarts
// it on the same data dir and checks: every confirmed message that was not
// acked is there, uncorrupted; none that was durably acked comes back. A
// lost message fails the test; duplicates (at least once) are logged.
func TestCrashRecovery(t *testing.T) { crashRecovery(t, crashQueue{name: "crash-q"}) }

// TestCrashRecoveryQuorum is TestCrashRecovery on a quorum queue of a
// standalone node: its confirms come once its log has the message on
// disk, and its log is what comes back.
func TestCrashRecoveryQuorum(t *testing.T) {
	crashRecovery(t, crashQueue{name: "crash-qq", args: rmq.Table{"x-queue-type": "quorum"}})
}

// crashQueue is the queue a crash test loads.
type crashQueue struct {
	name  string
	args  rmq.Table
	flags []string // more flags for the broker
}

func crashRecovery(t *testing.T, cq crashQueue) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	rounds := crashRounds()
	led := &crashLedger{confirmed: map[uint64]bool{}, acked: map[uint64]time.Time{}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var running *exec.Cmd // killed if the test stops early
	defer func() {
		if running != nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	var total crashCheck
	done := 0 // kill -9 rounds completed
	for round := 0; round <= rounds; round++ {
		addr := testutil.FreePort(t)
		cmd := exec.Command(bin, append([]string{"--listen", addr, "--data-dir", dir, "--log-level", "warn", "--queue-window", "256"}, cq.flags...)...)
		var logs bytes.Buffer
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running = cmd
		testutil.WaitListening(t, addr, 30*time.Second)
		url := "amqp://guest:guest@" + addr + "/"
		c := verifyCrashRound(t, url, cq, led, round)
		total.checked += c.checked
		total.lost += c.lost
		total.duplicates += c.duplicates
		if c.lost > 0 {
			break // failed; the deferred kill stops the broker
		}
		if round == rounds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err := waitExit(t, cmd, 30*time.Second)
			running = nil
			if err != nil {
				t.Fatalf("final shutdown: %v\n%s", err, logs.String())
			}
			break
		}
		waiters := runCrashLoad(t, url, cq, led, uint64(round+1), time.Duration(100+rng.IntN(900))*time.Millisecond)
		_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
		_ = cmd.Wait()
		running = nil
		done++
		waiters.Wait() // confirms still awaited now fail: the connection is gone
	}
	t.Logf("%d kill -9 rounds, %d messages checked after restarts, %d confirmed messages lost, %d duplicates",
		done, total.checked, total.lost, total.duplicates)
}

// crashCheck is what one check after a restart found.
type crashCheck struct {
	checked    int // distinct messages read back
	lost       int // confirmed, not acked, and not read back
	duplicates int // read back more than once
}

// someIDs lists up to 10 of ids, sorted, for a message.
func someIDs(ids []uint64) []uint64 {
	slices.Sort(ids)
	return ids[:min(len(ids), 10)]
}

// verifyCrashRound drains the queue after a restart and checks the ledger:
// it fails the test on a corrupted message, a durably acked one that came
// back, or a confirmed one lost (counting them all), and logs duplicates.
func verifyCrashRound(t *testing.T, url string, cq crashQueue, led *crashLedger, round int) crashCheck {
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("round %d: dial after restart: %v", round, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(cq.name, true, false, false, false, cq.args); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var dups []uint64
	for {
		d, ok, err := ch.Get(cq.name, true)
		if err != nil {
			t.Fatalf("round %d: get: %v", round, err)
		}
		if !ok {
			break
		}
		id, good := parseCrashBody(d.Body)
		if !good {
			t.Fatalf("round %d: corrupted message %x", round, d.Body[:min(len(d.Body), 16)])
		}
		if seen[id] {
			dups = append(dups, id) // not expected within one queue, but not loss: logged
			continue
		}
		seen[id] = true
		if at, ok := led.acked[id]; ok && !at.IsZero() && at.Before(led.horizon) {
			t.Fatalf("round %d: message %d reappeared after its ack was durable", round, id)
		}
	}
	var lost []uint64
	for id := range led.confirmed {
		if _, acked := led.acked[id]; !acked && !seen[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("round %d: %d confirmed messages lost (of %d confirmed), ids %v", round, len(lost), len(led.confirmed), someIDs(lost))
	}
	if len(dups) > 0 {
		t.Logf("round %d: %d messages read back more than once, ids %v", round, len(dups), someIDs(dups))
	}
	// The queue is now empty: start the next round's ledger afresh.
	led.confirmed = map[uint64]bool{}
	led.acked = map[uint64]time.Time{}
	led.horizon = time.Time{}
	return crashCheck{checked: len(seen), lost: len(lost), duplicates: len(dups)}
}

// runCrashLoad publishes and consumes until the deadline; the broker is
// killed right after, with traffic in flight.
func runCrashLoad(t *testing.T, url string, cq crashQueue, led *crashLedger, round uint64, d time.Duration) *sync.WaitGroup {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	waiters := &sync.WaitGroup{}
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rmq.Dial(url)
			if err != nil {
				return
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil || ch.Confirm(false) != nil {
				return
			}
			for seq := uint64(0); time.Now().Before(deadline); seq++ {
				id := round<<40 | uint64(p)<<32 | seq
				sent := time.Now()
				dc, err := ch.PublishWithDeferredConfirm("", cq.name, false, false,
					rmq.Publishing{DeliveryMode: rmq.Persistent, Body: crashBody(id, 256+int(seq%512))})
				if err != nil {
					return
				}
				if seq%8 == 7 || !time.Now().Before(deadline) {
					if !dc.Wait() {
						return
					}
				} else {
					waiters.Add(1)
					go func() {
						defer waiters.Done()
						if dc.Wait() {
							led.confirm(id, sent)
						}
					}()
					continue
				}
				led.confirm(id, sent)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rmq.Dial(url)
			if err != nil {
				return
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil || ch.Qos(50, 0, false) != nil {
				return
			}
			ds, err := ch.Consume(cq.name, "", false, false, false, false, nil)
			if err != nil {
				return
			}
			var pending []uint64
			for time.Now().Before(deadline) {
				var m rmq.Delivery
				select {
				case m = <-ds:
				case <-time.After(50 * time.Millisecond):
					continue
				}
				id, _ := parseCrashBody(m.Body)
				time.Sleep(200 * time.Microsecond) // slower than the publishers: a backlog builds
				if m.Ack(false) != nil {
					return
				}
				led.mu.Lock()
				led.acked[id] = time.Time{} // acked, not yet known processed
				led.mu.Unlock()
				pending = append(pending, id)
				if len(pending) >= 10 {
					// A round trip: the broker has processed the acks.
					if ch.Qos(50, 0, false) != nil {
						return
					}
					now := time.Now()
					led.mu.Lock()
					for _, p := range pending {
						led.acked[p] = now
					}
					led.mu.Unlock()
					pending = pending[:0]
				}
			}
		}()
	}
	wg.Wait()
	return waiters
}
