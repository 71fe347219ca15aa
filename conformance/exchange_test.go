package conformance

import (
	"sort"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

func TestExchangeRouting(t *testing.T) {
	e := setup(t, broker.Options{})
	for _, x := range []struct{ name, kind string }{{"t.direct", "direct"}, {"t.fanout", "fanout"}, {"t.topic", "topic"}, {"t.headers", "headers"}} {
		must(t, e.ch.ExchangeDeclare(x.name, x.kind, false, true, false, false, nil))
	}
	qa, qb, qc := e.queue("route-a", nil), e.queue("route-b", nil), e.queue("route-c", nil)
	must(t, e.ch.QueueBind(qa, "red", "t.direct", false, nil))
	must(t, e.ch.QueueBind(qb, "green", "t.direct", false, nil))
	must(t, e.ch.QueueBind(qa, "", "t.fanout", false, nil))
	must(t, e.ch.QueueBind(qb, "", "t.fanout", false, nil))
	must(t, e.ch.QueueBind(qc, "", "t.fanout", false, nil))
	must(t, e.ch.QueueBind(qa, "*.orange.*", "t.topic", false, nil))
	must(t, e.ch.QueueBind(qb, "*.*.rabbit", "t.topic", false, nil))
	must(t, e.ch.QueueBind(qb, "lazy.#", "t.topic", false, nil))
	must(t, e.ch.QueueBind(qa, "", "t.headers", false, rmq.Table{"x-match": "all", "format": "pdf", "type": "report"}))
	must(t, e.ch.QueueBind(qc, "", "t.headers", false, rmq.Table{"x-match": "any", "format": "zip", "type": "log"}))

	type pub struct {
		ex, key string
		hdr     rmq.Table
		want    []string
	}
	for _, p := range []pub{
		{"t.direct", "red", nil, []string{qa}},
		{"t.direct", "green", nil, []string{qb}},
		{"t.direct", "blue", nil, nil},
		{"t.fanout", "whatever", nil, []string{qa, qb, qc}},
		{"t.topic", "quick.orange.rabbit", nil, []string{qa, qb}},
		{"t.topic", "lazy.orange.elephant", nil, []string{qa, qb}},
		{"t.topic", "quick.orange.fox", nil, []string{qa}},
		{"t.topic", "lazy.brown.fox", nil, []string{qb}},
		{"t.topic", "lazy", nil, []string{qb}},
		{"t.topic", "quick.orange.male.rabbit", nil, nil},
		{"t.headers", "", rmq.Table{"format": "pdf", "type": "report"}, []string{qa}},
		{"t.headers", "", rmq.Table{"format": "pdf", "type": "log"}, []string{qc}},
		{"t.headers", "", rmq.Table{"format": "zip"}, []string{qc}},
		{"t.headers", "", rmq.Table{"format": "pdf"}, nil},
		{"", qc, nil, []string{qc}}, // the default exchange routes by queue name
	} {
		e.publishConfirmed(p.ex, p.key, rmq.Publishing{Headers: p.hdr, Body: []byte(p.ex + "/" + p.key)})
		var got []string
		for _, q := range []string{qa, qb, qc} {
			if n := e.countAfter(q); n > 0 {
				for range n {
					e.get(e.ch, q, true)
				}
				got = append(got, q)
			}
		}
		sort.Strings(got)
		want := append([]string(nil), p.want...)
		sort.Strings(want)
		if len(got) != len(want) || (len(got) > 0 && got[0] != want[0]) || len(got) > 1 && got[len(got)-1] != want[len(want)-1] {
			t.Errorf("%s %q %v: routed to %v, want %v", p.ex, p.key, p.hdr, got, want)
		}
	}
}

// countAfter returns a queue's ready count; call it after the publishes
// it should see are confirmed.
func (e *env) countAfter(q string) int {
	st, err := e.ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Messages
}

func TestDefaultExchangeRules(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("dx-q", nil)
	err := e.ch.QueueBind(q, "k", "", false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - operation not permitted on the default exchange")
	ch := e.channel(e.conn)
	err = ch.ExchangeDelete("", false, false)
	expectErr(t, err, 403, "ACCESS_REFUSED - operation not permitted on the default exchange")
	ch = e.channel(e.conn)
	err = ch.ExchangeDeclare("", "direct", true, false, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - operation not permitted on the default exchange")
}

func TestReservedNames(t *testing.T) {
	e := setup(t, broker.Options{})
	err := e.ch.ExchangeDeclare("amq.custom", "direct", false, false, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'")
	ch := e.channel(e.conn)
	err = ch.ExchangeDelete("amq.direct", false, false)
	expectErr(t, err, 403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")
	ch = e.channel(e.conn)
	_, err = ch.QueueDeclare("amq.myqueue", false, false, false, false, nil)
	expectErr(t, err, 403, "ACCESS_REFUSED - queue name 'amq.myqueue' contains reserved prefix 'amq.*'")
	// The pre-declared exchanges exist and may be redeclared as they are.
	ch = e.channel(e.conn)
	for _, x := range []struct{ name, kind string }{{"amq.direct", "direct"}, {"amq.fanout", "fanout"}, {"amq.topic", "topic"}, {"amq.headers", "headers"}, {"amq.match", "headers"}} {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			t.Fatalf("%s: %v", x.name, err)
		}
	}
}

func TestExchangeDeclareErrors(t *testing.T) {
	e := setup(t, broker.Options{})
	err := e.ch.ExchangeDeclarePassive("nope", "direct", false, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no exchange 'nope' in vhost '/'")

	ch := e.channel(e.conn)
	if err := ch.ExchangeDeclare("eq-x", "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err = ch.ExchangeDeclare("eq-x", "fanout", false, true, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'eq-x' in vhost '/': received 'fanout' but current is 'direct'")
	ch = e.channel(e.conn)
	err = ch.ExchangeDeclare("eq-x", "direct", true, true, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'eq-x' in vhost '/': received 'true' but current is 'false'")
	// A non-string alternate exchange, in the channel's words (rabbit_misc:r_arg).
	ch = e.channel(e.conn)
	err = ch.ExchangeDeclare("ae-type-x", "direct", false, true, false, false, rmq.Table{"alternate-exchange": int32(5)})
	expectErr(t, err, 406, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'ae-type-x' in vhost '/'")

	// An unknown type is a connection error.
	c2 := dial(t, e.b.URL)
	ch = e.channel(c2)
	err = ch.ExchangeDeclare("bogus-x", "bogus", false, true, false, false, nil)
	expectErr(t, err, 503, "COMMAND_INVALID - unknown exchange type 'bogus'")
}

func TestExchangeDeleteIfUnused(t *testing.T) {
	e := setup(t, broker.Options{})
	if err := e.ch.ExchangeDeclare("del-x", "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q := e.queue("del-x-q", nil)
	if err := e.ch.QueueBind(q, "", "del-x", false, nil); err != nil {
		t.Fatal(err)
	}
	err := e.ch.ExchangeDelete("del-x", true, false)
	expectErr(t, err, 406, "PRECONDITION_FAILED - exchange 'del-x' in vhost '/' in use")
	ch := e.channel(e.conn)
	if err := ch.ExchangeDelete("del-x", false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("del-x", false, false); err != nil {
		t.Fatalf("deleting a missing exchange must succeed: %v", err)
	}
}

func TestExchangeAutoDelete(t *testing.T) {
	e := setup(t, broker.Options{})
	if err := e.ch.ExchangeDeclare("ad-x", "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q := e.queue("ad-x-q", nil)
	if err := e.ch.QueueBind(q, "k1", "ad-x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueBind(q, "k2", "ad-x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueUnbind(q, "k1", "ad-x", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.ExchangeDeclarePassive("ad-x", "direct", false, true, false, false, nil); err != nil {
		t.Fatalf("deleted with a binding left: %v", err)
	}
	if err := e.ch.QueueUnbind(q, "k2", "ad-x", nil); err != nil {
		t.Fatal(err)
	}
	err := e.ch.ExchangeDeclarePassive("ad-x", "direct", false, true, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no exchange 'ad-x' in vhost '/'")
}

func TestAlternateExchange(t *testing.T) {
	e := setup(t, broker.Options{})
	if err := e.ch.ExchangeDeclare("ae-fallback", "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.ExchangeDeclare("ae-main", "direct", false, true, false, false, rmq.Table{"alternate-exchange": "ae-fallback"}); err != nil {
		t.Fatal(err)
	}
	qm, qf := e.queue("ae-main-q", nil), e.queue("ae-fb-q", nil)
	if err := e.ch.QueueBind(qm, "known", "ae-main", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueBind(qf, "", "ae-fallback", false, nil); err != nil {
		t.Fatal(err)
	}
	e.publish("ae-main", "known", "routed")
	e.publish("ae-main", "unknown", "fallback")
	if d := e.get(e.ch, qm, true); string(d.Body) != "routed" {
		t.Fatalf("main got %q", d.Body)
	}
	if d := e.get(e.ch, qf, true); string(d.Body) != "fallback" || d.RoutingKey != "unknown" || d.Exchange != "ae-main" {
		t.Fatalf("fallback got %q via %q/%q", d.Body, d.Exchange, d.RoutingKey)
	}
}

func TestExchangeToExchangeWithLoop(t *testing.T) {
	e := setup(t, broker.Options{})
	for _, x := range []string{"e2e-a", "e2e-b"} {
		if err := e.ch.ExchangeDeclare(x, "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ch.ExchangeBind("e2e-b", "", "e2e-a", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.ExchangeBind("e2e-a", "", "e2e-b", false, nil); err != nil { // a loop
		t.Fatal(err)
	}
	q := e.queue("e2e-q", nil)
	for _, x := range []string{"e2e-a", "e2e-b"} {
		if err := e.ch.QueueBind(q, "", x, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.publish("e2e-a", "", "once")
	e.waitCount(q, 1)
	if err := e.ch.ExchangeUnbind("e2e-a", "", "e2e-b", false, nil); err != nil {
		t.Fatal(err)
	}
}

func TestInternalExchange(t *testing.T) {
	e := setup(t, broker.Options{})
	if err := e.ch.ExchangeDeclare("int-x", "fanout", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	closed := e.ch.NotifyClose(make(chan *rmq.Error, 1))
	e.publish("int-x", "", "x")
	expectErr(t, closeErr(t, closed, "channel after publishing to an internal exchange"), 403, "ACCESS_REFUSED - cannot publish to internal exchange 'int-x' in vhost '/'")
}
