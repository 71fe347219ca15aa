package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Streams (x-queue-type stream) over AMQP 0-9-1, as RabbitMQ answers.
// Every answer quoted below was asked of RabbitMQ 3.10.8 on 2026-12-06
// with amqp091-go (and a raw socket for class and method ids); run
// with RAILMQ_TEST_URL pointing at a RabbitMQ 3.10.8 these tests pass
// there, except those marked rabbit4 (RabbitMQ 3.13+ behaviour, cited
// from the rabbitmq-server source) and better (railmq goes further).
// The source of every 3.10.8 answer is
// deps/rabbit/src/rabbit_stream_queue.erl and rabbit_amqqueue.erl at
// v3.10.8.

// stArgs is x-queue-type stream with more arguments, as pairs.
func stArgs(kv ...any) rmq.Table {
	t := rmq.Table{"x-queue-type": "stream"}
	for i := 0; i+1 < len(kv); i += 2 {
		t[kv[i].(string)] = kv[i+1]
	}
	return t
}

// stream declares a durable stream q (deleting one left by an earlier
// run against an external broker first); the test's cleanup deletes it.
func (e *env) stream(q string, args rmq.Table) {
	e.t.Helper()
	deleteQueue(e.b.URL, q)
	ch := e.channel(e.conn)
	defer ch.Close()
	ok, err := ch.QueueDeclare(q, true, false, false, false, args)
	if err != nil {
		e.t.Fatalf("declare stream %q: %v", q, err)
	}
	if ok.Name != q || ok.Messages != 0 || ok.Consumers != 0 {
		e.t.Fatalf("declare-ok %+v", ok)
	}
	e.t.Cleanup(func() { deleteQueue(e.b.URL, q) })
}

// fresh is a channel on a connection of its own, for a check whose
// error closes the connection.
func (e *env) fresh() *rmq.Channel {
	e.t.Helper()
	return openChannel(e.t, dial(e.t, e.b.URL))
}

// publishEach publishes bodies to stream q one at a time, each confirmed
// before the next is sent: each is a chunk of its own.
func (e *env) publishEach(q string, bodies ...string) {
	e.t.Helper()
	for _, b := range bodies {
		e.publishConfirmed("", q, rmq.Publishing{Body: []byte(b)})
	}
}

// bodiesN is prefix0..prefix(n-1).
func bodiesN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// streamConsume starts a consumer of stream q on a channel of its own
// with a prefetch and arguments.
func (e *env) streamConsume(q string, prefetch int, args rmq.Table) (*rmq.Channel, <-chan rmq.Delivery) {
	e.t.Helper()
	ch := e.channel(e.conn)
	must(e.t, ch.Qos(prefetch, 0, false))
	ds, err := ch.Consume(q, "", false, false, false, false, args)
	if err != nil {
		e.t.Fatalf("consume %s %v: %v", q, args, err)
	}
	return ch, ds
}

// streamOffset is a delivery's x-stream-offset header, which must be a
// long (RabbitMQ: rabbit_basic:add_header(<<"x-stream-offset">>, long, O, Msg0)).
func streamOffset(t *testing.T, d rmq.Delivery) int64 {
	t.Helper()
	v, ok := d.Headers["x-stream-offset"].(int64)
	if !ok {
		t.Fatalf("delivery %q: x-stream-offset %T(%v), want a long", d.Body, d.Headers["x-stream-offset"], d.Headers["x-stream-offset"])
	}
	return v
}

// takeAcked receives n deliveries, acking each, and returns their
// bodies and offsets.
func takeAcked(t *testing.T, ds <-chan rmq.Delivery, n int) ([]string, []int64) {
	t.Helper()
	var bodies []string
	var offs []int64
	for range n {
		d := recv(t, ds)
		bodies = append(bodies, string(d.Body))
		offs = append(offs, streamOffset(t, d))
		must(t, d.Ack(false))
	}
	return bodies, offs
}

// rabbit4 skips a test of RabbitMQ 3.13+/4.x behaviour when the suite
// runs against an external broker (the RabbitMQ 3.10.8 it is compared
// with answers otherwise: why).
func rabbit4(t *testing.T, why string) {
	t.Helper()
	if testutil.ExternalURL() != "" {
		t.Skip("RabbitMQ 3.13+ behaviour; 3.10.8: " + why)
	}
}

// better skips a test of what railmq does beyond RabbitMQ when the
// suite runs against an external broker.
func better(t *testing.T) {
	t.Helper()
	if testutil.ExternalURL() != "" {
		t.Skip("railmq goes beyond RabbitMQ here")
	}
}

// TestStreamDeclare: a stream is durable, not exclusive, not
// auto-delete, and has a name from its client.
func TestStreamDeclare(t *testing.T) {
	e := setup(t, broker.Options{})
	// RabbitMQ 3.10.8: declare-ok {Name:s Messages:0 Consumers:0}.
	e.stream("st-decl", stArgs())
	type decl struct {
		name                   string
		durable, autoDel, excl bool
		code                   int
		text                   string
	}
	for _, c := range []decl{
		// RabbitMQ 3.10.8 (rabbit_queue_type_util checks, in the order
		// auto-delete, exclusive, non-durable):
		{"st-nd", false, false, false, 406, "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'st-nd' in vhost '/'"},
		{"st-ex", true, false, true, 406, "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'st-ex' in vhost '/'"},
		{"st-ad", true, true, false, 406, "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'st-ad' in vhost '/'"},
		{"st-ndad", false, true, false, 406, "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'st-ndad' in vhost '/'"},
		{"st-ndex", false, false, true, 406, "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'st-ndex' in vhost '/'"},
		// RabbitMQ 3.10.8: capabilities server_named => false.
		{"", true, false, false, 406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue"},
		{"amq.st", true, false, false, 403, "ACCESS_REFUSED - queue name 'amq.st' contains reserved prefix 'amq.*'"},
	} {
		_, err := e.fresh().QueueDeclare(c.name, c.durable, c.autoDel, c.excl, false, stArgs())
		expectErr(t, err, c.code, c.text)
	}
	// RabbitMQ 3.10.8: the type's name is checked as given.
	_, err := e.fresh().QueueDeclare("st-upper", true, false, false, false, rmq.Table{"x-queue-type": "STREAM"})
	expectErr(t, err, 406, `PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'st-upper' in vhost '/': "unsupported queue type 'STREAM'"`)
}

// TestStreamDeclareArgs: each stream argument's checks, and the
// arguments of other queue types refused, in RabbitMQ 3.10.8's words.
func TestStreamDeclareArgs(t *testing.T) {
	e := setup(t, broker.Options{})
	const inv = "PRECONDITION_FAILED - invalid arg '%s' for queue 'st-args' in vhost '/': %s"
	const other = "PRECONDITION_FAILED - invalid arg '%s' for queue 'st-args' in vhost '/' of queue type rabbit_stream_queue"
	for _, c := range []struct {
		arg  string
		val  any
		want string // "": accepted
	}{
		{"x-max-length-bytes", int64(0), ""},
		{"x-max-length-bytes", int32(1000), ""},
		{"x-max-length-bytes", int64(-1), fmt.Sprintf(inv, "x-max-length-bytes", "{value_negative,-1}")},
		{"x-max-length-bytes", "100", fmt.Sprintf(inv, "x-max-length-bytes", `"expected integer, got longstr"`)},
		{"x-max-length-bytes", 1.5, fmt.Sprintf(inv, "x-max-length-bytes", `"expected integer, got double"`)},
		// x-max-age: a positive integer and one unit of Y M D h m s.
		{"x-max-age", "1Y", ""}, {"x-max-age", "1M", ""}, {"x-max-age", "7D", ""},
		{"x-max-age", "12h", ""}, {"x-max-age", "30m", ""}, {"x-max-age", "10s", ""},
		{"x-max-age", "1X", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "0s", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "10", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "1d", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "1H", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "1.5h", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", "1h30m", fmt.Sprintf(inv, "x-max-age", "invalid_max_age")},
		{"x-max-age", int64(10), fmt.Sprintf(inv, "x-max-age", "{unacceptable_type,long}")},
		{"x-stream-max-segment-size-bytes", int64(0), ""},
		{"x-stream-max-segment-size-bytes", int64(1000), ""},
		{"x-stream-max-segment-size-bytes", int64(-1), fmt.Sprintf(inv, "x-stream-max-segment-size-bytes", "{value_negative,-1}")},
		{"x-stream-max-segment-size-bytes", "a", fmt.Sprintf(inv, "x-stream-max-segment-size-bytes", `"expected integer, got longstr"`)},
		// ?MAX_STREAM_MAX_SEGMENT_SIZE is 3,000,000,000.
		{"x-stream-max-segment-size-bytes", int64(4_000_000_000), "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes"},
		{"x-initial-cluster-size", int64(1), ""},
		{"x-initial-cluster-size", int64(0), fmt.Sprintf(inv, "x-initial-cluster-size", "{value_zero,0}")},
		{"x-initial-cluster-size", int64(-1), fmt.Sprintf(inv, "x-initial-cluster-size", "{value_negative,-1}")},
		{"x-initial-cluster-size", "a", fmt.Sprintf(inv, "x-initial-cluster-size", `"expected integer, got longstr"`)},
		{"x-queue-leader-locator", "client-local", ""},
		{"x-queue-leader-locator", "bogus", fmt.Sprintf(inv, "x-queue-leader-locator", "invalid_queue_locator_arg")},
		{"x-bogus", "x", ""},
		{"x-max-length", int64(10), fmt.Sprintf(other, "x-max-length")},
		{"x-overflow", "reject-publish", fmt.Sprintf(other, "x-overflow")},
		{"x-dead-letter-exchange", "dlx", fmt.Sprintf(other, "x-dead-letter-exchange")},
		{"x-dead-letter-routing-key", "k", fmt.Sprintf(other, "x-dead-letter-routing-key")},
		{"x-dead-letter-strategy", "at-least-once", fmt.Sprintf(other, "x-dead-letter-strategy")},
		{"x-message-ttl", int64(1000), fmt.Sprintf(other, "x-message-ttl")},
		{"x-expires", int64(10000), fmt.Sprintf(other, "x-expires")},
		{"x-max-priority", int64(5), fmt.Sprintf(other, "x-max-priority")},
		{"x-single-active-consumer", true, fmt.Sprintf(other, "x-single-active-consumer")},
		{"x-queue-mode", "lazy", fmt.Sprintf(other, "x-queue-mode")},
		{"x-queue-version", int64(2), fmt.Sprintf(other, "x-queue-version")},
		{"x-delivery-limit", int64(3), fmt.Sprintf(other, "x-delivery-limit")},
		{"x-quorum-initial-group-size", int64(1), fmt.Sprintf(other, "x-quorum-initial-group-size")},
		{"x-max-in-memory-length", int64(3), fmt.Sprintf(other, "x-max-in-memory-length")},
		{"x-queue-master-locator", "client-local", fmt.Sprintf(other, "x-queue-master-locator")},
	} {
		deleteQueue(e.b.URL, "st-args")
		_, err := e.fresh().QueueDeclare("st-args", true, false, false, false, stArgs(c.arg, c.val))
		if c.want == "" {
			if err != nil {
				t.Fatalf("%s=%v: %v, want it accepted", c.arg, c.val, err)
			}
			continue
		}
		expectErr(t, err, 406, c.want)
	}
	deleteQueue(e.b.URL, "st-args")
}

// TestStreamDeclareMaxAgeNoDigits: an x-max-age with no leading digit is
// refused as any bad x-max-age (RabbitMQ 4.3.1+, commit 7b971eee3c "Fix
// three stream argument validation bugs": rabbit_amqqueue.erl v4.3.5
// check_max_age matches (^[0-9]+)). RabbitMQ 3.10.8 crashes on it:
// connection.close 541 "INTERNAL_ERROR", class 0 method 0.
func TestStreamDeclareMaxAgeNoDigits(t *testing.T) {
	rabbit4(t, `x-max-age "" closes the connection with 541 INTERNAL_ERROR`)
	e := setup(t, broker.Options{})
	for _, v := range []string{"", "-1s", " 1s", "D"} {
		_, err := e.fresh().QueueDeclare("st-age", true, false, false, false, stArgs("x-max-age", v))
		expectErr(t, err, 406, "PRECONDITION_FAILED - invalid arg 'x-max-age' for queue 'st-age' in vhost '/': invalid_max_age")
	}
}

// TestStreamRedeclare: a redeclare must match the stream's arguments
// and properties (rabbit_amqqueue:assert_args_equivalence over the
// stream's queue_arguments).
func TestStreamRedeclare(t *testing.T) {
	e := setup(t, broker.Options{})
	base := stArgs("x-max-age", "1D", "x-max-length-bytes", int64(1000000))
	e.stream("st-re", base)
	// RabbitMQ 3.10.8: the same arguments, also a long given as an int,
	// are equivalent.
	for _, a := range []rmq.Table{base, stArgs("x-max-age", "1D", "x-max-length-bytes", int32(1000000))} {
		_, err := e.fresh().QueueDeclare("st-re", true, false, false, false, a)
		must(t, err)
	}
	const pre = "PRECONDITION_FAILED - inequivalent arg '%s' for queue 'st-re' in vhost '/': %s"
	for _, c := range []struct {
		args rmq.Table
		want string
	}{
		{stArgs("x-max-age", "2D", "x-max-length-bytes", int64(1000000)), fmt.Sprintf(pre, "x-max-age", "received '2D' but current is '1D'")},
		{stArgs("x-max-age", "1D", "x-max-length-bytes", int64(5)), fmt.Sprintf(pre, "x-max-length-bytes", "received '5' but current is '1000000'")},
		{stArgs("x-max-length-bytes", int64(1000000)), fmt.Sprintf(pre, "x-max-age", "received none but current is the value '1D' of type 'longstr'")},
		{stArgs("x-max-age", "1D", "x-max-length-bytes", int64(1000000), "x-stream-max-segment-size-bytes", int64(1000)),
			fmt.Sprintf(pre, "x-stream-max-segment-size-bytes", "received the value '1000' of type 'long' but current is none")},
		{stArgs("x-max-age", "1D", "x-max-length-bytes", int64(1000000), "x-initial-cluster-size", int64(1)),
			fmt.Sprintf(pre, "x-initial-cluster-size", "received the value '1' of type 'long' but current is none")},
		{rmq.Table{"x-queue-type": "classic", "x-max-age": "1D", "x-max-length-bytes": int64(1000000)}, fmt.Sprintf(pre, "x-queue-type", "received 'classic' but current is 'stream'")},
		{rmq.Table{"x-queue-type": "quorum", "x-max-age": "1D", "x-max-length-bytes": int64(1000000)}, fmt.Sprintf(pre, "x-queue-type", "received 'quorum' but current is 'stream'")},
	} {
		_, err := e.fresh().QueueDeclare("st-re", true, false, false, false, c.args)
		expectErr(t, err, 406, c.want)
	}
	_, err := e.fresh().QueueDeclare("st-re", false, false, false, false, base)
	expectErr(t, err, 406, fmt.Sprintf(pre, "durable", "received 'false' but current is 'true'"))
	_, err = e.fresh().QueueDeclare("st-re", true, true, false, false, base)
	expectErr(t, err, 406, fmt.Sprintf(pre, "auto_delete", "received 'true' but current is 'false'"))
	_, err = e.fresh().QueueDeclare("st-re", true, false, true, false, base)
	expectErr(t, err, 405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'st-re' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.")
	// A passive declare needs no arguments.
	_, err = e.fresh().QueueDeclarePassive("st-re", false, false, false, false, nil)
	must(t, err)
}

// TestStreamConsumeRules: a stream consumer needs a prefetch and manual
// acks; consumer arguments of other queue types are refused.
func TestStreamConsumeRules(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-cons", stArgs())
	const noPrefetch = "PRECONDITION_FAILED - consumer prefetch count is not set for 'queue 'st-cons' in vhost '/''"
	// RabbitMQ 3.10.8, channel.close 406, class 60 method 20: no qos,
	// qos 0, and a global qos alone (it is no consumer prefetch).
	ch := e.fresh()
	_, err := ch.Consume("st-cons", "", false, false, false, false, nil)
	expectErr(t, err, 406, noPrefetch)
	ch = e.fresh()
	must(t, ch.Qos(0, 0, false))
	_, err = ch.Consume("st-cons", "", false, false, false, false, nil)
	expectErr(t, err, 406, noPrefetch)
	ch = e.fresh()
	must(t, ch.Qos(10, 0, true))
	_, err = ch.Consume("st-cons", "", false, false, false, false, nil)
	expectErr(t, err, 406, noPrefetch)
	// RabbitMQ 3.10.8: without qos, no-ack gets the prefetch error
	// first; with qos, connection.close 540, class 60 method 20.
	_, err = e.fresh().Consume("st-cons", "", true, false, false, false, nil)
	expectErr(t, err, 406, noPrefetch)
	ch = e.fresh()
	must(t, ch.Qos(10, 0, false))
	_, err = ch.Consume("st-cons", "", true, false, false, false, nil)
	expectErr(t, err, 540, "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues queue 'st-cons' in vhost '/'")
}

// TestStreamConsumeArgs: consumer arguments of other queue types are
// refused; unknown ones are ignored.
func TestStreamConsumeArgs(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-cons", stArgs())
	var ch *rmq.Channel
	var err error
	// RabbitMQ 3.10.8: x-priority and x-cancel-on-ha-failover are other
	// types' consumer arguments (406, class 60 method 20); an unknown
	// argument is ignored.
	for _, a := range []string{"x-priority", "x-cancel-on-ha-failover"} {
		ch = e.fresh()
		must(t, ch.Qos(10, 0, false))
		var v any = int32(5)
		if a == "x-cancel-on-ha-failover" {
			v = true
		}
		_, err = ch.Consume("st-cons", "", false, false, false, false, rmq.Table{a: v})
		expectErr(t, err, 406, fmt.Sprintf("PRECONDITION_FAILED - invalid arg '%s' for queue 'st-cons' in vhost '/' of queue type rabbit_stream_queue", a))
	}
	ch = e.fresh()
	must(t, ch.Qos(10, 0, false))
	_, err = ch.Consume("st-cons", "", false, false, false, false, rmq.Table{"x-bogus": "a"})
	must(t, err)
}

// TestStreamConsumeGlobalQos: a global qos followed by a per-consumer
// one: the consumer works, with the per-consumer prefetch; a global qos
// still in force is refused.
func TestStreamConsumeGlobalQos(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-cons", stArgs())
	// RabbitMQ 3.10.8: a global qos with a per-consumer one: the
	// consumer works, with the per-consumer prefetch.
	e.publishEach("st-cons", "m0", "m1", "m2")
	ch := e.fresh()
	must(t, ch.Qos(10, 0, true))
	must(t, ch.Qos(2, 0, false))
	ds, err := ch.Consume("st-cons", "", false, false, false, false, rmq.Table{"x-stream-offset": "first"})
	must(t, err)
	recv(t, ds)
	recv(t, ds)
	none(t, ds, 300*time.Millisecond)
	// RabbitMQ 3.10.8: in the other order the global limit stays (a
	// per-consumer basic.qos lifts it, rabbit_limiter:unlimit_prefetch):
	// connection.close 540.
	ch = e.fresh()
	must(t, ch.Qos(2, 0, false))
	must(t, ch.Qos(10, 0, true))
	_, err = ch.Consume("st-cons", "", false, false, false, false, nil)
	expectErr(t, err, 540, "NOT_IMPLEMENTED - queue 'st-cons' in vhost '/' does not support global qos")
}

// TestStreamExclusiveConsume: an exclusive consumer of a stream does not
// keep other consumers away.
func TestStreamExclusiveConsume(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-cons", stArgs())
	// RabbitMQ 3.10.8: an exclusive consumer does not keep others away.
	ch := e.fresh()
	must(t, ch.Qos(2, 0, false))
	_, err := ch.Consume("st-cons", "", false, true, false, false, nil)
	must(t, err)
	ch2 := e.fresh()
	must(t, ch2.Qos(2, 0, false))
	_, err = ch2.Consume("st-cons", "", false, false, false, false, nil)
	must(t, err)
}

// TestStreamRefusedOperations: basic.get and queue.purge close the
// connection (RabbitMQ 3.10.8 answers, with their class and method
// ids, read on a raw connection).
func TestStreamRefusedOperations(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-ref", stArgs())
	e.publishEach("st-ref", "m")
	for _, noAck := range []bool{false, true} {
		_, _, err := e.fresh().Get("st-ref", noAck)
		expectErr(t, err, 540, "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 'st-ref' in vhost '/'")
	}
	_, err := e.fresh().QueuePurge("st-ref", false)
	expectErr(t, err, 540, "NOT_IMPLEMENTED - queue.purge not supported by stream queues queue 'st-ref' in vhost '/'")

	qos := func(r *testutil.Raw) {
		r.Send(1, &amqp.BasicQos{PrefetchCount: 10})
		r.Expect((*amqp.BasicQosOk)(nil))
	}
	for _, c := range []struct {
		do            func(r *testutil.Raw)
		conn          bool
		code          uint16
		class, method uint16
	}{
		{func(r *testutil.Raw) { r.Send(1, &amqp.BasicGet{Queue: "st-ref"}) }, true, 540, 60, 70},
		{func(r *testutil.Raw) { r.Send(1, &amqp.QueuePurge{Queue: "st-ref"}) }, true, 540, 50, 30},
		{func(r *testutil.Raw) { qos(r); r.Send(1, &amqp.BasicConsume{Queue: "st-ref", NoAck: true}) }, true, 540, 60, 20},
		{func(r *testutil.Raw) { r.Send(1, &amqp.BasicConsume{Queue: "st-ref"}) }, false, 406, 60, 20},
		{func(r *testutil.Raw) {
			r.Send(1, &amqp.QueueDeclare{Queue: "st-ref-nd", Arguments: amqp.Table{"x-queue-type": "stream"}})
		}, false, 406, 50, 10},
	} {
		r := testutil.DialRaw(t, e.b.Addr)
		r.Handshake(nil, 0, true)
		c.do(r)
		code, class, method, conn := rawCloseIDs(t, r)
		if code != c.code || class != c.class || method != c.method || conn != c.conn {
			t.Fatalf("close %d %d/%d (connection %v), want %d %d/%d (connection %v)", code, class, method, conn, c.code, c.class, c.method, c.conn)
		}
	}
}

// rawCloseIDs reads until a channel.close or connection.close and
// returns its code, class and method ids, and whether it closed the
// connection.
func rawCloseIDs(t *testing.T, r *testutil.Raw) (code, class, method uint16, conn bool) {
	t.Helper()
	for {
		_, m, err := r.Next()
		if err != nil {
			t.Fatalf("waiting for a close: %v", err)
		}
		switch x := m.(type) {
		case *amqp.ChannelClose:
			return x.ReplyCode, x.ClassID, x.MethodID, false
		case *amqp.ConnectionClose:
			return x.ReplyCode, x.ClassID, x.MethodID, true
		}
	}
}

// TestStreamAcksAreCredit: a consumer's prefetch is its credit; an ack
// gives credit back and deletes nothing.
func TestStreamAcksAreCredit(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-credit", stArgs())
	e.publishEach("st-credit", bodiesN("m", 10)...)
	// RabbitMQ 3.10.8: prefetch 2 → m0, m1, then nothing until an ack.
	ch, ds := e.streamConsume("st-credit", 2, rmq.Table{"x-stream-offset": "first"})
	d0, d1 := recv(t, ds), recv(t, ds)
	none(t, ds, 300*time.Millisecond)
	must(t, d0.Ack(false))
	if d := recv(t, ds); string(d.Body) != "m2" || d.Redelivered {
		t.Fatalf("after an ack %q redelivered=%v, want m2", d.Body, d.Redelivered)
	}
	none(t, ds, 300*time.Millisecond)
	// RabbitMQ 3.10.8: ack multiple of 2 gives 2 credits: m3, m4.
	must(t, ch.Ack(d1.DeliveryTag+1, true))
	for _, want := range []string{"m3", "m4"} {
		if d := recv(t, ds); string(d.Body) != want {
			t.Fatalf("got %q, want %s", d.Body, want)
		}
	}
	// RabbitMQ 3.10.8: qos 0 after the consume changes nothing for it.
	must(t, ch.Qos(0, 0, false))
	none(t, ds, 300*time.Millisecond)
	// Acks deleted nothing: a new consumer from first reads all ten.
	_, ds2 := e.streamConsume("st-credit", 20, rmq.Table{"x-stream-offset": "first"})
	if got, _ := takeAcked(t, ds2, 10); fmt.Sprint(got) != fmt.Sprint(bodiesN("m", 10)) {
		t.Fatalf("replay %v", got)
	}
	// RabbitMQ 3.10.8: cancel-ok, then nothing more.
	ch3 := e.channel(e.conn)
	must(t, ch3.Qos(20, 0, false))
	ds3, err := ch3.Consume("st-credit", "st-tag", false, false, false, false, rmq.Table{"x-stream-offset": "next"})
	must(t, err)
	must(t, ch3.Cancel("st-tag", false))
	e.publishEach("st-credit", "after cancel")
	for d := range ds3 { // closed by the library at cancel-ok
		t.Fatalf("delivery %q after basic.cancel", d.Body)
	}
	// An unknown delivery tag: 406 (RabbitMQ 3.10.8, as for any queue).
	ch4, ds4 := e.streamConsume("st-credit", 2, rmq.Table{"x-stream-offset": "first"})
	recv(t, ds4)
	closed := ch4.NotifyClose(make(chan *rmq.Error, 1))
	must(t, ch4.Ack(999, false))
	expectErr(t, closeErr(t, closed, "ack of tag 999"), 406, "PRECONDITION_FAILED - unknown delivery tag 999")
}
