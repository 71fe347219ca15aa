package conformance

import (
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Message deduplication, as the rabbitmq-message-deduplication plugin
// does it (github.com/noxdafox/rabbitmq-message-deduplication: README,
// lib/rabbitmq_message_deduplication/rabbit_message_deduplication_exchange.ex
// and _queue.ex, test/exchange_SUITE.erl and test/queue_SUITE.erl). The
// plugin does not ship with RabbitMQ, so these behaviours follow its
// source, not a broker's answers.

// dedupExchange declares a deduplication exchange with a cache of size
// entries (and ttl ms when positive) and binds a fresh queue to it.
func dedupExchange(e *env, name string, durable bool, args rmq.Table) string {
	e.t.Helper()
	must(e.t, e.ch.ExchangeDeclare(name, "x-message-deduplication", durable, false, false, false, args))
	q := e.queue(name+"-q", nil)
	// The exchange routes as fanout: the binding key does not matter
	// (the plugin's route/3 matches every binding).
	must(e.t, e.ch.QueueBind(q, "any-key", name, false, nil))
	return q
}

// publishDedup publishes on a confirm channel with header
// x-deduplication-header id (none when id is nil) and waits for the ack.
func (e *env) publishDedup(ex string, id any, extra rmq.Table) {
	e.t.Helper()
	h := rmq.Table{}
	if id != nil {
		h["x-deduplication-header"] = id
	}
	for k, v := range extra {
		h[k] = v
	}
	e.publishConfirmed(ex, "other-key", rmq.Publishing{Headers: h, Body: []byte("m")})
}

// The plugin's deduplicate_message: a message whose header value was seen
// is not routed (but still confirmed with basic.ack: it is unroutable, not
// refused); a message without the header is never deduplicated. Values of
// any type are ids; integers compare by value, whatever their width.
func TestDedupExchangeDropsDuplicates(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupExchange(e, "dd-x", false, rmq.Table{"x-cache-size": int32(10)})
	for range 3 {
		e.publishDedup("dd-x", "deduplicate-this", nil) // waits for each ack
	}
	e.waitCount(q, 1)
	e.publishDedup("dd-x", "deduplicate-that", nil)
	e.publishDedup("dd-x", int32(42), nil)
	e.publishDedup("dd-x", int64(42), nil) // the same id as int32 42
	e.publishDedup("dd-x", 4.2, nil)
	e.publishDedup("dd-x", 4.2, nil)
	e.publishDedup("dd-x", "42", nil) // a string is not the integer
	e.publishDedup("dd-x", nil, nil)
	e.publishDedup("dd-x", nil, nil)
	e.waitCount(q, 7)
	d := e.get(e.ch, q, true)
	if d.Headers["x-deduplication-header"] != "deduplicate-this" {
		t.Fatalf("first message %v", d.Headers)
	}
}

// A duplicate routes nowhere: published mandatory, it comes back with 312
// NO_ROUTE, as any unroutable message (rabbit_channel, after the
// exchange type's route/3 answered []).
func TestDedupExchangeMandatoryReturn(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupExchange(e, "dd-m", false, rmq.Table{"x-cache-size": int32(10)})
	returns := e.ch.NotifyReturn(make(chan rmq.Return, 2))
	h := rmq.Table{"x-deduplication-header": "id-1"}
	must(t, e.ch.Publish("dd-m", "", true, false, rmq.Publishing{Headers: h, Body: []byte("first")}))
	must(t, e.ch.Publish("dd-m", "", true, false, rmq.Publishing{Headers: h, Body: []byte("second")}))
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || string(r.Body) != "second" {
			t.Fatalf("return %d %q %q", r.ReplyCode, r.ReplyText, r.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return for the duplicate")
	}
	e.waitCount(q, 1)
}

// The plugin's deduplicate_message_ttl: with x-cache-ttl an id is a
// duplicate for that long only; the message header x-cache-ttl overrides
// the exchange's for its own id.
func TestDedupExchangeTTL(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupExchange(e, "dd-t", false, rmq.Table{"x-cache-size": int32(10), "x-cache-ttl": int32(300)})
	start := time.Now()
	e.publishDedup("dd-t", "a", nil)
	e.publishDedup("dd-t", "a", nil)
	e.waitCount(q, 1)
	testutil.Eventually(t, 5*time.Second, func() bool {
		e.publishDedup("dd-t", "a", nil)
		return e.count(q) == 2
	}, "the id routed again once its entry expired")
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("routed again after %v, within the 300 ms window", el)
	}

	// The header's TTL: longer than the exchange's.
	e.publishDedup("dd-t", "b", rmq.Table{"x-cache-ttl": int32(60_000)})
	start = time.Now()
	for time.Since(start) < 600*time.Millisecond {
		e.publishDedup("dd-t", "b", nil)
	}
	if n := e.count(q); n != 3 {
		t.Fatalf("%d messages: a duplicate within its own TTL was routed", n)
	}
	// And shorter.
	e.publishDedup("dd-t", "c", rmq.Table{"x-cache-ttl": int64(1)})
	testutil.Eventually(t, 5*time.Second, func() bool {
		e.publishDedup("dd-t", "c", nil)
		return e.count(q) == 5
	}, "c routed again after its 1 ms TTL")
}

// x-cache-size bounds the cache: a full cache drops its least recently
// used id to make room (the plugin drops an unspecified one), which is
// then routed again.
func TestDedupExchangeCacheSize(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupExchange(e, "dd-s", false, rmq.Table{"x-cache-size": int32(2)})
	e.publishDedup("dd-s", "a", nil)
	e.publishDedup("dd-s", "b", nil)
	e.publishDedup("dd-s", "c", nil) // evicts a
	e.waitCount(q, 3)
	e.publishDedup("dd-s", "c", nil) // still cached
	e.publishDedup("dd-s", "b", nil)
	e.waitCount(q, 3)
	e.publishDedup("dd-s", "a", nil) // evicted: routed
	e.waitCount(q, 4)
}

// A duplicate is an empty route, and RabbitMQ sends an empty route to the
// exchange's alternate exchange (rabbit_exchange:route, process_alternate).
func TestDedupExchangeAlternate(t *testing.T) {
	e := setup(t, broker.Options{})
	must(t, e.ch.ExchangeDeclare("dd-ae", "fanout", false, false, false, false, nil))
	ae := e.queue("dd-ae-q", nil)
	must(t, e.ch.QueueBind(ae, "", "dd-ae", false, nil))
	q := dedupExchange(e, "dd-a", false, rmq.Table{"x-cache-size": int32(5), "alternate-exchange": "dd-ae"})
	e.publishDedup("dd-a", "a", nil)
	e.publishDedup("dd-a", "a", nil)
	e.waitCount(q, 1)
	e.waitCount(ae, 1)
}

// The plugin's validate/1: x-cache-size is required, an integer greater
// than 0 or a string of one; x-cache-ttl likewise but optional;
// x-cache-persistence "disk" or "memory". Anything else is 406
// PRECONDITION_FAILED with the plugin's text. Its Elixir strings continue
// lines with a backslash, which keeps the next line's indentation: the
// texts carry those runs of spaces.
func TestDedupExchangeArguments(t *testing.T) {
	e := setup(t, broker.Options{})
	sp := func(n int) string { return strings.Repeat(" ", n) }
	size := "PRECONDITION_FAILED - Missing or invalid argument, " + sp(10) + "'x-cache-size' must be an integer greater than 0"
	sizeStr := "PRECONDITION_FAILED - Missing or invalid argument, " + sp(22) + "'x-cache-size' must be an integer greater than 0"
	ttl := "PRECONDITION_FAILED - Invalid argument, " + sp(13) + "'x-cache-ttl' must be an integer greater than 0"
	ttlStr := "PRECONDITION_FAILED - Invalid argument, " + sp(22) + "'x-cache-ttl' must be an integer greater than 0"
	pers := "PRECONDITION_FAILED - Invalid argument, " + sp(13) + "'x-cache-persistence' must be either 'disk' or 'memory'"
	for _, tc := range []struct {
		name string
		args rmq.Table
		text string // "" when accepted
	}{
		{"short", rmq.Table{"x-cache-size": int16(10), "x-cache-ttl": int16(1000), "x-cache-persistence": "memory"}, ""},
		{"long", rmq.Table{"x-cache-size": int32(10), "x-cache-ttl": int32(1000)}, ""},
		{"longlong", rmq.Table{"x-cache-size": int64(10), "x-cache-ttl": int64(1000)}, ""},
		{"strings", rmq.Table{"x-cache-size": "10", "x-cache-ttl": "1000", "x-cache-persistence": "disk"}, ""},
		{"no-size", rmq.Table{"x-cache-ttl": int32(1000)}, size},
		{"no-args", nil, size},
		{"size-zero", rmq.Table{"x-cache-size": int32(0)}, size},
		{"size-negative", rmq.Table{"x-cache-size": int32(-3)}, size},
		{"size-float", rmq.Table{"x-cache-size": 10.0}, size},
		{"size-bool", rmq.Table{"x-cache-size": true}, size},
		{"size-string", rmq.Table{"x-cache-size": "foo"}, sizeStr},
		{"ttl-zero", rmq.Table{"x-cache-size": int32(10), "x-cache-ttl": int32(0)}, ttl},
		{"ttl-float", rmq.Table{"x-cache-size": int32(10), "x-cache-ttl": 1.5}, ttl},
		{"ttl-string", rmq.Table{"x-cache-size": int32(10), "x-cache-ttl": "bar"}, ttlStr},
		{"size-before-ttl", rmq.Table{"x-cache-size": "foo", "x-cache-ttl": "bar"}, sizeStr},
		{"persistence", rmq.Table{"x-cache-size": int32(10), "x-cache-persistence": "ssd"}, pers},
		{"persistence-type", rmq.Table{"x-cache-size": int32(10), "x-cache-persistence": int32(1)}, pers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := e.channel(e.conn)
			defer ch.Close()
			err := ch.ExchangeDeclare("dd-args-"+tc.name, "x-message-deduplication", false, false, false, false, tc.args)
			if tc.text == "" {
				must(t, err)
				must(t, ch.ExchangeDelete("dd-args-"+tc.name, false, false))
				return
			}
			expectErr(t, err, 406, tc.text)
		})
	}
	// Refused means not declared.
	ch := e.channel(e.conn)
	err := ch.ExchangeDeclarePassive("dd-args-no-size", "x-message-deduplication", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no exchange 'dd-args-no-size' in vhost '/'")
}

// A durable deduplication exchange's window survives a restart; one
// declared with x-cache-persistence "memory" starts empty; a deleted and
// redeclared one starts empty too.
func TestDedupExchangeRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	must(t, ch.ExchangeDeclare("dd-dur", "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(100)}))
	must(t, ch.ExchangeDeclare("dd-mem", "x-message-deduplication", true, false, false, false,
		rmq.Table{"x-cache-size": int32(100), "x-cache-persistence": "memory"}))
	must(t, ch.ExchangeDeclare("dd-gone", "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(100)}))
	must(t, ch.ExchangeDeclare("dd-ttl", "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(100)}))
	for _, x := range []string{"dd-dur", "dd-mem", "dd-gone", "dd-ttl"} {
		_, err := ch.QueueDeclare(x+"-q", true, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(x+"-q", "", x, false, nil))
	}
	must(t, ch.Confirm(false))
	pub := func(ch *rmq.Channel, x, id string, extra rmq.Table) {
		t.Helper()
		h := rmq.Table{"x-deduplication-header": id}
		for k, v := range extra {
			h[k] = v
		}
		dc, err := ch.PublishWithDeferredConfirm(x, "", false, false, rmq.Publishing{Headers: h, DeliveryMode: rmq.Persistent, Body: []byte(id)})
		must(t, err)
		if !dc.Wait() {
			t.Fatalf("publish %s to %s nacked", id, x)
		}
	}
	for _, x := range []string{"dd-dur", "dd-mem", "dd-gone"} {
		pub(ch, x, "a", nil)
	}
	pub(ch, "dd-ttl", "short", rmq.Table{"x-cache-ttl": int32(1)})
	pub(ch, "dd-ttl", "long", rmq.Table{"x-cache-ttl": int32(600_000)})
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	must(t, ch.Confirm(false))
	must(t, ch.ExchangeDelete("dd-gone", false, false))
	must(t, ch.ExchangeDeclare("dd-gone", "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(100)}))
	must(t, ch.QueueBind("dd-gone-q", "", "dd-gone", false, nil))
	for _, x := range []string{"dd-dur", "dd-mem", "dd-gone"} {
		pub(ch, x, "a", nil)
	}
	pub(ch, "dd-ttl", "short", nil)
	pub(ch, "dd-ttl", "long", nil)
	for q, want := range map[string]int{"dd-dur-q": 1, "dd-mem-q": 2, "dd-gone-q": 2, "dd-ttl-q": 3} {
		testutil.Eventually(t, 5*time.Second, func() bool {
			st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			must(t, err)
			return st.Messages == want
		}, "%d messages in %s", want, q)
	}
}

// A confirmed id stays seen across kill -9: the real binary is killed
// (no shutdown, no flush) right after the confirms, and restarted on the
// same data dir. The message is transient and its queue not durable, so
// the only store write the confirm waited for is the cache entry's.
func TestDedupExchangeSurvivesKill(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	start := func() (*exec.Cmd, string, *testutil.SyncBuffer) { return startBinary(t, bin, dir) }
	cmd, url, _ := start()
	c, err := rmq.Dial(url)
	must(t, err)
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare("dd-kill", "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(1000)}))
	_, err = ch.QueueDeclare("dd-kill-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dd-kill-q", "", "dd-kill", false, nil))
	must(t, ch.Confirm(false))
	const n = 200
	var dcs []*rmq.DeferredConfirmation
	for i := range n {
		id := "id-" + itoa(i)
		dc, err := ch.PublishWithDeferredConfirm("dd-kill", "", false, false, rmq.Publishing{Headers: rmq.Table{"x-deduplication-header": id}, Body: []byte(id)})
		must(t, err)
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	_ = cmd.Process.Kill() // SIGKILL right after the confirms
	_ = cmd.Wait()
	c.Close()

	_, url, logs := start()
	c, err = rmq.Dial(url)
	must(t, err)
	defer c.Close()
	ch, err = c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	// The messages were transient: the queue is empty after the crash,
	// but their ids are still in the window.
	for i := range n {
		id := "id-" + itoa(i)
		dc, err := ch.PublishWithDeferredConfirm("dd-kill", "", false, false, rmq.Publishing{Headers: rmq.Table{"x-deduplication-header": id}, Body: []byte(id)})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	dc, err := ch.PublishWithDeferredConfirm("dd-kill", "", false, false, rmq.Publishing{Headers: rmq.Table{"x-deduplication-header": "new"}, Body: []byte("new")})
	must(t, err)
	dc.Wait()
	testutil.Eventually(t, 5*time.Second, func() bool {
		st, err := ch.QueueDeclarePassive("dd-kill-q", true, false, false, false, nil)
		must(t, err)
		return st.Messages == 1
	}, "only the new id routed after the restart (logs: %s)", logs)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// dedupQueue declares a queue with x-message-deduplication (and extra
// arguments).
func dedupQueue(e *env, name string, extra rmq.Table) string {
	e.t.Helper()
	args := rmq.Table{"x-message-deduplication": true}
	for k, v := range extra {
		args[k] = v
	}
	return e.queue(name, args)
}

// publishQ publishes to queue q through the default exchange on a
// confirm channel with id (none when nil) and reports the broker's ack
// (true) or nack (false).
func (e *env) publishQ(q string, id any) bool {
	e.t.Helper()
	if e.confirmCh == nil {
		e.confirmCh = e.channel(e.conn)
		must(e.t, e.confirmCh.Confirm(false))
	}
	h := rmq.Table{}
	if id != nil {
		h["x-deduplication-header"] = id
	}
	dc, err := e.confirmCh.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{Headers: h, Body: []byte("m")})
	must(e.t, err)
	return dc.Wait()
}

// The plugin's deduplicate_message and deduplicate_message_confirm: a
// message whose id is that of a message in the queue is not enqueued,
// and its publisher gets basic.nack (RabbitMQ rejects a publish its
// backing queue calls a duplicate). Without the header, no deduplication.
func TestDedupQueueRefusesDuplicates(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-basic", nil)
	if !e.publishQ(q, "deduplicate-this") {
		t.Fatal("first publish nacked")
	}
	for range 12 {
		if e.publishQ(q, "deduplicate-this") {
			t.Fatal("duplicate acked")
		}
	}
	if e.publishQ(q, int32(42)) != true || e.publishQ(q, int64(42)) != false || e.publishQ(q, int16(42)) != false {
		t.Fatal("integer ids: want ack, nack, nack")
	}
	for range 2 { // two publishes without an id: never duplicates
		if !e.publishQ(q, nil) {
			t.Fatal("publish without id nacked")
		}
	}
	e.waitCount(q, 4)
}

// The plugin's message_acknowledged: a delivered message keeps its id
// until it is acknowledged; a message got or consumed without ack never
// holds it (consume_no_ack); a rejected one gives it up (dead_letter).
func TestDedupQueueIDLeavesWithMessage(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-ack", nil)
	if !e.publishQ(q, "a") {
		t.Fatal("nacked")
	}
	d := e.get(e.ch, q, false)
	if e.publishQ(q, "a") {
		t.Fatal("id of an unacked message accepted")
	}
	must(t, d.Ack(false))
	if !e.publishQ(q, "a") {
		t.Fatal("id of an acked message refused")
	}
	d = e.get(e.ch, q, false)
	must(t, d.Reject(false))
	if !e.publishQ(q, "a") {
		t.Fatal("id of a rejected message refused")
	}
	e.get(e.ch, q, true) // no ack
	if !e.publishQ(q, "a") {
		t.Fatal("id of a message got with no-ack refused")
	}
	ds := e.consume(q, true)
	recv(t, ds)
	if !e.publishQ(q, "a") {
		t.Fatal("id of a message delivered with no-ack refused")
	}
	recv(t, ds)
	// Requeued, it keeps its id.
	ch := e.channel(e.conn)
	q2 := dedupQueue(e, "dq-ack2", nil)
	if !e.publishQ(q2, "b") {
		t.Fatal("nacked")
	}
	d = e.get(ch, q2, false)
	must(t, d.Nack(false, true))
	if e.publishQ(q2, "b") {
		t.Fatal("id of a requeued message accepted")
	}
	e.waitCount(q2, 1)
}

// The plugin's queue_overflow and dead_letter: a message dropped by the
// length limit, or dead-lettered, gives up its id; the dead-letter queue
// deduplicates on its own.
func TestDedupQueueOverflowAndDeadLetter(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-len", rmq.Table{"x-max-length": int32(1)})
	e.publishQ(q, "deduplicate-this")
	e.publishQ(q, "deduplicate-that") // drops -this
	if !e.publishQ(q, "deduplicate-this") {
		t.Fatal("id of a dropped message refused")
	}
	d := e.get(e.ch, q, true)
	if d.Headers["x-deduplication-header"] != "deduplicate-this" {
		t.Fatalf("got %v", d.Headers)
	}

	must(t, e.ch.ExchangeDeclare("dq-dlx", "fanout", false, false, false, false, nil))
	dlq := dedupQueue(e, "dq-dead", nil)
	must(t, e.ch.QueueBind(dlq, "", "dq-dlx", false, nil))
	src := dedupQueue(e, "dq-src", rmq.Table{"x-dead-letter-exchange": "dq-dlx"})
	e.publishQ(src, "x")
	must(t, e.get(e.ch, src, false).Reject(false))
	e.waitCount(dlq, 1)
	if !e.publishQ(src, "x") {
		t.Fatal("id of a dead-lettered message refused")
	}
	must(t, e.get(e.ch, src, false).Reject(false))
	// The dead-letter queue holds x already: the second copy is dropped.
	e.waitCount(src, 0)
	e.waitCount(dlq, 1)
}

// The plugin flushes the queue's cache on purge.
func TestDedupQueuePurge(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-purge", nil)
	e.publishQ(q, "a")
	e.publishQ(q, "b")
	n, err := e.ch.QueuePurge(q, false)
	must(t, err)
	if n != 2 {
		t.Fatalf("purged %d", n)
	}
	if !e.publishQ(q, "a") || !e.publishQ(q, "b") {
		t.Fatal("ids of purged messages refused")
	}
}

// A duplicate was routed to its queue, which refused it: a mandatory
// publish is not returned (RabbitMQ sends mandatory returns before the
// queue looks at the message), and the publisher gets basic.nack.
func TestDedupQueueMandatory(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-mand", nil)
	ch := e.channel(e.conn)
	must(t, ch.Confirm(false))
	returns := ch.NotifyReturn(make(chan rmq.Return, 2))
	h := rmq.Table{"x-deduplication-header": "a"}
	var oks []bool
	for range 2 {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, rmq.Publishing{Headers: h})
		must(t, err)
		oks = append(oks, dc.Wait())
	}
	if !oks[0] || oks[1] {
		t.Fatalf("confirms %v, want ack then nack", oks)
	}
	select {
	case r := <-returns:
		t.Fatalf("returned: %d %s", r.ReplyCode, r.ReplyText)
	default:
	}
	e.waitCount(q, 1)
}

// A durable deduplicating queue's ids are its stored messages' ids: they
// are back after a restart, and after kill -9 (the real binary, killed
// right after the confirms), as are the messages.
func TestDedupQueueSurvivesKill(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	start := func() (*exec.Cmd, string) {
		cmd, url, _ := startBinary(t, bin, dir)
		return cmd, url
	}
	pubAll := func(ch *rmq.Channel, n int) (acks int) {
		var dcs []*rmq.DeferredConfirmation
		for i := range n {
			id := "id-" + itoa(i)
			dc, err := ch.PublishWithDeferredConfirm("", "dq-kill", false, false,
				rmq.Publishing{Headers: rmq.Table{"x-deduplication-header": id}, DeliveryMode: rmq.Persistent, Body: []byte(id)})
			must(t, err)
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if dc.Wait() {
				acks++
			}
		}
		return acks
	}
	cmd, url := start()
	c, err := rmq.Dial(url)
	must(t, err)
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("dq-kill", true, false, false, false, rmq.Table{"x-message-deduplication": true})
	must(t, err)
	must(t, ch.Confirm(false))
	if n := pubAll(ch, 100); n != 100 {
		t.Fatalf("%d acks", n)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	c.Close()

	_, url = start()
	c, err = rmq.Dial(url)
	must(t, err)
	defer c.Close()
	ch, err = c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	if n := pubAll(ch, 150); n != 50 {
		t.Fatalf("%d acks after the restart, want 50 (ids 100-149)", n)
	}
	st, err := ch.QueueDeclarePassive("dq-kill", true, false, false, false, nil)
	must(t, err)
	if st.Messages != 150 {
		t.Fatalf("%d messages", st.Messages)
	}
}

// The plugin's deduplicate_message_ttl: the id of a message that expired
// (the queue's x-message-ttl, or its own expiration) is free again.
func TestDedupQueueTTL(t *testing.T) {
	e := setup(t, broker.Options{})
	q := dedupQueue(e, "dq-ttl", rmq.Table{"x-message-ttl": int32(300)})
	e.publishQ(q, "deduplicate-this")
	if e.publishQ(q, "deduplicate-this") {
		t.Fatal("duplicate accepted")
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return e.publishQ(q, "deduplicate-this") },
		"the id accepted again once its message expired")
	e.get(e.ch, q, true)

	ch := e.channel(e.conn)
	must(t, ch.Confirm(false))
	pub := func() bool {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{
			Headers: rmq.Table{"x-deduplication-header": "deduplicate-that"}, Expiration: "100"})
		must(t, err)
		return dc.Wait()
	}
	if !pub() || pub() {
		t.Fatal("want ack, then nack")
	}
	testutil.Eventually(t, 5*time.Second, pub, "the id accepted again once its message's expiration ran out")
}

// The plugin's policies (rabbit_message_deduplication_policies.ex, and
// queue_policy / exchange_policy in its suites): x-message-deduplication
// turns a live queue's deduplication on and off; x-cache-size (and
// x-cache-ttl) resize a live exchange's window; bad values are refused
// with the plugin's reasons.
func TestDedupPolicies(t *testing.T) {
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	t.Cleanup(func() {
		a.call("DELETE", "/api/policies/%2F/dp-q", "guest", "guest", nil, nil)
		a.call("DELETE", "/api/policies/%2F/dp-x", "guest", "guest", nil, nil)
	})
	q := e.queue("dp-queue", nil)
	a.admin("PUT", "/api/policies/%2F/dp-q", map[string]any{"pattern": "^dp-queue$", "apply-to": "queues",
		"definition": map[string]any{"x-message-deduplication": true}}, 201)
	e.publishQ(q, "a")
	testutil.Eventually(t, 5*time.Second, func() bool { return !e.publishQ(q, "a") }, "a duplicate refused under the policy")
	a.admin("DELETE", "/api/policies/%2F/dp-q", nil, 204)
	testutil.Eventually(t, 5*time.Second, func() bool { return e.publishQ(q, "a") }, "duplicates taken once the policy is cleared")

	x := dedupExchange(e, "dp-x", false, rmq.Table{"x-cache-size": int32(100)})
	a.admin("PUT", "/api/policies/%2F/dp-x", map[string]any{"pattern": "^dp-x$", "apply-to": "exchanges",
		"definition": map[string]any{"x-cache-size": 1}}, 201)
	e.publishDedup("dp-x", "a", nil)
	e.publishDedup("dp-x", "b", nil) // the window holds one id: a goes
	e.publishDedup("dp-x", "a", nil)
	e.waitCount(x, 3)

	for _, tc := range []struct {
		def    map[string]any
		reason string
	}{
		{map[string]any{"x-cache-size": 0}, `"x-cache-size" must be an integer greater than 0, got 0`},
		{map[string]any{"x-cache-ttl": "10"}, `"x-cache-ttl" must be an integer greater than 0, got <<"10">>`},
		{map[string]any{"x-cache-persistence": "ssd"}, `"x-cache-persistence" must be either "disk" or "memory", got <<"ssd">>`},
		{map[string]any{"x-message-deduplication": "yes"}, `"x-message-deduplication" must be a boolean, got <<"yes">>`},
	} {
		code, _, body := a.callWithHeaders("PUT", "/api/policies/%2F/dp-bad", map[string]any{"pattern": ".*", "definition": tc.def})
		if code != 400 || body.Reason != "Validation failed\n\n"+tc.reason+"\n" {
			t.Fatalf("%v: %d %q", tc.def, code, body.Reason)
		}
	}
}

// A queue deduplicated by a policy (not by its argument) still refuses the
// id of a message it holds after a restart, as it did before: the stored
// policies are in force when the queue is recovered, so it rebuilds its
// ids from its stored messages as a queue with the argument does, and the
// management API shows the policy on it at once.
func TestDedupPolicyQueueSurvivesRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	newAPI(t, r.b).admin("PUT", "/api/policies/%2F/dpr", map[string]any{"pattern": "^dpr-", "apply-to": "queues",
		"definition": map[string]any{"x-message-deduplication": true}}, 201)
	c, ch := r.dial()
	_, err := ch.QueueDeclare("dpr-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	pub := func(ch *rmq.Channel, id string) bool {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm("", "dpr-q", false, false, rmq.Publishing{
			Headers: rmq.Table{"x-deduplication-header": id}, DeliveryMode: rmq.Persistent, Body: []byte(id)})
		must(t, err)
		return dc.Wait()
	}
	if !pub(ch, "a") || pub(ch, "a") {
		t.Fatal("before the restart: want ack, then nack")
	}
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	must(t, ch.Confirm(false))
	if pub(ch, "a") {
		t.Fatal("after the restart, a duplicate of a stored message was acked")
	}
	if !pub(ch, "b") {
		t.Fatal("a new id nacked")
	}
	st, err := ch.QueueDeclarePassive("dpr-q", true, false, false, false, nil)
	must(t, err)
	if st.Messages != 2 {
		t.Fatalf("%d messages, want 2", st.Messages)
	}
	var info struct{ Policy string }
	if code := newAPI(t, r.b).call("GET", "/api/queues/%2F/dpr-q", "guest", "guest", nil, &info); code != 200 || info.Policy != "dpr" {
		t.Fatalf("GET queue: %d, policy %q", code, info.Policy)
	}
}

// A publish whose routing records its id in a durable deduplication
// exchange is confirmed only once that record is durable, whatever else
// the confirm waits for: here a transient message, so the queues write
// nothing, to a non-durable queue that may refuse it (reject-publish, or
// queue-level deduplication: its confirm waits for the queue's verdict),
// or held back by a delayed exchange bound to the deduplication exchange
// (a transient delayed message is not waited for). The store's commits
// fail: the record is not durable, so the publish must be nacked, as one
// whose only write was the record is.
func TestDedupConfirmWaitsForRecord(t *testing.T) {
	var failing atomic.Bool
	r := newRestartable(t, broker.Options{StoreFault: func() error {
		if failing.Load() {
			return errors.New("no space left on device (injected)")
		}
		return nil
	}})
	c, ch := r.dial()
	defer c.Close()
	for _, tc := range []struct {
		name string
		args rmq.Table // the queue's, or nil for the delayed exchange
	}{
		{"reject-publish", rmq.Table{"x-max-length": int32(10), "x-overflow": "reject-publish"}},
		{"queue-dedup", rmq.Table{"x-message-deduplication": true}},
		{"delayed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := "dcw-" + tc.name
			must(t, ch.ExchangeDeclare(x, "x-message-deduplication", true, false, false, false, rmq.Table{"x-cache-size": int32(100)}))
			headers := rmq.Table{}
			if tc.args != nil {
				_, err := ch.QueueDeclare(x+"-q", false, false, false, false, tc.args)
				must(t, err)
				must(t, ch.QueueBind(x+"-q", "", x, false, nil))
			} else {
				must(t, ch.ExchangeDeclare(x+"-later", "x-delayed-message", true, false, false, false, rmq.Table{"x-delayed-type": "fanout"}))
				must(t, ch.ExchangeBind(x+"-later", "", x, false, nil))
				headers["x-delay"] = int32(600_000)
			}
			pc, err := c.Channel()
			must(t, err)
			defer pc.Close()
			must(t, pc.Confirm(false))
			pub := func(id string) bool {
				t.Helper()
				h := rmq.Table{"x-deduplication-header": id}
				for k, v := range headers {
					h[k] = v
				}
				dc, err := pc.PublishWithDeferredConfirm(x, "", false, false, rmq.Publishing{Headers: h, Body: []byte(id)})
				must(t, err)
				return dc.Wait()
			}
			failing.Store(true)
			acked := pub("a")
			failing.Store(false)
			if acked {
				t.Fatal("acked although its deduplication record was not written")
			}
			if !pub("b") {
				t.Fatal("nacked with a working store")
			}
		})
	}
}
