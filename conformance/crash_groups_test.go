package conformance

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestCrashGroups is the kill -9 round of message groups: the real binary
// (a window of 64 messages, so most of the backlog is paged) runs a
// durable grouped queue under a publisher with confirms (20 groups, each
// message numbered in its group) and two consumers acking; it is killed
// with SIGKILL at a random moment and restarted on the same data dir.
// After each restart one consumer drains the queue and checks: every
// confirmed message not acked is there (none lost), and each group's
// messages come in their publish order (what an ack had removed may come
// back, ahead of the rest, as it was).
func TestCrashGroups(t *testing.T) { crashGroups(t, "crash-groups", groupArgs()) }

// TestCrashGroupsQuorum is the same round on a grouped quorum queue
// (quorum_groups_test.go) on a standalone node: its groups are rebuilt
// from its Raft log and snapshot after each kill.
func TestCrashGroupsQuorum(t *testing.T) {
	crashGroups(t, "crash-groups-qq", quorumGroupArgs())
}

func crashGroups(t *testing.T, q string, args rmq.Table) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	rounds := crashRounds()
	const groups = 20
	led := &groupLedger{confirmed: map[string]bool{}, acked: map[string]bool{}, next: make([]int, groups)}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var running *exec.Cmd
	defer func() {
		if running != nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	checked, done := 0, 0
	for round := 0; round <= rounds; round++ {
		addr := testutil.FreePort(t)
		cmd := exec.Command(bin, "--listen", addr, "--data-dir", dir, "--log-level", "warn", "--queue-window", "64")
		var logs bytes.Buffer
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running = cmd
		testutil.WaitListening(t, addr, 30*time.Second)
		url := "amqp://guest:guest@" + addr + "/"
		checked += verifyGroupsRound(t, url, q, args, led, round)
		if round == rounds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err := waitExit(t, cmd, 30*time.Second)
			running = nil
			if err != nil {
				t.Fatalf("final shutdown: %v\n%s", err, logs.String())
			}
			break
		}
		wg := runGroupsLoad(t, url, q, led, time.Duration(200+rng.IntN(800))*time.Millisecond)
		_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
		_ = cmd.Wait()
		running = nil
		done++
		wg.Wait()
	}
	t.Logf("%d kill -9 rounds, %d messages checked after restarts", done, checked)
}

// groupLedger is what the clients know for sure, by message "g:n".
type groupLedger struct {
	mu        sync.Mutex
	confirmed map[string]bool
	acked     map[string]bool // an ack was sent (it may not have become durable)
	next      []int           // each group's next number to publish
	orderBad  []string        // order violations seen by the load's consumers
}

// verifyGroupsRound declares the queue (round 0) or drains it after a
// restart, checking order per group and that nothing confirmed is lost;
// it returns the messages read.
func verifyGroupsRound(t *testing.T, url, q string, args rmq.Table, led *groupLedger, round int) int {
	t.Helper()
	conn := dial(t, url)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	led.mu.Lock()
	if len(led.orderBad) > 0 {
		t.Fatalf("round %d: the consumers saw groups out of order: %v", round, led.orderBad[:min(5, len(led.orderBad))])
	}
	led.mu.Unlock()
	seen := map[string]bool{}
	last := map[string]int{}
	n := 0
	for {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok {
			break
		}
		g, num := groupOf(d)
		id := fmt.Sprintf("%s:%d", g, num)
		if string(d.Body) != id {
			t.Fatalf("round %d: body %q under headers %s", round, d.Body, id)
		}
		if l, had := last[g]; had && num <= l {
			t.Fatalf("round %d: group %s gave %d after %d", round, g, num, l)
		}
		last[g] = num
		seen[id] = true
		n++
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	var lost []string
	for id := range led.confirmed {
		if !seen[id] && !led.acked[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("round %d: %d confirmed messages lost, e.g. %v", round, len(lost), lost[:min(10, len(lost))])
	}
	// Drained: what was confirmed is settled now.
	led.confirmed, led.acked = map[string]bool{}, map[string]bool{}
	return n
}

// runGroupsLoad publishes (confirms) and consumes (two consumers, acking)
// for d; the broker is then killed. The returned group waits for the
// clients to see the connection go.
func runGroupsLoad(t *testing.T, url, q string, led *groupLedger, d time.Duration) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := rmq.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil || ch.Confirm(false) != nil {
			return
		}
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
		for time.Now().Before(stop) {
			var batch []*rmq.DeferredConfirmation
			var ids []string
			for range 50 {
				led.mu.Lock()
				g := rng.IntN(len(led.next))
				num := led.next[g]
				led.next[g]++
				led.mu.Unlock()
				p := groupMsg(fmt.Sprintf("g%d", g), num, true)
				dc, err := ch.PublishWithDeferredConfirm("", q, false, false, p)
				if err != nil {
					return
				}
				batch = append(batch, dc)
				ids = append(ids, string(p.Body))
			}
			for i, dc := range batch {
				if !dc.Wait() {
					return
				}
				led.mu.Lock()
				led.confirmed[ids[i]] = true
				led.mu.Unlock()
			}
		}
	}()
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := rmq.Dial(url)
			if err != nil {
				return
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil || ch.Qos(20, 0, false) != nil {
				return
			}
			ds, err := ch.Consume(q, fmt.Sprintf("c%d", c), false, false, false, false, nil)
			if err != nil {
				return
			}
			last := map[string]int{}
			for m := range ds {
				g, num := groupOf(m)
				if l, had := last[g]; had && num <= l && !m.Redelivered {
					led.mu.Lock()
					led.orderBad = append(led.orderBad, fmt.Sprintf("%s: %d after %d", g, num, l))
					led.mu.Unlock()
				}
				last[g] = num
				led.mu.Lock()
				led.acked[string(m.Body)] = true
				led.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // slower than the publisher: a backlog builds, paged
				if m.Ack(false) != nil {
					return
				}
			}
		}()
	}
	time.Sleep(d) // the load runs this long before the kill
	return &wg
}
