package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// dlxSetup declares a fanout dead-letter exchange and a queue bound to it.
func dlxSetup(t *testing.T, e *env, dlx, dlq string) {
	t.Helper()
	if err := e.ch.ExchangeDeclare(dlx, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.queue(dlq, nil)
	if err := e.ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		t.Fatal(err)
	}
}

func deathOf(t *testing.T, d rmq.Delivery) rmq.Table {
	t.Helper()
	xd, ok := d.Headers["x-death"].([]interface{})
	if !ok || len(xd) == 0 {
		t.Fatalf("no x-death header: %#v", d.Headers)
	}
	return xd[0].(rmq.Table)
}

func TestDeadLetterRejected(t *testing.T) { forEachType(t, testDeadLetterRejected) }

func testDeadLetterRejected(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-rej", "dlq-rej")
	q := e.typedQueue(qt, "work-rej", rmq.Table{"x-dead-letter-exchange": "dlx-rej"})
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("poison"), Headers: rmq.Table{"app": "x"}})
	d := e.get(e.ch, q, false)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	got := e.get(e.ch, "dlq-rej", true)
	if string(got.Body) != "poison" || got.Exchange != "dlx-rej" || got.RoutingKey != q || got.Headers["app"] != "x" {
		t.Fatalf("dead-lettered %q via %q/%q headers %v", got.Body, got.Exchange, got.RoutingKey, got.Headers)
	}
	x := deathOf(t, got)
	if x["count"] != int64(1) || x["reason"] != "rejected" || x["queue"] != q || x["exchange"] != "" {
		t.Fatalf("x-death %#v", x)
	}
	if rks, _ := x["routing-keys"].([]interface{}); len(rks) != 1 || rks[0] != q {
		t.Fatalf("routing-keys %#v", x["routing-keys"])
	}
	if _, ok := x["time"].(time.Time); !ok {
		t.Fatalf("time %#v", x["time"])
	}
	if got.Headers["x-first-death-queue"] != q || got.Headers["x-first-death-reason"] != "rejected" || got.Headers["x-first-death-exchange"] != "" {
		t.Fatalf("x-first-death-* %v", got.Headers)
	}
	// Back in the same queue and nacked without requeue, it dies there for
	// the same reason again: RabbitMQ counts that death in the entry it
	// already has for {queue, reason} (count 2), which stays the only one,
	// and keeps the x-first-death-* headers.
	e.publishConfirmed("", q, rmq.Publishing{Body: got.Body, Headers: got.Headers}) // keep its x-death
	d = e.get(e.ch, q, false)
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	again := e.get(e.ch, "dlq-rej", true)
	xd, _ := again.Headers["x-death"].([]interface{})
	if len(xd) != 1 {
		t.Fatalf("x-death has %d entries, want the one for %s: %#v", len(xd), q, again.Headers["x-death"])
	}
	if x := xd[0].(rmq.Table); x["count"] != int64(2) || x["reason"] != "rejected" || x["queue"] != q || x["exchange"] != "" {
		t.Fatalf("x-death %#v", x)
	}
	if again.Headers["x-first-death-queue"] != q || again.Headers["x-first-death-reason"] != "rejected" || again.Headers["x-first-death-exchange"] != "" {
		t.Fatalf("x-first-death-* %v", again.Headers)
	}
}

func TestDeadLetterCountIncrements(t *testing.T) { forEachType(t, testDeadLetterCountIncrements) }

func testDeadLetterCountIncrements(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	// work -> (reject) dlx -> retry (ttl 50 ms) -> (expired) back to work.
	if err := e.ch.ExchangeDeclare("dlx-retry", "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.typedQueue(qt, "work-c", rmq.Table{"x-dead-letter-exchange": "dlx-retry", "x-dead-letter-routing-key": "retry"})
	e.typedQueue(qt, "retry-c", rmq.Table{"x-dead-letter-exchange": "dlx-retry", "x-dead-letter-routing-key": "work", "x-message-ttl": int32(50)})
	must(t, e.ch.QueueBind("retry-c", "retry", "dlx-retry", false, nil))
	must(t, e.ch.QueueBind("work-c", "work", "dlx-retry", false, nil))
	e.publishConfirmed("", "work-c", rmq.Publishing{Body: []byte("job")})
	var d rmq.Delivery
	for round := 1; round <= 2; round++ {
		d = e.get(e.ch, "work-c", false)
		if err := d.Nack(false, false); err != nil {
			t.Fatal(err)
		}
	}
	d = e.get(e.ch, "work-c", true)
	xd := d.Headers["x-death"].([]interface{})
	if len(xd) != 2 {
		t.Fatalf("x-death %#v", xd)
	}
	byQueue := map[string]rmq.Table{}
	for _, x := range xd {
		byQueue[x.(rmq.Table)["queue"].(string)] = x.(rmq.Table)
	}
	if w := byQueue["work-c"]; w["count"] != int64(2) || w["reason"] != "rejected" || w["exchange"] != "" {
		t.Fatalf("work-c entry %#v", w)
	}
	if r := byQueue["retry-c"]; r["count"] != int64(2) || r["reason"] != "expired" || r["exchange"] != "dlx-retry" {
		t.Fatalf("retry-c entry %#v", r)
	}
	if d.Headers["x-first-death-queue"] != "work-c" || d.Headers["x-first-death-reason"] != "rejected" {
		t.Fatalf("first death %v", d.Headers)
	}
}

func TestDeadLetterCycleDropped(t *testing.T) { forEachType(t, testDeadLetterCycleDropped) }

func testDeadLetterCycleDropped(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	if err := e.ch.ExchangeDeclare("dlx-cycle", "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q := e.typedQueue(qt, "cycle-q", rmq.Table{"x-dead-letter-exchange": "dlx-cycle", "x-message-ttl": int32(20)})
	// A witness bound to the same exchange gets the dead-lettered copy
	// the cycle drops for cycle-q (the drop is per queue, as RabbitMQ's
	// detect_cycles): it shows when the expiry has happened.
	w := e.typedQueue(qt, "cycle-witness", nil)
	for _, b := range []string{q, w} {
		if err := e.ch.QueueBind(b, "", "dlx-cycle", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("loop")})
	if x := deathOf(t, e.get(e.ch, w, true)); x["reason"] != "expired" || x["queue"] != q {
		t.Fatalf("x-death %#v", x)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d messages left: the expired message cycled", n)
	}
}

func TestDeadLetterMissingExchangeDrops(t *testing.T) {
	forEachType(t, testDeadLetterMissingExchangeDrops)
}

func testDeadLetterMissingExchangeDrops(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "nodlx-q", rmq.Table{"x-dead-letter-exchange": "no-such-exchange"})
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("x")})
	d := e.get(e.ch, q, false)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d left", n)
	}
	if e.conn.IsClosed() {
		t.Fatal("closed")
	}
}

// A poison message nacked with requeue forever ends in the dead-letter
// queue after exactly limit+1 deliveries, with x-delivery-count on the
// redeliveries (as RabbitMQ's quorum queues) and none on the dead copy.
func TestDeliveryLimit(t *testing.T) { forEachType(t, testDeliveryLimit) }

func testDeliveryLimit(t *testing.T, qt queueKind) {
	// RabbitMQ has x-delivery-limit on quorum queues only; railmq's queues
	// all have it.
	if !qt.quorum() {
		testutil.InProcess(t)
	}
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-lim", "dlq-lim")
	q := e.typedQueue(qt, "lim-q", rmq.Table{"x-delivery-limit": int32(2), "x-dead-letter-exchange": "dlx-lim"})
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("poison")})
	ds := e.consume(q, false)
	for i := 0; i < 3; i++ {
		d := recv(t, ds)
		cnt, has := d.Headers["x-delivery-count"]
		if (i == 0 && has) || (i > 0 && cnt != int64(i)) {
			t.Fatalf("delivery %d: x-delivery-count %#v", i+1, d.Headers["x-delivery-count"])
		}
		// A reject counts on both types and on RabbitMQ 3.10.8 and 4.3
		// (4.3's nack on a quorum queue raises only x-acquired-count).
		if err := d.Reject(true); err != nil {
			t.Fatal(err)
		}
	}
	none(t, ds, 200*time.Millisecond)
	dead := e.get(e.channel(e.conn), "dlq-lim", true)
	if _, has := dead.Headers["x-delivery-count"]; has {
		t.Fatal("the dead-lettered copy carries x-delivery-count")
	}
	if x := deathOf(t, dead); x["reason"] != "delivery_limit" || x["queue"] != q {
		t.Fatalf("x-death %#v", x)
	}
}

func TestMessageTTLQueueAndPerMessage(t *testing.T) { forEachType(t, testMessageTTLQueueAndPerMessage) }

func testMessageTTLQueueAndPerMessage(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-ttl", "dlq-ttl")
	q := e.typedQueue(qt, "ttl-q", rmq.Table{"x-message-ttl": int32(100), "x-dead-letter-exchange": "dlx-ttl"})
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("queue-ttl")})
	p := e.typedQueue(qt, "pttl-q", rmq.Table{"x-dead-letter-exchange": "dlx-ttl"})
	e.publishConfirmed("", p, rmq.Publishing{Body: []byte("msg-ttl"), Expiration: "100"})
	e.publishConfirmed("", p, rmq.Publishing{Body: []byte("lives")})
	e.waitCount("dlq-ttl", 2) // both expired
	// Never delivered once expired, also not through basic.get.
	if _, ok, _ := e.ch.Get(q, true); ok {
		t.Fatal("an expired message was delivered")
	}
	if d := e.get(e.ch, p, true); string(d.Body) != "lives" {
		t.Fatalf("got %q", d.Body)
	}
	got := map[string]rmq.Table{}
	for range 2 {
		d := e.get(e.ch, "dlq-ttl", true)
		got[string(d.Body)] = deathOf(t, d)
		if string(d.Body) == "msg-ttl" && d.Expiration != "" {
			t.Fatalf("expiration kept on the dead-lettered copy: %q", d.Expiration)
		}
	}
	if got["queue-ttl"]["reason"] != "expired" || got["msg-ttl"]["reason"] != "expired" || got["msg-ttl"]["original-expiration"] != "100" {
		t.Fatalf("x-death %#v", got)
	}
}

// A TTL of 0, the queue's or the message's, hands the message to a
// consumer that can take it at once and expires it otherwise, as
// RabbitMQ's deliver_or_enqueue does: basic.get never sees it, nor does a
// consumer at its prefetch limit. Delivered, it keeps its expiration.
func TestMessageTTLZero(t *testing.T) { forEachType(t, testMessageTTLZero) }

func testMessageTTLZero(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-ttl0", "dlq-ttl0")
	qttl := e.typedQueue(qt, "ttl0-q", rmq.Table{"x-message-ttl": int32(0), "x-dead-letter-exchange": "dlx-ttl0"})
	pttl := e.typedQueue(qt, "pttl0-q", rmq.Table{"x-dead-letter-exchange": "dlx-ttl0"})
	expired := func(body, q string) {
		t.Helper()
		d := e.get(e.ch, "dlq-ttl0", true)
		if x := deathOf(t, d); string(d.Body) != body || x["reason"] != "expired" || x["queue"] != q {
			t.Fatalf("dead-lettered %q with x-death %#v, want %q expired from %s", d.Body, x, body, q)
		}
	}
	for _, tc := range []struct{ q, expiration string }{{qttl, ""}, {pttl, "0"}} {
		// No consumer: it expires at once.
		e.publishConfirmed("", tc.q, rmq.Publishing{Body: []byte("unwanted"), Expiration: tc.expiration})
		if _, ok, err := e.ch.Get(tc.q, true); err != nil || ok {
			t.Fatalf("basic.get from %s: ok %v, err %v", tc.q, ok, err)
		}
		expired("unwanted", tc.q)

		c := e.channel(e.conn)
		must(t, c.Confirm(false))
		must(t, c.Qos(1, 0, false))
		ds, err := c.Consume(tc.q, "", false, false, false, false, nil)
		must(t, err)
		pub := func(body string) {
			t.Helper()
			dc, err := c.PublishWithDeferredConfirm("", tc.q, false, false, rmq.Publishing{Body: []byte(body), Expiration: tc.expiration})
			must(t, err)
			if !dc.Wait() {
				t.Fatal("publish nacked")
			}
		}
		pub("first")
		first := recv(t, ds)
		if string(first.Body) != "first" || first.Expiration != tc.expiration {
			t.Fatalf("from %s got %q with expiration %q", tc.q, first.Body, first.Expiration)
		}
		pub("second") // the consumer is at its prefetch limit
		expired("second", tc.q)
		must(t, first.Ack(false))
		pub("third") // after the ack, on the same channel: room again
		if d := recv(t, ds); string(d.Body) != "third" {
			t.Fatalf("from %s got %q, want third", tc.q, d.Body)
		} else {
			must(t, d.Ack(false))
		}
		must(t, c.Close())
	}
	// Behind another message it waits, and expires when it reaches the head.
	e.publishConfirmed("", pttl, rmq.Publishing{Body: []byte("ahead")})
	e.publishConfirmed("", pttl, rmq.Publishing{Body: []byte("behind"), Expiration: "0"})
	if d := e.get(e.ch, pttl, true); string(d.Body) != "ahead" {
		t.Fatalf("got %q, want ahead", d.Body)
	}
	if d, ok, err := e.ch.Get(pttl, true); err != nil || ok {
		t.Fatalf("basic.get after the head: %q, ok %v, err %v", d.Body, ok, err)
	}
	expired("behind", pttl)
	if n := e.count("dlq-ttl0"); n != 0 {
		t.Fatalf("%d more messages dead-lettered", n)
	}
}

func TestInvalidExpiration(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("", nil)
	for _, tc := range []struct{ exp, text string }{
		{"abc", "PRECONDITION_FAILED - invalid expiration 'abc': no_integer"},
		{"-5", "PRECONDITION_FAILED - invalid expiration '-5': {value_negative,-5}"},
		// At most 10 years, as x-message-ttl.
		{"315360000001", "PRECONDITION_FAILED - invalid expiration '315360000001': {value_too_large,315360000001}"},
		// Digits then anything else: the rest is refused, printed with ~p.
		{"10abc", `PRECONDITION_FAILED - invalid expiration '10abc': {leftover_string,"abc"}`},
		{"1\x01", "PRECONDITION_FAILED - invalid expiration '1\x01': {leftover_string,[1]}"},
		// Numbers of any size, and ~p's line break past column 78.
		{"1000000000000000000", "PRECONDITION_FAILED - invalid expiration '1000000000000000000': {value_too_large,\n" +
			strings.Repeat(" ", 43) + "1000000000000000000}"},
	} {
		ch := e.channel(e.conn)
		closed := ch.NotifyClose(make(chan *rmq.Error, 1))
		_ = ch.Publish("", q, false, false, rmq.Publishing{Expiration: tc.exp, Body: []byte("x")})
		expectErr(t, closeErr(t, closed, "channel after expiration "+tc.exp), 406, tc.text)
	}
	// The largest allowed is taken, and -0 is 0.
	e.publishConfirmed("", q, rmq.Publishing{Expiration: "315360000000", Body: []byte("ok")})
	e.publishConfirmed("", q, rmq.Publishing{Expiration: "-0", Body: []byte("ok")})
}

func TestQueueExpires(t *testing.T) { forEachType(t, testQueueExpires) }

func testQueueExpires(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	if _, err := e.ch.QueueDeclare("expiring-q", qt.durable, false, false, false, qt.declareArgs(rmq.Table{"x-expires": int32(200)})); err != nil {
		t.Fatal(err)
	}
	// Polled with queue.bind, which is not a use: a (passive) declare
	// would renew the queue's lease, in RabbitMQ as in railmq.
	probe := e.channel(e.conn)
	within := 5 * time.Second
	if qt.quorum() {
		// RabbitMQ's quorum queue looks at its expiry on its Ra tick
		// (v3.10.8 rabbit_fifo.erl is_expired/2 from tick/2; the
		// quorum_tick_interval is 5 s): deleted within seconds.
		within = 30 * time.Second
	}
	testutil.Eventually(t, within, func() bool {
		err := probe.QueueBind("expiring-q", "probe", "amq.direct", false, nil)
		if err != nil {
			expectErr(t, err, 404, "NOT_FOUND - no queue 'expiring-q' in vhost '/'")
		}
		return err != nil
	}, "queue of x-expires 200 ms deleted")
	_, err := e.ch.QueueDeclarePassive("expiring-q", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'expiring-q' in vhost '/'")
}

func TestMaxLengthDropHead(t *testing.T) { forEachType(t, testMaxLengthDropHead) }

func testMaxLengthDropHead(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-len", "dlq-len")
	q := e.typedQueue(qt, "len-q", rmq.Table{"x-max-length": int32(3), "x-dead-letter-exchange": "dlx-len"})
	// A publish storm: the queue stays within its limit throughout.
	for i := range 200 {
		if err := e.ch.Publish("", q, false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("last")})
	if n := e.count(q); n != 3 {
		t.Fatalf("%d in a queue of max length 3", n)
	}
	for _, want := range []string{"198", "199", "last"} {
		if d := e.get(e.ch, q, true); string(d.Body) != want {
			t.Fatalf("got %q want %q", d.Body, want)
		}
	}
	d := e.get(e.ch, "dlq-len", true)
	if string(d.Body) != "0" || deathOf(t, d)["reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q %v", d.Body, d.Headers)
	}
}

func TestMaxLengthBytes(t *testing.T) { forEachType(t, testMaxLengthBytes) }

func testMaxLengthBytes(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "lenb-q", rmq.Table{"x-max-length-bytes": int32(10)})
	for _, b := range []string{"aaaa", "bbbb", "cccc"} {
		e.publishConfirmed("", q, rmq.Publishing{Body: []byte(b)})
	}
	if d := e.get(e.ch, q, true); string(d.Body) != "bbbb" {
		t.Fatalf("got %q", d.Body)
	}
}

// Classic queues only: a quorum queue's reject-publish limit is soft
// (RabbitMQ 3.10.8 confirmed all three publishes to a quorum queue of
// x-max-length 2; the quorum queue tests of overflow pin RabbitMQ 4's
// rule) and it has no reject-publish-dlx.
func TestMaxLengthRejectPublish(t *testing.T) {
	qt := classicType
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-rp", "dlq-rp")
	for _, mode := range []string{"reject-publish", "reject-publish-dlx"} {
		q := e.typedQueue(qt, "rp-"+mode, rmq.Table{"x-max-length": int32(2), "x-overflow": mode, "x-dead-letter-exchange": "dlx-rp"})
		ch := e.channel(e.conn)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		var acks []bool
		for i := range 3 {
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, dc.Wait())
		}
		if !acks[0] || !acks[1] || acks[2] {
			t.Fatalf("%s: confirms %v, want ack ack nack", mode, acks)
		}
		if n := e.count(q); n != 2 {
			t.Fatalf("%s: %d queued", mode, n)
		}
	}
	// Only reject-publish-dlx dead-letters the refused message.
	if d := e.get(e.ch, "dlq-rp", true); string(d.Body) != "2" || deathOf(t, d)["reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q", d.Body)
	}
	if _, ok, _ := e.ch.Get("dlq-rp", true); ok {
		t.Fatal("reject-publish dead-lettered too")
	}
}

func TestSingleActiveConsumer(t *testing.T) { forEachType(t, testSingleActiveConsumer) }

func testSingleActiveConsumer(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "sac-q", rmq.Table{"x-single-active-consumer": true})
	c1, c2 := e.channel(e.conn), e.channel(e.conn)
	d1, err := c1.Consume(q, "first", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := c2.Consume(q, "second", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 4)
	for range 2 {
		recv(t, d1) // held, not acked
	}
	m3 := recv(t, d1)
	_ = m3
	none(t, d2, 200*time.Millisecond)
	c1.Close() // the first goes: what it held is requeued, the second takes over
	got := map[string]bool{}
	for range 4 {
		d := recv(t, d2)
		got[string(d.Body)] = true
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 4 {
		t.Fatalf("second consumer got %v", got)
	}
}

func TestPriorityQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("prio-q", rmq.Table{"x-max-priority": int32(10)})
	for i, p := range []uint8{1, 5, 0, 9, 5, 255} {
		e.publishConfirmed("", q, rmq.Publishing{Priority: p, Body: []byte(fmt.Sprintf("%d-p%d", i, p))})
	}
	// Higher first (255 is capped to 10, above 9), FIFO within a priority.
	for _, want := range []string{"5-p255", "3-p9", "1-p5", "4-p5", "0-p1", "2-p0"} {
		if d := e.get(e.ch, q, true); string(d.Body) != want {
			t.Fatalf("got %q want %q", d.Body, want)
		}
	}
}

// A classic queue without a delivery limit redelivers a message with
// exactly the headers it was published with, as RabbitMQ 3.10 does:
// x-delivery-count is a quorum-queue header (railmq adds it only where a
// delivery limit was asked for), and clients that take every header for a
// string (Watermill) refuse a message that carries it and loop on it.
func TestRedeliveryAddsNoHeaders(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("", nil)
	want := rmq.Table{"_watermill_message_uuid": "e3b0c442", "app": "billing"}
	e.publishConfirmed("", q, rmq.Publishing{Headers: want, Body: []byte("job")})
	sameHeaders := func(how string, d rmq.Delivery) {
		t.Helper()
		if len(d.Headers) != len(want) {
			t.Fatalf("%s: headers %#v, want %#v", how, d.Headers, want)
		}
		for k, v := range want {
			if d.Headers[k] != v {
				t.Fatalf("%s: headers %#v, want %#v", how, d.Headers, want)
			}
		}
	}
	ch := e.channel(e.conn)
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, ds)
	sameHeaders("first delivery", d)
	for i := range 3 { // nack with requeue
		must(t, d.Nack(false, true))
		d = recv(t, ds)
		if !d.Redelivered {
			t.Fatalf("redelivery %d not flagged redelivered", i+1)
		}
		sameHeaders(fmt.Sprintf("redelivery %d after nack", i+1), d)
	}
	must(t, d.Reject(true))
	d = recv(t, ds)
	sameHeaders("redelivery after reject", d)
	// Closing the channel requeues the unacked delivery.
	must(t, ch.Close())
	g := e.get(e.ch, q, false)
	if !g.Redelivered {
		t.Fatal("basic.get after channel close: not redelivered")
	}
	sameHeaders("basic.get after channel close", g)
	must(t, g.Nack(false, true))
	g = e.get(e.ch, q, true)
	sameHeaders("basic.get after nack", g)
}

// The dead-lettered copy's headers are laid out as RabbitMQ writes them:
// the table sorted by name, each x-death entry as count, reason, queue,
// time, exchange, routing-keys, original-expiration. Read off the wire
// with a raw client, since client libraries decode tables into maps.
func TestDeadLetterHeaderOrder(t *testing.T) { forEachType(t, testDeadLetterHeaderOrder) }

func testDeadLetterHeaderOrder(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-order", "dlq-order")
	q := e.typedQueue(qt, "order-src", rmq.Table{"x-dead-letter-exchange": "dlx-order"})
	e.publishConfirmed("", q, rmq.Publishing{Expiration: "60000", Body: []byte("m"),
		Headers: rmq.Table{"zz": int32(1), "Mid": "m", "app": "a", "b": true}})
	must(t, e.get(e.ch, q, false).Reject(false))
	testutil.Eventually(t, 5*time.Second, func() bool { return e.count("dlq-order") == 1 }, "the dead-lettered copy")

	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(1, &amqp.BasicGet{Queue: "dlq-order", NoAck: true})
	r.Expect((*amqp.BasicGetOk)(nil))
	f, _, err := r.Next()
	if err != nil || f.Type != amqp.FrameHeader {
		t.Fatalf("want the content header, got %v %v", f, err)
	}
	h, err := amqp.ParseContentHeader(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	v, err := amqp.ScanProperties(h.Props)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := amqp.RawFields(v.Headers)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var death []byte
	for _, fl := range fields {
		names = append(names, fl.Name)
		if fl.Name == "x-death" {
			death = fl.Value
		}
	}
	// x-last-death-* are RabbitMQ 3.13's; 3.10 writes the rest.
	want := []string{"Mid", "app", "b", "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}
	if testutil.ExternalURL() == "" {
		want = append(want, "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")
	}
	want = append(want, "zz")
	if !slices.Equal(names, want) {
		t.Fatalf("header order %v\nwant %v", names, want)
	}
	// The array's first element: 'F', then the entry table.
	entry, err := amqp.RawFields(death[4+1+4:])
	if err != nil {
		t.Fatal(err)
	}
	var en []string
	for _, fl := range entry {
		en = append(en, fl.Name)
	}
	if w := []string{"count", "reason", "queue", "time", "exchange", "routing-keys", "original-expiration"}; !slices.Equal(en, w) {
		t.Fatalf("x-death entry order %v\nwant %v", en, w)
	}
}

// A queue of max length 0 (drop-head) still hands a message to a consumer
// that is ready for it, as RabbitMQ's deliver_or_enqueue does; with no
// consumer the message is dead-lettered (maxlen) at once.
func TestMaxLengthZero(t *testing.T) { forEachType(t, testMaxLengthZero) }

func testMaxLengthZero(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	dlxSetup(t, e, "dlx-len0", "dlq-len0")
	q := e.typedQueue(qt, "len0-q", rmq.Table{"x-max-length": int32(0), "x-dead-letter-exchange": "dlx-len0"})
	ch := e.channel(e.conn)
	ds, err := ch.Consume(q, "len0", false, false, false, false, nil)
	must(t, err)
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("live")})
	d := recv(t, ds)
	if string(d.Body) != "live" {
		t.Fatalf("got %q", d.Body)
	}
	must(t, d.Ack(false))
	must(t, ch.Cancel("len0", false))
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("nobody")})
	dead := e.get(e.ch, "dlq-len0", true)
	if string(dead.Body) != "nobody" || deathOf(t, dead)["reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q %v", dead.Body, dead.Headers)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d in a queue of max length 0", n)
	}
}
