package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func (e *env) fill(q string, n int) {
	e.t.Helper()
	for i := 1; i <= n; i++ {
		e.publishConfirmed("", q, rmq.Publishing{Body: []byte(fmt.Sprintf("m%d", i))})
	}
}

func TestConsumeBasics(t *testing.T) { forEachType(t, testConsumeBasics) }

func testConsumeBasics(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	ds := e.consume(q, false)
	e.fill(q, 3)
	for i := 1; i <= 3; i++ {
		d := recv(t, ds)
		if string(d.Body) != fmt.Sprintf("m%d", i) || d.Redelivered {
			t.Fatalf("delivery %d: %q redelivered=%v tag=%q", i, d.Body, d.Redelivered, d.ConsumerTag)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServerGeneratedConsumerTag(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(1, &amqp.QueueDeclare{Queue: "", Exclusive: true})
	ok := r.Expect((*amqp.QueueDeclareOk)(nil)).(*amqp.QueueDeclareOk)
	r.Send(1, &amqp.BasicConsume{Queue: ok.Queue})
	tag := r.Expect((*amqp.BasicConsumeOk)(nil)).(*amqp.BasicConsumeOk).ConsumerTag
	if !strings.HasPrefix(tag, "amq.ctag-") || len(tag) != len("amq.ctag-")+22 {
		t.Fatalf("tag %q", tag)
	}
}

func TestConsumerTagReuse(t *testing.T) { forEachType(t, testConsumerTagReuse) }

func testConsumerTagReuse(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	if _, err := e.ch.Consume(q, "tag1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := e.ch.Consume(q, "tag1", false, false, false, false, nil)
	expectErr(t, err, 530, "NOT_ALLOWED - attempt to reuse consumer tag 'tag1'")
}

// An exclusive consumer keeps every other consumer off a classic queue.
// A quorum queue ignores the flag: RabbitMQ checks it only in the classic
// queue process (v4.3.5 deps/rabbit/src/rabbit_amqqueue_process.erl
// exclusive_consume_unavailable; rabbit_quorum_queue:consume/3 passes it
// on to the metrics only), and RabbitMQ 3.10.8 lets a second consumer on
// beside an exclusive one, and an exclusive one beside others.
func TestExclusiveConsumer(t *testing.T) { forEachType(t, testExclusiveConsumer) }

func testExclusiveConsumer(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "xc-q", nil)
	if _, err := e.ch.Consume(q, "first", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if qt.quorum() {
		ch := e.channel(e.conn)
		second, err := ch.Consume(q, "second", false, false, false, false, nil)
		must(t, err)
		c2 := e.channel(e.conn)
		third, err := c2.Consume(q, "third", false, true, false, false, nil)
		must(t, err)
		must(t, e.ch.Cancel("first", false))
		e.fill(q, 2) // round robin: one each
		recv(t, second)
		recv(t, third)
		return
	}
	ch := e.channel(e.conn)
	_, err := ch.Consume(q, "second", false, false, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - queue 'xc-q' in vhost '/' in exclusive use")
	if err := e.ch.Cancel("first", false); err != nil {
		t.Fatal(err)
	}
	ch = e.channel(e.conn)
	if _, err := ch.Consume(q, "second", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c2 := e.channel(e.conn)
	_, err = c2.Consume(q, "third", false, true, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - queue 'xc-q' in vhost '/' in exclusive use")
}

func TestNoAckConsumer(t *testing.T) { forEachType(t, testNoAckConsumer) }

func testNoAckConsumer(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	ds := e.consume(q, true)
	e.fill(q, 50)
	for i := 1; i <= 50; i++ {
		if d := recv(t, ds); string(d.Body) != fmt.Sprintf("m%d", i) {
			t.Fatalf("got %q", d.Body)
		}
	}
	e.ch.Close() // nothing to requeue
	e.ch = e.channel(e.conn)
	if n := e.count(q); n != 0 {
		t.Fatalf("%d requeued after no-ack deliveries", n)
	}
}

func TestCompetingConsumersRoundRobin(t *testing.T) { forEachType(t, testCompetingConsumersRoundRobin) }

func testCompetingConsumersRoundRobin(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	c1, c2 := e.channel(e.conn), e.channel(e.conn)
	d1, err := c1.Consume(q, "c1", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := c2.Consume(q, "c2", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 10)
	got1, got2 := 0, 0
	for range 10 {
		select {
		case <-d1:
			got1++
		case <-d2:
			got2++
		case <-time.After(5 * time.Second):
			t.Fatal("missing deliveries")
		}
	}
	if got1 != 5 || got2 != 5 {
		t.Fatalf("split %d/%d, want 5/5", got1, got2)
	}
}

func TestConsumerPriorities(t *testing.T) { forEachType(t, testConsumerPriorities) }

func testConsumerPriorities(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	lo, hi := e.channel(e.conn), e.channel(e.conn)
	if err := hi.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	dlo, err := lo.Consume(q, "lo", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	dhi, err := hi.Consume(q, "hi", false, false, false, false, rmq.Table{"x-priority": int32(10)})
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 5)
	// The high-priority consumer takes all it can (2); the rest go to the
	// low-priority one.
	for range 2 {
		recv(t, dhi)
	}
	for range 3 {
		recv(t, dlo)
	}
	none(t, dhi, 100*time.Millisecond)
}

func TestOneConsumerManyQueues(t *testing.T) { forEachType(t, testOneConsumerManyQueues) }

func testOneConsumerManyQueues(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	qa, qb := e.typedQueue(qt, "", nil), e.typedQueue(qt, "", nil)
	da, err := e.ch.Consume(qa, "a", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := e.ch.Consume(qb, "b", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish("", qa, "to a")
	e.publish("", qb, "to b")
	a, b := recv(t, da), recv(t, db)
	if string(a.Body) != "to a" || string(b.Body) != "to b" {
		t.Fatalf("%q %q", a.Body, b.Body)
	}
	// Delivery tags are per channel, across consumers.
	if a.DeliveryTag == b.DeliveryTag {
		t.Fatalf("same delivery tag %d", a.DeliveryTag)
	}
	if err := e.ch.Ack(max(a.DeliveryTag, b.DeliveryTag), true); err != nil {
		t.Fatal(err)
	}
}

func TestCancelAndServerCancel(t *testing.T) { forEachType(t, testCancelAndServerCancel) }

func testCancelAndServerCancel(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "cancel-q", nil)
	ds, err := e.ch.Consume(q, "mine", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ch.Cancel("mine", false); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ds:
		if ok {
			t.Fatal("deliveries after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delivery channel still open 5s after cancel")
	}
	// Deleting the queue cancels its consumers; amqp091-go advertises
	// consumer_cancel_notify, so it is told.
	ch := e.channel(e.conn)
	cancels := ch.NotifyCancel(make(chan string, 1))
	if _, err := ch.Consume(q, "doomed", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "doomed" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel from the server")
	}
}

func TestPrefetchPerConsumer(t *testing.T) { forEachType(t, testPrefetchPerConsumer) }

func testPrefetchPerConsumer(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	slow, fast := e.channel(e.conn), e.channel(e.conn)
	for _, ch := range []*rmq.Channel{slow, fast} {
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	dslow, err := slow.Consume(q, "slow", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	dfast, err := fast.Consume(q, "fast", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 10)
	held := recv(t, dslow) // never acked
	for range 9 {
		d := recv(t, dfast)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	none(t, dslow, 100*time.Millisecond)
	_ = held
}

func TestPrefetchGlobalPerChannel(t *testing.T) {
	e := setup(t, broker.Options{})
	qa, qb := e.queue("", nil), e.queue("", nil)
	if err := e.ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	da, err := e.ch.Consume(qa, "a", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := e.ch.Consume(qb, "b", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.fill(qa, 5)
	e.fill(qb, 5)
	got := 0
	var last rmq.Delivery
	for {
		select {
		case last = <-da:
			got++
			continue
		case last = <-db:
			got++
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if got != 3 {
		t.Fatalf("%d unacked across the channel, want 3 (global qos)", got)
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
}

func TestPrefetchBothLimits(t *testing.T) {
	e := setup(t, broker.Options{})
	qa, qb := e.queue("", nil), e.queue("", nil)
	if err := e.ch.Qos(2, 0, false); err != nil { // per consumer
		t.Fatal(err)
	}
	if err := e.ch.Qos(3, 0, true); err != nil { // per channel
		t.Fatal(err)
	}
	da, _ := e.ch.Consume(qa, "a", false, false, false, false, nil)
	db, _ := e.ch.Consume(qb, "b", false, false, false, false, nil)
	e.fill(qa, 5)
	e.fill(qb, 5)
	ga, gb := 0, 0
	for {
		select {
		case <-da:
			ga++
			continue
		case <-db:
			gb++
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if ga > 2 || gb > 2 || ga+gb != 3 {
		t.Fatalf("a=%d b=%d, want at most 2 each and 3 in all", ga, gb)
	}
}

func TestQosAppliesToLaterConsumers(t *testing.T) { forEachType(t, testQosAppliesToLaterConsumers) }

func testQosAppliesToLaterConsumers(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	if err := e.ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds := e.consume(q, false)
	if err := e.ch.Qos(10, 0, false); err != nil { // does not change the existing consumer
		t.Fatal(err)
	}
	e.fill(q, 5)
	recv(t, ds)
	none(t, ds, 200*time.Millisecond)
}

func TestAckErrors(t *testing.T) { forEachType(t, testAckErrors) }

func testAckErrors(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	e.fill(q, 1)
	d := e.get(e.ch, q, false)
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	_ = e.ch.Ack(d.DeliveryTag, false) // twice
	expectErr(t, closeErr(t, closed, "channel after a double ack"), 406, fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", d.DeliveryTag))
	ch := e.channel(e.conn)
	closed = ch.NotifyClose(make(chan *rmq.Error, 1))
	_ = ch.Ack(42, false)
	expectErr(t, closeErr(t, closed, "channel after an ack of an unknown tag"), 406, "PRECONDITION_FAILED - unknown delivery tag 42")
	ch = e.channel(e.conn)
	closed = ch.NotifyClose(make(chan *rmq.Error, 1))
	_ = ch.Reject(7, true)
	expectErr(t, closeErr(t, closed, "channel after a reject of an unknown tag"), 406, "PRECONDITION_FAILED - unknown delivery tag 7")
}

func TestAckMultipleAndNackMultiple(t *testing.T) { forEachType(t, testAckMultipleAndNackMultiple) }

func testAckMultipleAndNackMultiple(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	e.fill(q, 6)
	var ds []rmq.Delivery
	for range 6 {
		ds = append(ds, e.get(e.ch, q, false))
	}
	if err := e.ch.Ack(ds[2].DeliveryTag, true); err != nil { // m1..m3
		t.Fatal(err)
	}
	if err := e.ch.Nack(ds[5].DeliveryTag, true, true); err != nil { // m4..m6 back
		t.Fatal(err)
	}
	for i := 4; i <= 6; i++ {
		d := e.get(e.ch, q, true)
		if string(d.Body) != fmt.Sprintf("m%d", i) || !d.Redelivered {
			t.Fatalf("got %q redelivered=%v", d.Body, d.Redelivered)
		}
	}
}

func TestGetAndGetEmpty(t *testing.T) { forEachType(t, testGetAndGetEmpty) }

func testGetAndGetEmpty(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	if _, ok, err := e.ch.Get(q, true); ok || err != nil {
		t.Fatalf("get on empty queue: %v %v", ok, err)
	}
	e.fill(q, 3)
	d, ok, err := e.ch.Get(q, true)
	if !ok || err != nil || d.MessageCount != 2 || string(d.Body) != "m1" {
		t.Fatalf("get-ok %q count=%d %v %v", d.Body, d.MessageCount, ok, err)
	}
}

// Requeued messages go back to their original place, ahead of later ones,
// in a classic queue. A quorum queue puts them in its returns queue,
// delivered before the rest in the order they came back (RabbitMQ 4,
// whose quorum queues have a delivery limit of 20 unless told otherwise:
// v4.3.5 deps/rabbit/src/rabbit_fifo.erl return_one/6 appends to the
// returns, take_next_msg serves them first). RabbitMQ 3.10.8 answers the
// same once the queue has a delivery limit (it has no default one): m1,
// m3, m2, m4, m5, redelivered with x-delivery-count 1.
func TestRequeueOrder(t *testing.T) { forEachType(t, testRequeueOrder) }

func testRequeueOrder(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	var args rmq.Table
	want := []int{1, 2, 3, 4, 5}
	if qt.quorum() {
		args = rmq.Table{"x-delivery-limit": int32(20)} // RabbitMQ 4's default
		want = []int{1, 3, 2, 4, 5}
	}
	q := e.typedQueue(qt, "", args)
	e.fill(q, 5)
	var ds []rmq.Delivery
	for range 3 {
		ds = append(ds, e.get(e.ch, q, false))
	}
	for _, i := range []int{0, 2, 1} { // nack m1, m3, m2
		if err := ds[i].Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	for pos, i := range want {
		d := e.get(e.ch, q, true)
		if string(d.Body) != fmt.Sprintf("m%d", i) || d.Redelivered != (i <= 3) {
			t.Fatalf("position %d: %q redelivered=%v, want m%d", pos+1, d.Body, d.Redelivered, i)
		}
	}
}

func TestRequeueOnChannelClose(t *testing.T) { forEachType(t, testRequeueOnChannelClose) }

func testRequeueOnChannelClose(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	e.fill(q, 4)
	c1 := e.channel(e.conn)
	ds, err := c1.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		recv(t, ds)
	}
	c1.Close()
	c2 := e.channel(e.conn)
	ds2, err := c2.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		d := recv(t, ds2)
		if string(d.Body) != fmt.Sprintf("m%d", i) {
			t.Fatalf("position %d: %q", i, d.Body)
		}
	}
}

func TestRequeueOnConnectionLoss(t *testing.T) { forEachType(t, testRequeueOnConnectionLoss) }

func testRequeueOnConnectionLoss(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "loss-q", nil)
	e.fill(q, 2)
	// A raw client takes both and vanishes without a close.
	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(nil, 0, true)
	r.Write(frameConsume(q, false))
	for range 2 {
		r.Next() // deliver
		r.Next() // header
		r.Next() // body
	}
	r.NC.Close()
	e.waitCount(q, 2)
	d := e.get(e.ch, q, true)
	if !d.Redelivered || string(d.Body) != "m1" {
		t.Fatalf("got %q redelivered=%v", d.Body, d.Redelivered)
	}
}

func TestRecoverRequeues(t *testing.T) { forEachType(t, testRecoverRequeues) }

func testRecoverRequeues(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	e.fill(q, 1)
	e.get(e.ch, q, false)
	//lint:ignore SA1019 basic.recover is the behaviour under test
	if err := e.ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	d := e.get(e.ch, q, true)
	if !d.Redelivered {
		t.Fatal("not flagged redelivered")
	}
}

func TestRejectWithoutRequeueDrops(t *testing.T) { forEachType(t, testRejectWithoutRequeueDrops) }

func testRejectWithoutRequeueDrops(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	e.fill(q, 1)
	d := e.get(e.ch, q, false)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d left", n)
	}
}

func TestConsumerTimeout(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	q := e.queue("", rmq.Table{"x-consumer-timeout": int32(300)})
	c1 := e.channel(e.conn)
	closed := c1.NotifyClose(make(chan *rmq.Error, 1))
	ds, err := c1.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 1)
	recv(t, ds) // held, never acked
	select {
	case err := <-closed:
		expectErr(t, err, 406, "")
		if !strings.HasPrefix(err.Reason, "PRECONDITION_FAILED - delivery acknowledgement on channel ") ||
			!strings.Contains(err.Reason, "timed out. Timeout value used: 300 ms. This timeout value can be configured, see consumers doc guide to learn more") {
			t.Fatalf("text %q", err.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	if e.conn.IsClosed() {
		t.Fatal("the connection must stay open")
	}
	d := e.get(e.ch, q, true)
	if !d.Redelivered {
		t.Fatal("not redelivered")
	}
}

// x-consumer-timeout in basic.consume's arguments overrides the queue's
// and the broker's for that consumer only (RabbitMQ's
// rabbit_queue_type:consume): a long job gets a longer lease than short
// ones on the same queue.
func TestPerConsumerTimeout(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	q := e.queue("", rmq.Table{"x-consumer-timeout": int32(300)})
	// The long job: 60 s lease on a queue whose lease is 300 ms.
	long := e.channel(e.conn)
	longClosed := long.NotifyClose(make(chan *rmq.Error, 1))
	ds, err := long.Consume(q, "long", false, false, false, false, rmq.Table{"x-consumer-timeout": int64(60000)})
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q, 1)
	recv(t, ds) // held
	// The short job, on a queue with no timeout of its own and the broker's
	// 30 min default: 200 ms.
	q2 := e.queue("", nil)
	short := e.channel(e.conn)
	shortClosed := short.NotifyClose(make(chan *rmq.Error, 1))
	ds2, err := short.Consume(q2, "short", false, false, false, false, rmq.Table{"x-consumer-timeout": int32(200)})
	if err != nil {
		t.Fatal(err)
	}
	e.fill(q2, 1)
	recv(t, ds2) // held
	select {
	case err := <-shortClosed:
		expectErr(t, err, 406, "")
		if !strings.Contains(err.Reason, "Timeout value used: 200 ms.") {
			t.Fatalf("text %q", err.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the 200 ms consumer's channel was not closed")
	}
	// Well past the queue's 300 ms, the 60 s consumer still holds its
	// delivery.
	time.Sleep(500 * time.Millisecond) // the behaviour under test is time itself
	select {
	case err := <-longClosed:
		t.Fatalf("the 60 s consumer was timed out at the queue's 300 ms: %v", err)
	default:
	}
	// A bad value is refused.
	bad := e.channel(e.conn)
	_, err = bad.Consume(q, "", false, false, false, false, rmq.Table{"x-consumer-timeout": "soon"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for consumer: expected integer")
}

func TestBrokerConsumerTimeout(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{ConsumerTimeout: 200 * time.Millisecond, TimeoutCheckInterval: 50 * time.Millisecond})
	q := e.queue("", nil)
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	e.fill(q, 1)
	e.get(e.ch, q, false) // basic.get deliveries time out too
	select {
	case err := <-closed:
		expectErr(t, err, 406, "")
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
}

// A consumer whose client stops reading stalls only itself.
func TestStalledConsumerIsolated(t *testing.T) {
	e := setup(t, broker.Options{})
	q1, q2 := e.queue("stall-1", nil), e.queue("stall-2", nil)
	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(nil, 0, true)
	r.Write(frameConsume(q1, true)) // no-ack consumer that never reads
	body := make([]byte, 64<<10)
	for range 400 { // 25 MiB: more than the socket buffers and the outbound cap
		if err := e.ch.Publish("", q1, false, false, rmq.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	// Another consumer of the same queue and one of another queue flow.
	c2 := e.channel(e.conn)
	d1, err := c2.Consume(q1, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := c2.Consume(q2, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish("", q2, "other queue")
	if d := recv(t, d2); string(d.Body) != "other queue" {
		t.Fatalf("got %q", d.Body)
	}
	recv(t, d1)
}

// rawPublisher declares queue q with a no-ack consumer on the test's
// connection, and opens a raw connection to publish to it.
func rawPublisher(t *testing.T, q string) (<-chan rmq.Delivery, *testutil.Raw) {
	e := setup(t, broker.Options{})
	e.queue(q, nil)
	ds := e.consume(q, true)
	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(nil, 0, true)
	return ds, r
}

// promptly fails unless body arrives within a second: sooner than the
// consumer connection's writer would look on its own (a heartbeat tick).
func promptly(t *testing.T, ds <-chan rmq.Delivery, body, why string) {
	t.Helper()
	select {
	case d := <-ds:
		if string(d.Body) != body {
			t.Fatalf("got %q, want %q", d.Body, body)
		}
	case <-time.After(time.Second):
		t.Fatal(why)
	}
}

func rawPublish(b []byte, q, body string) []byte {
	b = amqp.AppendMethodFrame(b, 1, &amqp.BasicPublish{RoutingKey: q})
	return amqp.AppendContent(b, 1, amqp.ClassBasic, nil, []byte(body), 131072)
}

// A publisher's reader writes the deliveries its publishes made to other
// connections before it waits for more input, also when that input stops
// in the middle of a frame.
func TestDeliveryNotHeldByStalledPublisher(t *testing.T) {
	ds, r := rawPublisher(t, "half-frame")
	b := rawPublish(rawPublish(nil, "half-frame", "whole"), "half-frame", "never finished")
	r.Write(b[:len(b)-5]) // the second body frame, cut short
	promptly(t, ds, "whole", "the delivery was held while its publisher's reader waited")
	none(t, ds, 200*time.Millisecond)
}

// A publisher that closes its connection right after publishing: what its
// reader delivered still goes out promptly.
func TestDeliveryNotHeldByClosingPublisher(t *testing.T) {
	ds, r := rawPublisher(t, "publish-and-close")
	b := rawPublish(nil, "publish-and-close", "last words")
	r.Write(amqp.AppendMethodFrame(b, 0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "bye"}))
	r.Expect(&amqp.ConnectionCloseOk{})
	promptly(t, ds, "last words", "the delivery was held after its publisher closed")
}

// x-priority must be an integer: anything else closes the channel with
// RabbitMQ's 406, which names the queue and the type; an integer past
// int32 is taken.
func TestConsumerPriorityArgument(t *testing.T) { forEachType(t, testConsumerPriorityArgument) }

func testConsumerPriorityArgument(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "prio-arg-q", nil)
	ch := e.channel(e.conn)
	_, err := ch.Consume(q, "", false, false, false, false, rmq.Table{"x-priority": "5"})
	expectErr(t, err, 406, `PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'prio-arg-q' in vhost '/': "expected integer, got longstr"`)
	ch = e.channel(e.conn)
	if _, err := ch.Consume(q, "big", false, false, false, false, rmq.Table{"x-priority": int64(1) << 40}); err != nil {
		t.Fatalf("x-priority 2^40: %v", err)
	}
}

// A channel that deletes a queue its own consumer is on gets queue.delete-ok
// first, then basic.cancel, as from RabbitMQ (whose queue tells the
// channel of the cancel by a message it handles after the delete). amqplib
// relies on it: its "cancelled consumer" test closes the channel on the
// cancel, and a delete-ok still to come fails with "Channel ended, no
// reply will be forthcoming".
func TestDeleteOkBeforeOwnCancel(t *testing.T) { forEachType(t, testDeleteOkBeforeOwnCancel) }

func testDeleteOkBeforeOwnCancel(t *testing.T, qt queueKind) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(amqp.Table{"consumer_cancel_notify": true}, 0, true)
	decl := &amqp.QueueDeclare{Queue: "del-order-q"}
	if qt.quorum() {
		decl.Durable, decl.Arguments = true, amqp.Table{"x-queue-type": "quorum"}
	}
	r.Send(1, decl)
	r.Expect((*amqp.QueueDeclareOk)(nil))
	for i := range 20 {
		tag := fmt.Sprintf("c%d", i)
		r.Send(1, &amqp.BasicConsume{Queue: "del-order-q", ConsumerTag: tag})
		r.Expect((*amqp.BasicConsumeOk)(nil))
	}
	r.Send(1, &amqp.QueueDelete{Queue: "del-order-q"})
	r.Expect((*amqp.QueueDeleteOk)(nil))
	for range 20 {
		r.Expect((*amqp.BasicCancel)(nil))
	}
}
