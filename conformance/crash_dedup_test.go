package conformance

import (
	"math/rand/v2"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestCrashDedupConfirm: idempotent publishing across kill -9. Publishers
// send messages with unique x-deduplication-header ids, under confirms,
// to a durable classic queue and a quorum queue (both deduplicating,
// x-deduplication-confirm ack) and to a durable deduplication exchange
// (ack) bound to a durable queue; the real binary is killed with SIGKILL
// mid-traffic and restarted on its data. Then each publisher does what
// a publisher that lost its connection does: it sends again every id it
// sent, whether its confirm came or not. Every retry must be acked (a
// duplicate of a stored message is acked, a message the crash lost is
// stored now), and each queue must then hold every id exactly once: a
// confirmed id was neither lost nor stored twice, an unconfirmed one was
// stored once, by its first publish or by its retry.
func TestCrashDedupConfirm(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	rounds := crashRounds()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 43))
	targets := []crashDedupTarget{
		{name: "classic", queue: "crash-dd", args: rmq.Table{"x-message-deduplication": true, "x-deduplication-confirm": "ack"}},
		{name: "quorum", queue: "crash-ddq", args: rmq.Table{"x-queue-type": "quorum", "x-message-deduplication": true, "x-deduplication-confirm": "ack"}},
		{name: "exchange", queue: "crash-ddx-q", exchange: "crash-ddx"},
	}
	var running *exec.Cmd
	defer func() {
		if running != nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	var confirmed, unconfirmed, checked int
	for round := 0; round <= rounds; round++ {
		addr := testutil.FreePort(t)
		cmd := exec.Command(bin, "--listen", addr, "--data-dir", dir, "--log-level", "warn")
		var logs testutil.SyncBuffer // read while the broker writes it
		cmd.Stderr = &logs
		must(t, cmd.Start())
		running = cmd
		testutil.WaitListening(t, addr, 30*time.Second)
		url := "amqp://guest:guest@" + addr + "/"
		if round == 0 {
			declareCrashDedup(t, url, targets)
		}
		for i := range targets {
			tg := &targets[i]
			confirmed += len(tg.confirmed)
			unconfirmed += len(tg.sent) - len(tg.confirmed)
			checked += tg.retryAndCheck(t, url, round, &logs)
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
		var wg sync.WaitGroup
		deadline := time.Now().Add(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		for i := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				targets[i].load(url, round, deadline)
			}()
		}
		time.Sleep(time.Until(deadline))
		_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
		_ = cmd.Wait()
		running = nil
		wg.Wait()
	}
	t.Logf("%d kill -9 rounds: %d ids checked after restarts (%d confirmed before the kill, %d sent without a confirm seen), each found once",
		rounds, checked, confirmed, unconfirmed)
}

// crashDedupTarget is one destination of TestCrashDedupConfirm, with
// the ids sent to it this round and those confirmed.
type crashDedupTarget struct {
	name, queue, exchange string
	args                  rmq.Table
	mu                    sync.Mutex
	sent, confirmed       map[string]bool
}

func declareCrashDedup(t *testing.T, url string, targets []crashDedupTarget) {
	c, err := rmq.Dial(url)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	for i := range targets {
		tg := &targets[i]
		_, err := ch.QueueDeclare(tg.queue, true, false, false, false, tg.args)
		must(t, err)
		if tg.exchange != "" {
			must(t, ch.ExchangeDeclare(tg.exchange, "x-message-deduplication", true, false, false, false,
				rmq.Table{"x-cache-size": int32(1 << 20), "x-deduplication-confirm": "ack"}))
			must(t, ch.QueueBind(tg.queue, "", tg.exchange, false, nil))
		}
	}
}

// publishing is what a target's publish is made of.
func (tg *crashDedupTarget) publishing(id string) (ex, key string, p rmq.Publishing) {
	n, _ := strconv.ParseUint(id, 10, 64)
	p = rmq.Publishing{Headers: rmq.Table{"x-deduplication-header": id}, DeliveryMode: rmq.Persistent, Body: crashBody(n, 64+int(n%256))}
	if tg.exchange != "" {
		return tg.exchange, "", p
	}
	return "", tg.queue, p
}

// load publishes fresh ids until the deadline (the broker is killed
// then), noting each as sent before it goes out and as confirmed once
// its ack comes.
func (tg *crashDedupTarget) load(url string, round int, deadline time.Time) {
	tg.mu.Lock()
	tg.sent, tg.confirmed = map[string]bool{}, map[string]bool{}
	tg.mu.Unlock()
	c, err := rmq.Dial(url)
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil || ch.Confirm(false) != nil {
		return
	}
	var waiters sync.WaitGroup
	defer waiters.Wait()
	for seq := 0; time.Now().Before(deadline); seq++ {
		id := strconv.FormatUint(uint64(round+1)<<32|uint64(seq), 10)
		tg.mu.Lock()
		tg.sent[id] = true
		tg.mu.Unlock()
		ex, key, p := tg.publishing(id)
		dc, err := ch.PublishWithDeferredConfirm(ex, key, false, false, p)
		if err != nil {
			return
		}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			if dc.Wait() {
				tg.mu.Lock()
				tg.confirmed[id] = true
				tg.mu.Unlock()
			}
		}()
		if seq%16 == 15 && !dc.Wait() {
			return
		}
	}
}

// retryAndCheck sends every id of the last round again (each must be
// acked), then reads the queue empty: every id sent must be there
// exactly once, and nothing else. It returns the ids checked.
func (tg *crashDedupTarget) retryAndCheck(t *testing.T, url string, round int, logs *testutil.SyncBuffer) int {
	if len(tg.sent) == 0 {
		return 0
	}
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("round %d: dial after restart: %v", round, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	var dcs []*rmq.DeferredConfirmation
	var ids []string
	for id := range tg.sent {
		ex, key, p := tg.publishing(id)
		dc, err := ch.PublishWithDeferredConfirm(ex, key, false, false, p)
		must(t, err)
		dcs = append(dcs, dc)
		ids = append(ids, id)
	}
	var nacked []string
	for i, dc := range dcs {
		if !dc.Wait() {
			nacked = append(nacked, ids[i])
		}
	}
	if len(nacked) > 0 {
		t.Fatalf("round %d, %s: %d of %d retries nacked (confirmed before the kill: %v), e.g. %v\n%s", round, tg.name,
			len(nacked), len(ids), tg.confirmed[nacked[0]], nacked[:min(5, len(nacked))], logs.String())
	}
	seen := map[string]int{}
	for n := 0; n < len(tg.sent); {
		d, ok, err := ch.Get(tg.queue, true)
		must(t, err)
		if !ok {
			break // every retry was confirmed: all of them are in the queue
		}
		id, _ := d.Headers["x-deduplication-header"].(string)
		if _, good := parseCrashBody(d.Body); !good {
			t.Fatalf("round %d, %s: corrupted message %s", round, tg.name, id)
		}
		seen[id]++
		if seen[id] == 1 {
			n++
		}
	}
	var missing, twice, unknown []string
	for id := range tg.sent {
		switch seen[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	for id := range seen {
		if !tg.sent[id] {
			unknown = append(unknown, id)
		}
	}
	if len(missing)+len(twice)+len(unknown) > 0 {
		t.Fatalf("round %d, %s: of %d ids sent (%d confirmed), %d missing %v, %d stored twice %v, %d unknown %v", round, tg.name,
			len(tg.sent), len(tg.confirmed), len(missing), missing[:min(5, len(missing))], len(twice), twice[:min(5, len(twice))],
			len(unknown), unknown[:min(5, len(unknown))])
	}
	return len(tg.sent)
}
