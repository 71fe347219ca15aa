package conformance

import (
	"bytes"
	"math/rand/v2"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestCrashRecoveryStream kills the real binary with SIGKILL while
// publishers with confirms append to a stream (and a consumer reads it),
// restarts it on the same data dir and reads the whole stream from
// "first" every round: every message confirmed in any round is there,
// uncorrupted, exactly once, at offsets 0, 1, 2, ... with no gap (a torn
// tail is cut back to the last whole chunk, never into a hole).
func TestCrashRecoveryStream(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	rounds := crashRounds()
	const name = "crash-stream"
	args := rmq.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(256 << 10)}
	confirmed := map[uint64]bool{}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var running *exec.Cmd
	defer func() {
		if running != nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	checked := 0
	for round := 0; round <= rounds; round++ {
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
		mu.Lock()
		n := readStreamBack(t, url, name, args, confirmed, round)
		mu.Unlock()
		checked += n
		if round == rounds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err := waitExit(t, cmd, 30*time.Second)
			running = nil
			if err != nil {
				t.Fatalf("final shutdown: %v\n%s", err, logs.String())
			}
			break
		}
		wg := &sync.WaitGroup{}
		deadline := time.Now().Add(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		for p := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				streamCrashPublisher(url, name, uint64(round+1)<<40|uint64(p)<<32, deadline, func(id uint64) {
					mu.Lock()
					confirmed[id] = true
					mu.Unlock()
				})
			}()
		}
		time.Sleep(time.Until(deadline))
		_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
		_ = cmd.Wait()
		running = nil
		wg.Wait()
	}
	t.Logf("%d kill -9 rounds, %d records read back in all, %d confirmed", rounds, checked, len(confirmed))
}

// streamCrashPublisher publishes with confirms until deadline or the
// connection dies, recording each confirmed id.
func streamCrashPublisher(url, name string, base uint64, deadline time.Time, confirmed func(uint64)) {
	c, err := rmq.Dial(url)
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil || ch.Confirm(false) != nil {
		return
	}
	type pending struct {
		id uint64
		dc *rmq.DeferredConfirmation
	}
	var inflight []pending
	for seq := uint64(0); time.Now().Before(deadline); seq++ {
		id := base | seq
		dc, err := ch.PublishWithDeferredConfirm("", name, false, false, rmq.Publishing{Body: crashBody(id, 64+int(seq%700))})
		if err != nil {
			break
		}
		inflight = append(inflight, pending{id, dc})
		if len(inflight) >= 32 {
			for _, p := range inflight {
				if !p.dc.Wait() {
					return
				}
				confirmed(p.id)
			}
			inflight = inflight[:0]
		}
	}
	for _, p := range inflight {
		if !p.dc.Wait() {
			return
		}
		confirmed(p.id)
	}
}

// readStreamBack reads the stream from "first" to its end and checks it
// against the confirmed ids; it returns how many records it read.
func readStreamBack(t *testing.T, url, name string, args rmq.Table, confirmed map[uint64]bool, round int) int {
	t.Helper()
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("round %d: dial after restart: %v", round, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare(name, true, false, false, false, args)
	if err != nil {
		t.Fatalf("round %d: declare: %v", round, err)
	}
	must(t, ch.Qos(500, 0, false))
	ds, err := ch.Consume(name, "", false, false, false, false, rmq.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatalf("round %d: consume: %v", round, err)
	}
	seen := map[uint64]bool{}
	for i := 0; i < q.Messages; i++ {
		var d rmq.Delivery
		select {
		case d = <-ds:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: %d of %d records read, then nothing", round, i, q.Messages)
		}
		if off, _ := d.Headers["x-stream-offset"].(int64); off != int64(i) {
			t.Fatalf("round %d: record %d has x-stream-offset %v", round, i, d.Headers["x-stream-offset"])
		}
		id, good := parseCrashBody(d.Body)
		if !good {
			t.Fatalf("round %d: corrupted record at offset %d", round, i)
		}
		if seen[id] {
			t.Fatalf("round %d: message %d twice in the stream", round, id)
		}
		seen[id] = true
		must(t, d.Ack(false))
	}
	var lost []uint64
	for id := range confirmed {
		if !seen[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("round %d: %d confirmed messages lost (of %d), ids %v", round, len(lost), len(confirmed), someIDs(lost))
	}
	return len(seen)
}
