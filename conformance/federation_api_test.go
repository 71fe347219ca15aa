package conformance

// RabbitMQ 3.10.8's federation plugin contract (rabbitmq_federation,
// rabbitmq_federation_management), pinned call by call: every expected
// status and body is what RabbitMQ 3.10.8 answered on this machine
// (2026-12-06; cluster name rabbit@vm, written here as the broker's own),
// with two vhosts of one broker as upstream and downstream. Run against
// RabbitMQ as the shovel tests are (shovel_api_test.go); the full record
// is /work/notes/shovel-rabbit.md.
//
// Source: rabbitmq-server v3.10.8 deps/rabbitmq_federation/src/
// rabbit_federation_parameters.erl (validation, policy keys),
// rabbit_federation_exchange_link.erl (upstream names and arguments,
// x-bound-from), rabbit_federation_queue_link.erl,
// deps/rabbitmq_federation_management/src/rabbit_federation_mgmt.erl
// (routes, authorisation).

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// fapiLinks is GET path decoded as a list of federation links.
//
// RabbitMQ 3.10.8 answers 500 (empty body) now and then while links
// start: rabbit_federation_mgmt.erl format/3 matches the link's
// local_connection against every channel's connection_details name, and
// a starting link (no local_connection) against channels whose stats have
// no connection_details yet matches several: case_clause. Against
// RabbitMQ that answer is retried; railmq must always answer 200.
func fapiLinks(t *testing.T, a *api, path string) []map[string]any {
	t.Helper()
	var out []byte
	poll.Eventually(t, 30*time.Second, func() bool {
		var got int
		got, out = sapiGuest(t, a, "GET", path, "")
		if got == 500 && testutil.ExternalURL() != "" {
			return false
		}
		if got != 200 {
			t.Fatalf("GET %s: %d %s, want 200", path, got, out)
		}
		return true
	}, "GET %s", path)
	var l []map[string]any
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("GET %s: %s", path, out)
	}
	return l
}

// fapiLink is the link of the downstream exchange or queue name in vhost
// ("exchange" or "queue" as kind), nil if there is none.
func fapiLink(t *testing.T, a *api, vhost, kind, name string) map[string]any {
	t.Helper()
	for _, l := range fapiLinks(t, a, "/api/federation-links/"+vhost) {
		if l["type"] == kind && l[kind] == name {
			return l
		}
	}
	return nil
}

// fapiID is the form of a link id: 8 hex digits.
var fapiID = regexp.MustCompile(`^[0-9a-f]{8}$`)

// fapiStable checks a link's id and timestamp and returns it without
// them and without the running-only local_connection and local_channel
// (checked by the caller).
func fapiStable(t *testing.T, l map[string]any) map[string]any {
	t.Helper()
	id, _ := l["id"].(string)
	ts, _ := l["timestamp"].(string)
	if !fapiID.MatchString(id) || !sapiTimestamp.MatchString(ts) {
		t.Fatalf("id %q timestamp %q in %v", id, ts, l)
	}
	c := map[string]any{}
	for k, v := range l {
		switch k {
		case "id", "timestamp", "local_connection", "local_channel":
		default:
			c[k] = v
		}
	}
	return c
}

// Validation of federation-upstream, federation-upstream-set and the
// policy keys, with RabbitMQ 3.10.8's status and reason.
func TestFederationParameterValidation(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fapi-val")
	const u = "/api/parameters/federation-upstream/fapi-val/u0"
	for _, c := range []struct{ value, reason string }{
		// RabbitMQ: 400 {"error":"bad_request","reason":"Validation failed\n\nKey \"uri\" not found in u0\n"}
		{`{}`, "Key \"uri\" not found in u0\n"},
		{`{"uri":"http://x"}`, `"http://x" not a valid URI: {{unexpected_uri_scheme,"http"},"http://x"}` + "\n"},
		{`{"uri":5}`, "uri should be list, actually was 5\n"},
		// The per-key results come in reverse order of shared_validation().
		{`{"uri":"amqp://","expires":"x","message-ttl":"y","max-hops":"z","prefetch-count":"p","reconnect-delay":"r"}`,
			`message-ttl should be a number, actually was &lt;&lt;"y"&gt;&gt;` + "\n" +
				`expires should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n" +
				`max-hops should be a number, actually was &lt;&lt;"z"&gt;&gt;` + "\n" +
				`reconnect-delay should be a number, actually was &lt;&lt;"r"&gt;&gt;` + "\n" +
				`prefetch-count should be a number, actually was &lt;&lt;"p"&gt;&gt;` + "\n"},
		{`{"uri":"amqp://","ack-mode":"bogus"}`, `ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"bogus"&gt;&gt;` + "\n"},
		{`{"uri":"amqp://","trust-user-id":"yes"}`, `trust-user-id should be boolean, actually was &lt;&lt;"yes"&gt;&gt;` + "\n"},
		{`{"uri":"amqp://","exchange":5,"queue":6}`, "queue should be binary, actually was 6\nexchange should be binary, actually was 5\n"},
		{`{"uri":"amqp://","bogus":1}`, `Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in u0` + "\n"},
		{`{"uri":"amqp://","resource-cleanup-mode":"x","channel-use-mode":"y"}`,
			`channel-use-mode should be one of [&lt;&lt;"multiple"&gt;&gt;,&lt;&lt;"single"&gt;&gt;], actually was &lt;&lt;"y"&gt;&gt;` + "\n" +
				`resource-cleanup-mode should be one of [&lt;&lt;"default"&gt;&gt;,&lt;&lt;"never"&gt;&gt;], actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
	} {
		sapiWantErr(t, a, "guest", "guest", "PUT", u, `{"value":`+c.value+`}`, 400, "bad_request", sapiValidation+c.reason)
	}
	// Accepted: negative max-hops, expires 0, a URI list, a float.
	sapiWantStatus(t, a, "PUT", u, `{"value":{"uri":"amqp://","max-hops":-3,"expires":0}}`, 201)
	sapiWantStatus(t, a, "PUT", u, `{"value":{"uri":["amqp://","amqp://localhost"],"max-hops":1.5}}`, 204)
	// RabbitMQ: {"value":{"max-hops":1.5,"uri":["amqp://","amqp://localhost"]},"vhost":"sr-down","component":"federation-upstream","name":"u0"}
	sapiEqualJSON(t, "upstream", sapiJSON(t, sapiWantStatus(t, a, "GET", u, "", 200)),
		`{"value":{"max-hops":1.5,"uri":["amqp://","amqp://localhost"]},"vhost":"fapi-val","component":"federation-upstream","name":"u0"}`)
	sapiWantStatus(t, a, "DELETE", u, "", 204)

	const s = "/api/parameters/federation-upstream-set/fapi-val/set0"
	for _, c := range []struct{ value, reason string }{
		{`[{}]`, "Key \"upstream\" not found in set0\n"},
		{`[{"upstream":5}]`, "upstream should be binary, actually was 5\n"},
		{`[{"upstream":"a","bogus":1},{"upstream":"b","max-hops":"x"}]`, `Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in set0` + "\n" + `max-hops should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
	} {
		sapiWantErr(t, a, "guest", "guest", "PUT", s, `{"value":`+c.value+`}`, 400, "bad_request", sapiValidation+c.reason)
	}
	sapiWantStatus(t, a, "PUT", s, `{"value":[]}`, 201)
	// The upstream named need not exist.
	sapiWantStatus(t, a, "PUT", s, `{"value":[{"upstream":"nosuch","exchange":"ex2"}]}`, 204)
	sapiEqualJSON(t, "set", sapiJSON(t, sapiWantStatus(t, a, "GET", s, "", 200)),
		`{"value":[{"exchange":"ex2","upstream":"nosuch"}],"vhost":"fapi-val","component":"federation-upstream-set","name":"set0"}`)
	sapiWantStatus(t, a, "DELETE", s, "", 204)

	// The component "federation" is registered but takes no parameter.
	sapiWantErr(t, a, "guest", "guest", "PUT", "/api/parameters/federation/fapi-val/x", `{"value":{}}`, 400, "bad_request", sapiValidation+`name not recognised: &lt;&lt;"x"&gt;&gt;`+"\n")

	const p = "/api/policies/fapi-val/p1"
	for _, c := range []struct{ def, reason string }{
		{`{"federation-upstream":5}`, "5 is not a valid federation upstream name\n"},
		{`{"federation-upstream-set":5}`, "5 is not a valid federation upstream set name\n"},
		{`{"federation-upstream-pattern":"("}`, `could not compile pattern ( to a regular expression. Error: {"missing )",1}` + "\n"},
		{`{"federation-upstream":"a","federation-upstream-set":"b"}`, "cannot specify federation-upstream, federation-upstream-set or federation-upstream-pattern together\n"},
	} {
		sapiWantErr(t, a, "guest", "guest", "PUT", p, `{"pattern":"^g","definition":`+c.def+`}`, 400, "bad_request", sapiValidation+c.reason)
	}
	// An upstream that does not exist is accepted (no link is made).
	sapiWantStatus(t, a, "PUT", p, `{"pattern":"^g","definition":{"federation-upstream":"nosuch"}}`, 201)
}

// A federated exchange: the link's JSON, what it makes upstream (queue
// "federation: fx -> CLUSTER:DOWNVHOST:fx", internal exchange of type
// x-federation-upstream with suffix " B", the downstream binding key copied
// upstream with x-bound-from), and the message downstream with
// x-received-from. A federated queue pulls only while it has a consumer.
func TestFederationLinks(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fapi-up", "fapi-down")
	node := sapiClusterName(t, a)
	for _, v := range []string{"fapi-up", "fapi-down"} {
		sapiWantStatus(t, a, "PUT", "/api/exchanges/"+v+"/fx", `{"type":"topic","durable":true}`, 201)
		sapiWantStatus(t, a, "PUT", "/api/queues/"+v+"/fq", `{"durable":true}`, 201)
	}
	sapiWantStatus(t, a, "PUT", "/api/queues/fapi-down/sink", `{"durable":true}`, 201)
	sapiWantStatus(t, a, "POST", "/api/bindings/fapi-down/e/fx/q/sink", `{"routing_key":"a.#"}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-down/up1",
		`{"value":{"uri":"amqp://guest:guest@`+b.Addr+`/fapi-up","max-hops":2,"expires":3600000,"message-ttl":600000,"prefetch-count":100,"reconnect-delay":2,"ack-mode":"on-confirm","trust-user-id":false}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fapi-down/fed", `{"pattern":"^f","apply-to":"all","definition":{"federation-upstream":"up1"},"priority":1}`, 201)
	running := func(kind, name string) func() bool {
		return func() bool {
			l := fapiLink(t, a, "fapi-down", kind, name)
			return l != nil && l["status"] == "running"
		}
	}
	poll.Eventually(t, 30*time.Second, running("exchange", "fx"), "exchange link running")
	poll.Eventually(t, 30*time.Second, running("queue", "fq"), "queue link running")
	uri := "amqp://" + b.Addr + "/fapi-up" // credentials stripped
	// RabbitMQ: {"node":"rabbit@vm","exchange":"fx","upstream_exchange":"fx","type":"exchange","vhost":"sr-down","upstream":"up1","id":"9db92177","status":"running","local_connection":"<rabbit@vm.1796574705.6645.0>","uri":"amqp://localhost:5672/sr-up","timestamp":"2026-12-06 18:10:43","local_channel":{...}}
	xl := fapiLink(t, a, "fapi-down", "exchange", "fx")
	sapiEqualJSON(t, "exchange link", fapiStable(t, xl),
		`{"node":"`+node+`","exchange":"fx","upstream_exchange":"fx","type":"exchange","vhost":"fapi-down","upstream":"up1","status":"running","uri":"`+uri+`"}`)
	// RabbitMQ: {"node":"rabbit@vm","queue":"fq","upstream_queue":"fq","consumer_tag":"federation-link-up1","type":"queue","vhost":"sr-down","upstream":"up1","id":"a349d7dd","status":"running","local_connection":"<rabbit@vm...>","uri":"amqp://localhost:5672/sr-up","timestamp":"...","local_channel":{...}}
	ql := fapiLink(t, a, "fapi-down", "queue", "fq")
	sapiEqualJSON(t, "queue link", fapiStable(t, ql),
		`{"node":"`+node+`","queue":"fq","upstream_queue":"fq","consumer_tag":"federation-link-up1","type":"queue","vhost":"fapi-down","upstream":"up1","status":"running","uri":"`+uri+`"}`)
	for _, kind := range []string{"exchange", "queue"} {
		name := map[string]string{"exchange": "fx", "queue": "fq"}[kind]
		// local_channel is the channel object of the link's local
		// connection; RabbitMQ serves {} until the channel's first stats
		// emission, and that may show confirm false (emitted before the
		// confirm.select).
		var l map[string]any
		poll.Eventually(t, 30*time.Second, func() bool {
			l = fapiLink(t, a, "fapi-down", kind, name)
			ch, _ := l["local_channel"].(map[string]any)
			return len(ch) != 0 && ch["confirm"] == true
		}, "%s link's local_channel: %v", kind, l)
		lc, _ := l["local_connection"].(string)
		ch, _ := l["local_channel"].(map[string]any)
		if lc == "" || ch["vhost"] != "fapi-down" || ch["confirm"] != true || ch["node"] != node || ch["number"] != 1.0 {
			t.Fatalf("local_connection %q local_channel %v", lc, ch)
		}
	}
	// Links are listed in the downstream vhost only.
	if l := fapiLinks(t, a, "/api/federation-links/fapi-up"); len(l) != 0 {
		t.Fatalf("links of the upstream vhost: %v", l)
	}
	sapiWantErr(t, a, "guest", "guest", "GET", "/api/federation-links/fapi-nosuchvh", "", 404, "Object Not Found", "Not Found")

	// Upstream objects. RabbitMQ: queue "federation: fx -> rabbit@vm:sr-down:fx" {"x-expires":3600000,"x-internal-purpose":"federation","x-message-ttl":600000}, durable;
	// exchange "federation: fx -> rabbit@vm:sr-down:fx B" type x-federation-upstream, durable, auto_delete, internal, {"x-downstream-name":"rabbit@vm","x-downstream-vhost":"sr-down","x-internal-purpose":"federation","x-max-hops":2};
	// binding fx -> that exchange, key "a.#", {"x-bound-from":[{"cluster-name":"rabbit@vm","exchange":"sr-down:fx B","hops":2,"vhost":"sr-down"}]}.
	qname := "federation: fx -> " + node + ":fapi-down:fx"
	xname := qname + " B"
	esc := func(s string) string {
		return strings.NewReplacer(" ", "%20", ">", "%3E", ":", "%3A", "@", "%40").Replace(s)
	}
	var uq map[string]any
	if err := json.Unmarshal(sapiWantStatus(t, a, "GET", "/api/queues/fapi-up/"+esc(qname), "", 200), &uq); err != nil {
		t.Fatal(err)
	}
	sapiEqualJSON(t, "upstream queue", map[string]any{"durable": uq["durable"], "auto_delete": uq["auto_delete"], "exclusive": uq["exclusive"], "arguments": uq["arguments"]},
		`{"durable":true,"auto_delete":false,"exclusive":false,"arguments":{"x-expires":3600000,"x-internal-purpose":"federation","x-message-ttl":600000}}`)
	var ux map[string]any
	if err := json.Unmarshal(sapiWantStatus(t, a, "GET", "/api/exchanges/fapi-up/"+esc(xname), "", 200), &ux); err != nil {
		t.Fatal(err)
	}
	sapiEqualJSON(t, "upstream exchange", map[string]any{"type": ux["type"], "durable": ux["durable"], "auto_delete": ux["auto_delete"], "internal": ux["internal"], "arguments": ux["arguments"]},
		`{"type":"x-federation-upstream","durable":true,"auto_delete":true,"internal":true,"arguments":{"x-downstream-name":"`+node+`","x-downstream-vhost":"fapi-down","x-internal-purpose":"federation","x-max-hops":2}}`)
	var bs []map[string]any
	if err := json.Unmarshal(sapiWantStatus(t, a, "GET", "/api/exchanges/fapi-up/fx/bindings/source", "", 200), &bs); err != nil || len(bs) != 1 {
		t.Fatalf("bindings of upstream fx: %v %v", bs, err)
	}
	sapiEqualJSON(t, "upstream binding", map[string]any{"destination": bs[0]["destination"], "destination_type": bs[0]["destination_type"], "routing_key": bs[0]["routing_key"], "arguments": bs[0]["arguments"]},
		`{"destination":"`+xname+`","destination_type":"exchange","routing_key":"a.#","arguments":{"x-bound-from":[{"cluster-name":"`+node+`","exchange":"fapi-down:fx B","hops":2,"vhost":"fapi-down"}]}}`)

	// RabbitMQ: the message at the downstream queue:
	// {"exchange":"fx","routing_key":"a.b","properties":{"headers":{"h":"v","x-received-from":[{"cluster-name":"rabbit@vm","exchange":"fx","redelivered":false,"uri":"amqp://localhost:5672/sr-up","vhost":"sr-up"}]}}}
	uc := dial(t, "amqp://guest:guest@"+b.Addr+"/fapi-up")
	uch := openChannel(t, uc)
	if err := uch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	pub := func(ex, key, body string, h rmq.Table) {
		t.Helper()
		dc, err := uch.PublishWithDeferredConfirm(ex, key, false, false, rmq.Publishing{Headers: h, Body: []byte(body)})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish: %v", err)
		}
	}
	pub("fx", "z.z", "unbound", nil) // no downstream binding: not routed upstream
	pub("fx", "a.b", "fed1", rmq.Table{"h": "v"})
	dc := dial(t, "amqp://guest:guest@"+b.Addr+"/fapi-down")
	dch := openChannel(t, dc)
	var m rmq.Delivery
	poll.Eventually(t, 30*time.Second, func() bool {
		var ok bool
		var err error
		m, ok, err = dch.Get("sink", true)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}, "the federated message downstream")
	if string(m.Body) != "fed1" || m.Exchange != "fx" || m.RoutingKey != "a.b" || m.Headers["h"] != "v" {
		t.Fatalf("downstream message: %+v", m)
	}
	sapiEqualJSON(t, "x-received-from", m.Headers["x-received-from"],
		`[{"cluster-name":"`+node+`","exchange":"fx","redelivered":false,"uri":"`+uri+`","vhost":"fapi-up"}]`)
	if _, ok, _ := dch.Get("sink", true); ok {
		t.Fatal("the message with the unbound key reached the downstream")
	}

	// Federated queue: the message published upstream stays there while
	// the downstream queue has no consumer.
	pub("", "fq", "q1", nil)
	upCount := func() int {
		q, err := uch.QueueDeclarePassive("fq", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	deadline := time.Now().Add(2 * time.Second)
	poll.Eventually(t, 30*time.Second, func() bool {
		if n := upCount(); n != 1 {
			t.Fatalf("upstream fq holds %d messages with no downstream consumer, want 1", n)
		}
		return time.Now().After(deadline)
	}, "upstream fq keeps its message")
	// A consumer downstream pulls it.
	ds, err := dch.Consume("fq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "q1" {
			t.Fatalf("pulled %q", d.Body)
		}
		// RabbitMQ: exchange "" key "fq", headers {"x-original-exchange":"","x-original-routing-key":"fq","x-received-from":[{"queue":"fq","redelivered":false,"uri":"amqp://localhost:5672/fapi-up","visit-count":1}]}
		if d.Exchange != "" || d.RoutingKey != "fq" {
			t.Fatalf("pulled message: exchange %q key %q", d.Exchange, d.RoutingKey)
		}
		sapiEqualJSON(t, "pulled message headers", d.Headers,
			`{"x-original-exchange":"","x-original-routing-key":"fq","x-received-from":[{"queue":"fq","redelivered":false,"uri":"`+uri+`","visit-count":1}]}`)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the downstream consumer got nothing from the upstream queue")
	}
	poll.Eventually(t, 30*time.Second, func() bool { return upCount() == 0 }, "upstream fq emptied")
}

// A link whose upstream cannot be reached shows "error" with the reason;
// the restart route and the state/down routes; who may read links
// (is_authorized_monitor, filtered to the user's vhosts).
func TestFederationLinkErrorsAndAccess(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fapi-er")
	node := sapiClusterName(t, a)
	closed := testutil.FreePort(t)
	sapiWantStatus(t, a, "PUT", "/api/exchanges/fapi-er/gx", `{"type":"fanout","durable":true}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/exchanges/fapi-er/hx", `{"type":"fanout","durable":true}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-er/dead", `{"value":{"uri":"amqp://guest:guest@`+closed+`/fapi-er","reconnect-delay":5}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-er/badpw", `{"value":{"uri":"amqp://guest:nope@`+b.Addr+`/fapi-er","reconnect-delay":5}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fapi-er/g", `{"pattern":"^g","apply-to":"exchanges","definition":{"federation-upstream":"dead"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fapi-er/h", `{"pattern":"^h","apply-to":"exchanges","definition":{"federation-upstream":"badpw"}}`, 201)
	// A link in error retries (starting, then error again): the error
	// status seen is the one checked.
	errored := func(name string) map[string]any {
		var l map[string]any
		poll.Eventually(t, 30*time.Second, func() bool {
			l = fapiLink(t, a, "fapi-er", "exchange", name)
			return l != nil && l["status"] == "error"
		}, "%s link in error", name)
		return l
	}
	// RabbitMQ: {"node":"rabbit@vm","exchange":"gx","upstream_exchange":"gx","type":"exchange","vhost":"sr-down","upstream":"dead","id":"322cd5e1","status":"error","error":"econnrefused","uri":"amqp://localhost:5999/sr-up","timestamp":"2026-12-06 18:11:12"}
	gx := errored("gx")
	if _, ok := gx["local_channel"]; ok {
		t.Fatalf("an errored link has local_channel: %v", gx)
	}
	sapiEqualJSON(t, "gx", fapiStable(t, gx),
		`{"node":"`+node+`","exchange":"gx","upstream_exchange":"gx","type":"exchange","vhost":"fapi-er","upstream":"dead","status":"error","error":"econnrefused","uri":"amqp://`+closed+`/fapi-er"}`)
	// RabbitMQ: "error":"{auth_failure,\"ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.\"}"
	sapiEqualJSON(t, "hx", fapiStable(t, errored("hx")),
		`{"node":"`+node+`","exchange":"hx","upstream_exchange":"hx","type":"exchange","vhost":"fapi-er","upstream":"badpw","status":"error","error":"{auth_failure,\"ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.\"}","uri":"amqp://`+b.Addr+`/fapi-er"}`)
	// /federation-links/:vhost/state/down and /federation-links/state/down/ list links not running.
	for _, path := range []string{"/api/federation-links/fapi-er/state/down", "/api/federation-links/state/down/"} {
		n := 0
		for _, l := range fapiLinks(t, a, path) {
			if l["vhost"] == "fapi-er" {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("GET %s: %d links of fapi-er, want 2", path, n)
		}
	}
	// DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart: 204; an unknown id 404.
	sapiWantStatus(t, a, "DELETE", "/api/federation-links/vhost/fapi-er/"+gx["id"].(string)+"/"+node+"/restart", "", 204)
	sapiWantErr(t, a, "guest", "guest", "DELETE", "/api/federation-links/vhost/fapi-er/nope/"+node+"/restart", "", 404, "Object Not Found", "Not Found")

	sapiUser(t, a, "fapi-mon", "monitoring", "fapi-er")
	sapiUser(t, a, "fapi-monna", "monitoring")
	sapiUser(t, a, "fapi-pm", "policymaker", "fapi-er")
	sapiUser(t, a, "fapi-mg", "management", "fapi-er")
	sapiUser(t, a, "fapi-none", "", "fapi-er")
	if got, out := sapiReq(t, a, "GET", "/api/federation-links/fapi-er", "fapi-mon", "pw", ""); got != 200 || !strings.Contains(string(out), `"gx"`) {
		t.Fatalf("links as monitoring: %d %s", got, out)
	}
	// RabbitMQ: monitoring without permissions: []; policymaker, management: 401 "Not monitor user"; no tags: "Not management user".
	if got, out := sapiReq(t, a, "GET", "/api/federation-links/fapi-er", "fapi-monna", "pw", ""); got != 200 || string(out) != "[]" {
		t.Fatalf("links as monitoring without permissions: %d %s", got, out)
	}
	for u, reason := range map[string]string{"fapi-pm": "Not monitor user", "fapi-mg": "Not monitor user", "fapi-none": "Not management user"} {
		sapiWantErr(t, a, u, "pw", "GET", "/api/federation-links/fapi-er", "", 401, "not_authorised", reason)
	}
	// RabbitMQ: a policymaker may PUT an upstream (201); monitoring may not (401 "User not authorised to access object").
	if got, out := sapiReq(t, a, "PUT", "/api/parameters/federation-upstream/fapi-er/u-pm", "fapi-pm", "pw", `{"value":{"uri":"amqp:///fapi-er"}}`); got != 201 {
		t.Fatalf("PUT upstream as policymaker: %d %s", got, out)
	}
	sapiWantErr(t, a, "fapi-mon", "pw", "PUT", "/api/parameters/federation-upstream/fapi-er/u-mon", `{"value":{"uri":"amqp:///fapi-er"}}`, 401, "not_authorised", "User not authorised to access object")
}

// Upstream sets: a policy's federation-upstream-set names a set, or "all"
// for every upstream of the vhost; an upstream's "exchange" federates from
// another upstream exchange (upstream_exchange in the link). Two vhosts
// federating each other's exchange with max-hops 1 do not loop: a message
// crosses once and does not come back.
func TestFederationUpstreamSetAndLoop(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fapi-a", "fapi-b")
	for _, v := range []string{"fapi-a", "fapi-b"} {
		sapiWantStatus(t, a, "PUT", "/api/exchanges/"+v+"/fx", `{"type":"fanout","durable":true}`, 201)
		sapiWantStatus(t, a, "PUT", "/api/queues/"+v+"/sink", `{"durable":true}`, 201)
		sapiWantStatus(t, a, "POST", "/api/bindings/"+v+"/e/fx/q/sink", `{"routing_key":""}`, 201)
	}
	sapiWantStatus(t, a, "PUT", "/api/exchanges/fapi-a/other", `{"type":"fanout","durable":true}`, 201)
	up := func(v string) string { return "amqp://guest:guest@" + b.Addr + "/" + v }
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-b/ua", `{"value":{"uri":"`+up("fapi-a")+`","max-hops":1}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-b/ua2", `{"value":{"uri":"`+up("fapi-a")+`","exchange":"other"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream-set/fapi-b/s", `{"value":[{"upstream":"ua"},{"upstream":"ua2"}]}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fapi-b/f", `{"pattern":"^fx$","apply-to":"exchanges","definition":{"federation-upstream-set":"s"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fapi-a/ub", `{"value":{"uri":"`+up("fapi-b")+`","max-hops":1}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fapi-a/f", `{"pattern":"^fx$","apply-to":"exchanges","definition":{"federation-upstream-set":"all"}}`, 201)
	// RabbitMQ: {"exchange":"fx","upstream_exchange":"fx","type":"exchange","vhost":"pr-a","upstream":"ub",...,"status":"running","uri":"amqp://localhost:5672/pr-b"}
	// {"exchange":"fx","upstream_exchange":"fx",...,"vhost":"pr-b","upstream":"ua",...} {"exchange":"fx","upstream_exchange":"other",...,"vhost":"pr-b","upstream":"ua2",...}
	want := map[string]string{"fapi-a/ub": "fx", "fapi-b/ua": "fx", "fapi-b/ua2": "other"}
	poll.Eventually(t, 30*time.Second, func() bool {
		got := map[string]string{}
		for _, v := range []string{"fapi-a", "fapi-b"} {
			for _, l := range fapiLinks(t, a, "/api/federation-links/"+v) {
				if l["status"] != "running" || l["exchange"] != "fx" {
					return false
				}
				got[v+"/"+l["upstream"].(string)], _ = l["upstream_exchange"].(string)
			}
		}
		return len(got) == len(want) && got["fapi-a/ub"] == want["fapi-a/ub"] && got["fapi-b/ua"] == want["fapi-b/ua"] && got["fapi-b/ua2"] == want["fapi-b/ua2"]
	}, "three links running: %v", want)
	ac := dial(t, "amqp://guest:guest@"+b.Addr+"/fapi-a")
	ach := openChannel(t, ac)
	if err := ach.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"fx", "A1"}, {"other", "O1"}} {
		dc, err := ach.PublishWithDeferredConfirm(p[0], "", false, false, rmq.Publishing{Body: []byte(p[1])})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish: %v", err)
		}
	}
	bc := dial(t, "amqp://guest:guest@"+b.Addr+"/fapi-b")
	bch := openChannel(t, bc)
	// RabbitMQ: pr-b's sink got A1 and O1, each with x-received-from [{"cluster-name":"rabbit@vm","exchange":"fx","redelivered":false,"uri":"amqp://localhost:5672/pr-a","vhost":"pr-a"}]
	// (exchange "fx" for O1 too); pr-a's sink got A1 once, without headers.
	var got []string
	poll.Eventually(t, 30*time.Second, func() bool {
		m, ok, err := bch.Get("sink", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(m.Body))
			sapiEqualJSON(t, "x-received-from of "+string(m.Body), m.Headers["x-received-from"],
				`[{"cluster-name":"`+sapiClusterName(t, a)+`","exchange":"fx","redelivered":false,"uri":"amqp://`+b.Addr+`/fapi-a","vhost":"fapi-a"}]`)
		}
		return len(got) == 2
	}, "A1 and O1 at fapi-b")
	if !(got[0] == "A1" && got[1] == "O1") && !(got[0] == "O1" && got[1] == "A1") {
		t.Fatalf("fapi-b got %v", got)
	}
	// A1 must not come back to fapi-a over ub: after O1 and a marker
	// published in fapi-b reach fapi-a (the path back is running), fapi-a
	// holds A1 once and the marker.
	if err := bch.Publish("fx", "", false, false, rmq.Publishing{Body: []byte("B1")}); err != nil {
		t.Fatal(err)
	}
	var back []string
	poll.Eventually(t, 30*time.Second, func() bool {
		m, ok, err := ach.Get("sink", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			back = append(back, string(m.Body))
		}
		return len(back) > 0 && back[len(back)-1] == "B1"
	}, "the marker B1 at fapi-a")
	if len(back) != 2 || back[0] != "A1" {
		t.Fatalf("fapi-a sink: %v, want [A1 B1]", back)
	}
	if m, ok, _ := ach.Get("sink", true); ok {
		t.Fatalf("fapi-a sink has more: %q", m.Body)
	}
}
