package federation_test

import (
	"net"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/internal/poll"
)

func upstream(t *testing.T, name string, def map[string]any) federation.Upstream {
	t.Helper()
	u, err := federation.ParseUpstream(name, def)
	must(t, err)
	return u
}

// TestExchangeLink: a message published to the upstream exchange reaches
// the downstream exchange's binding, with x-received-from as RabbitMQ
// 3.10.8 writes it; the upstream queue and internal exchange carry
// RabbitMQ's names and arguments; a key no downstream binding has is not
// routed upstream; a binding added downstream is repeated upstream.
//
// RabbitMQ 3.10.8 (notes/shovel-rabbit.md, "What a federated exchange
// creates upstream"): queue `federation: fx -> rabbit@vm:sr-down:fx`
// durable with {"x-expires":3600000,"x-internal-purpose":"federation",
// "x-message-ttl":600000}; exchange `... B` durable auto_delete internal
// with {"x-downstream-name":"rabbit@vm","x-downstream-vhost":"sr-down",
// "x-internal-purpose":"federation","x-max-hops":2}; the message arrives
// with {"h":"v","x-received-from":[{"cluster-name":"rabbit@vm",
// "exchange":"fx","redelivered":false,"uri":"amqp://localhost:5672/sr-up",
// "vhost":"sr-up"}]}.
func TestExchangeLink(t *testing.T) {
	up, down := startNode(t), startNode(t)
	up.addVhost("sr-up")
	down.addVhost("sr-down")
	dch := dial(t, down.url("sr-down"))
	must(t, dch.ExchangeDeclare("fx", "topic", true, false, false, false, nil))
	_, err := dch.QueueDeclare("sink", true, false, false, false, nil)
	must(t, err)
	must(t, dch.QueueBind("sink", "a.#", "fx", false, nil))

	u := upstream(t, "up1", map[string]any{"uri": up.url("sr-up"), "max-hops": float64(2),
		"expires": float64(3600000), "message-ttl": float64(600000), "prefetch-count": float64(100), "reconnect-delay": float64(1)})
	binds := newBindings("a.#")
	l := federation.NewExchangeLink(u, federation.ExchangeSpec{Name: "fx", Type: "topic", Durable: true},
		newPublisher(t, down.url("sr-down")), binds, federation.Options{ClusterName: "railmq-down", Vhost: "sr-down"})
	l.Start()
	t.Cleanup(l.Stop)
	waitRunning(t, l)

	st := l.Status()
	if st.Type != "exchange" || st.Name != "fx" || st.UpstreamName != "fx" || st.Upstream != "up1" || st.Vhost != "sr-down" ||
		st.URI != "amqp://"+up.b.Addr+"/sr-up" || len(st.ID) != 8 {
		t.Fatalf("status %+v", st)
	}

	uch := dial(t, up.url("sr-up"))
	qname := "federation: fx -> railmq-down:sr-down:fx"
	// Re-declaring with the same arguments succeeds; any other
	// arguments would be 406 PRECONDITION_FAILED.
	q, err := uch.QueueDeclare(qname, true, false, false, false, rmq.Table{"x-expires": int64(3600000),
		"x-internal-purpose": "federation", "x-message-ttl": int64(600000)})
	must(t, err)
	if q.Consumers != 1 {
		t.Fatalf("upstream queue consumers %d, want 1", q.Consumers)
	}
	must(t, uch.ExchangeDeclarePassive(qname+" B", "fanout", true, true, true, false, nil))

	must(t, uch.Publish("fx", "z.z", false, false, rmq.Publishing{Body: []byte("unrouted")}))
	must(t, uch.Publish("fx", "a.b", false, false, rmq.Publishing{Headers: rmq.Table{"h": "v"}, Body: []byte("m1")}))
	d := get(t, dch, "sink")
	if string(d.Body) != "m1" || d.Exchange != "fx" || d.RoutingKey != "a.b" {
		t.Fatalf("got %q via %q/%q", d.Body, d.Exchange, d.RoutingKey)
	}
	if d.Headers["h"] != "v" {
		t.Fatalf("headers %v", d.Headers)
	}
	rf, _ := d.Headers["x-received-from"].([]any)
	if len(rf) != 1 {
		t.Fatalf("x-received-from %v", d.Headers["x-received-from"])
	}
	e := rf[0].(rmq.Table)
	if e["exchange"] != "fx" || e["redelivered"] != false || e["uri"] != "amqp://"+up.b.Addr+"/sr-up" ||
		e["vhost"] != "sr-up" || !strings.HasPrefix(e["cluster-name"].(string), "railmq@") || len(e) != 5 {
		t.Fatalf("x-received-from entry %v", e)
	}

	// A binding added downstream is repeated upstream.
	must(t, dch.QueueBind("sink", "c.*", "fx", false, nil))
	binds.set("a.#", "c.*")
	poll.Eventually(t, 30*time.Second, func() bool {
		must(t, uch.Publish("fx", "c.x", false, false, rmq.Publishing{Body: []byte("c")}))
		_, ok, err := dch.Get("sink", true)
		must(t, err)
		return ok
	}, "c.x never reached the sink")
	// The z.z message was never routed upstream (no binding for it).
	qi, err := uch.QueueDeclarePassive(qname, true, false, false, false, nil)
	must(t, err)
	if qi.Messages != 0 {
		t.Fatalf("upstream queue holds %d", qi.Messages)
	}
	if l.Status().Dropped != 0 {
		t.Fatalf("dropped %d", l.Status().Dropped)
	}
}

// TestExchangeLinkMaxHopsNoLoop: two brokers federating each other's
// fanout fx with max-hops 1 deliver a message once on each side and do
// not send it back (RabbitMQ 3.10.8: pr-a and pr-b, "pr-a's sink holds
// A1 once (no loop back)", notes/shovel-rabbit.md).
func TestExchangeLinkMaxHopsNoLoop(t *testing.T) {
	na, nb := startNode(t), startNode(t)
	na.addVhost("pr-a")
	nb.addVhost("pr-b")
	ach, bch := dial(t, na.url("pr-a")), dial(t, nb.url("pr-b"))
	for _, ch := range []*rmq.Channel{ach, bch} {
		must(t, ch.ExchangeDeclare("fx", "fanout", true, false, false, false, nil))
		_, err := ch.QueueDeclare("sink", true, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind("sink", "", "fx", false, nil))
	}
	x := federation.ExchangeSpec{Name: "fx", Type: "fanout", Durable: true}
	ua := upstream(t, "ua", map[string]any{"uri": na.url("pr-a"), "max-hops": float64(1), "reconnect-delay": float64(1)})
	ub := upstream(t, "ub", map[string]any{"uri": nb.url("pr-b"), "max-hops": float64(1), "reconnect-delay": float64(1)})
	toB := federation.NewExchangeLink(ua, x, newPublisher(t, nb.url("pr-b")), newBindings(""),
		federation.Options{ClusterName: "cluster-b", Vhost: "pr-b"})
	toA := federation.NewExchangeLink(ub, x, newPublisher(t, na.url("pr-a")), newBindings(""),
		federation.Options{ClusterName: "cluster-a", Vhost: "pr-a"})
	toB.Start()
	toA.Start()
	t.Cleanup(toB.Stop)
	t.Cleanup(toA.Stop)
	waitRunning(t, toB)
	waitRunning(t, toA)

	must(t, ach.Publish("fx", "", false, false, rmq.Publishing{Body: []byte("A1")}))
	if d := get(t, bch, "sink"); string(d.Body) != "A1" {
		t.Fatalf("pr-b got %q", d.Body)
	}
	// B's link republished A1 into pr-b's fx, where pr-a's link must not
	// take it back (one hop made): railmq's x-federation-upstream exchange
	// drops it upstream, as RabbitMQ's does (should_forward/4); over an
	// upstream without that type (fanout) the link drops it. A marker
	// published at pr-b then reaches pr-a after anything sent before it.
	if d := get(t, ach, "sink"); string(d.Body) != "A1" {
		t.Fatalf("pr-a got %q", d.Body)
	}
	must(t, bch.Publish("fx", "", false, false, rmq.Publishing{Body: []byte("B1")}))
	if d := get(t, ach, "sink"); string(d.Body) != "B1" {
		t.Fatalf("pr-a got %q after A1, want the marker B1 (A1 came back?)", d.Body)
	}
	if d := get(t, bch, "sink"); string(d.Body) != "B1" {
		t.Fatalf("pr-b got %q", d.Body)
	}
	for name, ch := range map[string]*rmq.Channel{"pr-a": ach, "pr-b": bch} {
		q, err := ch.QueueDeclarePassive("sink", true, false, false, false, nil)
		must(t, err)
		if q.Messages != 0 {
			t.Fatalf("%s sink holds %d more", name, q.Messages)
		}
	}
	if s := toB.Status(); s.Forwarded != 1 {
		t.Fatalf("pr-a -> pr-b link %+v", s)
	}
	if s := toA.Status(); s.Forwarded != 1 {
		t.Fatalf("pr-b -> pr-a link forwarded %d, want 1 (B1)", s.Forwarded)
	}
}

// TestQueueLink: a downstream queue without consumers pulls nothing; once
// a consumer attaches downstream it gets what was published to the
// upstream queue of the same name, with RabbitMQ 3.10.8's headers:
// exchange "" routing key "fq", {"x-original-exchange":"",
// "x-original-routing-key":"fq","x-received-from":[{"queue":"fq",
// "redelivered":false,"uri":"amqp://localhost:5672/fapi-up",
// "visit-count":1}]} (notes/shovel-rabbit.md, "Federated queue").
func TestQueueLink(t *testing.T) {
	up, down := startNode(t), startNode(t)
	up.addVhost("fq-up")
	down.addVhost("fq-down")
	uch, dch := dial(t, up.url("fq-up")), dial(t, down.url("fq-down"))
	for _, ch := range []*rmq.Channel{uch, dch} {
		_, err := ch.QueueDeclare("fq", true, false, false, false, nil)
		must(t, err)
	}
	const n = 5
	for i := range n {
		must(t, uch.Publish("", "fq", false, false, rmq.Publishing{Headers: rmq.Table{"i": int32(i)}, Body: []byte{byte('0' + i)}}))
	}
	u := upstream(t, "up1", map[string]any{"uri": up.url("fq-up"), "reconnect-delay": float64(1)})
	demand := newDemand(t, down.url("fq-down"), "fq")
	l := federation.NewQueueLink(u, federation.QueueSpec{Name: "fq", Durable: true},
		newPublisher(t, down.url("fq-down")), demand, federation.Options{ClusterName: "railmq-down", Vhost: "fq-down"})
	l.Start()
	t.Cleanup(l.Stop)
	waitRunning(t, l)
	if st := l.Status(); st.Type != "queue" || st.ConsumerTag != "federation-link-up1" || st.UpstreamName != "fq" {
		t.Fatalf("status %+v", st)
	}

	// No consumer downstream: the link asks and takes nothing.
	poll.Eventually(t, 30*time.Second, func() bool { a, _ := demand.stats(); return a >= 5 }, "demand never asked")
	if _, seen := demand.stats(); seen {
		t.Fatal("demand without a consumer")
	}
	q, err := uch.QueueDeclarePassive("fq", true, false, false, false, nil)
	must(t, err)
	if q.Messages != n || l.Status().Forwarded != 0 {
		t.Fatalf("upstream holds %d, forwarded %d, before any downstream consumer", q.Messages, l.Status().Forwarded)
	}

	must(t, dch.Qos(1, 0, false))
	dels, err := dch.Consume("fq", "c1", false, false, false, false, nil)
	must(t, err)
	for i := range n {
		var d rmq.Delivery
		select {
		case d = <-dels:
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d never came", i)
		}
		if string(d.Body) != string(rune('0'+i)) || d.Exchange != "" || d.RoutingKey != "fq" {
			t.Fatalf("message %d: %q via %q/%q", i, d.Body, d.Exchange, d.RoutingKey)
		}
		rf, _ := d.Headers["x-received-from"].([]any)
		if d.Headers["x-original-exchange"] != "" || d.Headers["x-original-routing-key"] != "fq" || len(rf) != 1 {
			t.Fatalf("headers %v", d.Headers)
		}
		e := rf[0].(rmq.Table)
		if e["queue"] != "fq" || e["redelivered"] != false || e["uri"] != "amqp://"+up.b.Addr+"/fq-up" ||
			e["visit-count"] != int64(1) || len(e) != 4 {
			t.Fatalf("x-received-from entry %v", e)
		}
		must(t, d.Ack(false))
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		q, err := uch.QueueDeclarePassive("fq", true, false, false, false, nil)
		must(t, err)
		return q.Messages == 0
	}, "upstream queue not drained")
}

// TestLinkErrors: a link whose upstream refuses the connection, or the
// login, shows status error with RabbitMQ 3.10.8's reasons
// ("error":"econnrefused"; "{auth_failure,\"ACCESS_REFUSED - Login was
// refused using authentication mechanism PLAIN. For details see the
// broker logfile.\"}", notes/shovel-rabbit.md) and the URI without
// credentials; stopped, it is shutdown.
func TestLinkErrors(t *testing.T) {
	n := startNode(t)
	n.addVhost("v")
	// A port that was just free: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dead := ln.Addr().String()
	must(t, ln.Close())
	for _, tc := range []struct{ uri, reason, shown string }{
		{"amqp://guest:guest@" + dead + "/v", "econnrefused", "amqp://" + dead + "/v"},
		{"amqp://guest:wrong@" + n.b.Addr + "/v",
			`{auth_failure,"ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."}`,
			"amqp://" + n.b.Addr + "/v"},
	} {
		u := upstream(t, "dead", map[string]any{"uri": tc.uri, "reconnect-delay": float64(1)})
		l := federation.NewExchangeLink(u, federation.ExchangeSpec{Name: "gx", Type: "fanout"},
			newPublisher(t, n.url("v")), newBindings(""), federation.Options{ClusterName: "c", Vhost: "v"})
		l.Start()
		poll.Eventually(t, 30*time.Second, func() bool { return l.Status().LastError != "" }, "no error: %+v", l.Status())
		st := l.Status()
		if st.LastError != tc.reason || st.URI != tc.shown {
			t.Errorf("%s: error %q uri %q, want %q %q", tc.uri, st.LastError, st.URI, tc.reason, tc.shown)
		}
		l.Stop()
		if st := l.Status(); st.State != federation.Shutdown {
			t.Errorf("stopped link is %s", st.State)
		}
	}
}
