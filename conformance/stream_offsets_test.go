package conformance

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Where a stream consumer starts (x-stream-offset) and what its
// deliveries carry, as RabbitMQ 3.10.8 answers (stream_test.go says how
// these were asked).

// offsetsFrom consumes stream q from the offset spec with prefetch 100,
// takes n deliveries and then checks that no more come.
func (e *env) offsetsFrom(q string, spec any, n int) ([]string, []int64) {
	e.t.Helper()
	ch, ds := e.streamConsume(q, 100, rmq.Table{"x-stream-offset": spec})
	defer ch.Close()
	bodies, offs := takeAcked(e.t, ds, n)
	none(e.t, ds, 300*time.Millisecond)
	return bodies, offs
}

func offsetRange(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestStreamOffsetSpecs: "first", "last", "next" and absolute offsets
// of every integer type.
func TestStreamOffsetSpecs(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-off", stArgs())
	e.publishEach("st-off", bodiesN("m", 10)...)
	all := bodiesN("m", 10)
	// RabbitMQ 3.10.8: first → m0@0 .. m9@9 (offsets count from 0, one
	// per message).
	bodies, offs := e.offsetsFrom("st-off", "first", 10)
	if !reflect.DeepEqual(bodies, all) || !reflect.DeepEqual(offs, offsetRange(0, 10)) {
		t.Fatalf("first: %v at %v", bodies, offs)
	}
	// RabbitMQ 3.10.8: last → the last chunk: with each message
	// confirmed before the next was sent, m9@9 alone.
	if bodies, offs := e.offsetsFrom("st-off", "last", 1); bodies[0] != "m9" || offs[0] != 9 {
		t.Fatalf("last: %v at %v", bodies, offs)
	}
	// RabbitMQ 3.10.8: any integer type is an offset: 3 → m3@3 .. m9@9.
	for _, v := range []any{int64(3), int32(3), int16(3), int8(3), uint8(3)} {
		bodies, offs := e.offsetsFrom("st-off", v, 7)
		if !reflect.DeepEqual(bodies, all[3:]) || !reflect.DeepEqual(offs, offsetRange(3, 10)) {
			t.Fatalf("offset %T(3): %v at %v", v, bodies, offs)
		}
	}
	// RabbitMQ 3.10.8: 0 and -1 (before the first) → from m0.
	for _, v := range []int64{0, -1} {
		if bodies, _ := e.offsetsFrom("st-off", v, 10); !reflect.DeepEqual(bodies, all) {
			t.Fatalf("offset %d: %v", v, bodies)
		}
	}
	// RabbitMQ 3.10.8: next (also the default without x-stream-offset)
	// → nothing until a new message: c0@10.
	chN, dsN := e.streamConsume("st-off", 100, rmq.Table{"x-stream-offset": "next"})
	chD, dsD := e.streamConsume("st-off", 100, nil)
	none(t, dsN, 300*time.Millisecond)
	none(t, dsD, 0)
	e.publishEach("st-off", "c0")
	for _, ds := range []<-chan rmq.Delivery{dsN, dsD} {
		if b, o := takeAcked(t, ds, 1); b[0] != "c0" || o[0] != 10 {
			t.Fatalf("next: %v at %v", b, o)
		}
	}
	chN.Close()
	chD.Close()
}

// TestStreamOffsetBeyondEnd: a consumer asking for an offset not yet
// written waits for it and gets nothing before it. RabbitMQ 3.10.8:
// offset 5 on a stream of 3 (0..2), then 4 more published (3..6) →
// n2@5, n3@6 only (rabbit_stream_queue.erl v3.10.8 stream_entries
// delivers the records with O >= StartOffs; v4.3.5 likewise, Offset >=
// StartOffset, begin_stream keeping an absolute offset as asked).
func TestStreamOffsetBeyondEnd(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-beyond", stArgs())
	e.publishEach("st-beyond", bodiesN("m", 3)...)
	_, ds := e.streamConsume("st-beyond", 100, rmq.Table{"x-stream-offset": int64(5)})
	none(t, ds, 300*time.Millisecond)
	e.publishEach("st-beyond", bodiesN("n", 4)...)
	bodies, offs := takeAcked(t, ds, 2)
	if !reflect.DeepEqual(bodies, []string{"n2", "n3"}) || !reflect.DeepEqual(offs, []int64{5, 6}) {
		t.Fatalf("offset 5: %v at %v, want n2@5 n3@6", bodies, offs)
	}
	none(t, ds, 300*time.Millisecond)
}

// TestStreamOffsetTimestamp: an AMQP timestamp ('T', seconds) starts at
// the first message published at or after it. RabbitMQ 3.10.8
// (parse_offset_arg {timestamp, V * 1000}): a timestamp taken between two
// batches published seconds apart → the second batch only; one an hour
// back → everything; one an hour ahead → nothing yet.
func TestStreamOffsetTimestamp(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-ts", stArgs())
	e.publishEach("st-ts", bodiesN("a", 3)...)
	// The next whole second, then a little more: batch a is older.
	ts := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(ts.Add(100 * time.Millisecond)))
	e.publishEach("st-ts", bodiesN("b", 3)...)
	if bodies, _ := e.offsetsFrom("st-ts", ts, 3); !reflect.DeepEqual(bodies, bodiesN("b", 3)) {
		t.Fatalf("timestamp %s: %v, want b0..b2", ts, bodies)
	}
	if bodies, _ := e.offsetsFrom("st-ts", time.Now().Add(-time.Hour), 6); bodies[0] != "a0" {
		t.Fatalf("an hour back: %v", bodies)
	}
	e.offsetsFrom("st-ts", time.Now().Add(time.Hour), 0)
}

// TestStreamOffsetInterval: a string in x-max-age's form is an interval
// back from now. RabbitMQ 3.10.8: "1h", "30m", "7D", "1M", "1Y" →
// everything published minutes ago; "5s" → only what came in the last
// five seconds.
func TestStreamOffsetInterval(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-ago", stArgs())
	e.publishEach("st-ago", bodiesN("old", 2)...)
	for _, v := range []string{"1h", "30m", "7D", "1M", "1Y"} {
		if bodies, _ := e.offsetsFrom("st-ago", v, 2); !reflect.DeepEqual(bodies, bodiesN("old", 2)) {
			t.Fatalf("%s: %v", v, bodies)
		}
	}
	time.Sleep(8 * time.Second) // "old" is now at least 8 s old
	e.publishEach("st-ago", bodiesN("new", 2)...)
	if bodies, _ := e.offsetsFrom("st-ago", "5s", 2); !reflect.DeepEqual(bodies, bodiesN("new", 2)) {
		t.Fatalf("5s: %v, want new0 new1", bodies)
	}
}

// TestStreamOffsetInvalid: offsets RabbitMQ refuses.
func TestStreamOffsetInvalid(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-badoff", stArgs())
	// RabbitMQ 3.10.8: a string starting with a digit that is no
	// interval → channel.close 406, class 60 method 20.
	for _, v := range []string{"0s", "3"} {
		ch := e.fresh()
		must(t, ch.Qos(10, 0, false))
		_, err := ch.Consume("st-badoff", "", false, false, false, false, rmq.Table{"x-stream-offset": v})
		expectErr(t, err, 406, fmt.Sprintf(`PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'st-badoff' in vhost '/': {invalid_stream_offset_arg,{longstr,<<"%s">>}}`, v))
	}
}

// TestStreamOffsetInvalidNoDigits: a string that is neither first, last,
// next nor an interval is refused alike (RabbitMQ 4.3.1+: commit
// 7b971eee3c, rabbit_amqqueue.erl v4.3.5 check_max_age (^[0-9]+) and
// check_stream_offset_arg). RabbitMQ 3.10.8 crashes on "foo", "FIRST",
// "" and "-1s": connection.close 541 "INTERNAL_ERROR", class 0 method 0.
func TestStreamOffsetInvalidNoDigits(t *testing.T) {
	rabbit4(t, `x-stream-offset "foo" closes the connection with 541 INTERNAL_ERROR`)
	e := setup(t, broker.Options{})
	e.stream("st-badoff", stArgs())
	for _, v := range []string{"foo", "FIRST", "", "-1s"} {
		ch := e.fresh()
		must(t, ch.Qos(10, 0, false))
		_, err := ch.Consume("st-badoff", "", false, false, false, false, rmq.Table{"x-stream-offset": v})
		expectErr(t, err, 406, fmt.Sprintf(`PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'st-badoff' in vhost '/': {invalid_stream_offset_arg,{longstr,<<"%s">>}}`, v))
	}
}

// TestStreamDeliveryShape: what a stream delivery carries.
func TestStreamDeliveryShape(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-shape", stArgs())
	ts := time.Unix(1700000000, 0)
	headers := rmq.Table{"str": "s", "i8": int8(1), "i16": int16(2), "i32": int32(3), "i64": int64(4),
		"u8": uint8(5), "u16": uint16(6), "u32": uint32(7), "f32": float32(1.5), "f64": 2.5, "bool": true,
		"ts": time.Unix(1600000000, 0), "bytes": []byte("by"), "void": nil, "x-custom": "c",
		"x-stream-offset": int64(999)}
	full := rmq.Publishing{Headers: headers, ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: 2,
		Priority: 7, CorrelationId: "corr", ReplyTo: "rt", Expiration: "60000", MessageId: "mid", Timestamp: ts,
		Type: "typ", UserId: "guest", AppId: "app", Body: []byte("full")}
	e.publishConfirmed("", "st-shape", full)
	e.publishConfirmed("", "st-shape", rmq.Publishing{Body: []byte("bare")})
	e.publishConfirmed("", "st-shape", rmq.Publishing{Body: []byte("transient"), DeliveryMode: 1})
	must(t, e.ch.ExchangeDeclare("st-shape-x", "direct", false, true, false, false, nil))
	must(t, e.ch.QueueBind("st-shape", "k", "st-shape-x", false, nil))
	e.publishConfirmed("st-shape-x", "k", rmq.Publishing{Body: []byte("routed")})

	_, ds := e.streamConsume("st-shape", 10, rmq.Table{"x-stream-offset": "first"})
	// RabbitMQ 3.10.8: every scalar header comes back with its type; the
	// publisher's x-stream-offset is replaced by the message's offset (a
	// long); no other header is added; every property is kept; not
	// redelivered; the exchange and routing key are the publish's.
	d := recv(t, ds)
	want := rmq.Table{}
	for k, v := range headers {
		want[k] = v
	}
	want["x-stream-offset"] = int64(0)
	if !reflect.DeepEqual(d.Headers, want) {
		t.Fatalf("headers\n got %v\nwant %v", d.Headers, want)
	}
	if d.ContentType != "text/plain" || d.ContentEncoding != "gzip" || d.DeliveryMode != 2 || d.Priority != 7 ||
		d.CorrelationId != "corr" || d.ReplyTo != "rt" || d.Expiration != "60000" || d.MessageId != "mid" ||
		!d.Timestamp.Equal(ts) || d.Type != "typ" || d.UserId != "guest" || d.AppId != "app" {
		t.Fatalf("properties %+v", d)
	}
	if d.Redelivered || d.Exchange != "" || d.RoutingKey != "st-shape" || string(d.Body) != "full" {
		t.Fatalf("delivery %q redelivered=%v exchange=%q key=%q", d.Body, d.Redelivered, d.Exchange, d.RoutingKey)
	}
	for i, w := range []struct {
		body string
		mode uint8
		ex   string
		key  string
	}{{"bare", 0, "", "st-shape"}, {"transient", 1, "", "st-shape"}, {"routed", 0, "st-shape-x", "k"}} {
		d := recv(t, ds)
		if string(d.Body) != w.body || d.DeliveryMode != w.mode || d.Exchange != w.ex || d.RoutingKey != w.key ||
			!reflect.DeepEqual(d.Headers, rmq.Table{"x-stream-offset": int64(i + 1)}) || d.Redelivered {
			t.Fatalf("delivery %q mode %d %q/%q headers %v redelivered=%v, want %+v", d.Body, d.DeliveryMode, d.Exchange, d.RoutingKey, d.Headers, d.Redelivered, w)
		}
	}
}

// TestStreamManyConsumers: consumers at different offsets read the same
// stream independently, at the same time. RabbitMQ 3.10.8: consumers on
// first, 10, last and next of a 20-message stream, then 20 more
// published: first gets all 40, 10 gets 10..39, last gets 19..39, next
// gets 20..39.
func TestStreamManyConsumers(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-many", stArgs())
	e.publishEach("st-many", bodiesN("a", 20)...)
	specs := []struct {
		spec any
		from int64
	}{{"first", 0}, {int64(10), 10}, {"last", 19}, {"next", 20}}
	type result struct {
		offs []int64
		err  string
	}
	results := make([]result, len(specs))
	var wg sync.WaitGroup
	chans := make([]<-chan rmq.Delivery, len(specs))
	for i, s := range specs {
		_, chans[i] = e.streamConsume("st-many", 7, rmq.Table{"x-stream-offset": s.spec})
	}
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(results[i].offs) < int(40-specs[i].from) {
				select {
				case d := <-chans[i]:
					off, _ := d.Headers["x-stream-offset"].(int64)
					results[i].offs = append(results[i].offs, off)
					_ = d.Ack(false)
				case <-time.After(10 * time.Second):
					results[i].err = "stalled"
					return
				}
			}
		}()
	}
	e.publishEach("st-many", bodiesN("b", 20)...)
	wg.Wait()
	for i, s := range specs {
		if results[i].err != "" || !reflect.DeepEqual(results[i].offs, offsetRange(s.from, 40)) {
			t.Fatalf("consumer on %v: %v %s, want %d..39", s.spec, results[i].offs, results[i].err, s.from)
		}
	}
}

// TestStreamNextSeesNew: a consumer on next sees every new message, in
// order, while they are being published.
func TestStreamNextSeesNew(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-next", stArgs())
	e.publishEach("st-next", "before")
	_, ds := e.streamConsume("st-next", 50, rmq.Table{"x-stream-offset": "next"})
	pc := dial(t, e.b.URL)
	pch := openChannel(t, pc)
	must(t, pch.Confirm(false))
	const n = 500
	go func() {
		for i := range n {
			if pch.Publish("", "st-next", false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}) != nil {
				return
			}
		}
	}()
	bodies, offs := takeAcked(t, ds, n)
	for i := range n {
		if bodies[i] != fmt.Sprint(i) || offs[i] != int64(i+1) {
			t.Fatalf("delivery %d: %q at %d", i, bodies[i], offs[i])
		}
	}
}

// TestStreamMessageCount: a passive declare counts a stream's messages
// (RabbitMQ 3.10.8 reports them from its metrics, within ~5 s; 7
// published → 7). Acks and consumers do not change it.
func TestStreamMessageCount(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-count", stArgs())
	e.publishEach("st-count", bodiesN("m", 7)...)
	_, ds := e.streamConsume("st-count", 10, rmq.Table{"x-stream-offset": "first"})
	takeAcked(t, ds, 7)
	testutil.Eventually(t, 15*time.Second, func() bool { return e.count("st-count") == 7 }, "a passive declare counting 7")
}
