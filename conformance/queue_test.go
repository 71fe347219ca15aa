package conformance

import (
	"fmt"
	"strings"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

func TestServerNamedQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	q, err := e.ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(q.Name, "amq.gen-") || len(q.Name) != len("amq.gen-")+22 {
		t.Fatalf("name %q", q.Name)
	}
	// The empty name means the channel's last declared queue.
	if err := e.ch.QueueBind("", "k", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	e.publish("amq.direct", "k", "via shortcut")
	if d := e.get(e.ch, "", true); string(d.Body) != "via shortcut" {
		t.Fatalf("got %q", d.Body)
	}
}

func TestQueueDeclarePassiveAndCounts(t *testing.T) { forEachType(t, testQueueDeclarePassiveAndCounts) }

func testQueueDeclarePassiveAndCounts(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	_, err := e.ch.QueueDeclarePassive("missing-q", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'missing-q' in vhost '/'")
	e.ch = e.channel(e.conn)
	q := e.typedQueue(qt, "counts-q", nil)
	for i := range 3 {
		e.publishConfirmed("", q, rmq.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	c := e.channel(e.conn)
	if _, err := c.Consume(q, "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	st, err := e.ch.QueueDeclare(q, qt.durable, false, false, false, qt.declareArgs(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The consumer took them (unacked), so none are ready.
	if st.Consumers != 1 || st.Messages != 0 {
		t.Fatalf("declare-ok %+v", st)
	}
	c.Close()
	e.waitCount(q, 3)
}

func TestQueueInequivalent(t *testing.T) { forEachType(t, testQueueInequivalent) }

func testQueueInequivalent(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	if _, err := e.ch.QueueDeclare("ineq-q", true, false, false, false, qt.declareArgs(nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := e.channel(e.conn)
		_, _ = c.QueueDelete("ineq-q", false, false, false)
	})
	_, err := e.ch.QueueDeclare("ineq-q", false, false, false, false, qt.declareArgs(nil))
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'ineq-q' in vhost '/': received 'false' but current is 'true'")
	e.ch = e.channel(e.conn)
	_, err = e.ch.QueueDeclare("ineq-q", true, false, false, false, qt.declareArgs(rmq.Table{"x-message-ttl": int32(1000)}))
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'ineq-q' in vhost '/': received the value '1000' of type 'signedint' but current is none")
}

func TestQueueArgumentValidation(t *testing.T) {
	e := setup(t, broker.Options{})
	t.Cleanup(func() { // in case a declare wrongly succeeded
		c := e.channel(e.conn)
		_, _ = c.QueueDelete("args-q", false, false, false)
	})
	for _, tc := range []struct {
		args rmq.Table
		text string
	}{
		{rmq.Table{"x-max-priority": int32(300)}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'args-q' in vhost '/': {max_value_exceeded,300}"},
		{rmq.Table{"x-message-ttl": "1000"}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		{rmq.Table{"x-message-ttl": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-expires": int32(0)}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'args-q' in vhost '/': {value_zero,0}"},
		{rmq.Table{"x-max-length": int32(-5)}, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'args-q' in vhost '/': {value_negative,-5}"},
		{rmq.Table{"x-overflow": "bogus"}, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'args-q' in vhost '/': invalid_overflow"},
		{rmq.Table{"x-dead-letter-routing-key": "rk"}, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue 'args-q' in vhost '/': routing_key_but_no_dlx_defined"},
		// Expiries are at most 10 years in ms (rabbit_misc:check_expiry).
		{rmq.Table{"x-message-ttl": int64(1099511627776)}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': {value_too_large,1099511627776}"},
		{rmq.Table{"x-message-ttl": int64(315360000001)}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': {value_too_large,315360000001}"},
		{rmq.Table{"x-message-ttl": true}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': \"expected integer, got bool\""},
		{rmq.Table{"x-message-ttl": 1.5}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': \"expected integer, got double\""},
		{rmq.Table{"x-expires": int32(-5)}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'args-q' in vhost '/': {value_negative,-5}"},
		{rmq.Table{"x-expires": int64(315360000001)}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'args-q' in vhost '/': {value_too_large,315360000001}"},
		{rmq.Table{"x-expires": "1000"}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		{rmq.Table{"x-max-length": "10"}, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		{rmq.Table{"x-max-length-bytes": int64(-1)}, "PRECONDITION_FAILED - invalid arg 'x-max-length-bytes' for queue 'args-q' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-max-priority": int16(-1)}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'args-q' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-max-priority": "10"}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		// The channel checks the dead-letter exchange's type first
		// (rabbit_channel, rabbit_misc:r_arg), in its own words.
		{rmq.Table{"x-dead-letter-exchange": int32(5)}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'args-q' in vhost '/'"},
		{rmq.Table{"x-dead-letter-exchange": int64(5)}, "PRECONDITION_FAILED - invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'args-q' in vhost '/'"},
		{rmq.Table{"x-dead-letter-exchange": true}, "PRECONDITION_FAILED - invalid type 'bool' for arg 'x-dead-letter-exchange' in queue 'args-q' in vhost '/'"},
		{rmq.Table{"x-dead-letter-exchange": []byte("dlx")}, "PRECONDITION_FAILED - invalid type 'binary' for arg 'x-dead-letter-exchange' in queue 'args-q' in vhost '/'"},
		{rmq.Table{"x-dead-letter-exchange": int32(5), "x-expires": int32(0)}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'args-q' in vhost '/'"},
		// The other string and bool arguments name the type they got.
		{rmq.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": int32(5)}, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue 'args-q' in vhost '/': {unacceptable_type,signedint}"},
		{rmq.Table{"x-overflow": int32(1)}, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'args-q' in vhost '/': {unacceptable_type,signedint}"},
		{rmq.Table{"x-queue-mode": "eager"}, "PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue 'args-q' in vhost '/': \"unsupported queue mode 'eager'\""},
		{rmq.Table{"x-queue-mode": int32(1)}, "PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue 'args-q' in vhost '/': {unacceptable_type,signedint}"},
		{rmq.Table{"x-single-active-consumer": "yes"}, "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue 'args-q' in vhost '/': {unacceptable_type,longstr}"},
		{rmq.Table{"x-single-active-consumer": int32(1)}, "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue 'args-q' in vhost '/': {unacceptable_type,signedint}"},
		{rmq.Table{"x-queue-version": int32(3)}, "PRECONDITION_FAILED - invalid arg 'x-queue-version' for queue 'args-q' in vhost '/': \"unsupported queue version '3'\""},
		{rmq.Table{"x-queue-version": "2"}, "PRECONDITION_FAILED - invalid arg 'x-queue-version' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		{rmq.Table{"x-queue-version": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-queue-version' for queue 'args-q' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-queue-type": "foo"}, "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'args-q' in vhost '/': \"unsupported queue type 'foo'\""},
		// Several bad arguments: the first in RabbitMQ's order is reported.
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager", "x-overflow": "bogus", "x-max-priority": int32(300), "x-max-length": int32(-1), "x-message-ttl": "1", "x-expires": int32(0)}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'args-q' in vhost '/': {value_zero,0}"},
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager", "x-overflow": "bogus", "x-max-priority": int32(300), "x-max-length": int32(-1), "x-message-ttl": "1"}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'args-q' in vhost '/': \"expected integer, got longstr\""},
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager", "x-overflow": "bogus", "x-max-priority": int32(300), "x-max-length": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'args-q' in vhost '/': {value_negative,-1}"},
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager", "x-overflow": "bogus", "x-max-priority": int32(300)}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'args-q' in vhost '/': {max_value_exceeded,300}"},
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager", "x-overflow": "bogus"}, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'args-q' in vhost '/': invalid_overflow"},
		{rmq.Table{"x-single-active-consumer": "yes", "x-queue-mode": "eager"}, "PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue 'args-q' in vhost '/': \"unsupported queue mode 'eager'\""},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			ch := e.channel(e.conn)
			_, err := ch.QueueDeclare("args-q", false, false, false, false, tc.args)
			expectErr(t, err, 406, tc.text)
		})
	}
	// Unknown x- arguments are accepted, and so are the largest expiries.
	if _, err := e.ch.QueueDeclare("", false, true, true, false, rmq.Table{"x-custom": "yes", "x-max-priority": int32(10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclare("", false, true, true, false, rmq.Table{"x-message-ttl": int64(315360000000), "x-expires": int64(315360000000),
		"x-max-length": int64(1) << 40, "x-max-length-bytes": int64(1) << 50, "x-queue-version": uint8(2)}); err != nil {
		t.Fatal(err)
	}
}

func TestQueueTypeNotClassic(t *testing.T) {
	e := setup(t, broker.Options{})
	if _, err := e.ch.QueueDeclare("qt-q", true, false, false, false, rmq.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c := e.channel(e.conn); _, _ = c.QueueDelete("qt-q", false, false, false) })
	_, err := e.ch.QueueDeclare("qt-q", true, false, false, false, rmq.Table{"x-queue-type": "quorum"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'qt-q' in vhost '/': received 'quorum' but current is 'classic'")
}

func TestExclusiveQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	q, err := e.ch.QueueDeclare("excl-q", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := dial(t, e.b.URL)
	locked := "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'excl-q' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
	for name, op := range map[string]func(*rmq.Channel) error{
		"declare": func(c *rmq.Channel) error {
			_, err := c.QueueDeclare(q.Name, false, false, true, false, nil)
			return err
		},
		"passive declare": func(c *rmq.Channel) error {
			_, err := c.QueueDeclarePassive(q.Name, false, false, true, false, nil)
			return err
		},
		"consume": func(c *rmq.Channel) error {
			_, err := c.Consume(q.Name, "", false, false, false, false, nil)
			return err
		},
		"get":    func(c *rmq.Channel) error { _, _, err := c.Get(q.Name, false); return err },
		"purge":  func(c *rmq.Channel) error { _, err := c.QueuePurge(q.Name, false); return err },
		"delete": func(c *rmq.Channel) error { _, err := c.QueueDelete(q.Name, false, false, false); return err },
		"bind":   func(c *rmq.Channel) error { return c.QueueBind(q.Name, "k", "amq.direct", false, nil) },
	} {
		ch := e.channel(other)
		err := op(ch)
		var ae *rmq.Error
		if !asErr(err, &ae) || ae.Code != 405 || ae.Reason != locked {
			t.Errorf("%s from another connection: %v", name, err)
		}
	}
	// Deleted when its connection closes.
	e.conn.Close()
	ch := e.channel(other)
	_, err = ch.QueueDeclarePassive("excl-q", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'excl-q' in vhost '/'")
}

func TestAutoDeleteQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	q, err := e.ch.QueueDeclare("ad-q", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c := e.channel(e.conn); _, _ = c.QueueDelete("ad-q", false, false, false) })
	// basic.get does not count as a consumer.
	if _, _, err := e.ch.Get(q.Name, true); err != nil {
		t.Fatal(err)
	}
	c1, c2 := e.channel(e.conn), e.channel(e.conn)
	if _, err := c1.Consume(q.Name, "one", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Consume(q.Name, "two", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := c1.Cancel("one", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclarePassive(q.Name, false, true, false, false, nil); err != nil {
		t.Fatalf("deleted with a consumer left: %v", err)
	}
	c2.Close() // the last consumer goes with its channel
	_, err = e.ch.QueueDeclarePassive(q.Name, false, true, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'ad-q' in vhost '/'")
}

func TestPurgeAndDelete(t *testing.T) { forEachType(t, testPurgeAndDelete) }

func testPurgeAndDelete(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "pd-q", nil)
	for range 4 {
		e.publishConfirmed("", q, rmq.Publishing{Body: []byte("x")})
	}
	n, err := e.ch.QueuePurge(q, false)
	if err != nil || n != 4 {
		t.Fatalf("purge %d %v", n, err)
	}
	e.publishConfirmed("", q, rmq.Publishing{Body: []byte("x")})
	// Quorum queues refuse if-empty and if-unused (540, RabbitMQ's
	// rabbit_quorum_queue:delete/4; conformance/quorum_refusals_test.go).
	if !qt.quorum() {
		_, err = e.ch.QueueDelete(q, false, true, false)
		expectErr(t, err, 406, "PRECONDITION_FAILED - queue 'pd-q' in vhost '/' not empty")
		e.ch = e.channel(e.conn)
		c := e.channel(e.conn)
		if _, err := c.Consume(q, "", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		_, err = e.ch.QueueDelete(q, true, false, false)
		expectErr(t, err, 406, "PRECONDITION_FAILED - queue 'pd-q' in vhost '/' in use")
		c.Close()
		e.ch = e.channel(e.conn)
	}
	e.waitCount(q, 1)
	n, err = e.ch.QueueDelete(q, false, false, false)
	if err != nil || n != 1 {
		t.Fatalf("delete %d %v", n, err)
	}
	if _, err := e.ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatalf("deleting a missing queue must succeed: %v", err)
	}
}

func TestNoWaitVariants(t *testing.T) {
	e := setup(t, broker.Options{})
	ch := e.ch
	must(t, ch.ExchangeDeclare("nw-x", "direct", false, true, false, true, nil))
	_, err := ch.QueueDeclare("nw-q", false, true, false, true, nil)
	must(t, err)
	must(t, ch.QueueBind("nw-q", "k", "nw-x", true, nil))
	must(t, ch.ExchangeDeclare("nw-x2", "fanout", false, true, false, true, nil))
	must(t, ch.ExchangeBind("nw-x2", "k", "nw-x", true, nil))
	_, err = ch.QueueDeclarePassive("nw-q", false, true, false, false, nil) // a round trip: the nowait methods are done
	must(t, err)
	e.publishConfirmed("nw-x", "k", rmq.Publishing{Body: []byte("x")})
	if n := e.count("nw-q"); n != 1 {
		t.Fatalf("count %d", n)
	}
	_, err = ch.QueuePurge("nw-q", true)
	must(t, err)
	must(t, ch.ExchangeUnbind("nw-x2", "k", "nw-x", true, nil))
	_, err = ch.QueueDelete("nw-q", false, false, true)
	must(t, err)
	must(t, ch.ExchangeDelete("nw-x2", false, true))
	must(t, ch.ExchangeDelete("nw-x", false, true))
	_, err = ch.QueueDeclarePassive("nw-q", false, true, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'nw-q' in vhost '/'")
}

func asErr(err error, target **rmq.Error) bool {
	e, ok := err.(*rmq.Error)
	if ok {
		*target = e
	}
	return ok
}
