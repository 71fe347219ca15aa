package conformance

import (
	"net/http/httptest"
	"os/exec"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Retry with backoff (x-retry-delay, railmq's own, queue/retry.go): a
// consumer's nack or reject with requeue holds the message back before it
// is ready again. RabbitMQ has no such argument (it takes unknown x-
// arguments and ignores them), so these tests run in-process only; the
// texts of the refusals follow RabbitMQ's for its own arguments of the same
// kinds (rabbit_amqqueue:declare_args: "invalid arg '...' for queue '...'
// in vhost '...': {value_negative,-1}"; inequivalent_arg).

// retryEnv is a broker with a channel whose consumer settles by hand.
func retryEnv(t *testing.T) *env {
	t.Helper()
	testutil.InProcess(t)
	return setup(t, broker.Options{})
}

// nackAt nacks d with requeue and returns when.
func nackAt(t *testing.T, d rmq.Delivery) time.Time {
	t.Helper()
	at := time.Now()
	must(t, d.Nack(false, true))
	return at
}

// A nacked message is held for x-retry-delay, then delivered again,
// flagged redelivered; each further nack waits backoff times longer.
func TestRetryHoldsNackedMessages(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-hold", rmq.Table{"x-retry-delay": int32(300), "x-retry-backoff": 2.0})
	e.publish("", q, "m1")
	ds := e.consume(q, false)
	d := recv(t, ds)
	if d.Redelivered {
		t.Fatal("first delivery flagged redelivered")
	}
	at := nackAt(t, d)
	d = recv(t, ds)
	if waited := time.Since(at); waited < 300*time.Millisecond {
		t.Fatalf("redelivered after %v, want x-retry-delay 300ms", waited)
	}
	if !d.Redelivered || string(d.Body) != "m1" {
		t.Fatalf("got %q redelivered=%v", d.Body, d.Redelivered)
	}
	// The second nack: 300ms * 2.
	at = nackAt(t, d)
	d = recv(t, ds)
	if waited := time.Since(at); waited < 600*time.Millisecond {
		t.Fatalf("second redelivery after %v, want 600ms", waited)
	}
	must(t, d.Ack(false))
	e.waitCount(q, 0)
}

// While held, a message is neither ready (basic.get finds nothing, the
// declare-ok count leaves it out) nor unacknowledged: the management API
// counts it in messages_held and messages, Prometheus in
// railmq_queue_messages_held. basic.reject with requeue holds too.
func TestRetryHeldIsNotReady(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-get", rmq.Table{"x-retry-delay": int32(30_000)})
	e.publish("", q, "m1")
	d := e.get(e.ch, q, false)
	must(t, d.Reject(true))
	a := newAPI(t, e.b)
	var raw map[string]any
	testutil.Eventually(t, 5*time.Second, func() bool {
		a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &raw)
		return raw["messages_held"] == float64(1)
	}, "the reject held")
	if raw["messages"] != float64(1) || raw["messages_ready"] != float64(0) || raw["messages_unacknowledged"] != float64(0) {
		t.Fatalf("management API: messages %v ready %v unacked %v, want 1, 0, 0", raw["messages"], raw["messages_ready"], raw["messages_unacknowledged"])
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("declare-ok counts %d ready, want 0", n)
	}
	if _, ok, err := e.ch.Get(q, false); err != nil || ok {
		t.Fatalf("basic.get during the hold: ok=%v err=%v", ok, err)
	}
	hs := httptest.NewServer(e.b.PrometheusHandler())
	t.Cleanup(hs.Close)
	po := getMetrics(t, hs.URL+"/metrics/per-object")
	if v := po.series[`railmq_queue_messages_held{queue="retry-get",vhost="/"}`]; v != 1 {
		t.Fatalf("railmq_queue_messages_held %v, want 1", v)
	}
	if v := po.series[`rabbitmq_queue_messages_ready{queue="retry-get",vhost="/"}`]; v != 0 {
		t.Fatalf("rabbitmq_queue_messages_ready %v, want 0", v)
	}
}

// Only the consumer's verdict holds: requeues on channel close and
// basic.recover make the message ready at once, and a nack without
// requeue drops (or dead-letters) it as before.
func TestRetryOnlyNackAndRejectHold(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-close", rmq.Table{"x-retry-delay": int32(60_000)})
	e.publish("", q, "m1")
	ch := e.channel(e.conn)
	if _, ok, err := ch.Get(q, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	must(t, ch.Close()) // requeued by the close: not held
	e.waitCount(q, 1)

	// basic.recover requeues, not held.
	ch = e.channel(e.conn)
	if _, ok, err := ch.Get(q, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	//lint:ignore SA1019 basic.recover is the requeue under test
	must(t, ch.Recover(true))
	e.waitCount(q, 1)

	// The connection closing requeues, not held.
	c2 := dial(t, e.b.URL)
	ch2 := e.channel(c2)
	if _, ok, err := ch2.Get(q, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	must(t, c2.Close())
	e.waitCount(q, 1)

	// A nack without requeue drops it.
	d := e.get(e.ch, q, false)
	must(t, d.Nack(false, false))
	e.waitCount(q, 0)
	if _, ok, _ := e.ch.Get(q, true); ok {
		t.Fatal("a nack without requeue was kept")
	}
}

// A nack inside a transaction is the consumer's verdict too: held from
// the commit. x-retry-delay 0 requeues at once, as without it.
func TestRetryTransactionsAndZeroDelay(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-tx", rmq.Table{"x-retry-delay": int32(60_000)})
	e.publish("", q, "m1")
	ch := e.channel(e.conn)
	must(t, ch.Tx())
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	must(t, d.Nack(false, true))
	must(t, ch.TxCommit())
	a := newAPI(t, e.b)
	testutil.Eventually(t, 5*time.Second, func() bool {
		var raw map[string]any
		a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &raw)
		return raw["messages_held"] == float64(1)
	}, "the committed nack held")
	if n := e.count(q); n != 0 {
		t.Fatalf("%d ready, want 0", n)
	}

	z := e.queue("retry-zero", rmq.Table{"x-retry-delay": int32(0)})
	e.publish("", z, "z1")
	d = e.get(e.ch, z, false)
	must(t, d.Nack(false, true))
	if d = e.get(e.ch, z, true); !d.Redelivered {
		t.Fatal("not flagged redelivered")
	}
}

// A consumer timeout is not the consumer's verdict: the message its
// closed channel returns is ready at once, not held.
func TestRetryConsumerTimeoutNotHeld(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	q := e.queue("retry-timeout", rmq.Table{"x-retry-delay": int32(60_000), "x-consumer-timeout": int32(200)})
	c1 := e.channel(e.conn)
	closed := c1.NotifyClose(make(chan *rmq.Error, 1))
	ds, err := c1.Consume(q, "", false, false, false, false, nil)
	must(t, err)
	e.publish("", q, "m1")
	recv(t, ds) // never acked
	expectErr(t, closeErr(t, closed, "the timed-out channel"), 406, "")
	if d := e.get(e.ch, q, true); !d.Redelivered || string(d.Body) != "m1" {
		t.Fatalf("got %q redelivered=%v", d.Body, d.Redelivered)
	}
}

// The delay grows by x-retry-backoff up to x-retry-delay-max.
func TestRetryDelayMax(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-max", rmq.Table{"x-retry-delay": int32(200), "x-retry-backoff": int32(20), "x-retry-delay-max": int32(400)})
	e.publish("", q, "m1")
	ds := e.consume(q, false)
	d := recv(t, ds)
	at := nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 200*time.Millisecond {
		t.Fatalf("first hold %v, want 200ms", w)
	}
	// Uncapped, the second would wait 4s; capped, 400ms.
	at = nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 400*time.Millisecond || w > 3*time.Second {
		t.Fatalf("second hold %v, want the cap, 400ms", w)
	}
	must(t, d.Ack(false))
}

// x-delivery-limit still applies: a nack past it dead-letters at once
// (reason delivery_limit), not held; the held redeliveries carry
// x-delivery-count as on any queue with a delivery limit.
func TestRetryDeliveryLimitDeadLetters(t *testing.T) {
	e := retryEnv(t)
	dlq := e.queue("retry-dl-dlq", nil)
	q := e.queue("retry-dl", rmq.Table{"x-retry-delay": int32(200), "x-delivery-limit": int32(1),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	e.publish("", q, "m1")
	ds := e.consume(q, false)
	d := recv(t, ds)
	at := nackAt(t, d) // count 1: held
	d = recv(t, ds)
	if w := time.Since(at); w < 200*time.Millisecond {
		t.Fatalf("held %v, want 200ms", w)
	}
	if n, _ := d.Headers["x-delivery-count"].(int64); n != 1 {
		t.Fatalf("x-delivery-count %v, want 1", d.Headers["x-delivery-count"])
	}
	must(t, d.Nack(false, true)) // count 2 > limit 1: dead-lettered now
	got := e.get(e.ch, dlq, true)
	deaths, _ := got.Headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("x-death %v", got.Headers["x-death"])
	}
	if r := deaths[0].(rmq.Table)["reason"]; r != "delivery_limit" {
		t.Fatalf("reason %v, want delivery_limit", r)
	}
	e.waitCount(q, 0)
}

// A message whose TTL runs out while it is held is dead-lettered as
// expired when it comes due, not delivered.
func TestRetryTTLExpiresWhileHeld(t *testing.T) {
	e := retryEnv(t)
	dlq := e.queue("retry-ttl-dlq", nil)
	q := e.queue("retry-ttl", rmq.Table{"x-retry-delay": int32(600), "x-message-ttl": int32(300),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	e.publish("", q, "m1")
	ds := e.consume(q, false)
	d := recv(t, ds)
	must(t, d.Nack(false, true))
	got := e.get(e.ch, dlq, true)
	deaths, _ := got.Headers["x-death"].([]any)
	if len(deaths) != 1 || deaths[0].(rmq.Table)["reason"] != "expired" {
		t.Fatalf("x-death %v, want one, expired", got.Headers["x-death"])
	}
	none(t, ds, 100*time.Millisecond)
}

// Purge drops held messages (and counts them); delete if-empty refuses a
// queue holding one.
func TestRetryPurgeDropsHeld(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-purge", rmq.Table{"x-retry-delay": int32(500)})
	e.publish("", q, "m1")
	e.publish("", q, "m2")
	d := e.get(e.ch, q, false)
	must(t, d.Nack(false, true))
	a := newAPI(t, e.b)
	testutil.Eventually(t, 5*time.Second, func() bool {
		var raw map[string]any
		a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &raw)
		return raw["messages_held"] == float64(1)
	}, "held")
	ch := e.channel(e.conn)
	_, err := ch.QueueDelete(q, false, true, false)
	expectErr(t, err, 406, "PRECONDITION_FAILED - queue 'retry-purge' in vhost '/' not empty")
	n, err := e.ch.QueuePurge(q, false)
	must(t, err)
	if n != 2 {
		t.Fatalf("purged %d, want 2 (one ready, one held)", n)
	}
	ds := e.consume(q, false)
	none(t, ds, 800*time.Millisecond) // past the hold: it is gone
}

// Held messages come back at their place: ahead of those published
// while they were held, in their own order.
func TestRetryDueGoesBackToItsPlace(t *testing.T) {
	e := retryEnv(t)
	q := e.queue("retry-order", rmq.Table{"x-retry-delay": int32(1500)})
	e.publish("", q, "m1")
	e.publish("", q, "m2")
	d1 := e.get(e.ch, q, false)
	d2 := e.get(e.ch, q, false)
	must(t, d2.Nack(false, true))
	must(t, d1.Nack(false, true))
	e.publish("", q, "m3")
	if d := e.get(e.ch, q, true); string(d.Body) != "m3" {
		t.Fatalf("got %q while m1 and m2 are held, want m3", d.Body)
	}
	e.publish("", q, "m4")
	e.waitCount(q, 3) // m1, m2 due, m4
	for _, want := range []string{"m1", "m2", "m4"} {
		if d := e.get(e.ch, q, true); string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
	}
}

// The arguments are checked as RabbitMQ checks its own of the same kinds,
// and a redeclare must match them.
func TestRetryArgumentValidation(t *testing.T) {
	e := retryEnv(t)
	for _, c := range []struct {
		args rmq.Table
		text string
	}{
		{rmq.Table{"x-retry-delay": "1s"}, `PRECONDITION_FAILED - invalid arg 'x-retry-delay' for queue 'retry-bad' in vhost '/': "expected integer, got longstr"`},
		{rmq.Table{"x-retry-delay": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-retry-delay' for queue 'retry-bad' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-retry-delay-max": int32(0)}, "PRECONDITION_FAILED - invalid arg 'x-retry-delay-max' for queue 'retry-bad' in vhost '/': {value_zero,0}"},
		{rmq.Table{"x-retry-backoff": "2"}, `PRECONDITION_FAILED - invalid arg 'x-retry-backoff' for queue 'retry-bad' in vhost '/': "expected number, got longstr"`},
		{rmq.Table{"x-retry-backoff": 0.5}, "PRECONDITION_FAILED - invalid arg 'x-retry-backoff' for queue 'retry-bad' in vhost '/': {value_too_small,0.5}"},
		{rmq.Table{"x-retry-jitter": 1.5}, "PRECONDITION_FAILED - invalid arg 'x-retry-jitter' for queue 'retry-bad' in vhost '/': {value_out_of_range,1.5}"},
		{rmq.Table{"x-retry-jitter": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-retry-jitter' for queue 'retry-bad' in vhost '/': {value_out_of_range,-1}"},
	} {
		ch := e.channel(e.conn)
		_, err := ch.QueueDeclare("retry-bad", false, false, false, false, c.args)
		expectErr(t, err, 406, c.text)
	}
	args := rmq.Table{"x-retry-delay": int32(1000), "x-retry-backoff": 1.5, "x-retry-delay-max": int64(60000), "x-retry-jitter": 0.1}
	q := e.queue("retry-eq", args)
	if _, err := e.ch.QueueDeclare(q, false, false, false, false, args); err != nil {
		t.Fatalf("redeclare with the same arguments: %v", err)
	}
	ch := e.channel(e.conn)
	_, err := ch.QueueDeclare(q, false, false, false, false, rmq.Table{"x-retry-delay": int32(2000), "x-retry-backoff": 1.5, "x-retry-delay-max": int64(60000), "x-retry-jitter": 0.1})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-retry-delay' for queue 'retry-eq' in vhost '/': received '2000' but current is '1000'")
}

// x-retry-backoff and x-retry-jitter also take an AMQP decimal, the one
// non-integer number some clients can put in a table (Python's pika
// encodes no floats, only decimal.Decimal), checked and used as the same
// number would be.
func TestRetryDecimalArguments(t *testing.T) {
	e := retryEnv(t)
	ch := e.channel(e.conn)
	_, err := ch.QueueDeclare("retry-dec-bad", false, false, false, false, rmq.Table{"x-retry-jitter": rmq.Decimal{Scale: 1, Value: 15}})
	expectErr(t, err, 406, "PRECONDITION_FAILED - invalid arg 'x-retry-jitter' for queue 'retry-dec-bad' in vhost '/': {value_out_of_range,1.5}")
	args := rmq.Table{"x-retry-delay": int32(200), "x-retry-backoff": rmq.Decimal{Scale: 1, Value: 30}, "x-retry-jitter": rmq.Decimal{Scale: 0, Value: 0}}
	q := e.queue("retry-dec", args)
	if _, err := e.ch.QueueDeclare(q, false, false, false, false, args); err != nil {
		t.Fatalf("redeclare with the same arguments: %v", err)
	}
	e.publish("", q, "m")
	ds := e.consume(q, false)
	at := nackAt(t, recv(t, ds))
	d := recv(t, ds)
	if w := time.Since(at); w < 200*time.Millisecond {
		t.Fatalf("first hold %v, want 200ms", w)
	}
	// The second nack: 200ms * 3.0 (the default backoff, 2, would give 400ms).
	at = nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 600*time.Millisecond {
		t.Fatalf("second hold %v, want 600ms (backoff 3.0 as a decimal)", w)
	}
	must(t, d.Ack(false))
}

// A policy's retry-delay holds nacks on a live queue; the queue's own
// x-retry-delay wins over it. Bad policy values are refused.
func TestRetryPolicy(t *testing.T) {
	e := retryEnv(t)
	a := newAPI(t, e.b)
	pq := e.queue("retrypol-q", nil)
	own := e.queue("retrypol-own", rmq.Table{"x-retry-delay": int32(60_000)})
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/retrypol", "guest", "guest", nil, nil) })
	if code := a.call("PUT", "/api/policies/%2F/retrypol-bad", "guest", "guest", map[string]any{"pattern": "^retrypol-", "apply-to": "queues",
		"definition": map[string]any{"retry-jitter": 2}}, nil); code != 400 {
		t.Fatalf("retry-jitter 2: %d, want 400", code)
	}
	a.admin("PUT", "/api/policies/%2F/retrypol", map[string]any{"pattern": "^retrypol-", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"retry-delay": 400, "retry-backoff": 1.5}}, 201)
	testutil.Eventually(t, 5*time.Second, func() bool {
		var raw map[string]any
		a.call("GET", "/api/queues/%2F/"+pq, "guest", "guest", nil, &raw)
		return raw["policy"] == "retrypol"
	}, "the policy applied")
	e.publish("", pq, "p1")
	e.publish("", own, "o1")
	ch := e.channel(e.conn)
	ds, err := ch.Consume(pq, "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, ds)
	at := nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 400*time.Millisecond {
		t.Fatalf("policy hold %v, want 400ms", w)
	}
	must(t, d.Ack(false))
	// The queue's own 60s wins over the policy's 400ms.
	d = e.get(e.ch, own, false)
	must(t, d.Nack(false, true))
	if _, ok, _ := e.ch.Get(own, true); ok {
		t.Fatal("own x-retry-delay lost to the policy")
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		var raw map[string]any
		a.call("GET", "/api/queues/%2F/"+own, "guest", "guest", nil, &raw)
		return raw["messages_held"] == float64(1)
	}, "own hold")
	if _, ok, _ := e.ch.Get(own, true); ok {
		t.Fatal("own x-retry-delay lost to the policy")
	}
}

// A clean restart keeps a durable queue's hold: the message is still held
// for the rest of its delay, then delivered.
func TestRetryHoldSurvivesRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	if _, err := ch.QueueDeclare("retry-durable", true, false, false, false, rmq.Table{"x-retry-delay": int32(3000)}); err != nil {
		t.Fatal(err)
	}
	publishPersistent(t, ch, "", "retry-durable", "m1")
	d, ok, err := ch.Get("retry-durable", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	at := nackAt(t, d)
	// A confirmed publish after the nack: the hold's write is durable
	// before it (the queue commits in order).
	publishPersistent(t, ch, "", "retry-durable", "marker")
	c.Close()
	r.restart()
	_, ch = r.dial()
	ds, err := ch.Consume("retry-durable", "", false, false, false, false, nil)
	must(t, err)
	first := recv(t, ds)
	if string(first.Body) != "marker" {
		t.Fatalf("first after restart %q (after %v), want the marker: m1 is held", first.Body, time.Since(at))
	}
	got := recv(t, ds)
	if w := time.Since(at); string(got.Body) != "m1" || w < 3*time.Second {
		t.Fatalf("got %q after %v, want m1 after 3s", got.Body, w)
	}
	if !got.Redelivered {
		t.Fatal("m1 not flagged redelivered")
	}
}

// kill -9: a hold survives a crash (the broker binary killed, restarted on
// the same data dir): the message is neither delivered at once nor lost.
func TestRetryHoldSurvivesKill9(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	start := func() (*exec.Cmd, string, *testutil.SyncBuffer) { return startBinary(t, bin, dir) }
	cmd, url, _ := start()
	defer func() {
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	c := dial(t, url)
	ch, err := c.Channel()
	must(t, err)
	const delay = 5 * time.Second
	_, err = ch.QueueDeclare("retry-crash", true, false, false, false, rmq.Table{"x-retry-delay": int32(delay / time.Millisecond), "x-retry-backoff": int32(1)})
	must(t, err)
	publishPersistent(t, ch, "", "retry-crash", "m1", "m2")
	d1, ok, err := ch.Get("retry-crash", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	d2, ok, err := ch.Get("retry-crash", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	at := nackAt(t, d1)
	must(t, d2.Reject(true))
	publishPersistent(t, ch, "", "retry-crash", "marker") // the holds are durable before it
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	c.Close()
	cmd, url, logs := start()
	c = dial(t, url)
	defer c.Close()
	ch, err = c.Channel()
	must(t, err)
	ds, err := ch.Consume("retry-crash", "", false, false, false, false, nil)
	must(t, err)
	first := recv(t, ds)
	if string(first.Body) != "marker" {
		t.Fatalf("first after kill -9 %q (%v after the nack), want the marker: m1 and m2 are held\n%s", first.Body, time.Since(at), logs)
	}
	must(t, first.Ack(false))
	var got []string
	for len(got) < 2 {
		select {
		case d := <-ds:
			if w := time.Since(at); w < delay {
				t.Fatalf("%q delivered %v after the nack, want the rest of the %v hold", d.Body, w, delay)
			}
			if !d.Redelivered {
				t.Fatalf("%q not flagged redelivered", d.Body)
			}
			got = append(got, string(d.Body))
			must(t, d.Ack(false))
		case <-time.After(delay + 10*time.Second):
			t.Fatalf("held messages lost after kill -9: got %v\n%s", got, logs)
		}
	}
	if got[0] != "m1" || got[1] != "m2" {
		t.Fatalf("got %v, want m1, m2", got)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = waitExit(t, cmd, 30*time.Second)
	cmd = nil
	if err != nil {
		t.Fatalf("shutdown: %v\n%s", err, logs)
	}
}

// In a cluster: a classic queue with x-retry-delay declared on one node
// and consumed through another holds the other node's nacks (forwarded
// as nacks to the queue's home), and its definition, arguments included,
// reaches every node; a quorum queue takes the same arguments (one
// retry mechanism for both types: queue.Retry), and a nack on the other
// node is held there too, the log keeping the message until its due time.
func TestRetryInCluster(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 2)
	declareQuorum(t, nodes[0].b.URL, "retry-warmup", quorumArgs) // the cluster has its leaders
	chans := clusterChannels(t, nodes)
	_, err := chans[0].QueueDeclare("retry-cq", true, false, false, false, rmq.Table{"x-retry-delay": int32(400)})
	must(t, err)
	// An inequivalent redeclare on the other node is refused there.
	ch, err := dial(t, nodes[1].b.URL).Channel()
	must(t, err)
	_, err = ch.QueueDeclare("retry-cq", true, false, false, false, rmq.Table{"x-retry-delay": int32(500)})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-retry-delay' for queue 'retry-cq' in vhost '/': received '500' but current is '400'")
	must(t, chans[0].Publish("", "retry-cq", false, false, rmq.Publishing{Body: []byte("m1")}))
	ds, err := chans[1].Consume("retry-cq", "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, ds)
	at := nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 400*time.Millisecond || !d.Redelivered {
		t.Fatalf("redelivered=%v after %v through the other node, want a 400ms hold", d.Redelivered, w)
	}
	must(t, d.Ack(false))

	declareQuorum(t, nodes[0].b.URL, "retry-qq", rmq.Table{"x-queue-type": "quorum", "x-retry-delay": int32(400)})
	must(t, chans[0].Publish("", "retry-qq", false, false, rmq.Publishing{Body: []byte("q1")}))
	ds, err = chans[1].Consume("retry-qq", "", false, false, false, false, nil)
	must(t, err)
	d = recv(t, ds)
	at = nackAt(t, d)
	d = recv(t, ds)
	if w := time.Since(at); w < 400*time.Millisecond || !d.Redelivered || string(d.Body) != "q1" {
		t.Fatalf("quorum queue: %q redelivered=%v after %v, want q1 after a 400ms hold", d.Body, d.Redelivered, w)
	}
	must(t, d.Ack(false))
}

// A durable queue keeps held messages in memory up to half its window
// only; the rest keep their index, and are read back from the store when
// due: the memory the queue holds stays bounded, every message comes back
// in its order, after its delay, also across a restart.
func TestRetryHoldsPageBeyondWindow(t *testing.T) {
	r := newRestartable(t, broker.Options{QueueWindow: 16})
	c, ch := r.dial()
	const n, size = 50, 64 << 10
	if _, err := ch.QueueDeclare("retry-paged", true, false, false, false, rmq.Table{"x-retry-delay": int32(3000), "x-retry-backoff": int32(1)}); err != nil {
		t.Fatal(err)
	}
	must(t, ch.Confirm(false))
	for i := range n {
		body := make([]byte, size)
		body[0] = byte(i)
		dc, err := ch.PublishWithDeferredConfirm("", "retry-paged", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	ds, err := ch.Consume("retry-paged", "", false, false, false, false, nil)
	must(t, err)
	nacked := make([]time.Time, n) // when each was nacked last
	for i := range n {
		d := recv(t, ds)
		if int(d.Body[0]) != i {
			t.Fatalf("delivery %d is message %d", i, d.Body[0])
		}
		nacked[i] = nackAt(t, d)
	}
	// The queue holds at most 8 bodies (half its window of 16) in memory.
	hs := httptest.NewServer(r.b.PrometheusHandler())
	testutil.Eventually(t, 5*time.Second, func() bool {
		return getMetrics(t, hs.URL+"/metrics").series["railmq_memory_held_bytes"] < 12*size
	}, "railmq_memory_held_bytes stays at 12 bodies of %d or more: the holds are not paged", size)
	hs.Close()
	check := func(ds <-chan rmq.Delivery, after time.Duration) {
		t.Helper()
		for i := range n {
			d := recv(t, ds)
			if int(d.Body[0]) != i || len(d.Body) != size || !d.Redelivered {
				t.Fatalf("delivery %d: message %d, %d bytes, redelivered %v", i, d.Body[0], len(d.Body), d.Redelivered)
			}
			if w := time.Since(nacked[i]); w < after {
				t.Fatalf("message %d back after %v, want %v", i, w, after)
			}
			if i < n/2 {
				nacked[i] = nackAt(t, d) // held again, across the restart below
			} else {
				must(t, d.Ack(false))
			}
		}
	}
	check(ds, 3*time.Second)
	publishPersistent(t, ch, "", "retry-paged", "marker") // the holds are durable before it
	c.Close()
	r.restart()
	_, ch = r.dial()
	ds, err = ch.Consume("retry-paged", "", false, false, false, false, nil)
	must(t, err)
	if d := recv(t, ds); string(d.Body) != "marker" {
		t.Fatalf("first after restart: %d bytes, want the marker", len(d.Body))
	}
	for i := range n / 2 {
		d := recv(t, ds)
		if int(d.Body[0]) != i || len(d.Body) != size {
			t.Fatalf("after restart, delivery %d: message %d, %d bytes", i, d.Body[0], len(d.Body))
		}
		if w := time.Since(nacked[i]); w < 3*time.Second {
			t.Fatalf("message %d back %v after its nack, want 3s", i, w)
		}
		must(t, d.Ack(false))
	}
}
