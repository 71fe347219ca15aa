package conformance

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"go.uber.org/zap/zapcore"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Leases and retries a worker asks for with a publish on its channel
// (channel/lease.go, docs/leases.md): amq.railmq.lease moves a delivery's
// ack deadline, amq.railmq.retry returns it to be redelivered after
// x-delay. railmq's own: RabbitMQ has neither exchange, so a publish to
// amq.railmq.lease there closes the channel with 404 NOT_FOUND - no
// exchange 'amq.railmq.lease' in vhost '/' (rabbit_channel's basic.publish
// looks the exchange up with rabbit_exchange:lookup_or_die, v4.1.0; the
// local RabbitMQ 3.10.8 was not answering when these tests were written),
// and railmq answered the same before it had them. These tests run
// in-process only. The consumer timeout they move is
// RabbitMQ's (x-consumer-timeout; a classic queue's closes the channel
// with 406, TestConsumerTimeout).

const (
	leaseX = "amq.railmq.lease"
	retryX = "amq.railmq.retry"
)

func leaseEnv(t *testing.T) *env {
	t.Helper()
	testutil.InProcess(t)
	return setup(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
}

// leasePub publishes to ex (the lease or retry exchange) on ch, in
// confirm mode, with routing key key, and reports the broker's answer:
// true for basic.ack, false for basic.nack.
func leasePub(t *testing.T, ch *rmq.Channel, ex, key string, hdr rmq.Table) bool {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirm(ex, key, false, false, rmq.Publishing{Headers: hdr, Body: []byte("ignored")})
	if err != nil {
		t.Fatalf("publish to %s: %v", ex, err)
	}
	select {
	case <-dc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("no confirm for the publish to %s %q", ex, key)
	}
	return dc.Acked()
}

// leaseMetrics scrapes the broker's Prometheus metrics.
func leaseMetrics(t *testing.T, e *env) scrape {
	t.Helper()
	hs := httptest.NewServer(e.b.PrometheusHandler())
	defer hs.Close()
	return getMetrics(t, hs.URL+"/metrics")
}

func tagKey(d rmq.Delivery) string { return strconv.FormatUint(d.DeliveryTag, 10) }

// consumerOn opens a confirm-mode channel on e.conn with a manual-ack
// consumer of q; it returns the channel, its deliveries and its close
// notification.
func (e *env) consumerOn(q string, args rmq.Table) (*rmq.Channel, <-chan rmq.Delivery, chan *rmq.Error) {
	e.t.Helper()
	ch := e.channel(e.conn)
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	must(e.t, ch.Confirm(false))
	ds, err := ch.Consume(q, "", false, false, false, false, args)
	must(e.t, err)
	return ch, ds, closed
}

// stillOpen fails if the channel was closed.
func stillOpen(t *testing.T, closed <-chan *rmq.Error, what string) {
	t.Helper()
	select {
	case err := <-closed:
		t.Fatalf("%s: channel closed: %v", what, err)
	default:
	}
}

// A lease extended twice keeps a delivery past its consumer timeout; the
// same delivery without one is timed out (the channel closed, the message
// back in its queue).
func TestLeaseExtendsDeadline(t *testing.T) {
	e := leaseEnv(t)
	q := e.queue("lease-extend", rmq.Table{"x-consumer-timeout": int32(1000)})
	ch, ds, closed := e.consumerOn(q, nil)
	e.publish("", q, "job")
	d := recv(t, ds)
	start := time.Now()
	if !leasePub(t, ch, leaseX, tagKey(d), rmq.Table{"x-lease-ms": int32(5000)}) {
		t.Fatal("lease nacked")
	}
	time.Sleep(time.Until(start.Add(2 * time.Second))) // past the 1 s timeout: time is what is tested
	stillOpen(t, closed, "2 s after a delivery with a 1 s timeout, leased for 5 s")
	// The second lease, as a string of digits (what a client without
	// integer headers sends).
	if !leasePub(t, ch, leaseX, tagKey(d), rmq.Table{"x-lease-ms": "5000"}) {
		t.Fatal("second lease nacked")
	}
	// Past the first lease's 5 s; each step leaves 3 s for a loaded
	// machine to send a lease late.
	time.Sleep(time.Until(start.Add(6 * time.Second)))
	stillOpen(t, closed, "6 s after the delivery, leased again for 5 s at 2 s")
	must(t, d.Ack(false))
	stillOpen(t, closed, "acked")
	e.waitCount(q, 0)

	// Without a lease the same delivery times out.
	e.publish("", q, "job2")
	ch2, ds2, closed2 := e.consumerOn(q, nil)
	d2 := recv(t, ds2)
	at := time.Now()
	err := closeErr(t, closed2, "timeout without a lease")
	expectErr(t, err, 406, "")
	if !strings.Contains(err.Reason, "Timeout value used: 1000 ms.") {
		t.Fatalf("text %q", err.Reason)
	}
	if w := time.Since(at); w > 10*time.Second {
		t.Fatalf("timed out after %v", w)
	}
	_ = ch2
	got := e.get(e.ch, q, true)
	if !got.Redelivered || string(got.Body) != string(d2.Body) {
		t.Fatalf("after the timeout: %q redelivered=%v", got.Body, got.Redelivered)
	}
	_ = ch.Close()
}

// Without x-lease-ms a lease is the delivery's consumer timeout again,
// from now; the management API shows each unacked delivery's deadline
// (pending_acks on GET /api/channels/{name}) and whether it was leased,
// and the lease counters move (Prometheus, /api/overview).
func TestLeaseDefaultAndAPI(t *testing.T) {
	e := leaseEnv(t)
	q := e.queue("lease-default", rmq.Table{"x-consumer-timeout": int32(4000)})
	ch, ds, closed := e.consumerOn(q, nil)
	e.publish("", q, "job")
	d := recv(t, ds)
	a := newAPI(t, e.b)
	var chans []map[string]any
	testutil.Eventually(t, 5*time.Second, func() bool {
		a.call("GET", "/api/channels", "guest", "guest", nil, &chans)
		for _, c := range chans {
			if c["messages_unacknowledged"] == float64(1) {
				return true
			}
		}
		return false
	}, "the consumer's channel listed")
	var name string
	for _, c := range chans {
		if c["messages_unacknowledged"] == float64(1) {
			name = c["name"].(string)
		}
	}
	pending := func() map[string]any {
		var c map[string]any
		if code := a.call("GET", "/api/channels/"+url.PathEscape(name), "guest", "guest", nil, &c); code != 200 {
			t.Fatalf("GET channel: %d", code)
		}
		ps, _ := c["pending_acks"].([]any)
		if len(ps) != 1 {
			t.Fatalf("pending_acks %v, want one", c["pending_acks"])
		}
		return ps[0].(map[string]any)
	}
	p := pending()
	delivered, deadline := int64(p["delivered_at"].(float64)), int64(p["deadline"].(float64))
	if p["delivery_tag"] != float64(d.DeliveryTag) || p["queue"] != q || p["leased"] != false || p["consumer_tag"] != d.ConsumerTag {
		t.Fatalf("pending_acks entry %v", p)
	}
	if deadline-delivered != 4000 {
		t.Fatalf("deadline %d - delivered_at %d = %d ms, want the 4000 ms timeout", deadline, delivered, deadline-delivered)
	}
	time.Sleep(time.Second) // so that "now + timeout" differs from the first deadline
	before := time.Now().UnixMilli()
	if !leasePub(t, ch, leaseX, tagKey(d), nil) {
		t.Fatal("default lease nacked")
	}
	after := time.Now().UnixMilli()
	p = pending()
	deadline = int64(p["deadline"].(float64))
	if p["leased"] != true || deadline < before+4000 || deadline > after+4000 {
		t.Fatalf("after a default lease between %d and %d: %v, want leased, deadline 4000 ms after the lease", before, after, p)
	}
	// The counters.
	var ov map[string]any
	a.call("GET", "/api/overview", "guest", "guest", nil, &ov)
	if ms := ov["message_stats"].(map[string]any); ms["lease_extended"] != float64(1) {
		t.Fatalf("overview message_stats %v, want lease_extended 1", ms)
	}
	must(t, d.Ack(false))
	stillOpen(t, closed, "acked")
	if leasePub(t, ch, leaseX, tagKey(d), nil) {
		t.Fatal("lease on an acked tag acked")
	}
	po := leaseMetrics(t, e)
	if v := po.series["railmq_global_lease_extensions_total"]; v != 1 {
		t.Fatalf("railmq_global_lease_extensions_total %v, want 1", v)
	}
	if v := po.series["railmq_global_lease_refused_total"]; v != 1 {
		t.Fatalf("railmq_global_lease_refused_total %v, want 1", v)
	}
}

// A retry returns the delivery to its queue, held for x-delay, then
// redelivered flagged redelivered; the retry is confirmed.
func TestRetryAfterDelay(t *testing.T) {
	e := leaseEnv(t)
	q := e.queue("lease-retry", nil)
	ch, ds, closed := e.consumerOn(q, nil)
	e.publish("", q, "job")
	d := recv(t, ds)
	if d.Redelivered {
		t.Fatal("first delivery flagged redelivered")
	}
	at := time.Now()
	if !leasePub(t, ch, retryX, tagKey(d), rmq.Table{"x-delay": int64(1500)}) {
		t.Fatal("retry nacked")
	}
	// Settled by the retry: its tag is no longer ackable (a basic.ack of it
	// would close the channel, as any unknown tag; a lease is nacked).
	if leasePub(t, ch, leaseX, tagKey(d), nil) {
		t.Fatal("lease on a retried tag acked")
	}
	r := recv(t, ds)
	if w := time.Since(at); w < 1500*time.Millisecond {
		t.Fatalf("redelivered %v after the retry, want x-delay 1500 ms", w)
	}
	if !r.Redelivered || string(r.Body) != "job" {
		t.Fatalf("redelivery %q redelivered=%v", r.Body, r.Redelivered)
	}
	must(t, r.Ack(false))
	stillOpen(t, closed, "after the retry")
	e.waitCount(q, 0)
	po := leaseMetrics(t, e)
	if v := po.series["railmq_global_retries_scheduled_total"]; v != 1 {
		t.Fatalf("railmq_global_retries_scheduled_total %v, want 1", v)
	}
}

// Refusals: an unknown tag, a settled one, a routing key that is no tag,
// a malformed header, a retry without x-delay, a tag of another channel:
// each is nacked under confirms, the channel stays open and its other
// deliveries stay ackable. Without confirms the same publishes change
// nothing and close nothing. mandatory gets no basic.return: the publish
// is consumed.
func TestLeaseRefusals(t *testing.T) {
	b, logs := observed(t, broker.Options{})
	e := &env{t: t, b: b}
	e.conn = dial(t, b.URL)
	e.ch = e.channel(e.conn)
	q := e.queue("lease-refuse", nil)
	ch, ds, closed := e.consumerOn(q, nil)
	returns := ch.NotifyReturn(make(chan rmq.Return, 8))
	for i := range 3 {
		e.publish("", q, "m"+strconv.Itoa(i))
	}
	d1, d2, d3 := recv(t, ds), recv(t, ds), recv(t, ds)
	must(t, d1.Ack(false))
	// Another channel with a delivery of its own: tag 1 there.
	q2 := e.queue("lease-refuse-2", nil)
	e.publish("", q2, "other")
	och, ods, oclosed := e.consumerOn(q2, nil)
	od := recv(t, ods)
	for _, c := range []struct {
		what, ex, key string
		hdr           rmq.Table
	}{
		{"unknown tag", leaseX, "99", nil},
		{"settled tag", leaseX, tagKey(d1), nil},
		{"garbage key", leaseX, "abc", nil},
		{"empty key", retryX, "", rmq.Table{"x-delay": int32(10)}},
		{"signed key", leaseX, "+2", nil},
		{"tag 0", leaseX, "0", nil},
		{"x-lease-ms not a number", leaseX, tagKey(d2), rmq.Table{"x-lease-ms": "soon"}},
		{"x-lease-ms negative", leaseX, tagKey(d2), rmq.Table{"x-lease-ms": int32(-5)}},
		{"x-lease-ms a float", leaseX, tagKey(d2), rmq.Table{"x-lease-ms": 1.5}},
		{"retry without x-delay", retryX, tagKey(d2), nil},
		{"retry of a settled tag", retryX, tagKey(d1), rmq.Table{"x-delay": int32(10)}},
		{"x-delay too large", retryX, tagKey(d2), rmq.Table{"x-delay": int64(1) << 50}},
	} {
		if leasePub(t, ch, c.ex, c.key, c.hdr) {
			t.Fatalf("%s: acked, want nack", c.what)
		}
		stillOpen(t, closed, c.what)
	}
	// Each is logged, at warn, as RabbitMQ words a channel error.
	line := awaitLine(t, logs, `^Lease refused on connection <0\.\d+\.0> \(127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+, vhost: '/', user: 'guest'\), channel \d+:\noperation basic\.publish to exchange 'amq\.railmq\.lease' refused: unknown delivery tag 99$`)
	if f := fieldsOf(line); line.Level != zapcore.WarnLevel || f["reason"] != "unknown delivery tag 99" || f["routing_key"] != "99" || f["user"] != "guest" {
		t.Fatalf("log line %v %v", line.Level, f)
	}
	awaitLine(t, logs, `refused: invalid x-lease-ms header: expected an integer of milliseconds$`)
	awaitLine(t, logs, `refused: invalid delivery tag 'abc' in the routing key$`)
	awaitLine(t, logs, `refused: no x-delay header$`)
	// mandatory: consumed, never returned.
	dc, err := ch.PublishWithDeferredConfirm(leaseX, tagKey(d2), true /* mandatory */, false, rmq.Publishing{})
	must(t, err)
	<-dc.Done()
	if !dc.Acked() {
		t.Fatal("mandatory lease nacked")
	}
	dc, err = ch.PublishWithDeferredConfirm(leaseX, "12345", true /* mandatory */, false, rmq.Publishing{})
	must(t, err)
	<-dc.Done()
	if dc.Acked() {
		t.Fatal("mandatory lease of an unknown tag acked")
	}
	select {
	case r := <-returns:
		t.Fatalf("basic.return %d %s for a lease publish", r.ReplyCode, r.ReplyText)
	default:
	}
	// Tag 1 of the other channel is not this channel's: this channel's tag
	// 1 is acked, so the lease is refused; the other channel's delivery
	// keeps its own deadline (no timeout here: null) unleased.
	if od.DeliveryTag != d1.DeliveryTag {
		t.Fatalf("tags %d and %d: want the same number on both channels", od.DeliveryTag, d1.DeliveryTag)
	}
	if leasePub(t, ch, leaseX, tagKey(od), nil) {
		t.Fatal("lease of another channel's tag acked")
	}
	// The other deliveries are still this worker's.
	must(t, d2.Ack(false))
	must(t, d3.Ack(false))
	must(t, od.Ack(false))
	e.waitCount(q, 0)
	e.waitCount(q2, 0)
	if _, err := ch.QueueDeclarePassive(q, false, false, false, false, nil); err != nil {
		t.Fatalf("channel after the refusals: %v", err)
	}
	stillOpen(t, closed, "end")
	stillOpen(t, oclosed, "other channel")
	_ = och

	// Without confirms: nothing answered, nothing closed.
	plain := e.channel(e.conn)
	pclosed := plain.NotifyClose(make(chan *rmq.Error, 1))
	must(t, plain.Publish(leaseX, "7", false, false, rmq.Publishing{}))
	must(t, plain.Publish(retryX, "junk", true, false, rmq.Publishing{}))
	if _, err := plain.QueueDeclarePassive(q, false, false, false, false, nil); err != nil {
		t.Fatalf("channel without confirms after refused publishes: %v", err)
	}
	stillOpen(t, pclosed, "without confirms")
}

// The exchanges exist in every vhost, as amq.direct does, and are the
// system's: declared as they are (direct, durable) they are there; a
// client cannot delete them or bind to them, nor declare another amq.*
// name. RabbitMQ 3.10.8 answers for amq.direct: "ACCESS_REFUSED -
// deletion of system exchange 'amq.direct' in vhost '/' not allowed" and
// "ACCESS_REFUSED - exchange name 'amq.x' contains reserved prefix
// 'amq.*'" (RABBITMQ-COMPAT.md, verified); binds to amq.rabbitmq.* are
// refused with "operation not permitted on exchange".
func TestLeaseExchangesDeclared(t *testing.T) {
	e := leaseEnv(t)
	for _, x := range []string{leaseX, retryX} {
		ch := e.channel(e.conn)
		must(t, ch.ExchangeDeclarePassive(x, "direct", true, false, false, false, nil))
		must(t, ch.ExchangeDeclare(x, "direct", true, false, false, false, nil))
		err := ch.ExchangeDelete(x, false, false)
		expectErr(t, err, 403, "ACCESS_REFUSED - deletion of system exchange '"+x+"' in vhost '/' not allowed")
		ch = e.channel(e.conn)
		q := e.queue("", nil)
		err = ch.QueueBind(q, "1", x, false, nil)
		expectErr(t, err, 403, "ACCESS_REFUSED - operation not permitted on exchange '"+x+"'")
	}
	ch := e.channel(e.conn)
	err := ch.ExchangeDeclare("amq.railmq.other", "direct", true, false, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - exchange name 'amq.railmq.other' contains reserved prefix 'amq.*'")
	// A new vhost has them too; the API lists them; an export leaves
	// them out, as it does amq.direct.
	a := newAPI(t, e.b)
	if code := a.call("PUT", "/api/vhosts/lease-vh", "guest", "guest", map[string]any{}, nil); code/100 != 2 {
		t.Fatalf("PUT vhost: %d", code)
	}
	for _, vh := range []string{"%2F", "lease-vh"} {
		var xs []map[string]any
		a.call("GET", "/api/exchanges/"+vh, "guest", "guest", nil, &xs)
		found := 0
		for _, x := range xs {
			if x["name"] == leaseX || x["name"] == retryX {
				found++
				if x["type"] != "direct" || x["durable"] != true || x["internal"] != false {
					t.Fatalf("%s: %v", vh, x)
				}
			}
		}
		if found != 2 {
			t.Fatalf("vhost %s lists %d of the lease exchanges", vh, found)
		}
	}
	// An import naming them (a definitions file from a railmq export
	// edited by hand, say) leaves them as they are, as it does amq.direct.
	imp := map[string]any{"exchanges": []any{
		map[string]any{"name": leaseX, "vhost": "/", "type": "fanout", "durable": false, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
		map[string]any{"name": "amq.direct", "vhost": "/", "type": "fanout", "durable": false, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
	}}
	if code := a.call("POST", "/api/definitions", "guest", "guest", imp, nil); code/100 != 2 {
		t.Fatalf("import: %d", code)
	}
	var lx map[string]any
	a.call("GET", "/api/exchanges/%2F/"+leaseX, "guest", "guest", nil, &lx)
	if lx["type"] != "direct" || lx["durable"] != true {
		t.Fatalf("after an import naming it: %v", lx)
	}
	var defs map[string]any
	a.call("GET", "/api/definitions", "guest", "guest", nil, &defs)
	for _, x := range defs["exchanges"].([]any) {
		if n := x.(map[string]any)["name"].(string); strings.HasPrefix(n, "amq.") {
			t.Fatalf("definitions export has %s", n)
		}
	}
}

// On a quorum queue: a lease keeps a delivery past the consumer timeout
// (which there returns the message and cancels the consumer of a client
// that takes basic.cancel, as RabbitMQ 4.3's quorum queues do); a retry
// holds the return in the queue's log for x-delay, then redelivers it
// flagged redelivered with x-delivery-count 1.
func TestLeaseAndRetryQuorum(t *testing.T) {
	e := leaseEnv(t)
	const q = "lease-qq"
	_, err := e.ch.QueueDeclare(q, true, false, false, false, rmq.Table{"x-queue-type": "quorum", "x-consumer-timeout": int32(1000)})
	must(t, err)
	t.Cleanup(func() { _, _ = e.ch.QueueDelete(q, false, false, false) })
	ch, ds, closed := e.consumerOn(q, nil)
	cancels := ch.NotifyCancel(make(chan string, 1))
	e.publishConfirmed("", q, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("job")})
	d := recv(t, ds)
	start := time.Now()
	if !leasePub(t, ch, leaseX, tagKey(d), rmq.Table{"x-lease-ms": int32(3000)}) {
		t.Fatal("lease nacked")
	}
	time.Sleep(time.Until(start.Add(2 * time.Second))) // past the 1 s timeout
	select {
	case tag := <-cancels:
		t.Fatalf("consumer %s cancelled by the timeout despite the lease", tag)
	default:
	}
	stillOpen(t, closed, "leased")
	at := time.Now()
	if !leasePub(t, ch, retryX, tagKey(d), rmq.Table{"x-delay": int32(1500)}) {
		t.Fatal("retry nacked")
	}
	r := recv(t, ds)
	if w := time.Since(at); w < 1500*time.Millisecond {
		t.Fatalf("redelivered %v after the retry, want x-delay 1500 ms", w)
	}
	if !r.Redelivered || string(r.Body) != "job" || r.Headers["x-delivery-count"] != int64(1) {
		t.Fatalf("redelivery %q redelivered=%v headers %v, want x-delivery-count 1", r.Body, r.Redelivered, r.Headers)
	}
	must(t, r.Ack(false))
	stillOpen(t, closed, "acked")

	// Without a lease, the timeout returns it and cancels the consumer.
	e.publishConfirmed("", q, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("job2")})
	recv(t, ds)
	select {
	case <-cancels:
	case <-time.After(10 * time.Second):
		t.Fatal("no basic.cancel for the timed-out delivery")
	}
}

// A retry's hold survives a restart, on a durable classic queue (its
// entry holds the due time) and on a quorum queue (its log): the message
// is neither delivered early nor lost. The retry is confirmed once the
// hold is durable.
func TestRetryHeldAcrossRestart(t *testing.T) {
	for _, qt := range []struct {
		name string
		args rmq.Table
	}{{"lease-restart-classic", nil}, {"lease-restart-qq", rmq.Table{"x-queue-type": "quorum"}}} {
		t.Run(qt.name, func(t *testing.T) {
			r := newRestartable(t, broker.Options{})
			c, ch := r.dial()
			_, err := ch.QueueDeclare(qt.name, true, false, false, false, qt.args)
			must(t, err)
			publishPersistent(t, ch, "", qt.name, "job")
			ds, err := ch.Consume(qt.name, "", false, false, false, false, nil)
			must(t, err)
			d := recv(t, ds)
			const delay = 4 * time.Second
			at := time.Now()
			if !leasePub(t, ch, retryX, tagKey(d), rmq.Table{"x-delay": int32(delay / time.Millisecond)}) {
				t.Fatal("retry nacked")
			}
			c.Close()
			r.restart()
			_, ch = r.dial()
			ds, err = ch.Consume(qt.name, "", false, false, false, false, nil)
			must(t, err)
			select {
			case got := <-ds:
				if w := time.Since(at); w < delay {
					t.Fatalf("%q delivered %v after the retry, want the %v hold", got.Body, w, delay)
				}
				if string(got.Body) != "job" || !got.Redelivered {
					t.Fatalf("got %q redelivered=%v", got.Body, got.Redelivered)
				}
				must(t, got.Ack(false))
			case <-time.After(delay + 20*time.Second):
				t.Fatal("the held message was lost across the restart")
			}
		})
	}
}
