package conformance

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Quorum queues' at-least-once dead-lettering (x-dead-letter-strategy
// at-least-once with x-overflow reject-publish; RabbitMQ 4.3.5's
// rabbit_fifo_dlx.erl and rabbit_fifo_dlx_worker.erl, and
// https://www.rabbitmq.com/docs/quorum-queues#dead-lettering): a dead
// letter stays in its queue until the queues its dead-letter exchange
// routes it to have confirmed it. RabbitMQ 3.10.8 (localhost:5672), asked:
// a quorum queue with x-dead-letter-exchange probe-dlx (a fanout with no
// binding), at-least-once, reject-publish, x-max-length 3; 3 messages
// published, each basic.get and basic.nack'ed without requeue; the
// management API then showed messages 3, messages_dlx 3, message_bytes_dlx
// 6, messages_ready 0, messages_unacknowledged 0; a queue bound to
// probe-dlx afterwards got the 3 once RabbitMQ tried again (after its
// dead_letter_worker_publisher_confirm_timeout, 180 s; railmq tries again
// after 2 s). With drop-head instead of reject-publish the strategy falls
// back to at-most-once (rabbit_quorum_queue:dlh): the same nack left
// messages 0, messages_dlx 0.

type qqDLXStats struct {
	Messages     int   `json:"messages"`
	Ready        int   `json:"messages_ready"`
	Unacked      int   `json:"messages_unacknowledged"`
	DLX          int   `json:"messages_dlx"`
	DLXBytes     int64 `json:"message_bytes_dlx"`
	MessageBytes int64 `json:"message_bytes"`
}

func qqStats(t *testing.T, a *api, q string) qqDLXStats {
	t.Helper()
	var s qqDLXStats
	if code := a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &s); code != 200 {
		t.Fatalf("GET %s: %d", q, code)
	}
	return s
}

// nackOne takes q's head with basic.get and nacks it without requeue.
func nackOne(t *testing.T, ch *rmq.Channel, q string) {
	t.Helper()
	var d rmq.Delivery
	testutil.Eventually(t, 5*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(q, false)
		must(t, err)
		return ok
	}, "nothing to get from %s", q)
	must(t, d.Nack(false, false))
}

// acceptedUntilRefused publishes with confirms until one is nacked (at
// most max) and counts those acked.
func acceptedUntilRefused(t *testing.T, ch *rmq.Channel, q string, max int) int {
	t.Helper()
	for i := 0; i < max; i++ {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{Body: []byte(fmt.Sprint("more ", i))})
		must(t, err)
		if !dc.Wait() {
			return i
		}
	}
	return max
}

// TestQuorumQueueDeadLetterAtLeastOnce: a dead letter with no queue to go
// to stays in the source, shown as messages_dlx (in messages, not ready
// or unacked) and taking a place under x-max-length (a publish is refused
// one message sooner than with at-most-once, whose dead letter is gone);
// once a queue is bound to the dead-letter exchange it gets the message,
// with x-death, and the source lets it go.
func TestQuorumQueueDeadLetterAtLeastOnce(t *testing.T) {
	testutil.InProcess(t) // RabbitMQ tries again after 180 s
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	must(t, e.ch.ExchangeDeclare("alo-dlx", "fanout", true, false, false, false, nil))
	args := func(strategy string) rmq.Table {
		return qqArgs("x-dead-letter-exchange", "alo-dlx", "x-dead-letter-strategy", strategy,
			"x-overflow", "reject-publish", "x-max-length", int32(1))
	}
	_, err := e.ch.QueueDeclare("alo-src", true, false, false, false, args("at-least-once"))
	must(t, err)
	_, err = e.ch.QueueDeclare("amo-src", true, false, false, false, args("at-most-once"))
	must(t, err)
	ch := e.channel(e.conn)
	must(t, ch.Confirm(false))
	accepted := map[string]int{}
	for _, q := range []string{"alo-src", "amo-src"} {
		publishPersistent(t, ch, "", q, "first")
		nackOne(t, e.ch, q)
		accepted[q] = acceptedUntilRefused(t, ch, q, 3)
	}
	if accepted["alo-src"]+1 != accepted["amo-src"] {
		t.Fatalf("after a dead letter, %d more publishes accepted at least once, %d at most once: the held one takes no place under x-max-length",
			accepted["alo-src"], accepted["amo-src"])
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		s := qqStats(t, a, "alo-src")
		return s.DLX == 1 && s.DLXBytes == 5 && s.Messages == 1+accepted["alo-src"] && s.Ready == accepted["alo-src"] && s.Unacked == 0
	}, "alo-src: %+v, want 1 dead letter of 5 bytes held, in messages, not ready nor unacked", qqStats(t, a, "alo-src"))
	if s := qqStats(t, a, "amo-src"); s.DLX != 0 || s.Messages != accepted["amo-src"] {
		t.Fatalf("amo-src: %+v, want its dead letter gone", s)
	}

	// A queue to go to: the dead letter goes there and leaves the source.
	_, err = e.ch.QueueDeclare("alo-dead", true, false, false, false, nil)
	must(t, err)
	must(t, e.ch.QueueBind("alo-dead", "", "alo-dlx", false, nil))
	testutil.Eventually(t, 30*time.Second, func() bool {
		q, err := e.ch.QueueDeclarePassive("alo-dead", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	}, "the held dead letter did not reach the queue bound since")
	testutil.Eventually(t, 10*time.Second, func() bool {
		s := qqStats(t, a, "alo-src")
		return s.DLX == 0 && s.Messages == accepted["alo-src"]
	}, "alo-src still holds its dead letter: %+v", qqStats(t, a, "alo-src"))
	d, ok, err := e.ch.Get("alo-dead", true)
	must(t, err)
	if !ok || string(d.Body) != "first" {
		t.Fatalf("alo-dead holds %q", d.Body)
	}
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("x-death %v", d.Headers["x-death"])
	}
	death, _ := deaths[0].(rmq.Table)
	if death["queue"] != "alo-src" || death["reason"] != "rejected" || death["exchange"] != "" {
		t.Fatalf("x-death %v", death)
	}
	// Room again once the source is back under 80% of its limit
	// (RabbitMQ 4.3's reject-publish is a soft limit: rabbit_fifo
	// ?LOW_LIMIT, cluster/fifo_overflow.go): one taken, it takes a
	// publish it refused before.
	if _, ok, err := e.ch.Get("alo-src", true); err != nil || !ok {
		t.Fatalf("get from alo-src: %v %v", ok, err)
	}
	if n := acceptedUntilRefused(t, ch, "alo-src", 1); n != 1 {
		t.Fatal("a publish is still refused after the dead letter left")
	}
}

// TestQuorumQueueDeadLetterAtLeastOnceRestart: a dead letter whose
// dead-letter exchange does not exist is held, across a restart of the
// node (its group elects itself leader again and sends what the log
// holds); once the exchange and a queue bound to it exist, it goes
// there.
func TestQuorumQueueDeadLetterAtLeastOnceRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	_, err := ch.QueueDeclare("alo-r", true, false, false, false, qqArgs("x-dead-letter-exchange", "alo-later",
		"x-dead-letter-strategy", "at-least-once", "x-overflow", "reject-publish"))
	must(t, err)
	publishPersistent(t, ch, "", "alo-r", "kept 1", "kept 2")
	ch = reopen(t, c)
	nackOne(t, ch, "alo-r")
	nackOne(t, ch, "alo-r")
	stats := func() qqDLXStats {
		code, body := r.mgmtCall("GET", "/api/queues/%2F/alo-r", nil)
		if code != 200 {
			t.Fatalf("GET alo-r: %d %s", code, body)
		}
		var s qqDLXStats
		must(t, json.Unmarshal(body, &s))
		return s
	}
	testutil.Eventually(t, 5*time.Second, func() bool { s := stats(); return s.DLX == 2 && s.Messages == 2 },
		"alo-r: %+v, want its 2 dead letters held", stats())
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	if s := stats(); s.DLX != 2 || s.Messages != 2 || s.Ready != 0 {
		t.Fatalf("after the restart alo-r: %+v, want its 2 dead letters held", s)
	}
	must(t, ch.ExchangeDeclare("alo-later", "fanout", true, false, false, false, nil))
	_, err = ch.QueueDeclare("alo-r-dead", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("alo-r-dead", "", "alo-later", false, nil))
	testutil.Eventually(t, 30*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive("alo-r-dead", true, false, false, false, nil)
		return err == nil && q.Messages == 2
	}, "the held dead letters did not reach the queue bound after the restart")
	testutil.Eventually(t, 10*time.Second, func() bool { s := stats(); return s.DLX == 0 && s.Messages == 0 },
		"alo-r still holds: %+v", stats())
	for _, want := range []string{"kept 1", "kept 2"} {
		d, ok, err := ch.Get("alo-r-dead", true)
		must(t, err)
		if !ok || string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
	}
}

// TestQuorumQueueDeadLetterAtMostOnceFallback: at-least-once without
// reject-publish falls back to at-most-once, as RabbitMQ does
// (rabbit_quorum_queue:dlh, with a warning): a dead letter with nowhere
// to go is gone at once.
func TestQuorumQueueDeadLetterAtMostOnceFallback(t *testing.T) {
	testutil.InProcess(t) // RabbitMQ's management figures lag 5 s
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	dropQueues(t, e.b.URL, "alo-dh")
	_, err := e.ch.QueueDeclare("alo-dh", true, false, false, false, qqArgs("x-dead-letter-exchange", "alo-nosuch",
		"x-dead-letter-strategy", "at-least-once"))
	must(t, err)
	ch := e.channel(e.conn)
	publishPersistent(t, ch, "", "alo-dh", "a")
	nackOne(t, e.ch, "alo-dh")
	testutil.Eventually(t, 10*time.Second, func() bool {
		s := qqStats(t, a, "alo-dh")
		return s.Messages == 0 && s.DLX == 0
	}, "alo-dh: %+v, want the dead letter gone", qqStats(t, a, "alo-dh"))
}

// TestQuorumQueueRejectPublishDLX: x-overflow reject-publish-dlx is
// taken by a quorum queue but not followed: RabbitMQ 3.10.8 (a quorum
// queue with x-max-length 1 and a dead-letter exchange) confirmed 3
// publishes, kept the last, and dead-lettered the other 2: drop-head
// (rabbit_quorum_queue:overflow logs "Invalid overflow strategy").
func TestQuorumQueueRejectPublishDLX(t *testing.T) {
	e := setup(t, broker.Options{})
	dropQueues(t, e.b.URL, "rpdlx-src", "rpdlx-dead")
	must(t, e.ch.ExchangeDeclare("rpdlx-x", "fanout", false, true, false, false, nil))
	_, err := e.ch.QueueDeclare("rpdlx-dead", false, false, false, false, nil)
	must(t, err)
	must(t, e.ch.QueueBind("rpdlx-dead", "", "rpdlx-x", false, nil))
	_, err = e.ch.QueueDeclare("rpdlx-src", true, false, false, false, qqArgs("x-overflow", "reject-publish-dlx",
		"x-max-length", int32(1), "x-dead-letter-exchange", "rpdlx-x"))
	must(t, err)
	ch := e.channel(e.conn)
	publishPersistent(t, ch, "", "rpdlx-src", "m0", "m1", "m2")
	testutil.Eventually(t, 10*time.Second, func() bool {
		q, err := e.ch.QueueDeclarePassive("rpdlx-dead", false, false, false, false, nil)
		return err == nil && q.Messages == 2
	}, "the 2 dropped heads were not dead-lettered")
	d, ok, err := e.ch.Get("rpdlx-src", true)
	must(t, err)
	if !ok || string(d.Body) != "m2" {
		t.Fatalf("the queue's head is %q, want m2", d.Body)
	}
}
