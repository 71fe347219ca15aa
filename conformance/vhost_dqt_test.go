package conformance

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// vhostView is what GET /api/vhosts/{name} shows of a vhost's metadata.
type vhostView struct {
	Description      string         `json:"description"`
	Tags             []string       `json:"tags"`
	DefaultQueueType string         `json:"default_queue_type"`
	Metadata         map[string]any `json:"metadata"`
}

func (a *api) vhost(name string) vhostView {
	a.t.Helper()
	var v vhostView
	if code := a.call("GET", "/api/vhosts/"+url.PathEscape(name), "guest", "guest", nil, &v); code != 200 {
		a.t.Fatalf("GET vhost %s: %d", name, code)
	}
	return v
}

// A vhost's default queue type is set by PUT /api/vhosts/{name}, shown by
// GET (top level and metadata) and the definitions export, and stored.
//
// RabbitMQ 3.10.8 (asked): GET /api/vhosts shows a vhost without one as
// "default_queue_type":"undefined" with metadata {description, tags}, and
// one made with {"defaultqueuetype":"quorum"} as "default_queue_type":
// "quorum" with metadata {default_queue_type, description, tags}.
// 3.10.8 reads only "defaultqueuetype", and only when it makes the vhost;
// RabbitMQ 4.x reads "default_queue_type" (falling back to
// "defaultqueuetype") on every PUT and answers an invalid one 400 with
// rabbit_queue_type:validate_default_queue_type's text
// (rabbit_mgmt_wm_vhost.erl, rabbit_queue_type.erl, v4.3.5); 3.10.8
// answers 500 with a garbled body, so railmq follows 4.x there.
func TestVHostDefaultQueueTypeAPI(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	a := newAPI(t, r.b)
	if v := a.vhost("/"); v.DefaultQueueType != "undefined" || v.Metadata["default_queue_type"] != nil {
		t.Fatalf("a vhost without one: %+v", v)
	}
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"description": "d", "tags": "a,b", "default_queue_type": "quorum"}, 201)
	want := func(when, dqt string) {
		t.Helper()
		v := a.vhost("dq")
		if v.DefaultQueueType != dqt || v.Metadata["default_queue_type"] != dqt || v.Description != "d" || v.Metadata["description"] != "d" {
			t.Fatalf("%s: %+v, want default_queue_type %q", when, v, dqt)
		}
	}
	want("made with quorum", "quorum")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"description": "d"}, 204)
	want("a PUT naming no type keeps it", "quorum")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"defaultqueuetype": "classic"}, 204)
	want("defaultqueuetype, RabbitMQ 3.10's name", "classic")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": "rabbit_quorum_queue"}, 204)
	want("a module name", "quorum")
	for _, tc := range []struct {
		val    any
		reason string
	}{
		{"bogus", "bogus is not a valid queue type"},
		{"", "default_queue_type must not be an empty string"},
		{5, "5 is not a valid default_queue_type value"},
	} {
		code, _, e := a.callWithHeaders("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": tc.val})
		if code != 400 || e.Reason != tc.reason {
			t.Errorf("default_queue_type %v: %d %q, want 400 %q", tc.val, code, e.Reason, tc.reason)
		}
		if code, _, _ := a.callWithHeaders("PUT", "/api/vhosts/dq-bad", map[string]any{"default_queue_type": tc.val}); code != 400 {
			t.Errorf("a new vhost with default_queue_type %v: %d", tc.val, code)
		}
	}
	if code := a.call("GET", "/api/vhosts/dq-bad", "guest", "guest", nil, nil); code != 404 {
		t.Fatalf("a refused PUT made its vhost: %d", code)
	}
	want("after the refusals", "quorum")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": "rabbit_stream_queue"}, 204)
	want("streams (RabbitMQ 3.13+)", "stream")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": "quorum"}, 204)

	var defs struct {
		VHosts []map[string]any `json:"vhosts"`
	}
	a.call("GET", "/api/definitions", "guest", "guest", nil, &defs)
	var got map[string]any
	for _, v := range defs.VHosts {
		if v["name"] == "dq" {
			got = v
		}
	}
	b, _ := json.Marshal(got)
	// RabbitMQ 3.13's and 4.0's shape (rabbit_mgmt_wm_definitions.erl,
	// v3.13.7 and v4.0.9: name, description, tags, default_queue_type,
	// metadata).
	if s := string(b); s != `{"default_queue_type":"quorum","description":"d","metadata":{"default_queue_type":"quorum","description":"d","tags":["a","b"]},"name":"dq","tags":["a","b"]}` {
		t.Errorf("exported as %s", s)
	}

	// An import naming the vhost without a default queue type (RabbitMQ
	// 3.12's export: the name alone) leaves it; one with an invalid type
	// is refused whole, in RabbitMQ 4.3.5's words (rabbit_definitions.erl
	// invalid_queue_type_message).
	if code, reason := a.postDefinitions(`{"vhosts":[{"name":"dq","description":"d","tags":["a","b"]}]}`); code != 204 {
		t.Fatalf("import: %d %s", code, reason)
	}
	want("after an import naming no type", "quorum")
	if code, reason := a.postDefinitions(`{"vhosts":[{"name":"dq-new","metadata":{"default_queue_type":"bogus"}}]}`); code != 400 || reason != `vhost "dq-new": bogus is not a valid queue type` {
		t.Errorf("an import with an invalid type: %d %q", code, reason)
	}

	r.restart()
	a = newAPI(t, r.b)
	want("after a restart", "quorum")
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": "undefined"}, 204)
	if v := a.vhost("dq"); v.DefaultQueueType != "undefined" || v.Metadata["default_queue_type"] != nil {
		t.Fatalf("\"undefined\" clears it (RabbitMQ 4.x, rabbit_vhost:update_metadata): %+v", v)
	}
}

// queueArgs is the arguments GET /api/queues shows of a queue, nil if it
// does not exist.
func (a *api) queueArgs(vh, q string) map[string]any {
	a.t.Helper()
	var out struct {
		Arguments map[string]any `json:"arguments"`
		Type      string         `json:"type"`
	}
	if code := a.call("GET", "/api/queues/"+url.PathEscape(vh)+"/"+url.PathEscape(q), "guest", "guest", nil, &out); code != 200 {
		return nil
	}
	if out.Arguments == nil {
		out.Arguments = map[string]any{}
	}
	out.Arguments["(type)"] = out.Type
	return out.Arguments
}

// Declares that name no queue type get the vhost's default where
// RabbitMQ writes it (rabbit_amqqueue:augment_declare_args, v3.10.8 to
// v4.3.5; vhost/defaulttype.go). RabbitMQ 3.10.8, asked, in a vhost made
// by `rabbitmqctl add_vhost dqt-probe2 --default-queue-type quorum`:
//
//	"p-durable" durable                    -> quorum, [{"x-queue-type","quorum"}]
//	"p-transient" not durable              -> classic, []
//	"p-autodel" durable auto-delete        -> classic, []
//	"p-excl" durable exclusive             -> classic
//	"" durable                             -> 406 PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue
//	"" exclusive auto-delete               -> amq.gen-...
//	"p-classic" x-queue-type classic       -> classic, [{"x-queue-type","classic"}]
//	redeclare p-durable, no arguments      -> ok
//	redeclare p-durable as classic         -> 406 PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'p-durable' in vhost 'dqt-probe2': received 'classic' but current is 'quorum'
func TestVHostDefaultQueueTypeDeclares(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/vhosts/dq", map[string]any{"default_queue_type": "quorum"}, 201)
	c := dial(t, b.URL+"dq")
	ch := func() *rmq.Channel {
		t.Helper()
		ch, err := c.Channel()
		must(t, err)
		return ch
	}
	classicNoType := func(q string) {
		t.Helper()
		args := a.queueArgs("dq", q)
		if args == nil || args["(type)"] != "classic" || args["x-queue-type"] != nil {
			t.Errorf("%s: %v, want a classic queue with no x-queue-type", q, args)
		}
	}
	for _, d := range []struct {
		name                          string
		durable, autoDelete, exclusve bool
	}{
		{"p-transient", false, false, false},
		{"p-autodel", true, true, false},
		{"p-excl", true, false, true},
	} {
		if _, err := ch().QueueDeclare(d.name, d.durable, d.autoDelete, d.exclusve, false, nil); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		classicNoType(d.name)
	}
	_, err := ch().QueueDeclare("", true, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue")
	q, err := ch().QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatalf("a server-named exclusive queue: %v", err)
	}
	classicNoType(q.Name)
	if _, err := ch().QueueDeclare("p-classic", true, false, false, false, rmq.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatal(err)
	}
	if args := a.queueArgs("dq", "p-classic"); args["(type)"] != "classic" || args["x-queue-type"] != "classic" {
		t.Errorf("p-classic: %v", args)
	}

	// The durable one is a quorum queue, which takes messages.
	pc := ch()
	if _, err := pc.QueueDeclare("p-durable", true, false, false, false, nil); err != nil {
		t.Fatalf("p-durable: %v", err)
	}
	if args := a.queueArgs("dq", "p-durable"); args["(type)"] != "quorum" || args["x-queue-type"] != "quorum" {
		t.Errorf("p-durable: %v, want a quorum queue with x-queue-type quorum", args)
	}
	must(t, pc.Confirm(false))
	dc, err := pc.PublishWithDeferredConfirm("", "p-durable", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("m1")})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish to p-durable: %v", err)
	}
	var d rmq.Delivery
	testutil.Eventually(t, 10e9, func() bool {
		var ok bool
		d, ok, err = pc.Get("p-durable", false)
		return err != nil || ok
	}, "a message in p-durable")
	must(t, err)
	if string(d.Body) != "m1" {
		t.Fatalf("got %q", d.Body)
	}
	must(t, d.Ack(false))
	if _, err := ch().QueueDeclare("p-durable", true, false, false, false, nil); err != nil {
		t.Errorf("redeclaring p-durable with no arguments: %v", err)
	}
	if _, err := ch().QueueDeclare("p-durable", true, false, false, false, rmq.Table{"x-queue-type": "quorum"}); err != nil {
		t.Errorf("redeclaring p-durable as quorum: %v", err)
	}
	_, err = ch().QueueDeclare("p-durable", true, false, false, false, rmq.Table{"x-queue-type": "classic"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'p-durable' in vhost 'dq': received 'classic' but current is 'quorum'")

	// PUT /api/queues goes through the same rewrite
	// (rabbit_mgmt_util:direct_request calls rabbit_channel).
	a.admin("PUT", "/api/queues/dq/p-http", map[string]any{"durable": true}, 201)
	if args := a.queueArgs("dq", "p-http"); args["(type)"] != "quorum" {
		t.Errorf("p-http: %v, want quorum", args)
	}

	// A classic queue made before the default was set, redeclared with
	// no type, is now a quorum declare, and inequivalent: RabbitMQ
	// 3.10.8's text for a classic queue declared with no type, then
	// with x-queue-type quorum (asked).
	c2 := dial(t, b.URL)
	ch2 := func() *rmq.Channel {
		t.Helper()
		ch, err := c2.Channel()
		must(t, err)
		return ch
	}
	if _, err := ch2().QueueDeclare("old", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	a.admin("PUT", "/api/vhosts/%2F", map[string]any{"default_queue_type": "quorum"}, 204)
	_, err = ch2().QueueDeclare("old", true, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'old' in vhost '/': received the value 'quorum' of type 'longstr' but current is none")
	if _, err := ch2().QueueDeclarePassive("old", true, false, false, false, nil); err != nil {
		t.Errorf("a passive declare is not rewritten: %v", err)
	}
}

// In a cluster the default queue type is part of the replicated vhost
// record: set through one node, a declare naming no type on another
// makes a quorum queue, which a third sees as one.
func TestVHostDefaultQueueTypeCluster(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a0 := &api{t: t, url: nodes[0].api}
	testutil.Eventually(t, 20*time.Second, func() bool {
		return a0.call("PUT", "/api/vhosts/dqc", "guest", "guest", map[string]any{"default_queue_type": "quorum"}, nil) == 201
	}, "the vhost made through node 1")
	a1 := &api{t: t, url: nodes[1].api}
	testutil.Eventually(t, 20*time.Second, func() bool {
		var v vhostView
		return a1.call("GET", "/api/vhosts/dqc", "guest", "guest", nil, &v) == 200 && v.DefaultQueueType == "quorum"
	}, "node 2 seeing the vhost's default queue type")
	dialAllowed := func(url string) *rmq.Connection {
		t.Helper()
		var c *rmq.Connection
		testutil.Eventually(t, 20*time.Second, func() bool {
			var err error
			c, err = rmq.Dial(url)
			return err == nil
		}, "guest's permissions in dqc at %s", url)
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dialAllowed(nodes[1].b.URL + "dqc")
	ch, err := c.Channel()
	must(t, err)
	if _, err := ch.QueueDeclare("dqc-q", true, false, false, false, nil); err != nil {
		t.Fatalf("a declare naming no type on node 2: %v", err)
	}
	c2 := dialAllowed(nodes[2].b.URL + "dqc")
	testutil.Eventually(t, 20*time.Second, func() bool {
		ch, err := c2.Channel()
		must(t, err)
		_, err = ch.QueueDeclare("dqc-q", true, false, false, false, rmq.Table{"x-queue-type": "quorum"})
		return err == nil
	}, "node 3 seeing dqc-q as a quorum queue")
}
