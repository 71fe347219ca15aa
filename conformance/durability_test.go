package conformance

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// restartable runs an in-process broker on one data dir, restarted at will.
type restartable struct {
	t    *testing.T
	dir  string
	opts broker.Options
	b    *testutil.Broker
	stop func()
}

func newRestartable(t *testing.T, opts broker.Options) *restartable {
	testutil.InProcess(t)
	r := &restartable{t: t, dir: t.TempDir(), opts: opts}
	r.start()
	return r
}

func (r *restartable) start() {
	r.opts.DataDir = r.dir
	r.b, r.stop = testutil.StartStoppable(r.t, r.opts)
}

func (r *restartable) restart() {
	r.stop()
	r.start()
}

func (r *restartable) dial() (*rmq.Connection, *rmq.Channel) {
	r.t.Helper()
	c, err := rmq.Dial(r.b.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	ch, err := c.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	return c, ch
}

func publishPersistent(t *testing.T, ch *rmq.Channel, ex, key string, bodies ...string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm(ex, key, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %q nacked", b)
		}
	}
}

func TestRestartKeepsDefinitionsAndMessages(t *testing.T) {
	forEachType(t, testRestartKeepsDefinitionsAndMessages)
}

func testRestartKeepsDefinitionsAndMessages(t *testing.T, qt queueKind) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	must(t, ch.ExchangeDeclare("dur-x", "topic", true, false, false, false, rmq.Table{"alternate-exchange": "dur-ae"}))
	must(t, ch.ExchangeDeclare("dur-ae", "fanout", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare("tmp-x", "direct", false, false, false, false, nil))
	_, err := ch.QueueDeclare("dur-a", true, false, false, false, rmq.Table{"x-max-priority": int32(5)})
	must(t, err)
	_, err = ch.QueueDeclare("dur-b", true, false, false, false, qt.declareArgs(nil))
	must(t, err)
	_, err = ch.QueueDeclare("tmp-q", false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dur-a", "orders.*", "dur-x", false, nil))
	must(t, ch.QueueBind("dur-b", "orders.#", "dur-x", false, nil))
	must(t, ch.QueueBind("dur-b", "", "dur-ae", false, nil))
	must(t, ch.QueueBind("tmp-q", "k", "tmp-x", false, nil))
	// Fanned out to both durable queues, in order.
	publishPersistent(t, ch, "dur-x", "orders.new", "m1", "m2", "m3")
	// A transient message on a durable queue does not survive.
	must(t, ch.Publish("", "dur-a", false, false, rmq.Publishing{Body: []byte("transient")}))
	// One delivered, not acked: it comes back redelivered.
	d, ok, err := ch.Get("dur-b", false)
	if !ok || err != nil || string(d.Body) != "m1" {
		t.Fatalf("get %q %v %v", d.Body, ok, err)
	}
	// One acked: it must not come back.
	d, _, _ = ch.Get("dur-a", false)
	must(t, d.Ack(false))
	c.Close()

	r.restart()
	c, ch = r.dial()
	defer c.Close()
	for _, q := range []struct {
		name string
		want []string
		redl []bool
	}{
		{"dur-a", []string{"m2", "m3"}, []bool{false, false}},
		{"dur-b", []string{"m1", "m2", "m3"}, []bool{true, false, false}},
	} {
		st, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
		if err != nil || st.Messages != len(q.want) {
			t.Fatalf("%s: %+v %v", q.name, st, err)
		}
		for i, w := range q.want {
			d, ok, err := ch.Get(q.name, true)
			if !ok || err != nil || string(d.Body) != w || d.Redelivered != q.redl[i] || d.DeliveryMode != rmq.Persistent {
				t.Fatalf("%s[%d]: %q redelivered=%v ok=%v err=%v", q.name, i, d.Body, d.Redelivered, ok, err)
			}
		}
	}
	// Arguments and bindings came back; the transient ones did not.
	if _, err := ch.QueueDeclare("dur-a", true, false, false, false, rmq.Table{"x-max-priority": int32(5)}); err != nil {
		t.Fatalf("redeclare with the same arguments: %v", err)
	}
	publishPersistent(t, ch, "dur-x", "orders.x.y", "deep") // only dur-b matches orders.#
	publishPersistent(t, ch, "dur-x", "other", "to-ae")     // unroutable: alternate exchange
	if d, _, _ := ch.Get("dur-b", true); string(d.Body) != "deep" {
		t.Fatalf("got %q", d.Body)
	}
	if d, _, _ := ch.Get("dur-b", true); string(d.Body) != "to-ae" {
		t.Fatalf("got %q", d.Body)
	}
	for _, name := range []string{"tmp-q"} {
		_, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
		expectErr(t, err, 404, "NOT_FOUND - no queue '"+name+"' in vhost '/'")
		ch, _ = c.Channel()
	}
	err = ch.ExchangeDeclarePassive("tmp-x", "direct", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no exchange 'tmp-x' in vhost '/'")
}

func TestDeletedQueueStaysDeleted(t *testing.T) { forEachType(t, testDeletedQueueStaysDeleted) }

func testDeletedQueueStaysDeleted(t *testing.T, qt queueKind) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	if _, err := ch.QueueDeclare("gone", true, false, false, false, qt.declareArgs(nil)); err != nil {
		t.Fatal(err)
	}
	publishPersistent(t, ch, "", "gone", "x", "y")
	if _, err := ch.QueueDelete("gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("gone", true, false, false, false, qt.declareArgs(nil)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	st, err := ch.QueueDeclarePassive("gone", true, false, false, false, nil)
	if err != nil || st.Messages != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

// Nothing is confirmed before it is durable: the store's fsync is made
// slow, and every confirm the client sees must come after the fsync that
// covered its message.
func TestConfirmAfterFsync(t *testing.T) { forEachType(t, testConfirmAfterFsync) }

func testConfirmAfterFsync(t *testing.T, qt queueKind) {
	var synced atomic.Int64 // fsyncs completed
	r := newRestartable(t, broker.Options{AfterStoreSync: func() {
		time.Sleep(20 * time.Millisecond) // the fsync is slow
		synced.Add(1)
	}})
	c, ch := r.dial()
	defer c.Close()
	if _, err := ch.QueueDeclare("fsync-q", true, false, false, false, qt.declareArgs(nil)); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 100))
	const n = 50
	before := synced.Load()
	for i := range n {
		if err := ch.Publish("", "fsync-q", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		cf := confirmation(t, confirms)
		// At least one fsync finished after the publish began, and the
		// confirm was not sent while the fsync was still running.
		if synced.Load() == before {
			t.Fatalf("confirm %d (tag %d) arrived before any fsync completed", i, cf.DeliveryTag)
		}
		if !cf.Ack {
			t.Fatalf("nack %d", cf.DeliveryTag)
		}
	}
	// Group commit: 50 publishes did not take 50 fsyncs.
	if got := synced.Load() - before; got >= n {
		t.Fatalf("%d fsyncs for %d publishes: no group commit", got, n)
	}
}

// A backlog larger than the in-memory window is paged to the store and
// read back ahead of the consumer, in order, also across a restart.
func TestBacklogBeyondWindow(t *testing.T) {
	r := newRestartable(t, broker.Options{QueueWindow: 64})
	c, ch := r.dial()
	if _, err := ch.QueueDeclare("backlog", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	body := make([]byte, 1024)
	ctx := context.Background()
	var last *rmq.DeferredConfirmation
	for i := range n {
		copy(body, fmt.Sprintf("%06d", i))
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "backlog", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		last = dc
	}
	if !last.Wait() {
		t.Fatal("nacked")
	}
	// Only the window's bodies are in memory.
	if used := r.b.Server.MemoryUsed(); used > 64*1024*2 {
		t.Fatalf("queues hold %d bytes with a 64-message window", used)
	}
	// Take half, then restart, then take the rest: order is kept.
	next := 0
	take := func(k int) {
		for range k {
			d, ok, err := ch.Get("backlog", true)
			if !ok || err != nil {
				t.Fatalf("get %d: %v %v", next, ok, err)
			}
			if want := fmt.Sprintf("%06d", next); string(d.Body[:6]) != want {
				t.Fatalf("got %q, want %s", d.Body[:6], want)
			}
			next++
		}
	}
	take(n / 2)
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	st, err := ch.QueueDeclarePassive("backlog", true, false, false, false, nil)
	if err != nil || st.Messages != n/2 {
		t.Fatalf("after restart: %+v %v", st, err)
	}
	take(n / 2)
	if _, ok, _ := ch.Get("backlog", true); ok {
		t.Fatal("more messages than published")
	}
}

// A store held by another process stops the broker with an error.
func TestStoreLocked(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	_, err := broker.New(broker.Options{DataDir: r.dir})
	if err == nil {
		t.Fatal("a second broker opened the same store")
	}
}

// A failed store write (a full disk) nacks the publishes it held; the
// broker keeps serving, and publishes succeed again once writes do.
func TestStoreFailureNacks(t *testing.T) {
	var failing atomic.Bool
	r := newRestartable(t, broker.Options{StoreFault: func() error {
		if failing.Load() {
			return fmt.Errorf("no space left on device (injected)")
		}
		return nil
	}})
	c, ch := r.dial()
	defer c.Close()
	if _, err := ch.QueueDeclare("full-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	pub := func(mode uint8, body string) bool {
		dc, err := ch.PublishWithDeferredConfirm("", "full-q", false, false, rmq.Publishing{DeliveryMode: mode, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return dc.Wait()
	}
	if !pub(rmq.Persistent, "before") {
		t.Fatal("nacked with a working store")
	}
	failing.Store(true)
	if pub(rmq.Persistent, "during") {
		t.Fatal("a publish whose write failed was acked")
	}
	if !pub(rmq.Transient, "transient") {
		t.Fatal("a transient publish needs no store: it must be acked")
	}
	failing.Store(false)
	if !pub(rmq.Persistent, "after") {
		t.Fatal("nacked after the store recovered")
	}
	// Consumers are served throughout.
	ds, err := ch.Consume("full-q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A nacked message may still have been enqueued (at-least-once), as
	// in RabbitMQ: "during" may or may not be delivered.
	got := map[string]bool{}
	for len(got) < 4 && !(got["before"] && got["transient"] && got["after"]) {
		got[string(recv(t, ds).Body)] = true
	}
	if !got["before"] || !got["transient"] || !got["after"] {
		t.Fatalf("got %v", got)
	}
	if c.IsClosed() {
		t.Fatal("connection closed")
	}
}

// The real binary refuses a store another broker holds, with a clear
// message and a non-zero exit.
func TestBinaryRefusesLockedStore(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	a := testutil.FreePort(t)
	first := exec.Command(bin, "--listen", a, "--data-dir", dir)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
	testutil.WaitListening(t, a, 30*time.Second)
	second := exec.Command(bin, "--listen", testutil.FreePort(t), "--data-dir", dir, "--log-format", "json")
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second broker on the same store: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "cannot start broker") || !strings.Contains(string(out), "lock") {
		t.Fatalf("unclear message:\n%s", out)
	}
}

// TTLs and delivery counts survive a restart; dead-lettering of a
// persistent message moves it durably.
func TestRestartKeepsTTLAndDeliveryCount(t *testing.T) {
	forEachType(t, testRestartKeepsTTLAndDeliveryCount)
}

func testRestartKeepsTTLAndDeliveryCount(t *testing.T, qt queueKind) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	must(t, ch.ExchangeDeclare("r-dlx", "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare("r-dlq", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("r-dlq", "", "r-dlx", false, nil))
	_, err = ch.QueueDeclare("r-ttl", true, false, false, false, qt.declareArgs(rmq.Table{"x-message-ttl": int32(300), "x-dead-letter-exchange": "r-dlx"}))
	must(t, err)
	_, err = ch.QueueDeclare("r-count", true, false, false, false, qt.declareArgs(rmq.Table{"x-delivery-limit": int32(5)}))
	must(t, err)
	publishPersistent(t, ch, "", "r-ttl", "expires")
	publishPersistent(t, ch, "", "r-count", "counted")
	for range 2 {
		d, ok, err := ch.Get("r-count", false)
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		// A reject counts on both types (a quorum queue's nack raises
		// only its acquired count, as RabbitMQ 4.3's: docs/features.md).
		must(t, d.Reject(true))
	}
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	d, ok, err := ch.Get("r-count", true)
	if !ok || err != nil || d.Headers["x-delivery-count"] != int64(2) || !d.Redelivered {
		t.Fatalf("after restart: %v %v count=%#v redelivered=%v", ok, err, d.Headers["x-delivery-count"], d.Redelivered)
	}
	// The TTL runs from the original publish, across the restart.
	testutil.Eventually(t, 5*time.Second, func() bool {
		st, err := ch.QueueDeclarePassive("r-dlq", true, false, false, false, nil)
		return err == nil && st.Messages == 1
	}, "expired message dead-lettered")
	if _, ok, _ := ch.Get("r-ttl", true); ok {
		t.Fatal("an expired message was delivered")
	}
	c.Close()
	r.restart() // the dead-lettered copy is durable, the original gone
	c, ch = r.dial()
	defer c.Close()
	d, ok, _ = ch.Get("r-dlq", true)
	if !ok || string(d.Body) != "expires" || d.DeliveryMode != rmq.Persistent {
		t.Fatalf("dead-lettered copy after restart: %v %q", ok, d.Body)
	}
	if st, _ := ch.QueueDeclarePassive("r-ttl", true, false, false, false, nil); st.Messages != 0 {
		t.Fatalf("the expired original came back: %+v", st)
	}
}

// Messages whose TTL ran out while the broker was down are dead-lettered
// at the restart, every one: recovery rebuilds exchanges, queues and
// bindings first and starts the queues (and their expiry) only then.
// Before, a queue's expiry could fire while later queues and the bindings
// were still being recovered, and its messages went to a dead-letter
// exchange with no bindings yet, lost; and its dead-lettering commits
// raced the recovery of the shared messages' reference counts (the race
// detector caught it). The TTL queues sort first and many queues follow,
// to give the race room; the messages are shared by two queues.
func TestRestartDeadLettersWhatExpiredWhileDown(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	must(t, ch.ExchangeDeclare("zz-dlx", "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare("zz-dlq", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("zz-dlq", "", "zz-dlx", false, nil))
	must(t, ch.ExchangeDeclare("aa-in", "fanout", true, false, false, false, nil))
	for _, q := range []string{"aa-ttl-1", "aa-ttl-2"} {
		_, err := ch.QueueDeclare(q, true, false, false, false, rmq.Table{"x-message-ttl": int32(200), "x-dead-letter-exchange": "zz-dlx"})
		must(t, err)
		must(t, ch.QueueBind(q, "", "aa-in", false, nil))
	}
	for i := range 300 {
		_, err := ch.QueueDeclare(fmt.Sprintf("mm-%03d", i), true, false, false, false, nil)
		must(t, err)
	}
	const n = 50
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	publishPersistent(t, ch, "aa-in", "", bodies...)
	c.Close()
	r.stop()
	time.Sleep(400 * time.Millisecond) // the TTL runs out while the broker is down
	r.start()
	c, ch = r.dial()
	defer c.Close()
	testutil.Eventually(t, 10*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive("zz-dlq", true, false, false, false, nil)
		return err == nil && q.Messages == 2*n
	}, "every expired message in the dead-letter queue")
	for _, q := range []string{"aa-ttl-1", "aa-ttl-2"} {
		if qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || qi.Messages != 0 {
			t.Fatalf("%s: %d left, %v", q, qi.Messages, err)
		}
	}
}
