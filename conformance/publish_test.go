package conformance

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func TestLargeMessageOverSmallFrames(t *testing.T) { forEachType(t, testLargeMessageOverSmallFrames) }

func testLargeMessageOverSmallFrames(t *testing.T, qt queueKind) {
	b := testutil.Start(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{FrameSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := &env{t: t, b: b, conn: c}
	e.ch = e.channel(c)
	q := e.typedQueue(qt, "", nil)
	body := bytes.Repeat([]byte("0123456789abcdef"), 100000/16) // 100 KB: 25 body frames each way
	e.publishConfirmed("", q, rmq.Publishing{Body: body})
	if d := e.get(e.ch, q, true); !bytes.Equal(d.Body, body) {
		t.Fatalf("body of %d bytes came back as %d", len(body), len(d.Body))
	}
}

func TestPropertiesReachConsumer(t *testing.T) { forEachType(t, testPropertiesReachConsumer) }

func testPropertiesReachConsumer(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	ts := time.Unix(1700000000, 0)
	pub := rmq.Publishing{
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 7,
		CorrelationId: "corr", ReplyTo: "reply", Expiration: "600000", MessageId: "mid", Timestamp: ts,
		Type: "kind", UserId: "guest", AppId: "app",
		Headers: rmq.Table{
			"bool": true, "i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16),
			"i32": int32(-32), "u32": uint32(32), "i64": int64(-64), "f32": float32(3.5), "f64": 6.25,
			"dec": rmq.Decimal{Scale: 2, Value: 12345}, "str": "text", "bytes": []byte{0, 1, 2},
			"arr": []interface{}{int32(1), "two"}, "tbl": rmq.Table{"k": "v"}, "void": nil, "ts": ts,
		},
		Body: []byte("payload"),
	}
	e.publishConfirmed("", q, pub)
	d := e.get(e.ch, q, true)
	if d.ContentType != pub.ContentType || d.ContentEncoding != pub.ContentEncoding || d.DeliveryMode != 2 ||
		d.Priority != 7 || d.CorrelationId != "corr" || d.ReplyTo != "reply" || d.Expiration != "600000" ||
		d.MessageId != "mid" || !d.Timestamp.Equal(ts) || d.Type != "kind" || d.UserId != "guest" || d.AppId != "app" {
		t.Fatalf("properties changed: %+v", d)
	}
	for k, v := range pub.Headers {
		if fmt.Sprintf("%#v", d.Headers[k]) != fmt.Sprintf("%#v", v) && k != "ts" {
			t.Errorf("header %s: got %#v want %#v", k, d.Headers[k], v)
		}
	}
}

// The content header's properties reach the consumer byte for byte.
func TestPropertiesByteForByte(t *testing.T) { forEachType(t, testPropertiesByteForByte) }

func testPropertiesByteForByte(t *testing.T, qt queueKind) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	decl := &amqp.QueueDeclare{Queue: "raw-q", AutoDelete: true}
	if qt.quorum() {
		decl = &amqp.QueueDeclare{Queue: "raw-q", Durable: true, Arguments: amqp.Table{"x-queue-type": "quorum"}}
	}
	r.Send(1, decl)
	r.Expect((*amqp.QueueDeclareOk)(nil))
	// Header keys in an order a Go map would not keep.
	props := []byte{0xe0, 0x00} // content-type, content-encoding, headers
	props = append(props, 2, 'a', '/')
	props = append(props, 1, 'z')
	tbl := []byte{1, 'z', 'b', 0xff, 1, 'a', 'S', 0, 0, 0, 1, 'x', 1, 'm', 'x', 0, 0, 0, 0}
	props = append(props, 0, 0, 0, byte(len(tbl)))
	props = append(props, tbl...)
	r.Send(1, &amqp.BasicPublish{RoutingKey: "raw-q"})
	r.Write(amqp.AppendContent(nil, 1, amqp.ClassBasic, props, []byte("body"), 131072))
	r.Send(1, &amqp.BasicGet{Queue: "raw-q", NoAck: true})
	r.Expect((*amqp.BasicGetOk)(nil))
	f, _, err := r.Next()
	if err != nil || f.Type != amqp.FrameHeader {
		t.Fatalf("header: %v %+v", err, f)
	}
	if got := f.Payload[12:]; !bytes.Equal(got, props) {
		t.Fatalf("properties changed:\n got % x\nwant % x", got, props)
	}
}

// confirmation waits for the next publisher confirm, failing the test if
// none comes within 5 s.
func confirmation(t *testing.T, confirms <-chan rmq.Confirmation) rmq.Confirmation {
	t.Helper()
	select {
	case c, ok := <-confirms:
		if !ok {
			t.Fatal("confirmation channel closed")
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no confirm within 5s")
	}
	return rmq.Confirmation{}
}

func TestMandatoryReturn(t *testing.T) {
	e := setup(t, broker.Options{})
	returns := e.ch.NotifyReturn(make(chan rmq.Return, 1))
	confirms := e.ch.NotifyPublish(make(chan rmq.Confirmation, 1))
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// amqp091-go delivers returns and confirms on separate goroutines, so
	// the order on the wire is checked by the raw test below.
	if err := e.ch.Publish("amq.direct", "nobody", true, false, rmq.Publishing{Body: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != "amq.direct" || r.RoutingKey != "nobody" || string(r.Body) != "lost" {
			t.Fatalf("return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
	if c := confirmation(t, confirms); !c.Ack || c.DeliveryTag != 1 {
		t.Fatalf("confirm %+v", c)
	}
	// Without mandatory, an unroutable message is dropped and still acked.
	if err := e.ch.Publish("amq.direct", "nobody", false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if c := confirmation(t, confirms); !c.Ack || c.DeliveryTag != 2 {
		t.Fatalf("confirm %+v", c)
	}
}

func TestReturnBeforeConfirm(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(1, &amqp.ConfirmSelect{})
	r.Expect((*amqp.ConfirmSelectOk)(nil))
	r.Send(1, &amqp.BasicPublish{Exchange: "amq.direct", RoutingKey: "nobody", Mandatory: true})
	r.Write(amqp.AppendContent(nil, 1, amqp.ClassBasic, nil, []byte("x"), 131072))
	r.Expect((*amqp.BasicReturn)(nil))
	r.Next() // header
	r.Next() // body
	ack := r.Expect((*amqp.BasicAck)(nil)).(*amqp.BasicAck)
	if ack.DeliveryTag != 1 || ack.Multiple {
		t.Fatalf("ack %+v", ack)
	}
}

func TestImmediateNotImplemented(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(1, &amqp.BasicPublish{RoutingKey: "q", Immediate: true})
	r.Write(amqp.AppendContent(nil, 1, amqp.ClassBasic, nil, []byte("x"), 131072))
	cc := r.ExpectConnectionClose()
	if cc.ReplyCode != 540 || cc.ReplyText != "NOT_IMPLEMENTED - immediate=true" {
		t.Fatalf("got %+v", cc)
	}
}

func TestPublishToMissingExchange(t *testing.T) {
	e := setup(t, broker.Options{})
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	e.publish("no-such-x", "k", "x")
	expectErr(t, closeErr(t, closed, "channel after publishing to a missing exchange"), 404, "NOT_FOUND - no exchange 'no-such-x' in vhost '/'")
	if e.conn.IsClosed() {
		t.Fatal("the connection must stay open")
	}
}

func TestConfirmsMultiple(t *testing.T) { forEachType(t, testConfirmsMultiple) }

func testConfirmsMultiple(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "", nil)
	confirms := e.ch.NotifyPublish(make(chan rmq.Confirmation, 1000))
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := e.ch.Publish("", q, false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 500; i++ {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i) {
				t.Fatalf("confirm %d: %+v", i, c)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("confirm %d missing", i)
		}
	}
	e.waitCount(q, 500)
}

func TestUserIDMismatch(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("", nil)
	e.publishConfirmed("", q, rmq.Publishing{UserId: "guest", Body: []byte("ok")})
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	if err := e.ch.Publish("", q, false, false, rmq.Publishing{UserId: "bob", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	expectErr(t, closeErr(t, closed, "channel after a foreign user_id"), 406, "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'")
}

func TestMessageTooLarge(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{MaxMessageSize: 1000})
	q := e.queue("", nil)
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	if err := e.ch.Publish("", q, false, false, rmq.Publishing{Body: make([]byte, 1001)}); err != nil {
		t.Fatal(err)
	}
	expectErr(t, closeErr(t, closed, "channel after an oversize message"), 406, "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000")
	e.ch = e.channel(e.conn)
	if n := e.count(q); n != 0 {
		t.Fatalf("%d stored", n)
	}
}

func TestDirectReplyTo(t *testing.T) {
	e := setup(t, broker.Options{})
	// A server consuming requests...
	srvCh := e.channel(e.conn)
	rq := e.queue("rpc-requests", nil)
	reqs, err := srvCh.Consume(rq, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range reqs {
			_ = srvCh.Publish("", d.ReplyTo, false, false, rmq.Publishing{CorrelationId: d.CorrelationId, Body: append([]byte("re: "), d.Body...)})
		}
	}()
	// ...and a client using the pseudo-queue.
	cli := e.channel(e.conn)
	replies, err := cli.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cli.Publish("", rq, false, false, rmq.Publishing{ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: fmt.Sprint(i), Body: []byte("ping")}); err != nil {
			t.Fatal(err)
		}
		d := recv(t, replies)
		if string(d.Body) != "re: ping" || d.CorrelationId != fmt.Sprint(i) {
			t.Fatalf("reply %q %q", d.Body, d.CorrelationId)
		}
	}
	// Consuming the pseudo-queue needs no-ack; replying without a reply
	// consumer is refused.
	c2 := e.channel(e.conn)
	_, err = c2.Consume("amq.rabbitmq.reply-to", "", false, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")
	c3 := e.channel(e.conn)
	closed := c3.NotifyClose(make(chan *rmq.Error, 1))
	_ = c3.Publish("", rq, false, false, rmq.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
	expectErr(t, closeErr(t, closed, "channel after a reply-to without a reply consumer"), 406, "PRECONDITION_FAILED - fast reply consumer does not exist")
}

func TestTransactions(t *testing.T) { forEachType(t, testTransactions) }

func testTransactions(t *testing.T, qt queueKind) {
	e := setup(t, broker.Options{})
	q := e.typedQueue(qt, "tx-q", nil)
	if err := e.ch.Tx(); err != nil {
		t.Fatal(err)
	}
	e.publish("", q, "one")
	e.publish("", q, "two")
	if n := e.count(q); n != 0 {
		t.Fatalf("visible before commit: %d", n)
	}
	if err := e.ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	e.waitCount(q, 2)
	e.publish("", q, "three")
	if err := e.ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	e.waitCount(q, 2)
	// Acks in a transaction take effect at commit.
	d := e.get(e.ch, q, false)
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	other := e.channel(e.conn)
	other.Close()
	if err := e.ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	e.ch.Close() // the unacked message goes back
	e.ch = e.channel(e.conn)
	e.waitCount(q, 2)
}

func TestTxConfirmExclusive(t *testing.T) {
	e := setup(t, broker.Options{})
	if err := e.ch.Tx(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, e.ch.Confirm(false), 406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
	ch := e.channel(e.conn)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	expectErr(t, ch.Tx(), 406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")
	ch = e.channel(e.conn)
	expectErr(t, ch.TxCommit(), 406, "PRECONDITION_FAILED - channel is not transactional")
}

// A publisher faster than its consumers is blocked once queues hold more
// than the memory watermark, and told so (connection.blocked).
func TestMemoryAlarmBlocksPublisher(t *testing.T) {
	testutil.InProcess(t)
	// Paging off, as in TestMemoryAlarmAbsoluteWatermark: above half the
	// watermark queues would page, keeping them at the watermark and racing
	// the alarm this test is about (it failed so on a fresh clone).
	e := setup(t, broker.Options{MemoryHighWatermark: 1 << 20, AlarmCheckInterval: 10 * time.Millisecond, PagingRatio: 1})
	q := e.queue("", nil)
	blocked := e.conn.NotifyBlocked(make(chan rmq.Blocking, 64))
	body := make([]byte, 64<<10)
	const total = 100 // 6.4 MiB against a 1 MiB watermark
	done := make(chan error, 1)
	go func() {
		for range total {
			if err := e.ch.Publish("", q, false, false, rmq.Publishing{Body: body}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	expectBlocked(t, blocked, "low on memory", nil)
	// Held: what the blocked publisher already sent, within one read batch.
	if used := e.b.Server.MemoryUsed(); used > 2<<20 {
		t.Fatalf("queues hold %d bytes with a 1 MiB watermark", used)
	}
	// Draining the queue lifts the alarm, as often as needed.
	c2 := dial(t, e.b.URL)
	ch2 := e.channel(c2)
	// Every message is eventually taken in; purge until all were.
	sawUnblock, purged := false, 0
	for purged < total {
		n, err := ch2.QueuePurge(q, false)
		if err != nil {
			t.Fatal(err)
		}
		purged += n
		select {
		case b := <-blocked:
			sawUnblock = sawUnblock || !b.Active
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the publisher still blocked after its queue was drained")
	}
	for !sawUnblock {
		select {
		case b := <-blocked:
			sawUnblock = !b.Active
		case <-time.After(5 * time.Second):
			t.Fatal("no connection.unblocked")
		}
	}
}

// Header values nested deeper than 64 tables or arrays are refused at the
// door with 501, one bound for both: before, arrays were let in unbounded,
// and such a message was then lost when dead-lettered (its headers could
// not be decoded) and never matched a headers binding. RabbitMQ 3.10.8
// takes either nesting (checked: 70 levels), so this is railmq's own
// bound.
func TestDeepHeadersRefused(t *testing.T) {
	testutil.InProcess(t)
	for _, kind := range []string{"table", "array"} {
		for _, levels := range []int{64, 65} {
			e := setup(t, broker.Options{})
			q := e.queue("", nil)
			var v any = "x"
			for range levels {
				if kind == "table" {
					v = rmq.Table{"n": v}
				} else {
					v = []any{v}
				}
			}
			closed := e.conn.NotifyClose(make(chan *rmq.Error, 1))
			_ = e.ch.Publish("", q, false, false, rmq.Publishing{Headers: rmq.Table{"deep": v}, Body: []byte("x")})
			if levels == 64 {
				testutil.Eventually(t, 5*time.Second, func() bool { return e.count(q) == 1 }, "the message")
				continue
			}
			select {
			case err := <-closed:
				expectErr(t, err, 501, "FRAME_ERROR - type 2, all octets = <<>>: malformed content header")
			case <-time.After(5 * time.Second):
				t.Fatalf("%d nested %ss: accepted", levels, kind)
			}
		}
	}
}
