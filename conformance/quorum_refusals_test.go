package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

// What RabbitMQ refuses of quorum queues, with its codes and texts. Every
// expected answer below is what RabbitMQ 3.10.8 (localhost:5672, one node)
// answered to the same calls; these tests run against it too
// (RAILMQ_TEST_URL=amqp://guest:guest@localhost:5672/). RabbitMQ 4.3.5's
// source has the same checks (rabbit_amqqueue:check_declare_arguments,
// rabbit_quorum_queue:declare, consume, delete).

func qqArgs(kv ...any) rmq.Table {
	t := rmq.Table{"x-queue-type": "quorum"}
	for i := 0; i < len(kv); i += 2 {
		t[kv[i].(string)] = kv[i+1]
	}
	return t
}

// dropQueues deletes the queues a test may have made (on RabbitMQ they
// outlive it).
func dropQueues(t *testing.T, url string, names ...string) {
	t.Cleanup(func() {
		c, err := rmq.Dial(url)
		if err != nil {
			return
		}
		defer c.Close()
		for _, n := range names {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(n, false, false, false)
			}
		}
	})
}

// TestQuorumQueueDeclareArgs: a new quorum queue's arguments are checked
// as rabbit_amqqueue checks them, before its properties: the quorum
// type's own arguments' types and values, then the arguments of other
// queue types, "of queue type rabbit_quorum_queue"; then auto-delete,
// exclusive and non-durable. What RabbitMQ takes without a complaint is
// taken (reject-publish-dlx: it falls back to drop-head,
// TestQuorumQueueRejectPublishDLX).
func TestQuorumQueueDeclareArgs(t *testing.T) {
	e := setup(t, broker.Options{})
	const (
		invalid  = "PRECONDITION_FAILED - invalid arg '%s' for queue '%s' in vhost '/': %s"
		notTaken = "PRECONDITION_FAILED - invalid arg '%s' for queue '%s' in vhost '/' of queue type rabbit_quorum_queue"
	)
	for _, tc := range []struct {
		name                  string
		durable, ad, ex       bool
		args                  rmq.Table
		arg, detail, property string // the refusal: an argument's (with the detail, or "" for another type's) or a property's
	}{
		{"", false, false, false, qqArgs(), "", "", "server-named"},
		{"", true, false, false, qqArgs("x-max-priority", int32(3)), "", "", "server-named"},
		{"qqr-ad-prio", true, true, false, qqArgs("x-max-priority", int32(3)), "x-max-priority", "", ""},
		{"qqr-nd-dls", false, false, false, qqArgs("x-dead-letter-strategy", "foo"), "x-dead-letter-strategy", "invalid_dlx_strategy", ""},
		{"qqr-prio-dls", true, false, false, qqArgs("x-max-priority", int32(3), "x-dead-letter-strategy", "foo"), "x-dead-letter-strategy", "invalid_dlx_strategy", ""},
		{"qqr-dls-int", true, false, false, qqArgs("x-dead-letter-strategy", int32(1)), "x-dead-letter-strategy", "{unacceptable_type,signedint}", ""},
		{"qqr-prio", true, false, false, qqArgs("x-max-priority", int32(5)), "x-max-priority", "", ""},
		{"qqr-prio-str", true, false, false, qqArgs("x-max-priority", "x"), "x-max-priority", "", ""},
		{"qqr-lazy", true, false, false, qqArgs("x-queue-mode", "lazy"), "x-queue-mode", "", ""},
		{"qqr-master", true, false, false, qqArgs("x-queue-master-locator", "min-masters"), "x-queue-master-locator", "", ""},
		{"qqr-qver", true, false, false, qqArgs("x-queue-version", int32(2)), "x-queue-version", "", ""},
		{"qqr-maxage", true, false, false, qqArgs("x-max-age", "1D"), "x-max-age", "", ""},
		{"qqr-initcs", true, false, false, qqArgs("x-initial-cluster-size", int32(1)), "x-initial-cluster-size", "", ""},
		{"qqr-segsz", true, false, false, qqArgs("x-stream-max-segment-size-bytes", int32(1)), "x-stream-max-segment-size-bytes", "", ""},
		{"qqr-ovfoo", true, false, false, qqArgs("x-overflow", "foo"), "x-overflow", "invalid_overflow", ""},
		{"qqr-ov-int", true, false, false, qqArgs("x-overflow", int32(1)), "x-overflow", "{unacceptable_type,signedint}", ""},
		{"qqr-ll-bad", true, false, false, qqArgs("x-queue-leader-locator", "foo"), "x-queue-leader-locator", "invalid_queue_locator_arg", ""},
		{"qqr-ll-int", true, false, false, qqArgs("x-queue-leader-locator", int32(1)), "x-queue-leader-locator", "{unacceptable_type,signedint}", ""},
		{"qqr-igs-0", true, false, false, qqArgs("x-quorum-initial-group-size", int32(0)), "x-quorum-initial-group-size", "{value_zero,0}", ""},
		{"qqr-igs-neg", true, false, false, qqArgs("x-quorum-initial-group-size", int32(-2)), "x-quorum-initial-group-size", "{value_negative,-2}", ""},
		{"qqr-igs-str", true, false, false, qqArgs("x-quorum-initial-group-size", "x"), "x-quorum-initial-group-size", `"expected integer, got longstr"`, ""},
		{"qqr-mimem", true, false, false, qqArgs("x-max-in-memory-length", int32(-5)), "x-max-in-memory-length", "{value_negative,-5}", ""},
		{"qqr-mib-str", true, false, false, qqArgs("x-max-in-memory-bytes", "x"), "x-max-in-memory-bytes", `"expected integer, got longstr"`, ""},
		{"qqr-sac-str", true, false, false, qqArgs("x-single-active-consumer", "x"), "x-single-active-consumer", "{unacceptable_type,longstr}", ""},
		{"qqr-ttl-neg", true, false, false, qqArgs("x-message-ttl", int32(-1)), "x-message-ttl", "{value_negative,-1}", ""},
		{"qqr-expires-0", true, false, false, qqArgs("x-expires", int32(0)), "x-expires", "{value_zero,0}", ""},
		{"qqr-mlb-neg", true, false, false, qqArgs("x-max-length-bytes", int32(-1)), "x-max-length-bytes", "{value_negative,-1}", ""},
		{"qqr-ad", true, true, false, qqArgs(), "", "", "auto-delete"},
		{"qqr-ex", true, false, true, qqArgs(), "", "", "exclusive-owner"},
		{"qqr-nd", false, false, false, qqArgs(), "", "", "non-durable"},
		{"qqr-nd-ex-ad", false, true, true, qqArgs(), "", "", "auto-delete"},
	} {
		ch := e.channel(e.conn)
		_, err := ch.QueueDeclare(tc.name, tc.durable, tc.ad, tc.ex, false, tc.args)
		var want string
		switch {
		case tc.property == "server-named":
			want = "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"
		case tc.property != "":
			want = fmt.Sprintf("PRECONDITION_FAILED - invalid property '%s' for queue '%s' in vhost '/'", tc.property, tc.name)
		case tc.detail == "":
			want = fmt.Sprintf(notTaken, tc.arg, tc.name)
		default:
			want = fmt.Sprintf(invalid, tc.arg, tc.name, tc.detail)
		}
		expectErr(t, err, 406, want)
	}
	// The dead-letter exchange's type is the channel's to check, in its
	// own words.
	ch := e.channel(e.conn)
	_, err := ch.QueueDeclare("qqr-dlx-int", true, false, false, false, qqArgs("x-dead-letter-exchange", int32(1)))
	expectErr(t, err, 406, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'qqr-dlx-int' in vhost '/'")

	// Taken: RabbitMQ 3.10.8 declared each.
	taken := []struct {
		name string
		args rmq.Table
	}{
		{"qqr-rpdlx", qqArgs("x-overflow", "reject-publish-dlx")},
		{"qqr-ll-balanced", qqArgs("x-queue-leader-locator", "balanced")},
		{"qqr-ll-random", qqArgs("x-queue-leader-locator", "random")},
		{"qqr-dls-alo", qqArgs("x-dead-letter-strategy", "at-least-once", "x-dead-letter-exchange", "dlx")},
		{"qqr-dls-alo-rp", qqArgs("x-dead-letter-strategy", "at-least-once", "x-dead-letter-exchange", "dlx", "x-overflow", "reject-publish")},
		{"qqr-dls-amo", qqArgs("x-dead-letter-strategy", "at-most-once")},
		{"qqr-dls-nodlx", qqArgs("x-dead-letter-strategy", "at-least-once")},
		{"qqr-mimem-ok", qqArgs("x-max-in-memory-length", int32(5))},
		{"qqr-foo", qqArgs("x-foo", "x")},
	}
	for _, tc := range taken {
		dropQueues(t, e.b.URL, tc.name)
		ch := e.channel(e.conn)
		if _, err := ch.QueueDeclare(tc.name, true, false, false, false, tc.args); err != nil {
			t.Fatalf("%s %v: %v", tc.name, tc.args, err)
		}
	}
}

// TestQuorumQueueRedeclare: a redeclare of an existing quorum queue is
// compared with it (no argument checks, no property refusals): on the
// quorum type's arguments only, so an x-max-priority, which no quorum
// queue takes, is ignored.
func TestQuorumQueueRedeclare(t *testing.T) {
	e := setup(t, broker.Options{})
	dropQueues(t, e.b.URL, "qqr-existing")
	ch := e.channel(e.conn)
	_, err := ch.QueueDeclare("qqr-existing", true, false, false, false, qqArgs())
	must(t, err)
	for _, tc := range []struct {
		durable, ad, ex bool
		args            rmq.Table
		code            int
		want            string
	}{
		{false, false, false, qqArgs(), 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'qqr-existing' in vhost '/': received 'false' but current is 'true'"},
		{true, true, false, qqArgs(), 406, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue 'qqr-existing' in vhost '/': received 'true' but current is 'false'"},
		{true, false, true, qqArgs(), 405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'qqr-existing' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."},
		{true, false, false, qqArgs("x-max-priority", int32(3)), 0, ""},
		{true, false, false, qqArgs("x-dead-letter-strategy", "foo"), 406, "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-strategy' for queue 'qqr-existing' in vhost '/': received the value 'foo' of type 'longstr' but current is none"},
		{true, false, false, qqArgs("x-dead-letter-strategy", "at-least-once"), 406, "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-strategy' for queue 'qqr-existing' in vhost '/': received the value 'at-least-once' of type 'longstr' but current is none"},
	} {
		ch := e.channel(e.conn)
		_, err := ch.QueueDeclare("qqr-existing", tc.durable, tc.ad, tc.ex, false, tc.args)
		if tc.code == 0 {
			must(t, err)
			continue
		}
		expectErr(t, err, tc.code, tc.want)
	}
}

// TestQuorumQueueGlobalQos: a consumer on a quorum queue is refused, 540
// (the connection closes), while its channel has a global prefetch limit:
// after basic.qos(10, global), whether it came before the channel's first
// consumer or after; not after basic.qos(0, global), nor after a basic.qos
// without global that followed the global one (RabbitMQ's basic.qos
// global=false lifts the channel's limit: rabbit_limiter:unlimit_prefetch).
// basic.get and classic queues are not concerned.
func TestQuorumQueueGlobalQos(t *testing.T) {
	e := setup(t, broker.Options{})
	dropQueues(t, e.b.URL, "qqr-qos")
	_, err := e.ch.QueueDeclare("qqr-qos", true, false, false, false, qqArgs())
	must(t, err)
	const refused = "NOT_IMPLEMENTED - queue 'qqr-qos' in vhost '/' does not support global qos"
	fresh := func() (*rmq.Connection, *rmq.Channel) {
		c := dial(t, e.b.URL)
		ch, err := c.Channel()
		must(t, err)
		return c, ch
	}
	c, ch := fresh()
	must(t, ch.Qos(10, 0, true))
	_, err = ch.Consume("qqr-qos", "", false, false, false, false, nil)
	expectErr(t, err, 540, refused)
	if !waitClosed(c) {
		t.Fatal("the connection is still open after the 540")
	}

	c, ch = fresh()
	_, err = ch.Consume("qqr-qos", "ct1", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Qos(10, 0, true))
	_, err = ch.Consume("qqr-qos", "ct2", false, false, false, false, nil)
	expectErr(t, err, 540, refused)
	waitClosed(c)

	for i, seq := range [][]struct {
		n      int
		global bool
	}{
		{{0, true}},
		{{10, true}, {5, false}},
		{{10, true}, {0, true}},
	} {
		c, ch = fresh()
		for _, q := range seq {
			must(t, ch.Qos(q.n, 0, q.global))
		}
		if _, err := ch.Consume("qqr-qos", "", false, false, false, false, nil); err != nil {
			t.Fatalf("qos sequence %d %v: %v", i, seq, err)
		}
		c.Close()
	}
	c, ch = fresh()
	defer c.Close()
	must(t, ch.Qos(10, 0, true))
	if _, _, err := ch.Get("qqr-qos", false); err != nil {
		t.Fatalf("basic.get with a global prefetch: %v", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	if _, err := ch.Consume(q.Name, "", false, false, false, false, nil); err != nil {
		t.Fatalf("a classic queue's consumer with a global prefetch: %v", err)
	}
}

// waitClosed reports whether c closes within 5 s.
func waitClosed(c *rmq.Connection) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !c.IsClosed() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestQosGlobalLiftedByLocal: a basic.qos without global lifts the
// channel's global limit, as in RabbitMQ: asked basic.qos(1, global) then
// basic.qos(3), RabbitMQ 3.10.8 had 3 messages unacked on a consumer; in
// the other order, 1 (TestPrefetchBothLimits).
func TestQosGlobalLiftedByLocal(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("", nil)
	must(t, e.ch.Qos(1, 0, true))
	must(t, e.ch.Qos(3, 0, false))
	ds := e.consume(q, false)
	e.fill(q, 10)
	for i := 0; i < 3; i++ {
		recv(t, ds)
	}
	none(t, ds, 300*time.Millisecond)
}

// TestQuorumQueueDeleteIf: queue.delete with if-unused or if-empty is
// refused for a quorum queue, whatever it holds: 540, the connection
// closes, the queue stays.
func TestQuorumQueueDeleteIf(t *testing.T) {
	e := setup(t, broker.Options{})
	dropQueues(t, e.b.URL, "qqr-del")
	_, err := e.ch.QueueDeclare("qqr-del", true, false, false, false, qqArgs())
	must(t, err)
	for _, tc := range []struct {
		ifUnused, ifEmpty bool
		flag              string
	}{{true, false, "if-unused"}, {false, true, "if-empty"}} {
		c := dial(t, e.b.URL)
		ch, err := c.Channel()
		must(t, err)
		_, err = ch.QueueDelete("qqr-del", tc.ifUnused, tc.ifEmpty, false)
		expectErr(t, err, 540, "NOT_IMPLEMENTED - cannot delete queue 'qqr-del' in vhost '/'. queue.delete operations with "+tc.flag+" flag set are not supported by quorum queues")
		if !waitClosed(c) {
			t.Fatal("the connection is still open after the 540")
		}
	}
	ch := e.channel(e.conn)
	if _, err := ch.QueueDeclarePassive("qqr-del", true, false, false, false, nil); err != nil {
		t.Fatalf("the queue went: %v", err)
	}
}
