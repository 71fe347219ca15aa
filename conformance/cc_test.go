package conformance

// Sender-selected distribution: RabbitMQ routes a publish also by each
// routing key in its CC and BCC headers (arrays of strings) and removes
// BCC before anyone sees the message. Pinned side by side with RabbitMQ
// 3.10.8; found by the pika and bunny checks in scripts/clients/.

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
)

func TestCCAndBCCRouting(t *testing.T) {
	e := setup(t, broker.Options{})
	must(t, e.ch.ExchangeDeclare("cc-x", "direct", false, true, false, false, nil))
	must(t, e.ch.ExchangeDeclare("cc-t", "topic", false, true, false, false, nil))
	got := map[string]<-chan rmq.Delivery{}
	for _, b := range []struct{ q, x, key string }{
		{"cc-orig", "cc-x", "orig"}, {"cc-cc1", "cc-x", "cc1"}, {"cc-bcc1", "cc-x", "bcc1"}, {"cc-other", "cc-x", "other"},
		{"cc-topic", "cc-t", "cc.#"},
	} {
		e.queue(b.q, nil)
		must(t, e.ch.QueueBind(b.q, b.key, b.x, false, nil))
		got[b.q] = e.consume(b.q, true)
	}
	hdr := rmq.Table{"a": int32(1), "CC": []any{"cc1", "cc-other"}, "BCC": []any{"bcc1", int32(7)}}
	e.publishConfirmed("cc-x", "orig", rmq.Publishing{Headers: hdr, Body: []byte("m")})
	want := rmq.Table{"a": int32(1), "CC": []any{"cc1", "cc-other"}}
	for _, q := range []string{"cc-orig", "cc-cc1", "cc-bcc1"} {
		d := recv(t, got[q])
		if d.RoutingKey != "orig" || d.Exchange != "cc-x" {
			t.Fatalf("%s: delivered with exchange %q key %q", q, d.Exchange, d.RoutingKey)
		}
		if !reflect.DeepEqual(d.Headers, want) {
			t.Fatalf("%s: headers %#v, want %#v (BCC removed)", q, d.Headers, want)
		}
	}
	none(t, got["cc-other"], 100*time.Millisecond)
	// A topic exchange matches each key; the default exchange takes each
	// key for a queue name.
	e.publishConfirmed("cc-t", "nomatch", rmq.Publishing{Headers: rmq.Table{"CC": []any{"cc.a.b"}}, Body: []byte("t")})
	if d := recv(t, got["cc-topic"]); d.RoutingKey != "nomatch" {
		t.Fatalf("topic: key %q", d.RoutingKey)
	}
	e.publishConfirmed("", "cc-other", rmq.Publishing{Headers: rmq.Table{"BCC": []any{"cc-other", "cc-orig"}}, Body: []byte("d")})
	for _, q := range []string{"cc-other", "cc-orig"} {
		if d := recv(t, got[q]); d.RoutingKey != "cc-other" || len(d.Headers) != 0 {
			t.Fatalf("%s via the default exchange: key %q headers %#v", q, d.RoutingKey, d.Headers)
		}
	}
	// A mandatory publish routed nowhere is returned without its BCC.
	returns := e.ch.NotifyReturn(make(chan rmq.Return, 1))
	must(t, e.ch.Publish("cc-x", "nowhere", true, false, rmq.Publishing{Headers: rmq.Table{"BCC": []any{"nowhere-either"}}, Body: []byte("r")}))
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || len(r.Headers) != 0 {
			t.Fatalf("return %d headers %#v", r.ReplyCode, r.Headers)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
	// A CC that is not an array is refused.
	ch := e.channel(e.conn)
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	must(t, ch.Publish("cc-x", "orig", false, false, rmq.Publishing{Headers: rmq.Table{"CC": "cc1"}, Body: []byte("x")}))
	select {
	case err := <-closed:
		expectErr(t, err, 406, `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}`)
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
}

// Dead-lettering keeps to the CC keys: they are listed in x-death's
// routing-keys and route the dead-lettered copy, unless the queue has a
// dead-letter routing key, which replaces them and drops the CC header.
func TestDeadLetterCC(t *testing.T) {
	e := setup(t, broker.Options{})
	must(t, e.ch.ExchangeDeclare("dlcc-x", "direct", false, true, false, false, nil))
	e.queue("dlcc-by-orig", nil)
	e.queue("dlcc-by-cc", nil)
	must(t, e.ch.QueueBind("dlcc-by-orig", "orig", "dlcc-x", false, nil))
	must(t, e.ch.QueueBind("dlcc-by-cc", "cc1", "dlcc-x", false, nil))
	src := e.queue("dlcc-src", rmq.Table{"x-dead-letter-exchange": "dlcc-x"})
	fixed := e.queue("dlcc-src-rk", rmq.Table{"x-dead-letter-exchange": "dlcc-x", "x-dead-letter-routing-key": "orig"})
	for _, q := range []string{src, fixed} {
		e.publishConfirmed("", q, rmq.Publishing{Headers: rmq.Table{"CC": []any{"cc1"}}, Body: []byte(q)})
		d := e.get(e.ch, q, false)
		must(t, d.Reject(false))
	}
	// From src (dead-lettered with its own key, src): routed by src and
	// cc1, so only the cc1 binding takes it; routing-keys [src cc1]; CC
	// kept.
	d := e.get(e.ch, "dlcc-by-cc", true)
	if string(d.Body) != src {
		t.Fatalf("dlcc-by-cc got %q", d.Body)
	}
	if rk := deathOf(t, d)["routing-keys"]; !reflect.DeepEqual(rk, []any{src, "cc1"}) {
		t.Fatalf("routing-keys %#v", rk)
	}
	if !reflect.DeepEqual(d.Headers["CC"], []any{"cc1"}) {
		t.Fatalf("CC %#v", d.Headers["CC"])
	}
	// From fixed: routed by orig alone; CC dropped, routing-keys as
	// published.
	d = e.get(e.ch, "dlcc-by-orig", true)
	if string(d.Body) != fixed {
		t.Fatalf("dlcc-by-orig got %q", d.Body)
	}
	if _, has := d.Headers["CC"]; has {
		t.Fatalf("with x-dead-letter-routing-key the CC header stays: %#v", d.Headers)
	}
	if rk := deathOf(t, d)["routing-keys"]; !reflect.DeepEqual(rk, []any{fixed, "cc1"}) {
		t.Fatalf("routing-keys %#v", rk)
	}
	if n := e.count("dlcc-by-orig") + e.count("dlcc-by-cc"); n != 0 {
		t.Fatalf("%d more dead-lettered copies", n)
	}
}

// A headers table may name BCC twice (nothing in AMQP forbids it, though a
// map-based client cannot send it): every BCC field is removed, where
// RabbitMQ's strip_header (rabbit_basic.erl, lists:keydelete of the first
// match) removes only the first and so hands the second list of blind
// recipients to every consumer. Routing keeps to the first CC and first
// BCC, as RabbitMQ's rabbit_misc:table_lookup does.
func TestTwoBCCFieldsNeverDelivered(t *testing.T) {
	ds, r := rawPublisher(t, "two-bcc")
	field := func(b []byte, name string, keys ...string) []byte {
		b = append(append(b, byte(len(name))), name...)
		var arr []byte
		for _, k := range keys {
			arr = binary.BigEndian.AppendUint32(append(arr, 'S'), uint32(len(k)))
			arr = append(arr, k...)
		}
		b = binary.BigEndian.AppendUint32(append(b, 'A'), uint32(len(arr)))
		return append(b, arr...)
	}
	tbl := field(nil, "BCC", "first-secret")
	tbl = append(tbl, 1, 'x', 't', 1)
	tbl = field(tbl, "BCC", "second-secret")
	props := binary.BigEndian.AppendUint16(nil, amqp.FlagHeaders)
	props = append(binary.BigEndian.AppendUint32(props, uint32(len(tbl))), tbl...)
	b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "two-bcc"})
	r.Write(amqp.AppendContent(b, 1, amqp.ClassBasic, props, []byte("blind"), 131072))
	d := recv(t, ds)
	if want := (rmq.Table{"x": true}); !reflect.DeepEqual(d.Headers, want) {
		t.Fatalf("delivered headers %#v, want %#v: a BCC list reached the consumer", d.Headers, want)
	}
}
