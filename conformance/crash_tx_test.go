package conformance

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// Transactions spanning txQueues durable queues, run by txWorkers
// publishers at once, each on queues of its own (so that one worker's gets
// and acks never interleave with another's).
const (
	txQueues  = 10
	txWorkers = 2
)

// crashTxRounds is how many transactions TestCrashTxAtomic commits (or
// has interrupted by a kill) in all: RAILMQ_CRASH_TX_ROUNDS, else the
// issue's 1,000 (about 15 s with 20 kills).
func crashTxRounds() int {
	if n, err := strconv.Atoi(os.Getenv("RAILMQ_CRASH_TX_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// crashTxKills is about how many times TestCrashTxAtomic kills the broker
// over its rounds: RAILMQ_CRASH_TX_KILLS, else 20.
func crashTxKills() int {
	if n, err := strconv.Atoi(os.Getenv("RAILMQ_CRASH_TX_KILLS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// txLedger is what the transactional workers know for sure.
type txLedger struct {
	mu sync.Mutex
	// sent: rounds whose tx.commit was sent (committed or interrupted).
	sent map[uint64]bool
	// committed: rounds whose tx.commit-ok arrived.
	committed map[uint64]bool
	// acks: per round, the round id each queue's ack in it settled (0:
	// that queue had nothing to get).
	acks map[uint64][txQueues]uint64
	// ackedBy: round ids whose messages an ack of a sent round settled.
	ackedBy map[uint64]bool
	// partial: round ids found in some of their queues but not all.
	partial map[uint64]bool
	commits int // commit-ok seen
	// lost: committed rounds found in none of their queues, no ack of
	// them sent; unheld: acks of committed rounds that did not hold (each
	// counted once).
	lost, unheld map[uint64]bool
	logged       int // problems logged in full (the first few)
}

// problem logs the first problems found in full, and counts them all.
func (l *txLedger) problem(t *testing.T, format string, args ...any) {
	if l.logged < 20 {
		l.logged++
		t.Logf(format, args...)
	}
}

func txQueueName(w, i int) string { return fmt.Sprintf("crash-tx-%d-%d", w, i) }

// TestCrashTxAtomic kills the real binary with SIGKILL at random moments
// while workers commit transactions that each publish one persistent
// message (the round id) to each of 10 durable queues and ack the oldest
// message of each (got in the same round), restarts it on the same data
// dir and reads every queue back after each restart. Every transaction
// must be all or nothing: a round id is in all 10 of its queues or in
// none; a round whose commit-ok arrived is there (unless a later round's
// acks took it, in all 10 queues at once); the acks of a round whose
// commit-ok arrived took their messages from every queue.
func TestCrashTxAtomic(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	target := crashTxRounds()
	led := &txLedger{sent: map[uint64]bool{}, committed: map[uint64]bool{}, acks: map[uint64][txQueues]uint64{},
		ackedBy: map[uint64]bool{}, partial: map[uint64]bool{}, lost: map[uint64]bool{}, unheld: map[uint64]bool{}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 43))
	var running *exec.Cmd
	defer func() {
		if running != nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	start := time.Now()
	kills := 0
	var next [txWorkers]uint64 // each worker's next round number
	for {
		addr := testutil.FreePort(t)
		cmd := exec.Command(bin, "--listen", addr, "--data-dir", dir, "--log-level", "warn")
		var logs bytes.Buffer
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running = cmd
		testutil.WaitListening(t, addr, 30*time.Second)
		url := "amqp://guest:guest@" + addr + "/"
		verifyTxRound(t, url, led, kills)
		led.mu.Lock()
		rounds := len(led.sent)
		led.mu.Unlock()
		if rounds >= target {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err := waitExit(t, cmd, 30*time.Second)
			running = nil
			if err != nil {
				t.Fatalf("final shutdown: %v\n%s", err, logs.String())
			}
			break
		}
		// Killed once a random number of rounds (about target/kills) has
		// been sent in this window: in the middle of the workers' commits.
		quota := max(target/crashTxKills(), 2)
		killAt := rounds + quota/2 + rng.IntN(quota)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range txWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				txCrashWorker(url, w, &next[w], led, stop)
			}()
		}
		testutil.Eventually(t, 2*time.Minute, func() bool {
			led.mu.Lock()
			defer led.mu.Unlock()
			return len(led.sent) >= killAt
		}, "restart %d: %d rounds sent", kills, killAt)
		_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush, commits in flight
		_ = cmd.Wait()
		running = nil
		kills++
		close(stop)
		wg.Wait()
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	t.Logf("%d rounds (transactions over %d queues each, committed or interrupted), %d kill -9, %d commit-ok seen, "+
		"%d rounds found partial, %d committed rounds lost, %d committed rounds whose acks did not hold, %v",
		len(led.sent), txQueues, kills, led.commits, len(led.partial), len(led.lost), len(led.unheld), time.Since(start).Round(time.Millisecond))
	if len(led.partial) > 0 {
		t.Errorf("%d transactions found partial (of %d sent)", len(led.partial), len(led.sent))
	}
	if len(led.lost) > 0 {
		t.Errorf("%d transactions lost after their commit-ok", len(led.lost))
	}
	if len(led.unheld) > 0 {
		t.Errorf("%d transactions' acks undone after their commit-ok", len(led.unheld))
	}
}

// txCrashWorker commits rounds on worker w's queues until the broker's
// death (or stop): every third round publishes only; the others first get
// (unacked) the oldest message of each queue and ack it in the
// transaction.
func txCrashWorker(url string, w int, next *uint64, led *txLedger, stop chan struct{}) {
	c, err := rmq.Dial(url)
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil || ch.Tx() != nil {
		return
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		*next++
		id := uint64(w+1)<<32 | *next
		var got [txQueues]uint64
		var tags []uint64
		if *next%3 != 0 {
			for i := range txQueues {
				d, ok, err := ch.Get(txQueueName(w, i), false)
				if err != nil {
					return
				}
				if ok {
					got[i], _ = parseCrashBody(d.Body)
					tags = append(tags, d.DeliveryTag)
				}
			}
		}
		for i := range txQueues {
			if ch.Publish("", txQueueName(w, i), false, false,
				rmq.Publishing{DeliveryMode: rmq.Persistent, Body: crashBody(id, 64+int(*next%200))}) != nil {
				return
			}
		}
		for _, tag := range tags {
			if ch.Ack(tag, false) != nil {
				return
			}
		}
		led.mu.Lock()
		led.sent[id] = true
		led.acks[id] = got
		for _, a := range got {
			if a != 0 {
				led.ackedBy[a] = true
			}
		}
		led.mu.Unlock()
		if ch.TxCommit() != nil {
			return
		}
		led.mu.Lock()
		led.committed[id] = true
		led.commits++
		led.mu.Unlock()
	}
}

// verifyTxRound reads every queue back after a restart (consumed, then
// returned by closing the channel: the queues keep their messages for the
// rounds to come) and checks the ledger: each round id in all of its
// queues or none; a committed round there unless acks took it; a
// committed round's acks applied.
func verifyTxRound(t *testing.T, url string, led *txLedger, restart int) {
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("restart %d: dial: %v", restart, err)
	}
	defer c.Close()
	led.mu.Lock()
	defer led.mu.Unlock()
	for w := range txWorkers {
		var in [txQueues]map[uint64]int
		for i := range txQueues {
			in[i] = readTxQueue(t, c, txQueueName(w, i), restart)
		}
		count := map[uint64]int{}
		for i := range txQueues {
			for id, n := range in[i] {
				count[id]++
				if n > 1 {
					t.Fatalf("restart %d: round %x is %d times in %s", restart, id, n, txQueueName(w, i))
				}
			}
		}
		for id, n := range count {
			if n != txQueues && !led.partial[id] {
				led.partial[id] = true
				led.problem(t, "restart %d: round %x is in %d of its %d queues (commit-ok seen: %v)", restart, id, n, txQueues, led.committed[id])
			}
		}
		for id := range led.committed {
			if id>>32 != uint64(w+1) {
				continue
			}
			if count[id] == 0 && !led.ackedBy[id] && !led.lost[id] {
				led.lost[id] = true
				led.problem(t, "restart %d: round %x had its commit-ok and is in none of its queues", restart, id)
			}
			for i, a := range led.acks[id] {
				if a != 0 && in[i][a] > 0 && !led.unheld[id] {
					led.unheld[id] = true
					led.problem(t, "restart %d: round %x had its commit-ok but its ack of round %x in %s did not hold", restart, id, a, txQueueName(w, i))
				}
			}
		}
	}
}

// readTxQueue declares queue (durable) and returns how many times each
// round id is in it, leaving it as it was.
func readTxQueue(t *testing.T, c *rmq.Connection, queue string, restart int) map[uint64]int {
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("restart %d: channel: %v", restart, err)
	}
	defer ch.Close() // returns every delivery to the queue
	q, err := ch.QueueDeclare(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("restart %d: declare %s: %v", restart, queue, err)
	}
	out := map[uint64]int{}
	if q.Messages == 0 {
		return out
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("restart %d: consume %s: %v", restart, queue, err)
	}
	for n := 0; n < q.Messages; n++ {
		select {
		case d := <-ds:
			id, ok := parseCrashBody(d.Body)
			if !ok {
				t.Fatalf("restart %d: corrupted message in %s", restart, queue)
			}
			out[id]++
		case <-time.After(30 * time.Second):
			t.Fatalf("restart %d: %s: %d of %d messages delivered", restart, queue, n, q.Messages)
		}
	}
	return out
}
