package conformance

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

// Stream filtering (RabbitMQ 3.13+; 3.10.8 ignores all of it): a
// publisher gives a message a filter value in the x-stream-filter-value
// header (a string); a consumer asks for values with x-stream-filter (a
// string or an array of strings, other elements skipped) and, with
// x-stream-match-unfiltered true, also gets messages that have none
// (rabbit_stream_queue.erl v4.3.5 stream_message/1 and filter_spec/1;
// without x-stream-filter, x-stream-match-unfiltered means nothing).
// RabbitMQ filters whole chunks with a Bloom filter, so its consumers
// get false positives and must check again
// (https://www.rabbitmq.com/docs/stream-filtering); railmq delivers
// exactly the messages asked for.

// filterValues are the filter values of the messages publishFiltered
// sends, in turn ("" is no header).
var filterValues = []string{"a", "b", "", "c", "a", "", "b", "a"}

// publishFiltered publishes n messages to q in one burst (so that values
// share chunks), message i with filter value filterValues[i%8], and
// waits for their confirms; it returns the body of each.
func (e *env) publishFiltered(q string, n int) []string {
	e.t.Helper()
	ch := e.channel(e.conn)
	defer ch.Close()
	must(e.t, ch.Confirm(false))
	var dcs []*rmq.DeferredConfirmation
	bodies := make([]string, n)
	for i := range n {
		v := filterValues[i%len(filterValues)]
		bodies[i] = fmt.Sprintf("%d-%s", i, v)
		p := rmq.Publishing{Body: []byte(bodies[i])}
		if v != "" {
			p.Headers = rmq.Table{"x-stream-filter-value": v}
		}
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, p)
		must(e.t, err)
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			e.t.Fatal("publish nacked")
		}
	}
	return bodies
}

// selectFiltered is the bodies whose filter value is in vals (or, with
// unfiltered, has none).
func selectFiltered(bodies []string, unfiltered bool, vals ...string) []string {
	var out []string
	for i, b := range bodies {
		v := filterValues[i%len(filterValues)]
		ok := v == "" && unfiltered
		for _, w := range vals {
			ok = ok || (v != "" && v == w)
		}
		if ok {
			out = append(out, b)
		}
	}
	return out
}

// TestStreamFilterExact: each consumer gets exactly the messages its
// filter selects, in order, with their x-stream-filter-value header.
func TestStreamFilterExact(t *testing.T) {
	rabbit4(t, "x-stream-filter and x-stream-match-unfiltered are ignored: every message is delivered")
	e := setup(t, broker.Options{})
	e.stream("st-filter", stArgs())
	bodies := e.publishFiltered("st-filter", 400)
	for _, c := range []struct {
		args rmq.Table
		want []string
	}{
		{rmq.Table{"x-stream-filter": "a"}, selectFiltered(bodies, false, "a")},
		{rmq.Table{"x-stream-filter": []any{"a", "b"}}, selectFiltered(bodies, false, "a", "b")},
		{rmq.Table{"x-stream-filter": "c", "x-stream-match-unfiltered": true}, selectFiltered(bodies, true, "c")},
		{rmq.Table{"x-stream-filter": "a", "x-stream-match-unfiltered": false}, selectFiltered(bodies, false, "a")},
		// Array elements that are no strings are skipped.
		{rmq.Table{"x-stream-filter": []any{"b", int32(1), true}}, selectFiltered(bodies, false, "b")},
		// Without x-stream-filter, x-stream-match-unfiltered means nothing.
		{rmq.Table{"x-stream-match-unfiltered": true}, bodies},
		{rmq.Table{"x-stream-match-unfiltered": false}, bodies},
	} {
		c.args["x-stream-offset"] = "first"
		ch, ds := e.streamConsume("st-filter", 50, c.args)
		got, _ := takeAcked(t, ds, len(c.want))
		none(t, ds, 300*time.Millisecond)
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%v: got %d messages %v\nwant %d %v", c.args, len(got), got, len(c.want), c.want)
		}
		ch.Close()
	}
	// A value no message has: nothing, until one comes.
	ch, ds := e.streamConsume("st-filter", 50, rmq.Table{"x-stream-offset": "first", "x-stream-filter": "zzz"})
	defer ch.Close()
	none(t, ds, 300*time.Millisecond)
	e.publishConfirmed("", "st-filter", rmq.Publishing{Body: []byte("z"), Headers: rmq.Table{"x-stream-filter-value": "zzz"}})
	d := recv(t, ds)
	if string(d.Body) != "z" || d.Headers["x-stream-filter-value"] != "zzz" || streamOffset(t, d) != 400 {
		t.Fatalf("got %q headers %v", d.Body, d.Headers)
	}
}

// TestStreamFilterFromOffset: a filter applies from wherever the
// consumer starts, and to messages published while it reads.
func TestStreamFilterFromOffset(t *testing.T) {
	rabbit4(t, "x-stream-filter is ignored")
	e := setup(t, broker.Options{})
	e.stream("st-filter-off", stArgs())
	bodies := e.publishFiltered("st-filter-off", 80)
	ch, ds := e.streamConsume("st-filter-off", 5, rmq.Table{"x-stream-offset": int64(40), "x-stream-filter": "b"})
	defer ch.Close()
	want := selectFiltered(bodies[40:], false, "b")
	got, offs := takeAcked(t, ds, len(want))
	if !reflect.DeepEqual(got, want) || offs[0] < 40 {
		t.Fatalf("from 40: %v at %v, want %v", got, offs, want)
	}
	more := e.publishFiltered("st-filter-off", 16)
	want = selectFiltered(more, false, "b")
	if got, _ := takeAcked(t, ds, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("live: %v, want %v", got, want)
	}
	none(t, ds, 300*time.Millisecond)
}

// TestStreamFilterSizeArg: x-stream-filter-size-bytes, the size of each
// chunk's Bloom filter, is 16 to 255 (RabbitMQ 3.13+; 3.10.8 takes any
// value and ignores it). rabbit_stream_queue.erl v4.3.5
// check_filter_size: "Invalid value for x-stream-filter-size-bytes";
// rabbit_amqqueue.erl v4.3.5 declare_args checks it is a non-negative
// integer first (in the stream's queue_arguments since 4.3.1, commit
// 7b971eee3c), and a redeclare must match it.
func TestStreamFilterSizeArg(t *testing.T) {
	rabbit4(t, "x-stream-filter-size-bytes is accepted whatever its value")
	e := setup(t, broker.Options{})
	for _, c := range []struct {
		val  any
		want string
	}{
		{int64(16), ""},
		{int64(255), ""},
		{int32(100), ""},
		{int64(15), "PRECONDITION_FAILED - Invalid value for x-stream-filter-size-bytes"},
		{int64(256), "PRECONDITION_FAILED - Invalid value for x-stream-filter-size-bytes"},
		{int64(-1), "PRECONDITION_FAILED - invalid arg 'x-stream-filter-size-bytes' for queue 'st-fsize' in vhost '/': {value_negative,-1}"},
		{"128", `PRECONDITION_FAILED - invalid arg 'x-stream-filter-size-bytes' for queue 'st-fsize' in vhost '/': "expected integer, got longstr"`},
	} {
		deleteQueue(e.b.URL, "st-fsize")
		_, err := e.fresh().QueueDeclare("st-fsize", true, false, false, false, stArgs("x-stream-filter-size-bytes", c.val))
		if c.want == "" {
			must(t, err)
			continue
		}
		expectErr(t, err, 406, c.want)
	}
	deleteQueue(e.b.URL, "st-fsize")
	e.stream("st-fsize", stArgs("x-stream-filter-size-bytes", int64(32)))
	_, err := e.fresh().QueueDeclare("st-fsize", true, false, false, false, stArgs("x-stream-filter-size-bytes", int64(64)))
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-stream-filter-size-bytes' for queue 'st-fsize' in vhost '/': received '64' but current is '32'")
}
