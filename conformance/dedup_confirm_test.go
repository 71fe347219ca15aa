package conformance

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// x-deduplication-confirm (railmq's own, docs/deduplication.md): a
// duplicate on a deduplicating queue or exchange declared with "ack", or
// published with the header x-deduplication-confirm: ack, is confirmed
// with basic.ack, the original being stored; without it the
// rabbitmq-message-deduplication plugin's answer stands. The plugin is
// not part of RabbitMQ 3.10.8 here, so its answers come from the
// sources: a queue-level duplicate is nacked (test/queue_SUITE.erl
// deduplicate_message_confirm: wait_for_confirms false for the second
// and third publish). How, by version: the plugin's is_duplicate answers
// {true, :reject} up to 0.6.4, which RabbitMQ 3.8-3.13 nacks
// (rabbit_amqqueue_process v3.10.0 maybe_deliver_or_enqueue: "{true,
// reject} -> Drop publish and nack to publisher"); from 0.7.0 it answers
// true, which RabbitMQ 4.1 dead-letters (reason maxlen) and nacks
// (v4.1.0, the same function); before RabbitMQ 3.8 no confirm came at
// all (the plugin's issue #21, "clients hang"; rabbitmq-server PR #1741).
// An exchange-level duplicate routes nowhere and is acked as unroutable
// (the plugin's author in noxdafox/rabbitmq-message-deduplication issue
// #67).

// dedupPub publishes on ch (in confirm mode) with x-deduplication-header
// id and the extra headers, and reports the broker's ack (true) or nack
// (false).
func dedupPub(t *testing.T, ch *rmq.Channel, ex, key string, mandatory bool, id string, extra rmq.Table) bool {
	t.Helper()
	h := rmq.Table{"x-deduplication-header": id}
	for k, v := range extra {
		h[k] = v
	}
	dc, err := ch.PublishWithDeferredConfirm(ex, key, mandatory, false, rmq.Publishing{Headers: h, DeliveryMode: rmq.Persistent, Body: []byte(id)})
	must(t, err)
	return dc.Wait()
}

// confirmChannel opens a channel in confirm mode on c.
func confirmChannel(t *testing.T, c *rmq.Connection) *rmq.Channel {
	t.Helper()
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	return ch
}

var ackHeader = rmq.Table{"x-deduplication-confirm": "ack"}

// A deduplicating queue declared with x-deduplication-confirm ack acks a
// duplicate and keeps one copy; without it (or with nack) the duplicate
// is nacked, as the plugin has RabbitMQ answer. The message's header
// wins over the queue's argument, both ways.
func TestDedupConfirmAckQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	ack := dedupQueue(e, "dca-ack", rmq.Table{"x-deduplication-confirm": "ack"})
	def := dedupQueue(e, "dca-default", nil)
	nack := dedupQueue(e, "dca-nack", rmq.Table{"x-deduplication-confirm": "nack"})
	ch := confirmChannel(t, e.conn)
	for _, q := range []string{ack, def, nack} {
		if !dedupPub(t, ch, "", q, false, "a", nil) {
			t.Fatalf("%s: first publish nacked", q)
		}
	}
	for i := range 3 {
		if !dedupPub(t, ch, "", ack, false, "a", nil) {
			t.Fatalf("retry %d on %s nacked, want ack", i, ack)
		}
		if dedupPub(t, ch, "", def, false, "a", nil) {
			t.Fatalf("retry %d on %s acked, want the plugin's nack", i, def)
		}
		if dedupPub(t, ch, "", nack, false, "a", nil) {
			t.Fatalf("retry %d on %s acked, want nack", i, nack)
		}
	}
	// The header, on a queue without the argument and against it.
	if !dedupPub(t, ch, "", def, false, "a", ackHeader) {
		t.Fatal("retry with header x-deduplication-confirm ack nacked")
	}
	if dedupPub(t, ch, "", ack, false, "a", rmq.Table{"x-deduplication-confirm": "nack"}) {
		t.Fatal("retry with header x-deduplication-confirm nack acked")
	}
	// A header value that is neither: the queue's setting applies.
	if !dedupPub(t, ch, "", ack, false, "a", rmq.Table{"x-deduplication-confirm": "maybe"}) {
		t.Fatal("retry with a bad header value on an ack queue nacked")
	}
	// A new id is taken as ever.
	if !dedupPub(t, ch, "", ack, false, "b", nil) {
		t.Fatal("a new id nacked")
	}
	e.waitCount(ack, 2)
	e.waitCount(def, 1)
	e.waitCount(nack, 1)
	// The copy kept is the original.
	if d := e.get(e.ch, ack, true); string(d.Body) != "a" || d.Headers["x-deduplication-confirm"] != nil {
		t.Fatalf("kept %q %v, want the original", d.Body, d.Headers)
	}
}

// A deduplication exchange declared with x-deduplication-confirm ack
// acks a duplicate as the original's retry: not returned to a mandatory
// publisher and not sent to the alternate exchange (by default it is
// unroutable: acked after either). With nack it is nacked. The header
// asks the same of a default exchange.
func TestDedupConfirmAckExchange(t *testing.T) {
	e := setup(t, broker.Options{})
	must(t, e.ch.ExchangeDeclare("dcx-ae", "fanout", false, false, false, false, nil))
	ae := e.queue("dcx-ae-q", nil)
	must(t, e.ch.QueueBind(ae, "", "dcx-ae", false, nil))
	qAck := dedupExchange(e, "dcx-ack", false, rmq.Table{"x-cache-size": int32(10), "x-deduplication-confirm": "ack", "alternate-exchange": "dcx-ae"})
	qDef := dedupExchange(e, "dcx-def", false, rmq.Table{"x-cache-size": int32(10)})
	qNack := dedupExchange(e, "dcx-nack", false, rmq.Table{"x-cache-size": int32(10), "x-deduplication-confirm": "nack"})
	ch := confirmChannel(t, e.conn)
	returns := ch.NotifyReturn(make(chan rmq.Return, 16))
	noReturn := func(what string) {
		t.Helper()
		select {
		case r := <-returns:
			t.Fatalf("%s: returned %d %s", what, r.ReplyCode, r.ReplyText)
		default:
		}
	}
	for _, x := range []string{"dcx-ack", "dcx-def", "dcx-nack"} {
		if !dedupPub(t, ch, x, "", true, "a", nil) {
			t.Fatalf("%s: first publish nacked", x)
		}
	}
	noReturn("first publishes")
	for i := range 3 {
		if !dedupPub(t, ch, "dcx-ack", "", true, "a", nil) {
			t.Fatalf("retry %d on dcx-ack nacked", i)
		}
		noReturn("a retry on dcx-ack")
		if dedupPub(t, ch, "dcx-nack", "", false, "a", nil) {
			t.Fatalf("retry %d on dcx-nack acked", i)
		}
	}
	// The default: unroutable, returned when mandatory, then acked.
	if !dedupPub(t, ch, "dcx-def", "", true, "a", nil) {
		t.Fatal("default exchange: duplicate nacked")
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 {
			t.Fatalf("returned %d %s, want 312 NO_ROUTE", r.ReplyCode, r.ReplyText)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("default exchange: mandatory duplicate not returned")
	}
	// The header makes it the original's retry there too.
	if !dedupPub(t, ch, "dcx-def", "", true, "a", ackHeader) {
		t.Fatal("default exchange: duplicate with header ack nacked")
	}
	noReturn("a retry with header ack")
	e.waitCount(qAck, 1)
	e.waitCount(qDef, 1)
	e.waitCount(qNack, 1)
	e.waitCount(ae, 0)
}

// x-deduplication-confirm takes "ack" or "nack" only: anything else is
// refused at declare with 406 and a text that names the argument, on a
// classic queue, a quorum queue and a deduplication exchange; a
// redeclare with another value is refused as inequivalent.
func TestDedupConfirmArguments(t *testing.T) {
	e := setup(t, broker.Options{})
	refused := func(text string, declare func(ch *rmq.Channel) error) {
		t.Helper()
		ch := e.channel(e.conn)
		expectErr(t, declare(ch), 406, text)
	}
	refused("PRECONDITION_FAILED - invalid arg 'x-deduplication-confirm' for queue 'dcargs' in vhost '/': expected 'ack' or 'nack', got the value 'maybe' of type 'longstr'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs", false, false, false, false, rmq.Table{"x-message-deduplication": true, "x-deduplication-confirm": "maybe"})
			return err
		})
	refused("PRECONDITION_FAILED - invalid arg 'x-deduplication-confirm' for queue 'dcargs' in vhost '/': expected 'ack' or 'nack', got the value '1' of type 'signedint'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs", false, false, false, false, rmq.Table{"x-deduplication-confirm": int32(1)})
			return err
		})
	refused("PRECONDITION_FAILED - invalid arg 'x-deduplication-confirm' for queue 'dcargs-qq' in vhost '/': expected 'ack' or 'nack', got the value 'ACK' of type 'longstr'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs-qq", true, false, false, false, rmq.Table{"x-queue-type": "quorum", "x-deduplication-confirm": "ACK"})
			return err
		})
	refused("PRECONDITION_FAILED - invalid arg 'x-deduplication-confirm' for exchange 'dcargs-x' in vhost '/': expected 'ack' or 'nack', got the value 'yes' of type 'longstr'",
		func(ch *rmq.Channel) error {
			return ch.ExchangeDeclare("dcargs-x", "x-message-deduplication", false, false, false, false,
				rmq.Table{"x-cache-size": int32(5), "x-deduplication-confirm": "yes"})
		})
	// Redeclares.
	dedupQueue(e, "dcargs-ok", rmq.Table{"x-deduplication-confirm": "ack"})
	dedupQueue(e, "dcargs-ok", rmq.Table{"x-deduplication-confirm": "ack"}) // the same: fine
	refused("PRECONDITION_FAILED - inequivalent arg 'x-deduplication-confirm' for queue 'dcargs-ok' in vhost '/': received 'nack' but current is 'ack'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs-ok", false, false, false, false, rmq.Table{"x-message-deduplication": true, "x-deduplication-confirm": "nack"})
			return err
		})
	refused("PRECONDITION_FAILED - inequivalent arg 'x-deduplication-confirm' for queue 'dcargs-ok' in vhost '/': received none but current is the value 'ack' of type 'longstr'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs-ok", false, false, false, false, rmq.Table{"x-message-deduplication": true})
			return err
		})
	args := rmq.Table{"x-cache-size": int32(5), "x-deduplication-confirm": "ack"}
	must(t, e.ch.ExchangeDeclare("dcargs-x", "x-message-deduplication", false, false, false, false, args))
	must(t, e.ch.ExchangeDeclare("dcargs-x", "x-message-deduplication", false, false, false, false, args))
	refused("PRECONDITION_FAILED - inequivalent arg 'x-deduplication-confirm' for exchange 'dcargs-x' in vhost '/': received 'nack' but current is 'ack'",
		func(ch *rmq.Channel) error {
			return ch.ExchangeDeclare("dcargs-x", "x-message-deduplication", false, false, false, false,
				rmq.Table{"x-cache-size": int32(5), "x-deduplication-confirm": "nack"})
		})
	// A quorum queue takes the argument.
	_, err := e.ch.QueueDeclare("dcargs-qq", true, false, false, false,
		rmq.Table{"x-queue-type": "quorum", "x-message-deduplication": true, "x-deduplication-confirm": "ack"})
	must(t, err)
	refused("PRECONDITION_FAILED - inequivalent arg 'x-deduplication-confirm' for queue 'dcargs-qq' in vhost '/': received 'nack' but current is 'ack'",
		func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("dcargs-qq", true, false, false, false,
				rmq.Table{"x-queue-type": "quorum", "x-message-deduplication": true, "x-deduplication-confirm": "nack"})
			return err
		})
}

// The window survives a restart: a durable deduplicating queue's ids
// come back with its stored messages, a durable deduplication exchange's
// from its stored cache; a retry after the restart of a message
// confirmed before it is acked (ack mode) or nacked (the default), and
// not stored again.
func TestDedupConfirmRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	_, err := ch.QueueDeclare("dcr-ack", true, false, false, false, rmq.Table{"x-message-deduplication": true, "x-deduplication-confirm": "ack"})
	must(t, err)
	_, err = ch.QueueDeclare("dcr-def", true, false, false, false, rmq.Table{"x-message-deduplication": true})
	must(t, err)
	must(t, ch.ExchangeDeclare("dcr-x", "x-message-deduplication", true, false, false, false,
		rmq.Table{"x-cache-size": int32(100), "x-deduplication-confirm": "ack"}))
	_, err = ch.QueueDeclare("dcr-x-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dcr-x-q", "", "dcr-x", false, nil))
	must(t, ch.Confirm(false))
	for _, p := range [][2]string{{"", "dcr-ack"}, {"", "dcr-def"}, {"dcr-x", ""}} {
		if !dedupPub(t, ch, p[0], p[1], false, "a", nil) {
			t.Fatalf("%v: first publish nacked", p)
		}
	}
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	must(t, ch.Confirm(false))
	if !dedupPub(t, ch, "", "dcr-ack", false, "a", nil) {
		t.Fatal("retry on the ack queue after a restart nacked")
	}
	if dedupPub(t, ch, "", "dcr-def", false, "a", nil) {
		t.Fatal("retry on the default queue after a restart acked: the id was forgotten")
	}
	returns := ch.NotifyReturn(make(chan rmq.Return, 1))
	if !dedupPub(t, ch, "dcr-x", "", true, "a", nil) {
		t.Fatal("retry on the ack exchange after a restart nacked")
	}
	select {
	case r := <-returns:
		t.Fatalf("retry on the ack exchange returned %d: the id was forgotten", r.ReplyCode)
	default:
	}
	for q, want := range map[string]int{"dcr-ack": 1, "dcr-def": 1, "dcr-x-q": 1} {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		must(t, err)
		if st.Messages != want {
			t.Fatalf("%s holds %d messages, want %d", q, st.Messages, want)
		}
	}
}

// Duplicates dropped are counted: per queue and per deduplication
// exchange in Prometheus (railmq_queue_messages_deduplicated_total,
// railmq_exchange_messages_deduplicated_total; the queue's also summed
// in /metrics) and in the management API's queue and exchange objects
// (messages_deduplicated), single and listed.
func TestDedupConfirmMetrics(t *testing.T) {
	e := setup(t, broker.Options{})
	hs := httptest.NewServer(e.b.PrometheusHandler())
	t.Cleanup(hs.Close)
	a := newAPI(t, e.b)
	q := dedupQueue(e, "dcm-q", rmq.Table{"x-deduplication-confirm": "ack"})
	qx := dedupExchange(e, "dcm-x", false, rmq.Table{"x-cache-size": int32(10)})
	ch := confirmChannel(t, e.conn)
	for range 4 { // 1 stored, 3 dropped
		dedupPub(t, ch, "", q, false, "a", nil)
	}
	for range 3 { // 1 routed, 2 dropped
		dedupPub(t, ch, "dcm-x", "", false, "a", nil)
	}
	e.waitCount(q, 1)
	e.waitCount(qx, 1)
	want := map[string]float64{
		`railmq_queue_messages_deduplicated_total{queue="dcm-q",vhost="/"}`:       3,
		`railmq_queue_messages_deduplicated_total{queue="dcm-x-q",vhost="/"}`:     0,
		`railmq_exchange_messages_deduplicated_total{exchange="dcm-x",vhost="/"}`: 2,
	}
	po := getMetrics(t, hs.URL+"/metrics/per-object")
	for s, v := range want {
		if got, ok := po.series[s]; !ok || got != v {
			t.Errorf("/metrics/per-object: %s = %v (present %v), want %v", s, got, ok, v)
		}
	}
	if typ := po.types["railmq_queue_messages_deduplicated_total"]; typ != "counter" {
		t.Errorf("# TYPE railmq_queue_messages_deduplicated_total %s, want counter", typ)
	}
	if got := getMetrics(t, hs.URL+"/metrics").series["railmq_queue_messages_deduplicated_total"]; got != 3 {
		t.Errorf("/metrics: railmq_queue_messages_deduplicated_total = %v, want 3", got)
	}
	var qo, xo map[string]any
	a.call("GET", "/api/queues/%2F/dcm-q", "guest", "guest", nil, &qo)
	a.call("GET", "/api/exchanges/%2F/dcm-x", "guest", "guest", nil, &xo)
	if qo["messages_deduplicated"] != 3.0 || xo["messages_deduplicated"] != 2.0 {
		t.Fatalf("messages_deduplicated: queue %v, exchange %v; want 3, 2", qo["messages_deduplicated"], xo["messages_deduplicated"])
	}
	var list []map[string]any
	a.call("GET", "/api/queues/%2F", "guest", "guest", nil, &list)
	seen := map[string]any{}
	for _, o := range list {
		v, ok := o["messages_deduplicated"]
		seen[o["name"].(string)] = v
		if !ok {
			seen[o["name"].(string)] = "absent"
		}
	}
	if seen["dcm-q"] != 3.0 || seen["dcm-x-q"] != "absent" {
		b, _ := json.Marshal(seen)
		t.Fatalf("listed messages_deduplicated %s; want 3 for dcm-q, absent for a queue that does not deduplicate", b)
	}
}

// pika (Debian's python3-pika, the client of the plugin's most reported
// issue) with confirm_delivery: basic_publish raises NackError when the
// broker nacks. Its retry of a message already in the queue raises on a
// plain deduplicating queue (the plugin's answer) and does not on one
// declared with x-deduplication-confirm ack, nor with the header.
func TestDedupConfirmPika(t *testing.T) {
	testutil.InProcess(t)
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import pika").CombinedOutput(); err != nil {
		if os.Getenv("RAILMQ_REQUIRE_TOOLS") != "" {
			t.Fatalf("pika: %v %s", err, out)
		}
		t.Skipf("no pika for %s (apt-get install python3-pika): %s", py, out)
	}
	b := testutil.Start(t, broker.Options{})
	const script = `
import sys, pika
from pika.exceptions import NackError
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare("pk-ack", durable=True, arguments={"x-message-deduplication": True, "x-deduplication-confirm": "ack"})
ch.queue_declare("pk-default", durable=True, arguments={"x-message-deduplication": True})
def publish(q, headers):
    try:
        ch.basic_publish("", q, b"order-1", pika.BasicProperties(delivery_mode=2, headers=headers))
        return "acked"
    except NackError:
        return "nacked"
print("ack-first", publish("pk-ack", {"x-deduplication-header": "order-1"}))
print("ack-retry", publish("pk-ack", {"x-deduplication-header": "order-1"}))
print("default-first", publish("pk-default", {"x-deduplication-header": "order-1"}))
print("default-retry", publish("pk-default", {"x-deduplication-header": "order-1"}))
print("header-retry", publish("pk-default", {"x-deduplication-header": "order-1", "x-deduplication-confirm": "ack"}))
print("ack-count", ch.queue_declare("pk-ack", passive=True).method.message_count)
print("default-count", ch.queue_declare("pk-default", passive=True).method.message_count)
conn.close()
`
	out, err := exec.Command(py, "-c", script, b.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("pika: %v\n%s", err, out)
	}
	want := "ack-first acked\nack-retry acked\ndefault-first acked\ndefault-retry nacked\nheader-retry acked\nack-count 1\ndefault-count 1\n"
	if got := string(out); got != want {
		t.Fatalf("pika printed\n%s\nwant\n%s", got, want)
	}
}
