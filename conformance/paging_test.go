package conformance

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// pagedQueue declares a durable queue with args on a broker whose queues
// keep 16 messages in memory, and publishes n persistent messages to it
// with confirms, numbered from 0.
func pagedQueue(t *testing.T, name string, args rmq.Table, n int) *env {
	t.Helper()
	e := setup(t, broker.Options{QueueWindow: 16})
	if _, err := e.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete(name, false, false, false) })
	for i := range n {
		e.publishConfirmed("", name, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", i))})
	}
	return e
}

// takeInOrder reads want messages with basic.get and checks they are
// numbered first, first+1, ...
func takeInOrder(e *env, q string, first, want int) {
	e.t.Helper()
	for i := first; i < first+want; i++ {
		d, ok, err := e.ch.Get(q, true)
		if err != nil || !ok {
			e.t.Fatalf("get #%d: ok %v, %v", i, ok, err)
		}
		if got, w := string(d.Body), fmt.Sprintf("%04d", i); got != w {
			e.t.Fatalf("got %s, want %s", got, w)
		}
	}
	if d, ok, _ := e.ch.Get(q, true); ok {
		e.t.Fatalf("one more message than expected: %s", d.Body)
	}
}

// x-max-length with drop-head on a queue paged to the store: the oldest
// go even while they are still in the store, in order, to the
// dead-letter exchange, and the queue never reports more than its limit.
func TestPagedMaxLengthDropHead(t *testing.T) {
	e := pagedQueue(t, "paged-dlq", nil, 0)
	if _, err := e.ch.QueueDeclare("paged-maxlen", true, false, false, false, rmq.Table{
		"x-max-length":              int32(50),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "paged-dlq",
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete("paged-maxlen", false, false, false) })
	for i := range 200 {
		e.publishConfirmed("", "paged-maxlen", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", i))})
		if n := e.count("paged-maxlen"); n > 50 {
			t.Fatalf("after publish %d the queue reports %d messages, over its limit of 50", i, n)
		}
	}
	takeInOrder(e, "paged-maxlen", 150, 50)
	e.waitCount("paged-dlq", 150)
	takeInOrder(e, "paged-dlq", 0, 150)
}

// basic.get reads through the store: every message of a backlog far
// beyond the window, in order, then none.
func TestPagedGet(t *testing.T) {
	e := pagedQueue(t, "paged-get", nil, 300)
	if n := e.count("paged-get"); n != 300 {
		t.Fatalf("count %d", n)
	}
	takeInOrder(e, "paged-get", 0, 300)
}

// A purge while the queue reads its backlog from the store drops the
// backlog; what was read for it is not delivered afterwards, and later
// publishes come out alone, in order.
func TestPagedPurge(t *testing.T) {
	e := pagedQueue(t, "paged-purge", nil, 500)
	for i := range 20 { // reads begin as the window empties
		if d, ok, err := e.ch.Get("paged-purge", true); !ok || err != nil || string(d.Body) != fmt.Sprintf("%04d", i) {
			t.Fatalf("get %d: %v %v %q", i, ok, err, d.Body)
		}
	}
	n, err := e.ch.QueuePurge("paged-purge", false)
	if err != nil || n != 480 {
		t.Fatalf("purged %d, %v; want 480", n, err)
	}
	for i := range 5 {
		e.publishConfirmed("", "paged-purge", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", 1000+i))})
	}
	takeInOrder(e, "paged-purge", 1000, 5)
}

// The window is in bytes as well as messages: large persistent messages
// page to the store beyond QueueWindowBytes (ready and unacked bodies),
// so a backlog of them is not held in memory, and they come back in order.
func TestPagedByBytes(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{QueueWindowBytes: 1 << 20})
	if _, err := e.ch.QueueDeclare("paged-bytes", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete("paged-bytes", false, false, false) })
	body := make([]byte, 256<<10)
	for i := range 40 { // 10 MiB
		copy(body, fmt.Sprintf("%04d", i))
		e.publishConfirmed("", "paged-bytes", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
	}
	if used := e.b.Server.MemoryUsed(); used > 2<<20 {
		t.Fatalf("queues hold %d bytes of a 10 MiB backlog with a 1 MiB window", used)
	}
	for i := range 40 {
		d, ok, err := e.ch.Get("paged-bytes", true)
		if err != nil || !ok || string(d.Body[:4]) != fmt.Sprintf("%04d", i) || len(d.Body) != len(body) {
			t.Fatalf("get %d: ok %v, %v, %q (%d bytes)", i, ok, err, d.Body[:min(4, len(d.Body))], len(d.Body))
		}
	}
}

// A backlog of a million transient messages (1 GiB of bodies) on a
// non-durable queue keeps the broker's memory bounded: beyond the window
// the messages wait on disk (RabbitMQ pages transient messages too). They
// come back whole and in order (checked over the first 100,000, across
// many reads from disk; the load tool drains the rest and counts them).
// The load tool publishes: the race detector would make the client the
// slow part.
func TestTransientBacklogKeepsRSSBounded(t *testing.T) {
	testutil.InProcess(t)
	const n, size, checked = 1_000_000, 1024, 100_000
	const bound = 256 << 20
	bin, perf := testutil.Binary(t), testutil.Command(t, "railmq-perf")
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", t.TempDir(), "--log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testutil.WaitListening(t, addr, 30*time.Second)
	url := "amqp://guest:guest@" + addr + "/"
	runPerf := func(args ...string) map[string]any {
		t.Helper()
		out, err := exec.Command(perf, append([]string{"--uri", url, "--json", "--queue-prefix", "backlog"}, args...)...).Output()
		if err != nil {
			t.Fatalf("railmq-perf %v: %v\n%s", args, err, out)
		}
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("railmq-perf output: %v\n%s", err, out)
		}
		return r
	}
	r := runPerf("--consumers", "0", "--pmessages", strconv.Itoa(n), "--size", strconv.Itoa(size), "--confirm", "2000", "--keep")
	if r["confirmed"] != float64(n) {
		t.Fatalf("confirmed %v of %d", r["confirmed"], n)
	}
	c, err := rmq.Dial(url)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	q, err := ch.QueueDeclarePassive("backlog-1", false, false, false, false, nil)
	must(t, err)
	if q.Messages != n {
		t.Fatalf("%d ready, want %d", q.Messages, n)
	}
	hwm := func() int64 {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		t.Skip("no VmHWM")
		return 0
	}
	if h := hwm(); h > bound {
		t.Fatalf("peak RSS %d MiB with a %d MiB transient backlog (bound %d MiB)", h>>20, n*size>>20, bound>>20)
	}
	must(t, ch.Qos(1000, 0, false))
	ds, err := ch.Consume("backlog-1", "first", false, false, false, false, nil)
	must(t, err)
	for i := range checked {
		d := recv(t, ds)
		// The load tool's header: producer (u32), then sequence (u64) from 0.
		if got := binary.BigEndian.Uint64(d.Body[4:]); got != uint64(i) || len(d.Body) != size {
			t.Fatalf("delivery %d is message %d (%d bytes)", i, got, len(d.Body))
		}
		if i%500 == 499 {
			must(t, d.Ack(true))
		}
	}
	must(t, ch.Close()) // the unacked rest of its prefetch goes back
	r = runPerf("--producers", "0", "--consumers", "1", "--prefetch", "1000", "--multi-ack-every", "500", "--drain", "--predeclared")
	if got := r["consumed"].(float64); got != n-checked {
		t.Fatalf("drained %v, want %d", got, n-checked)
	}
	if h := hwm(); h > bound {
		t.Fatalf("peak RSS %d MiB after draining the backlog (bound %d MiB)", h>>20, bound>>20)
	}
	t.Logf("peak RSS %d MiB for a %d MiB backlog", hwm()>>20, n*size>>20)
}
