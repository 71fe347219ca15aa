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

// Where railmq's streams do better than RabbitMQ's (the limits RabbitMQ's
// documentation lists), and what needs a restart of the broker under
// test.

// TestStreamHeadersArraysTablesKept: headers holding arrays and tables
// come back as published. RabbitMQ 3.10.8 drops every array and table
// header of a stream message (also empty ones, x- ones, x-death and CC:
// streams store AMQP 1.0 application properties); 4.x keeps x- ones only
// (mc_amqpl.erl v4.3.5 supported_header_value_type/1). A decimal header
// makes RabbitMQ 3.10.8 nack the publish; railmq keeps it too.
func TestStreamHeadersArraysTablesKept(t *testing.T) {
	better(t)
	e := setup(t, broker.Options{})
	e.stream("st-hdrs", stArgs())
	headers := rmq.Table{
		"arr":      []any{"a", int32(1), rmq.Table{"in": "array"}},
		"tbl":      rmq.Table{"k": "v", "n": int64(2), "deep": rmq.Table{"x": []any{true}}},
		"emptyarr": []any{},
		"emptytbl": rmq.Table{},
		"x-arr":    []any{"x"},
		"x-death":  []any{rmq.Table{"count": int64(1), "queue": "q", "reason": "rejected"}},
		"CC":       []any{"k2"},
		"dec":      rmq.Decimal{Scale: 2, Value: 12345},
		"s":        "scalar",
	}
	e.publishConfirmed("", "st-hdrs", rmq.Publishing{Headers: headers, Body: []byte("h")})
	_, ds := e.streamConsume("st-hdrs", 10, rmq.Table{"x-stream-offset": "first"})
	d := recv(t, ds)
	want := rmq.Table{"x-stream-offset": int64(0)}
	for k, v := range headers {
		want[k] = v
	}
	for k, v := range want {
		if !sameField(d.Headers[k], v) {
			t.Errorf("header %s: got %#v, want %#v", k, d.Headers[k], v)
		}
	}
	if len(d.Headers) != len(want) {
		t.Errorf("headers %v, want %v", d.Headers, want)
	}
}

// sameField compares decoded field values; amqp091-go decodes an empty
// array as a nil slice.
func sameField(a, b any) bool {
	if x, ok := a.([]any); ok && len(x) == 0 {
		y, ok := b.([]any)
		return ok && len(y) == 0
	}
	return reflect.DeepEqual(a, b)
}

// TestStreamTimestampMillis: a consumer can start at a time given to the
// millisecond, as an RFC 3339 string with a fraction of a second.
// RabbitMQ's only time offset over 0-9-1 is the AMQP timestamp, in
// seconds (rabbit_stream_queue.erl v4.3.5 parse_offset_arg {timestamp,
// V * 1000}); a string starting with digits is refused there
// (invalid_stream_offset_arg).
func TestStreamTimestampMillis(t *testing.T) {
	better(t)
	e := setup(t, broker.Options{})
	e.stream("st-ms", stArgs())
	e.publishEach("st-ms", bodiesN("a", 3)...)
	time.Sleep(30 * time.Millisecond)
	at := time.Now()
	time.Sleep(30 * time.Millisecond)
	e.publishEach("st-ms", bodiesN("b", 3)...)
	for _, s := range []string{at.UTC().Format(time.RFC3339Nano), at.Format("2006-01-02T15:04:05.000Z07:00")} {
		if bodies, _ := e.offsetsFrom("st-ms", s, 3); !reflect.DeepEqual(bodies, bodiesN("b", 3)) {
			t.Fatalf("from %s: %v, want b0..b2", s, bodies)
		}
	}
	// Before everything: all; after everything: nothing yet.
	if bodies, _ := e.offsetsFrom("st-ms", at.Add(-time.Hour).UTC().Format(time.RFC3339Nano), 6); bodies[0] != "a0" {
		t.Fatalf("an hour back: %v", bodies)
	}
	e.offsetsFrom("st-ms", time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano), 0)
}

// trackedConsumer consumes q with tag and args on a new channel of c,
// prefetch 20.
func trackedConsumer(t *testing.T, c *rmq.Connection, q, tag string, args rmq.Table) (*rmq.Channel, <-chan rmq.Delivery) {
	t.Helper()
	ch := openChannel(t, c)
	must(t, ch.Qos(20, 0, false))
	ds, err := ch.Consume(q, tag, false, false, false, false, args)
	must(t, err)
	return ch, ds
}

// TestStreamOffsetTracking: a consumer that names itself with
// x-stream-offset-tracking (a name, or true for its consumer tag) has
// the broker store where it got to: its first delivery not acked. A
// consumer of that name without x-stream-offset resumes there; an
// explicit x-stream-offset wins over the stored one. RabbitMQ has no
// server-side tracking over 0-9-1 (its stream protocol's store_offset
// is client-driven).
func TestStreamOffsetTracking(t *testing.T) {
	better(t)
	e := setup(t, broker.Options{})
	e.stream("st-track", stArgs())
	e.publishEach("st-track", bodiesN("m", 10)...)
	c := dial(t, e.b.URL)

	// Ack 0..5 of ten; 6..9 stay unacked when the channel closes.
	ch, ds := trackedConsumer(t, c, "st-track", "", rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": "reader"})
	for i := range 10 {
		d := recv(t, ds)
		if i < 6 {
			must(t, d.Ack(false))
		}
	}
	must(t, ch.Close())
	ch, ds = trackedConsumer(t, c, "st-track", "", rmq.Table{"x-stream-offset-tracking": "reader"})
	if b, o := takeAcked(t, ds, 4); !reflect.DeepEqual(b, bodiesN("m", 10)[6:]) || o[0] != 6 {
		t.Fatalf("resumed at %v %v, want m6@6..m9", b, o)
	}
	must(t, ch.Close())
	e.publishEach("st-track", "n0", "n1")
	ch, ds = trackedConsumer(t, c, "st-track", "", rmq.Table{"x-stream-offset-tracking": "reader"})
	if b, o := takeAcked(t, ds, 2); b[0] != "n0" || o[0] != 10 {
		t.Fatalf("resumed at %v %v, want n0@10", b, o)
	}
	must(t, ch.Close())
}

// TestStreamOffsetTrackingExplicitOffset: an explicit x-stream-offset
// wins over a stored offset.
func TestStreamOffsetTrackingExplicitOffset(t *testing.T) {
	better(t)
	e := setup(t, broker.Options{})
	e.stream("st-track-x", stArgs())
	e.publishEach("st-track-x", bodiesN("m", 10)...)
	c := dial(t, e.b.URL)
	ch, ds := trackedConsumer(t, c, "st-track-x", "x1", rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": "w"})
	takeAcked(t, ds, 5)
	must(t, ch.Cancel("x1", false))
	for _, spec := range []any{int64(2), "first", "last"} {
		ch, ds = trackedConsumer(t, c, "st-track-x", "", rmq.Table{"x-stream-offset": spec, "x-stream-offset-tracking": "w"})
		want := map[any]string{int64(2): "m2", "first": "m0", "last": "m9"}[spec]
		if d := recv(t, ds); string(d.Body) != want {
			t.Fatalf("x-stream-offset %v with offset 5 stored: got %s@%d, want %s", spec, d.Body, streamOffset(t, d), want)
		}
		must(t, ch.Close())
	}
}

// TestStreamOffsetTrackingConsumerTag: x-stream-offset-tracking true
// stores the offset under the consumer tag; another tag has its own.
func TestStreamOffsetTrackingConsumerTag(t *testing.T) {
	better(t)
	e := setup(t, broker.Options{})
	e.stream("st-track-tag", stArgs())
	e.publishEach("st-track-tag", bodiesN("m", 10)...)
	c := dial(t, e.b.URL)
	ch, ds := trackedConsumer(t, c, "st-track-tag", "tagged", rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": true})
	takeAcked(t, ds, 3)
	must(t, ch.Cancel("tagged", false))
	ch, ds = trackedConsumer(t, c, "st-track-tag", "tagged", rmq.Table{"x-stream-offset-tracking": true})
	if b, o := takeAcked(t, ds, 1); b[0] != "m3" || o[0] != 3 {
		t.Fatalf("tag tagged resumed at %v %v, want m3@3", b, o)
	}
	must(t, ch.Close())
	_, ds = trackedConsumer(t, c, "st-track-tag", "other", rmq.Table{"x-stream-offset-tracking": true})
	none(t, ds, 300*time.Millisecond) // nothing stored: next
}

// TestStreamOffsetTrackingRestart: a tracked offset and every confirmed
// message outlive a restart of the broker.
func TestStreamOffsetTrackingRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	_, err := ch.QueueDeclare("st-track-rs", true, false, false, false, stArgs())
	must(t, err)
	publishPersistent(t, ch, "", "st-track-rs", bodiesN("m", 20)...)
	must(t, ch.Qos(20, 0, false))
	ds, err := ch.Consume("st-track-rs", "", false, false, false, false, rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": "svc"})
	must(t, err)
	for i := range 20 {
		d := recv(t, ds)
		if i < 12 {
			must(t, d.Ack(false))
		}
	}
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	must(t, ch.Qos(20, 0, false))
	ds, err = ch.Consume("st-track-rs", "", false, false, false, false, rmq.Table{"x-stream-offset-tracking": "svc"})
	must(t, err)
	if b, o := takeAcked(t, ds, 8); !reflect.DeepEqual(b, bodiesN("m", 20)[12:]) || o[0] != 12 {
		t.Fatalf("after the restart resumed at %v %v, want m12@12..m19", b, o)
	}
	ch2 := openChannel(t, c)
	must(t, ch2.Qos(30, 0, false))
	ds2, err := ch2.Consume("st-track-rs", "", false, false, false, false, rmq.Table{"x-stream-offset": "first"})
	must(t, err)
	if b, _ := takeAcked(t, ds2, 20); !reflect.DeepEqual(b, bodiesN("m", 20)) {
		t.Fatalf("after the restart the stream holds %v", b)
	}
}

// TestStreamRetentionBySize: whole segments go once the stream is over
// x-max-length-bytes; the first offset moves, a consumer on first or on
// an offset before it starts at the first kept, and one reading behind
// it moves on to it. RabbitMQ 3.10.8 (x-max-length-bytes 4000,
// x-stream-max-segment-size-bytes 1500, 40 messages of ~105 bytes):
// "first", 0 and 20 all started at offset 44, the first kept. (Not run
// against RabbitMQ: its retention with segments this small crashed
// osiris_retention, {bad_return_value,missing_file}, which stopped the
// broker.)
func TestStreamRetentionBySize(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	e.stream("st-ret", stArgs("x-max-length-bytes", int64(20000), "x-stream-max-segment-size-bytes", int64(4000)))
	body := fmt.Sprintf("%0200d", 0)
	e.publishEach("st-ret", "m0")
	// A consumer that reads m0 and then holds on to it.
	behind, bds := e.streamConsume("st-ret", 1, rmq.Table{"x-stream-offset": "first"})
	held := recv(t, bds)
	const n = 400
	for range n - 1 {
		e.publishConfirmed("", "st-ret", rmq.Publishing{Body: []byte(body)})
	}
	_, fds := e.streamConsume("st-ret", 1, rmq.Table{"x-stream-offset": "first"})
	first := streamOffset(t, recv(t, fds))
	if first == 0 || first > n-20 {
		t.Fatalf("first offset kept %d of %d", first, n)
	}
	for _, spec := range []any{int64(0), first - 1} {
		_, ds := e.streamConsume("st-ret", 1, rmq.Table{"x-stream-offset": spec})
		if off := streamOffset(t, recv(t, ds)); off != first {
			t.Fatalf("offset %v: first delivery at %d, want %d", spec, off, first)
		}
	}
	if c := e.count("st-ret"); c != int(n-first) {
		t.Fatalf("passive declare counts %d, want %d", c, n-first)
	}
	// The consumer behind: after what it had in hand it moves on to the
	// first offset kept, and reads on to the end.
	must(t, held.Ack(false))
	prev, late := int64(0), 0
	for prev != n-1 {
		d := recv(t, bds)
		off := streamOffset(t, d)
		if off <= prev {
			t.Fatalf("offset %d after %d", off, prev)
		}
		if off < first {
			late++
		}
		prev = off
		must(t, d.Ack(false))
	}
	if late > 1 {
		t.Fatalf("%d deliveries from before the first offset kept (%d) after the ack", late, first)
	}
	_ = behind
}

// TestStreamRetentionByAge: segments whose newest message is older than
// x-max-age go (checked periodically), and the first offset moves.
func TestStreamRetentionByAge(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	e.stream("st-age", stArgs("x-max-age", "2s", "x-stream-max-segment-size-bytes", int64(2000)))
	body := fmt.Sprintf("%0200d", 0)
	for range 40 {
		e.publishConfirmed("", "st-age", rmq.Publishing{Body: []byte(body)})
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return e.count("st-age") < 40 }, "segments older than 2 s deleted")
	// Every sealed segment may be gone: a new message is then the first.
	_, ds := e.streamConsume("st-age", 1, rmq.Table{"x-stream-offset": "first"})
	e.publishConfirmed("", "st-age", rmq.Publishing{Body: []byte("new")})
	if off := streamOffset(t, recv(t, ds)); off == 0 {
		t.Fatal("first offset still 0")
	}
}
