package conformance

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Quorum queues' ordering and limits on a standalone broker: message
// priorities, consumer priorities, single active consumer, x-expires,
// message TTL, x-max-length(-bytes) and x-overflow, and
// x-quorum-initial-group-size. The tests that RabbitMQ 3.10.8 passes too
// run against it with RAILMQ_TEST_URL; those of RabbitMQ 4's behaviour
// (which 3.10.8 lacks) need the in-process broker and cite the 4.x source.

// quorumQueue declares a quorum queue named name (with args besides the
// type) on e's channel, deleted when the test ends.
func (e *env) quorumQueue(name string, args rmq.Table) {
	e.t.Helper()
	a := rmq.Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	if _, err := e.ch.QueueDeclare(name, true, false, false, false, a); err != nil {
		e.t.Fatalf("declare quorum queue %s: %v", name, err)
	}
	e.t.Cleanup(func() { deleteQueue(e.b.URL, name) })
}

// deleteQueue deletes a queue on a connection of its own (a test's end).
func deleteQueue(url, name string) {
	if c, err := rmq.Dial(url); err == nil {
		if ch, err := c.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
		c.Close()
	}
}

// getAll takes every ready message with basic.get (no ack) and returns
// their bodies.
func getAll(t *testing.T, ch *rmq.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
	}
}

// TestQuorumMessagePriorities: a quorum queue without x-max-priority has
// 32 strict priority levels (RabbitMQ 4.3: deps/rabbit/src/
// rabbit_fifo_pq.erl and rabbit_fifo.erl msg_priority at v4.3.5): the
// priority property above 31 counts as 31, none as 4, higher levels go
// first, arrival order within one. 3.10.8's quorum queues have none
// (asked, these publishes came back in publish order). A returned
// message goes before them all (rabbit_fifo take_next_msg: the returns
// queue first).
func TestQuorumMessagePriorities(t *testing.T) {
	testutil.InProcess(t)
	e := quorumSetup(t)
	e.quorumQueue("qq-prio", nil)
	for i, p := range []int{0, 9, 4, 5, 40, 1, -1, 31, 30, 4} {
		pub := rmq.Publishing{Body: []byte(fmt.Sprintf("%d:p%d", i, p))}
		if p >= 0 {
			pub.Priority = uint8(p)
		}
		e.publishConfirmed("", "qq-prio", pub)
	}
	if n := e.count("qq-prio"); n != 10 {
		t.Fatalf("ready %d, want 10", n)
	}
	// amqp091-go sends no priority property for 0 (a zero field is
	// unset), so 0:p0 is a message without one: level 4, in arrival
	// order with the others there.
	want := []string{"4:p40", "7:p31", "8:p30", "1:p9", "3:p5", "0:p0", "2:p4", "6:p-1", "9:p4", "5:p1"}
	if got := getAll(t, e.ch, "qq-prio"); !reflect.DeepEqual(got, want) {
		t.Fatalf("basic.get order %v, want %v", got, want)
	}

	// Returned first: a low one taken and requeued goes before a higher
	// one published meanwhile.
	e.publishConfirmed("", "qq-prio", rmq.Publishing{Body: []byte("low"), Priority: 1})
	low := e.get(e.ch, "qq-prio", false)
	e.publishConfirmed("", "qq-prio", rmq.Publishing{Body: []byte("high"), Priority: 20})
	must(t, low.Nack(false, true))
	e.waitCount("qq-prio", 2)
	if got := getAll(t, e.ch, "qq-prio"); !reflect.DeepEqual(got, []string{"low", "high"}) {
		t.Fatalf("after a requeue: %v, want the returned low first", got)
	}
}

// TestQuorumConsumerPriorities: consumers of a higher x-priority take
// messages while they have room; a lower one gets the rest. RabbitMQ
// 3.10.8 asked (quorum queue, prefetch 2 each, x-priority 1 and 5, five
// publishes): "lo [2 3] hi [0 1]".
func TestQuorumConsumerPriorities(t *testing.T) {
	e := quorumSetup(t)
	e.quorumQueue("qq-cprio", nil)
	consume := func(tag string, prio int) <-chan rmq.Delivery {
		ch := e.channel(dial(t, e.b.URL))
		must(t, ch.Qos(2, 0, false))
		ds, err := ch.Consume("qq-cprio", tag, false, false, false, false, rmq.Table{"x-priority": prio})
		must(t, err)
		return ds
	}
	lo := consume("lo", 1)
	hi := consume("hi", 5)
	for i := 0; i < 5; i++ {
		e.publishConfirmed("", "qq-cprio", rmq.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	got := map[string][]string{}
	for _, c := range []struct {
		name string
		ds   <-chan rmq.Delivery
	}{{"hi", hi}, {"hi", hi}, {"lo", lo}, {"lo", lo}} {
		got[c.name] = append(got[c.name], string(recv(t, c.ds).Body))
	}
	if want := map[string][]string{"hi": {"0", "1"}, "lo": {"2", "3"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
	e.waitCount("qq-cprio", 1)
}

// TestQuorumSingleActiveConsumer: with x-single-active-consumer one
// consumer gets the messages, the others wait; when it goes, the next
// takes over (3.10.8 does this too). RabbitMQ 4 adds consumer priorities:
// one of a higher x-priority takes over once the active one has no
// unacked messages, which gets no new ones meanwhile (rabbit_fifo.erl
// activate_next_consumer at v4.3.5; 3.10.8, asked, kept delivering to the
// low one: "after high joined: low [3] high []").
func TestQuorumSingleActiveConsumer(t *testing.T) {
	testutil.InProcess(t)
	e := quorumSetup(t)
	e.quorumQueue("qq-sac", rmq.Table{"x-single-active-consumer": true})
	consume := func(tag string, prio int) (*rmq.Channel, <-chan rmq.Delivery) {
		ch := e.channel(dial(t, e.b.URL))
		must(t, ch.Qos(10, 0, false))
		ds, err := ch.Consume("qq-sac", tag, false, false, false, false, rmq.Table{"x-priority": prio})
		must(t, err)
		return ch, ds
	}
	lowCh, low := consume("low", 1)
	_, low2 := consume("low2", 1)
	e.publishConfirmed("", "qq-sac", rmq.Publishing{Body: []byte("1")})
	e.publishConfirmed("", "qq-sac", rmq.Publishing{Body: []byte("2")})
	if a, b := string(recv(t, low).Body), string(recv(t, low).Body); a != "1" || b != "2" {
		t.Fatalf("low got %s %s", a, b)
	}
	highCh, high := consume("high", 5)
	e.publishConfirmed("", "qq-sac", rmq.Publishing{Body: []byte("3")})
	// low has two unacked: it quiesces, high waits for it.
	none(t, low, 300*time.Millisecond)
	none(t, high, 300*time.Millisecond)
	none(t, low2, 0)
	if n := e.count("qq-sac"); n != 1 {
		t.Fatalf("ready %d while low drains, want 1", n)
	}
	must(t, lowCh.Ack(2, true)) // both
	if d := recv(t, high); string(d.Body) != "3" {
		t.Fatalf("high took over with %q, want 3", d.Body)
	}
	e.publishConfirmed("", "qq-sac", rmq.Publishing{Body: []byte("4")})
	if d := recv(t, high); string(d.Body) != "4" {
		t.Fatalf("high got %q, want 4", d.Body)
	}
	none(t, low, 200*time.Millisecond)
	// high's channel closes with 3 and 4 unacked: they come back,
	// redelivered, to the first waiting one (low before low2).
	must(t, highCh.Close())
	for _, want := range []string{"3", "4"} {
		if d := recv(t, low); string(d.Body) != want || !d.Redelivered {
			t.Fatalf("after high left, low got %q (redelivered %v), want %s redelivered", d.Body, d.Redelivered, want)
		}
	}
	none(t, low2, 200*time.Millisecond)
}

// TestQuorumSingleActiveConsumerTakeover: without priorities, a second
// consumer gets nothing while the first is there, and everything once it
// cancels (RabbitMQ 3.10.8 behaves so; asked).
func TestQuorumSingleActiveConsumerTakeover(t *testing.T) {
	e := quorumSetup(t)
	e.quorumQueue("qq-sac2", rmq.Table{"x-single-active-consumer": true})
	ch1 := e.channel(dial(t, e.b.URL))
	first, err := ch1.Consume("qq-sac2", "first", true, false, false, false, nil)
	must(t, err)
	ch2 := e.channel(dial(t, e.b.URL))
	second, err := ch2.Consume("qq-sac2", "second", true, false, false, false, nil)
	must(t, err)
	for i := 0; i < 3; i++ {
		e.publishConfirmed("", "qq-sac2", rmq.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	for i := 0; i < 3; i++ {
		if d := recv(t, first); string(d.Body) != fmt.Sprint(i) {
			t.Fatalf("first got %q, want %d", d.Body, i)
		}
	}
	none(t, second, 200*time.Millisecond)
	must(t, ch1.Cancel("first", false))
	e.publishConfirmed("", "qq-sac2", rmq.Publishing{Body: []byte("after")})
	if d := recv(t, second); string(d.Body) != "after" {
		t.Fatalf("second got %q after the first's cancel", d.Body)
	}
}

// TestQuorumExpires: x-expires deletes a quorum queue unused for the
// period: no consumer and no basic.get (a publish is no use, nor a
// declare: rabbit_quorum_queue:declare answers {existing, Q} without a
// word to the state machine, in 3.10.8 and v4.3.5). RabbitMQ 3.10.8
// asked, x-expires 2000, each used every 0.7 s: the idle one and the one
// published to were gone within 5 s, the one read by basic.get stayed;
// one redeclared every 0.2 s was deleted after 5 s (its message gone: the
// redeclare made it anew). Its Ra tick, every 5 s, deletes; railmq's
// leader looks every second.
func TestQuorumExpires(t *testing.T) {
	e := quorumSetup(t)
	args := rmq.Table{"x-expires": 1500}
	for _, q := range []string{"qq-exp-idle", "qq-exp-pub", "qq-exp-redecl", "qq-exp-get", "qq-exp-consumed"} {
		e.quorumQueue(q, args)
	}
	e.publishConfirmed("", "qq-exp-redecl", rmq.Publishing{Body: []byte("marker")})
	cch := e.channel(dial(t, e.b.URL))
	_, err := cch.Consume("qq-exp-consumed", "c", true, false, false, false, nil)
	must(t, err)
	exists := func(q string) bool {
		ch := e.channel(dial(t, e.b.URL))
		defer ch.Close()
		_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}
	use := e.channel(dial(t, e.b.URL))
	qa := rmq.Table{"x-queue-type": "quorum", "x-expires": 1500}
	remade := false
	testutil.Eventually(t, 30*time.Second, func() bool {
		st, err := use.QueueDeclare("qq-exp-redecl", true, false, false, false, qa)
		must(t, err)
		remade = remade || st.Messages == 0 // the marker gone: deleted, made anew
		_, _, err = use.Get("qq-exp-get", true)
		must(t, err)
		must(t, use.Publish("", "qq-exp-pub", false, false, rmq.Publishing{Body: []byte("x")}))
		time.Sleep(200 * time.Millisecond) // a use every 0.2 s, well within the 1.5 s
		return !exists("qq-exp-idle") && !exists("qq-exp-pub") && remade
	}, "the idle quorum queue, the one only published to and the one only redeclared expire")
	for _, q := range []string{"qq-exp-get", "qq-exp-consumed"} {
		if !exists(q) {
			t.Errorf("%s expired though in use", q)
		}
	}
	// Its consumer gone, the consumed one expires too.
	must(t, cch.Cancel("c", false))
	testutil.Eventually(t, 30*time.Second, func() bool { return !exists("qq-exp-consumed") },
		"the quorum queue whose consumer left expires")
}

// TestQuorumMessageTTL: x-message-ttl and the expiration property expire
// quorum queue messages, dead-lettered with reason expired; a basic.get
// does not take an expired one (RabbitMQ 3.10.8 asked likewise).
func TestQuorumMessageTTL(t *testing.T) {
	e := quorumSetup(t)
	_, err := e.ch.QueueDeclare("qq-ttl-dlq", true, false, false, false, nil)
	must(t, err)
	t.Cleanup(func() { deleteQueue(e.b.URL, "qq-ttl-dlq") })
	e.quorumQueue("qq-ttl", rmq.Table{"x-message-ttl": 300, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "qq-ttl-dlq"})
	e.publishConfirmed("", "qq-ttl", rmq.Publishing{Body: []byte("queue-ttl")})
	e.publishConfirmed("", "qq-ttl", rmq.Publishing{Body: []byte("own-ttl"), Expiration: "100"})
	d := e.get(e.ch, "qq-ttl-dlq", true)
	if string(d.Body) != "queue-ttl" || d.Headers["x-first-death-reason"] != "expired" {
		t.Fatalf("dead-lettered %q for %v, want queue-ttl for expired", d.Body, d.Headers["x-first-death-reason"])
	}
	d = e.get(e.ch, "qq-ttl-dlq", true)
	if string(d.Body) != "own-ttl" || d.Headers["x-first-death-reason"] != "expired" {
		t.Fatalf("dead-lettered %q for %v, want own-ttl for expired", d.Body, d.Headers["x-first-death-reason"])
	}
	// An expired message is not what basic.get takes, however soon after.
	e.quorumQueue("qq-ttl0", rmq.Table{"x-message-ttl": 0})
	e.publishConfirmed("", "qq-ttl0", rmq.Publishing{Body: []byte("gone")})
	time.Sleep(20 * time.Millisecond) // past the millisecond it was enqueued in
	if got := getAll(t, e.ch, "qq-ttl0"); len(got) != 0 {
		t.Fatalf("basic.get took %v from a queue of TTL 0", got)
	}
}

// TestQuorumMaxLength: x-max-length drop-head dead-letters the oldest
// with reason maxlen; x-max-length-bytes counts the ready messages only,
// not those a consumer has (RabbitMQ 3.10.8 asked: x-max-length-bytes
// 10, AAAAAA delivered to a consumer, BBBBBB and CCCCCC published:
// CCCCCC left, BBBBBB dead-lettered, x-first-death-reason maxlen).
func TestQuorumMaxLength(t *testing.T) {
	e := quorumSetup(t)
	_, err := e.ch.QueueDeclare("qq-ml-dlq", true, false, false, false, nil)
	must(t, err)
	t.Cleanup(func() { deleteQueue(e.b.URL, "qq-ml-dlq") })
	dlx := rmq.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "qq-ml-dlq"}
	e.quorumQueue("qq-ml", rmq.Table{"x-max-length": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "qq-ml-dlq"})
	for _, b := range []string{"1", "2", "3"} {
		e.publishConfirmed("", "qq-ml", rmq.Publishing{Body: []byte(b)})
	}
	d := e.get(e.ch, "qq-ml-dlq", true)
	if string(d.Body) != "1" || d.Headers["x-first-death-reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q for %v, want 1 for maxlen", d.Body, d.Headers["x-first-death-reason"])
	}
	if got := getAll(t, e.ch, "qq-ml"); !reflect.DeepEqual(got, []string{"2", "3"}) {
		t.Fatalf("left %v, want 2 3", got)
	}

	dlx["x-max-length-bytes"] = 10
	e.quorumQueue("qq-mlb", dlx)
	e.publishConfirmed("", "qq-mlb", rmq.Publishing{Body: []byte("AAAAAA")})
	cch := e.channel(dial(t, e.b.URL))
	must(t, cch.Qos(1, 0, false))
	ds, err := cch.Consume("qq-mlb", "c", false, false, false, false, nil)
	must(t, err)
	if d := recv(t, ds); string(d.Body) != "AAAAAA" {
		t.Fatalf("consumer got %q", d.Body)
	}
	must(t, cch.Cancel("c", false))
	e.publishConfirmed("", "qq-mlb", rmq.Publishing{Body: []byte("BBBBBB")})
	e.publishConfirmed("", "qq-mlb", rmq.Publishing{Body: []byte("CCCCCC")})
	d = e.get(e.ch, "qq-ml-dlq", true)
	if string(d.Body) != "BBBBBB" || d.Headers["x-first-death-reason"] != "maxlen" {
		t.Fatalf("dead-lettered %q for %v, want BBBBBB for maxlen", d.Body, d.Headers["x-first-death-reason"])
	}
	if got := getAll(t, e.ch, "qq-mlb"); !reflect.DeepEqual(got, []string{"CCCCCC"}) {
		t.Fatalf("left ready %v, want CCCCCC (AAAAAA is the consumer's)", got)
	}
}

// TestQuorumRejectPublish: x-overflow reject-publish on a quorum queue
// takes the publish that goes over x-max-length and nacks the next ones,
// until the queue is back at 80% of its limit (rabbit_fifo's soft limit).
// RabbitMQ 3.10.8 asked, x-max-length 2, confirms one by one: ack, ack,
// ack, nack, nack, nack, "messages 3"; after one taken by basic.get and
// acked, nack again.
func TestQuorumRejectPublish(t *testing.T) {
	e := quorumSetup(t)
	e.quorumQueue("qq-rp", rmq.Table{"x-max-length": 2, "x-overflow": "reject-publish"})
	ch := e.channel(e.conn)
	must(t, ch.Confirm(false))
	publish := func(body string) bool {
		dc, err := ch.PublishWithDeferredConfirm("", "qq-rp", false, false, rmq.Publishing{Body: []byte(body)})
		must(t, err)
		return dc.Wait()
	}
	var acks []bool
	for i := 0; i < 6; i++ {
		acks = append(acks, publish(fmt.Sprint(i)))
	}
	if want := []bool{true, true, true, false, false, false}; !reflect.DeepEqual(acks, want) {
		t.Fatalf("confirms %v, want %v", acks, want)
	}
	if n := e.count("qq-rp"); n != 3 {
		t.Fatalf("messages %d, want 3", n)
	}
	d := e.get(e.ch, "qq-rp", false)
	must(t, d.Ack(false))
	if publish("after-ack") {
		t.Fatal("a publish at 2 ready (above 80% of 2) was confirmed")
	}
	e.get(e.ch, "qq-rp", true)
	if !publish("at-1") {
		t.Fatal("a publish at 1 ready (80% of 2) was nacked")
	}
	if got := getAll(t, e.ch, "qq-rp"); !reflect.DeepEqual(got, []string{"2", "at-1"}) {
		t.Fatalf("left %v", got)
	}
}

// TestQuorumInitialGroupSize: x-quorum-initial-group-size must be a
// positive integer, refused in RabbitMQ 3.10.8's words (asked); a size
// above the nodes there are is taken (5 on one node: declared).
func TestQuorumInitialGroupSize(t *testing.T) {
	e := quorumSetup(t)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{0, "PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue 'qq-size' in vhost '/': {value_zero,0}"},
		{-1, "PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue 'qq-size' in vhost '/': {value_negative,-1}"},
		{"x", `PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue 'qq-size' in vhost '/': "expected integer, got longstr"`},
	} {
		ch := e.channel(e.conn)
		_, err := ch.QueueDeclare("qq-size", true, false, false, false, rmq.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": tc.v})
		expectErr(t, err, 406, tc.want)
	}
	e.ch = e.channel(e.conn)
	e.quorumQueue("qq-size", rmq.Table{"x-quorum-initial-group-size": 5})
	e.publishConfirmed("", "qq-size", rmq.Publishing{Body: []byte("x")})
	if got := getAll(t, e.ch, "qq-size"); !reflect.DeepEqual(got, []string{"x"}) {
		t.Fatalf("got %v", got)
	}
}

// quorumSetup is a standalone broker (or RAILMQ_TEST_URL's) for quorum
// queue tests.
func quorumSetup(t *testing.T) *env {
	t.Helper()
	return setup(t, broker.Options{})
}
