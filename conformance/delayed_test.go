package conformance

// Delayed messages: the x-delayed-message exchange type of
// rabbitmq-delayed-message-exchange, built in. The plugin does not ship
// with Debian's RabbitMQ, so these tests follow its README and source
// (github.com/rabbitmq/rabbitmq-delayed-message-exchange, read at 5dc8577,
// and at 3bfbb1d^ for the 3.10/3.12-era header handling):
//   - src/rabbit_exchange_type_delayed_message.erl validate/1: the
//     x-delayed-type checks and their texts (406, and 503 from
//     rabbit_exchange:check_type); route/3: a delay in (0, 4294967295]
//     holds the message back and routes it nowhere now, anything else
//     routes at once as the underlying type.
//   - src/rabbit_delayed_message_utils.erl get_delay/1: integer header
//     types as they are, strings converted, floats truncated;
//     swap_delay_header/1: x-delay is -Delay (a signedint) on the routed
//     message.
//   - README "Limitations": mandatory is not supported (a delayed message
//     is returned as unroutable at publish; issues #7 and #136 show the
//     312 NO_ROUTE), messages survive a restart.
//   - rabbit_exchange_type_delayed_message:info/1: messages_delayed.

import (
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func declareDelayed(t *testing.T, ch *rmq.Channel, name, typ string, durable bool) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, "x-delayed-message", durable, false, false, false, rmq.Table{"x-delayed-type": typ}); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

func delayed(ms any, body string) rmq.Publishing {
	return rmq.Publishing{Headers: rmq.Table{"x-delay": ms}, Body: []byte(body)}
}

func TestDelayedDeclare(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	for _, tc := range []struct {
		name string
		args rmq.Table
		code int
		text string
	}{
		{"dl-none", nil, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"dl-int", rmq.Table{"x-delayed-type": int32(1)}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"dl-self", rmq.Table{"x-delayed-type": "x-delayed-message"}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
	} {
		ch := e.channel(e.conn)
		err := ch.ExchangeDeclare(tc.name, "x-delayed-message", false, false, false, false, tc.args)
		expectErr(t, err, tc.code, tc.text)
	}
	ch := e.channel(e.conn)
	for _, typ := range []string{"direct", "fanout", "topic", "headers"} {
		declareDelayed(t, ch, "dl-"+typ, typ, false)
		declareDelayed(t, ch, "dl-"+typ, typ, false) // equivalent redeclare
		must(t, ch.ExchangeDeclarePassive("dl-"+typ, "x-delayed-message", false, false, false, false, nil))
	}
	// RabbitMQ prints the type atom with ~p inside quotes: an atom with a
	// '-' comes quoted twice, as its 3.10.8 shows x-consistent-hash
	// (TestConsistentHashDeclareErrors, checked against it).
	err := ch.ExchangeDeclare("dl-direct", "direct", false, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'dl-direct' in vhost '/': received 'direct' but current is ''x-delayed-message''")
	// 503 is a connection error (rabbit_exchange:check_type's command_invalid).
	err = e.channel(e.conn).ExchangeDeclare("dl-bogus", "x-delayed-message", false, false, false, false, rmq.Table{"x-delayed-type": "bogus"})
	expectErr(t, err, 503, "COMMAND_INVALID - unknown exchange type 'bogus'")
}

// TestDelayedRouting holds a message back for its x-delay on each
// underlying type, then routes it as that type would, earliest due
// first, with x-delay negated.
func TestDelayedRouting(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	for _, typ := range []string{"direct", "fanout", "topic", "headers"} {
		t.Run(typ, func(t *testing.T) {
			x := "dr-" + typ
			declareDelayed(t, ch, x, typ, false)
			q := e.queue("dr-q-"+typ, nil)
			key, bargs := "k", rmq.Table(nil)
			switch typ {
			case "topic":
				key = "a.*"
			case "headers":
				bargs = rmq.Table{"x-match": "all", "kind": "dl"}
			}
			must(t, ch.QueueBind(q, key, x, false, bargs))
			ds := e.consume(q, true)
			pub := func(ms int32, body string) {
				p := delayed(ms, body)
				p.Headers["kind"] = "dl"
				if err := e.ch.Publish(x, map[bool]string{true: "a.b", false: "k"}[typ == "topic"], false, false, p); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			pub(600, "late")
			pub(300, "early")
			none(t, ds, 150*time.Millisecond)
			d := recv(t, ds)
			if string(d.Body) != "early" || time.Since(start) < 300*time.Millisecond {
				t.Fatalf("got %q after %v, want early after 300ms", d.Body, time.Since(start))
			}
			if got, ok := d.Headers["x-delay"].(int32); !ok || got != -300 {
				t.Fatalf("x-delay on delivery = %#v, want int32(-300)", d.Headers["x-delay"])
			}
			d = recv(t, ds)
			if string(d.Body) != "late" || time.Since(start) < 600*time.Millisecond {
				t.Fatalf("got %q after %v, want late after 600ms", d.Body, time.Since(start))
			}
			if d.Exchange != x || d.RoutingKey == "" {
				t.Fatalf("delivered with exchange %q key %q", d.Exchange, d.RoutingKey)
			}
		})
	}
}

// TestDelayedHeaderValues: what holds a message back and what routes it
// at once (get_delay/1, and the 0 < Delay =< ERL_MAX_T guard).
func TestDelayedHeaderValues(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dh", "fanout", false)
	q := e.queue("dh-q", nil)
	must(t, ch.QueueBind(q, "", "dh", false, nil))
	at := func(p rmq.Publishing) {
		t.Helper()
		must(t, e.ch.Publish("dh", "", false, false, p))
		e.get(e.ch, q, true)
	}
	at(rmq.Publishing{Body: []byte("no header")})
	at(delayed(int32(0), "zero"))
	at(delayed(int64(-5000), "negative"))
	at(delayed(int64(4294967296), "beyond Erlang's timer"))
	at(delayed("soon", "not a number"))
	at(delayed(true, "bool"))
	for _, v := range []any{int8(100), uint8(100), int16(100), uint16(100), int32(100), uint32(100), int64(100), "150", float64(100.9), float32(100.2)} {
		start := time.Now()
		must(t, e.ch.Publish("dh", "", false, false, delayed(v, "held")))
		if e.count(q) != 0 {
			t.Fatalf("x-delay %T(%v): routed at once", v, v)
		}
		e.get(e.ch, q, true)
		if time.Since(start) < 100*time.Millisecond {
			t.Fatalf("x-delay %T(%v): routed after %v", v, v, time.Since(start))
		}
	}
}

// TestDelayedMandatory: the plugin cannot route at publish, so a
// mandatory delayed message is returned (312 NO_ROUTE) at once, and still
// delivered when due; with no delay, mandatory works as usual. Confirms
// follow the return.
func TestDelayedMandatory(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dm", "direct", true)
	q := e.queue("dm-q", nil)
	must(t, ch.QueueBind(q, "k", "dm", false, nil))
	pc := e.channel(e.conn)
	must(t, pc.Confirm(false))
	returns := pc.NotifyReturn(make(chan rmq.Return, 4))
	dc, err := pc.PublishWithDeferredConfirm("dm", "k", true, false, delayed(int32(200), "held"))
	must(t, err)
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || string(r.Body) != "held" {
			t.Fatalf("return %d %s %q", r.ReplyCode, r.ReplyText, r.Body)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no basic.return")
	}
	if !dc.Wait() {
		t.Fatal("nacked")
	}
	e.get(e.ch, q, true)
	dc, err = pc.PublishWithDeferredConfirm("dm", "k", true, false, rmq.Publishing{Body: []byte("now")})
	must(t, err)
	if !dc.Wait() {
		t.Fatal("nacked")
	}
	select {
	case r := <-returns:
		t.Fatalf("unexpected return %v", r)
	default:
	}
	if d := e.get(e.ch, q, true); string(d.Body) != "now" {
		t.Fatalf("got %q", d.Body)
	}
}

// TestDelayedAlternateExchange: as with the plugin (issue #36), a delayed
// message finds no route at publish, so the alternate exchange gets it at
// once; the exchange still routes it when due.
func TestDelayedAlternateExchange(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	must(t, ch.ExchangeDeclare("dae", "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare("da", "x-delayed-message", false, false, false, false,
		rmq.Table{"x-delayed-type": "direct", "alternate-exchange": "dae"}))
	qa, q := e.queue("da-ae", nil), e.queue("da-q", nil)
	must(t, ch.QueueBind(qa, "", "dae", false, nil))
	must(t, ch.QueueBind(q, "k", "da", false, nil))
	must(t, e.ch.Publish("da", "k", false, false, delayed(int32(200), "m")))
	if d := e.get(e.ch, qa, true); d.Headers["x-delay"] != int32(200) {
		t.Fatalf("alternate got x-delay %#v", d.Headers["x-delay"])
	}
	if e.count(q) != 0 {
		t.Fatal("routed before its delay")
	}
	e.get(e.ch, q, true)
}

// TestDelayedTTL: a per-message TTL counts from when the message is
// routed to a queue, not from its publish.
func TestDelayedTTL(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dt", "fanout", false)
	q := e.queue("dt-q", nil)
	must(t, ch.QueueBind(q, "", "dt", false, nil))
	p := delayed(int32(400), "m")
	p.Expiration = "300"
	must(t, e.ch.Publish("dt", "", false, false, p))
	e.get(e.ch, q, true)
}

// TestDelayedExchangeToExchange: a delayed message routed when due
// follows exchange-to-exchange bindings, and is not held back again by a
// delayed exchange down the chain (its x-delay is negative by then).
func TestDelayedExchangeToExchange(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "de-1", "fanout", false)
	declareDelayed(t, ch, "de-2", "fanout", false)
	must(t, ch.ExchangeBind("de-2", "", "de-1", false, nil))
	q := e.queue("de-q", nil)
	must(t, ch.QueueBind(q, "", "de-2", false, nil))
	start := time.Now()
	must(t, e.ch.Publish("de-1", "", false, false, delayed(int32(300), "m")))
	e.get(e.ch, q, true)
	if el := time.Since(start); el < 300*time.Millisecond || el > 2*time.Second {
		t.Fatalf("arrived after %v", el)
	}
}

// TestDelayedDeleteExchange: deleting the exchange drops its delayed
// messages; one of the same name declared again does not get them.
func TestDelayedDeleteExchange(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dd", "fanout", true)
	q := e.queue("dd-q", nil)
	must(t, ch.QueueBind(q, "", "dd", false, nil))
	for range 10 {
		e.publishConfirmed("dd", "", rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(300)}, Body: []byte("old")})
	}
	must(t, ch.ExchangeDelete("dd", false, false))
	declareDelayed(t, ch, "dd", "fanout", true)
	must(t, ch.QueueBind(q, "", "dd", false, nil))
	e.publishConfirmed("dd", "", rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(400)}, Body: []byte("new")})
	ds := e.consume(q, true)
	if d := recv(t, ds); string(d.Body) != "new" {
		t.Fatalf("got %q", d.Body)
	}
	none(t, ds, 300*time.Millisecond) // no old message routed after the exchange was deleted
}

// TestDelayedStats: messages_delayed in the management API's exchange
// (the plugin's info/1) and the per-object Prometheus gauge.
func TestDelayedStats(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	e := &env{t: t, b: b}
	e.conn = dial(t, b.URL)
	e.ch = e.channel(e.conn)
	a := newAPI(t, b)
	a.admin("PUT", "/api/exchanges/%2F/ds", map[string]any{"type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "direct"}}, 201)
	q := e.queue("ds-q", nil)
	must(t, e.ch.QueueBind(q, "k", "ds", false, nil))
	for i := range 5 {
		e.publishConfirmed("ds", "k", rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(800 + 100*i)}})
	}
	var x map[string]any
	a.call("GET", "/api/exchanges/%2F/ds", "guest", "guest", nil, &x)
	if x["type"] != "x-delayed-message" || x["messages_delayed"] != float64(5) {
		t.Fatalf("exchange JSON: type %v messages_delayed %v", x["type"], x["messages_delayed"])
	}
	hs := httptest.NewServer(b.PrometheusHandler())
	t.Cleanup(hs.Close)
	m := getMetrics(t, hs.URL+"/metrics/per-object")
	if got := m.series[`railmq_exchange_messages_delayed{exchange="ds",vhost="/"}`]; got != 5 {
		var keys []string
		for k := range m.series {
			if strings.Contains(k, "delayed") {
				keys = append(keys, k)
			}
		}
		t.Fatalf("railmq_exchange_messages_delayed = %v (%v)", got, keys)
	}
	e.waitCount(q, 5)
	testutil.Eventually(t, 5*time.Second, func() bool {
		a.call("GET", "/api/exchanges/%2F/ds", "guest", "guest", nil, &x)
		return x["messages_delayed"] == float64(0)
	}, "messages_delayed back to 0")
	// How late each was routed: five observations, each in a bucket.
	m = getMetrics(t, hs.URL+"/metrics")
	if got := m.series[`railmq_delayed_routing_lateness_seconds_count`]; got != 5 {
		t.Fatalf("railmq_delayed_routing_lateness_seconds_count = %v, want 5", got)
	}
	if got := m.series[`railmq_delayed_routing_lateness_seconds_bucket{le="+Inf"}`]; got != 5 {
		t.Fatalf("lateness +Inf bucket = %v, want 5", got)
	}
}

// TestDelayedRestart: persistent delayed messages of a durable exchange
// survive a clean restart with what is left of their delay; transient
// ones, and those of a non-durable exchange, do not.
func TestDelayedRestart(t *testing.T) {
	testutil.InProcess(t)
	dir := t.TempDir()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	e := &env{t: t, b: b}
	e.conn = dial(t, b.URL)
	e.ch = e.channel(e.conn)
	declareDelayed(t, e.ch, "rs", "direct", true)
	declareDelayed(t, e.ch, "rs-t", "direct", false)
	_, err := e.ch.QueueDeclare("rs-q", true, false, false, false, nil)
	must(t, err)
	must(t, e.ch.QueueBind("rs-q", "k", "rs", false, nil))
	must(t, e.ch.QueueBind("rs-q", "k", "rs-t", false, nil))
	start := time.Now()
	e.publishConfirmed("rs", "k", rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(1500)}, Body: []byte("persistent")})
	e.publishConfirmed("rs", "k", rmq.Publishing{DeliveryMode: 1, Headers: rmq.Table{"x-delay": int32(1500)}, Body: []byte("transient")})
	e.publishConfirmed("rs-t", "k", rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(1500)}, Body: []byte("non-durable exchange")})
	e.conn.Close()
	stop()

	b2, _ := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	c := dial(t, b2.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	st, err := ch.QueueDeclarePassive("rs-q", true, false, false, false, nil)
	must(t, err)
	if st.Messages != 0 && time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("%d messages routed before their delay", st.Messages)
	}
	var got []string
	testutil.Eventually(t, 5*time.Second, func() bool {
		d, ok, err := ch.Get("rs-q", true)
		must(t, err)
		if ok {
			got = append(got, string(d.Body))
			if time.Since(start) < 1500*time.Millisecond {
				t.Fatalf("%q routed after %v", d.Body, time.Since(start))
			}
		}
		return len(got) > 0
	}, "the persistent message")
	if strings.Join(got, ",") != "persistent" {
		t.Fatalf("after restart got %v, want [persistent]", got)
	}
	ds, err := ch.Consume("rs-q", "", true, false, false, false, nil)
	must(t, err)
	none(t, ds, 500*time.Millisecond) // the transient ones are gone
}

// TestDelayedKill9: delayed messages confirmed before a SIGKILL (the real
// binary, no shutdown) are all routed after a restart on the same data
// dir (duplicates allowed: at least once).
func TestDelayedKill9(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	run := func() (*exec.Cmd, string) {
		cmd, url, _ := startBinary(t, bin, dir)
		return cmd, url
	}
	cmd, url := run()
	c := dial(t, url)
	ch, err := c.Channel()
	must(t, err)
	declareDelayed(t, ch, "k9", "direct", true)
	_, err = ch.QueueDeclare("k9-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("k9-q", "k", "k9", false, nil))
	must(t, ch.Confirm(false))
	const n = 500
	var dcs []*rmq.DeferredConfirmation
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("k9", "k", false, false, rmq.Publishing{DeliveryMode: 2,
			Headers: rmq.Table{"x-delay": int32(1000 + i*2)}, Body: []byte{byte(i >> 8), byte(i)}})
		must(t, err)
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	must(t, cmd.Process.Kill()) // SIGKILL right after the confirms
	_ = cmd.Wait()

	_, url = run()
	c2 := dial(t, url)
	defer c2.Close()
	ch2, err := c2.Channel()
	must(t, err)
	seen := map[int]bool{}
	testutil.Eventually(t, 15*time.Second, func() bool {
		d, ok, err := ch2.Get("k9-q", true)
		must(t, err)
		if ok {
			seen[int(d.Body[0])<<8|int(d.Body[1])] = true
		}
		return len(seen) == n
	}, "all %d confirmed delayed messages after kill -9", n)
}

// TestDelayedOrderMany: many messages with spread delays come out in due
// order, each not before its time. The broker's due time is when it read
// the publish plus x-delay: after the client sent it and before the
// client saw its confirm, so each message's due time is known to lie in
// [lo, hi]; a message routed after another whose lo is later than its hi
// is out of order, however long the broker took to read a burst.
func TestDelayedOrderMany(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "do", "fanout", true)
	q := e.queue("do-q", nil)
	must(t, ch.QueueBind(q, "", "do", false, nil))
	ds := e.consume(q, true)
	pc := e.channel(e.conn)
	must(t, pc.Confirm(false))
	const n, batch = 2000, 50
	lo, hi := make([]time.Time, n), make([]time.Time, n)
	delay := make([]time.Duration, n)
	for i := range n {
		d := 200 + (i*7919)%1000
		delay[i] = time.Duration(d) * time.Millisecond
		body, _ := json.Marshal(i)
		lo[i] = time.Now().Add(delay[i])
		dc, err := pc.PublishWithDeferredConfirm("do", "", false, false, rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(d)}, Body: body})
		must(t, err)
		if i%batch == batch-1 {
			if !dc.Wait() {
				t.Fatal("nacked")
			}
			confirmed := time.Now() // confirms come in order: the batch was read by now
			for j := i - batch + 1; j <= i; j++ {
				hi[j] = confirmed.Add(delay[j])
			}
		}
	}
	var maxLo time.Time
	maxAt := -1
	for range n {
		dl := recv(t, ds)
		now := time.Now()
		var i int
		must(t, json.Unmarshal(dl.Body, &i))
		if now.Before(lo[i].Add(-5 * time.Millisecond)) {
			t.Fatalf("message %d routed %v before its due time", i, lo[i].Sub(now))
		}
		if hi[i].Before(maxLo.Add(-5 * time.Millisecond)) {
			t.Fatalf("message %d (due by %v) routed after message %d (due from %v, %v later)", i, hi[i], maxAt, maxLo, maxLo.Sub(hi[i]))
		}
		if lo[i].After(maxLo) {
			maxLo, maxAt = lo[i], i
		}
	}
}

// TestDelayedDeadLetter: a message dead-lettered to a delayed exchange is
// held back for its x-delay too (the plugin's route/3 runs for every
// route through the exchange, dead-lettering's included).
func TestDelayedDeadLetter(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dx", "fanout", true)
	out := e.queue("dx-out", nil)
	must(t, ch.QueueBind(out, "", "dx", false, nil))
	src := e.queue("dx-src", rmq.Table{"x-dead-letter-exchange": "dx", "x-message-ttl": int32(0)})
	start := time.Now()
	must(t, e.ch.Publish("", src, false, false, rmq.Publishing{DeliveryMode: 2, Headers: rmq.Table{"x-delay": int32(300)}, Body: []byte("m")}))
	if n := e.count(out); n != 0 {
		t.Fatal("dead-lettered copy routed before its delay")
	}
	d := e.get(e.ch, out, true)
	if time.Since(start) < 300*time.Millisecond {
		t.Fatalf("routed after %v", time.Since(start))
	}
	if d.Headers["x-delay"] != int32(-300) || d.Headers["x-first-death-reason"] != "expired" {
		t.Fatalf("headers %v", d.Headers)
	}
}

// TestClusterDelayedExchange: in cluster mode a delayed exchange's
// definition is replicated like any other's; a message delayed on a node
// is held by that node and routed there when due.
func TestClusterDelayedExchange(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	chans := make([]*rmq.Channel, 3)
	reopen := func(i int) {
		c := dial(t, nodes[i].b.URL)
		ch, err := c.Channel()
		must(t, err)
		chans[i] = ch
	}
	for i := range nodes {
		reopen(i)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		err := chans[0].ExchangeDeclare("cl-delayed", "x-delayed-message", true, false, false, false, rmq.Table{"x-delayed-type": "direct"})
		if err != nil {
			reopen(0) // no leader yet: the channel was closed
			return false
		}
		return true
	}, "declare on node 1 did not succeed")
	for i := 1; i < 3; i++ {
		testutil.Eventually(t, 5*time.Second, func() bool {
			if err := chans[i].ExchangeDeclarePassive("cl-delayed", "x-delayed-message", true, false, false, false, nil); err != nil {
				reopen(i)
				return false
			}
			return true
		}, "node %d lacks the exchange", i+1)
	}
	ch := chans[2]
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q.Name, "k", "cl-delayed", false, nil))
	start := time.Now()
	must(t, ch.Publish("cl-delayed", "k", false, false, delayed(int32(300), "m")))
	var d rmq.Delivery
	testutil.Eventually(t, 10*time.Second, func() bool {
		var ok bool
		d, ok, err = ch.Get(q.Name, true)
		must(t, err)
		return ok
	}, "the delayed message on node 3")
	if time.Since(start) < 300*time.Millisecond || d.Headers["x-delay"] != int32(-300) {
		t.Fatalf("after %v, x-delay %v", time.Since(start), d.Headers["x-delay"])
	}
}

// TestDelayedRefusedCopyNotRetried: a due message that one of its queues
// refuses (full, x-overflow reject-publish) reaches the others once: the
// refusal is that queue's answer, as the plugin's one attempt, not a
// store failure that has the batch routed again.
func TestDelayedRefusedCopyNotRetried(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dr", "fanout", true)
	for _, q := range []struct {
		name string
		args rmq.Table
	}{{"dr-all", nil}, {"dr-full", rmq.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}}} {
		_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
		must(t, err)
		must(t, ch.QueueBind(q.name, "", "dr", false, nil))
	}
	for i := range 3 {
		p := delayed(int32(200), strconv.Itoa(i))
		p.DeliveryMode = rmq.Persistent
		e.publishConfirmed("dr", "", p)
	}
	e.waitCount("dr-all", 3)
	e.waitCount("dr-full", 1)
	// A batch taken for failed is routed again about every 2 s.
	time.Sleep(3 * time.Second)
	if n := e.count("dr-all"); n != 3 {
		t.Fatalf("dr-all holds %d messages after 3 s, want 3 (routed again)", n)
	}
}

// TestDelayedConsistentHashHeader: a delayed exchange whose x-delayed-type
// is x-consistent-hash with hash-header routes a due message by its
// header, to the queue the same message goes to undelayed.
func TestDelayedConsistentHashHeader(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	ch := e.channel(e.conn)
	must(t, ch.ExchangeDeclare("dch", "x-delayed-message", false, false, false, false,
		rmq.Table{"x-delayed-type": "x-consistent-hash", "hash-header": "h"}))
	qs := []string{"dch-1", "dch-2", "dch-3", "dch-4"}
	for _, q := range qs {
		e.queue(q, nil)
		must(t, ch.QueueBind(q, "1", "dch", false, nil))
	}
	const n = 40
	for i := range n {
		for _, d := range []int32{0, 200} { // at once, and delayed
			p := delayed(d, strconv.Itoa(i))
			p.Headers["h"] = "key-" + strconv.Itoa(i)
			must(t, e.ch.Publish("dch", "", false, false, p))
		}
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		total := 0
		for _, q := range qs {
			total += e.count(q)
		}
		return total == 2*n
	}, "%d messages routed", 2*n)
	used := 0
	for _, q := range qs {
		seen := map[string]int{}
		for range e.count(q) {
			seen[string(e.get(e.ch, q, true).Body)]++
		}
		for body, k := range seen {
			if k != 2 {
				t.Fatalf("message %s: %d copies in %s, want its undelayed and its delayed copy together", body, k, q)
			}
		}
		if len(seen) > 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("%d keys went to %d queue(s): the header was not hashed", n, used)
	}
}

// TestDelayedManagementPublish: a message published through the
// management API (rabbitmqadmin publish) to a delayed exchange is held
// back and routed when due, as one published over AMQP; the API answers
// routed false, as the plugin's route reaches no queue at publish time.
func TestDelayedManagementPublish(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	ch := e.channel(e.conn)
	declareDelayed(t, ch, "dmp", "direct", true)
	_, err := ch.QueueDeclare("dmp-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("dmp-q", "k", "dmp", false, nil))
	var out struct{ Routed bool }
	if code := a.call("POST", "/api/exchanges/%2F/dmp/publish", "guest", "guest", map[string]any{
		"properties":  map[string]any{"delivery_mode": 2, "headers": map[string]any{"x-delay": 300}},
		"routing_key": "k", "payload": "later", "payload_encoding": "string"}, &out); code != 200 || out.Routed {
		t.Fatalf("publish: %d, routed %v", code, out.Routed)
	}
	if n := e.count("dmp-q"); n != 0 {
		t.Fatalf("%d messages in dmp-q at once, want the message held back", n)
	}
	if d := e.get(e.ch, "dmp-q", true); string(d.Body) != "later" {
		t.Fatalf("got %q", d.Body)
	}
}
