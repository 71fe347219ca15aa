package conformance

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// Exchanges, queues and bindings through the management API: the same
// calls, statuses, Location headers and reasons as RabbitMQ 3.10.8 (the
// table was written from a side-by-side run, and this test passes
// against both: RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL).
func TestManagementObjects(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	t.Cleanup(func() {
		for _, p := range []string{"/api/queues/%2F/mo-q", "/api/exchanges/%2F/mo-x", "/api/exchanges/%2F/mo-y"} {
			a.call("DELETE", p, "guest", "guest", nil, nil)
		}
	})
	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		reason       string // "" not checked
		location     string
	}{
		{"PUT", "/api/queues/%2F/mo-q", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}}, 201, "", ""},
		{"PUT", "/api/queues/%2F/mo-q", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}}, 204, "", ""},
		{"PUT", "/api/queues/%2F/mo-q", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 11}}, 400,
			"inequivalent arg 'x-max-length' for queue 'mo-q' in vhost '/': received '11' but current is '10'", ""},
		{"PUT", "/api/exchanges/%2F/mo-x", map[string]any{"type": "topic", "durable": true}, 201, "", ""},
		{"PUT", "/api/exchanges/%2F/mo-x", map[string]any{"type": "topic", "durable": true}, 204, "", ""},
		{"PUT", "/api/exchanges/%2F/mo-x", map[string]any{"type": "direct", "durable": true}, 400,
			"inequivalent arg 'type' for exchange 'mo-x' in vhost '/': received 'direct' but current is 'topic'", ""},
		{"PUT", "/api/exchanges/%2F/mo-y", map[string]any{"durable": true}, 201, "", ""}, // type defaults to direct
		{"PUT", "/api/exchanges/%2F/mo-z", map[string]any{"type": "bogus"}, 400, "invalid exchange type 'bogus'", ""},
		{"PUT", "/api/exchanges/%2F/amq.mo", map[string]any{"type": "topic"}, 401, "Access refused.", ""},
		{"GET", "/api/exchanges/%2F/nope", nil, 404, "Not Found", ""},
		{"GET", "/api/queues/%2F/nope", nil, 404, "Not Found", ""},
		{"POST", "/api/bindings/%2F/e/mo-x/q/mo-q", map[string]any{"routing_key": "a.#", "arguments": map[string]any{}}, 201, "", "mo-q/a.%2523"},
		{"POST", "/api/bindings/%2F/e/mo-x/q/mo-q", map[string]any{"routing_key": ""}, 201, "", "mo-q/~"},
		{"POST", "/api/bindings/%2F/e/nope/q/mo-q", map[string]any{"routing_key": "k"}, 404, "no exchange 'nope' in vhost '/'", ""},
		{"POST", "/api/bindings/%2F/e/mo-x/q/nope", map[string]any{"routing_key": "k"}, 404, "no queue 'nope' in vhost '/'", ""},
		{"GET", "/api/bindings/%2F/e/mo-x/q/mo-q/a.%2523", nil, 200, "", ""},
		{"DELETE", "/api/bindings/%2F/e/mo-x/q/mo-q/a.%2523", nil, 204, "", ""},
		{"DELETE", "/api/bindings/%2F/e/mo-x/q/mo-q/a.%2523", nil, 404, "Not Found", ""},
		{"DELETE", "/api/bindings/%2F/e/mo-x/q/mo-q/~", nil, 204, "", ""},
		{"DELETE", "/api/queues/%2F/mo-q/contents", nil, 204, "", ""},
		{"DELETE", "/api/exchanges/%2F/amq.direct", nil, 401, "Access refused.", ""},
		{"DELETE", "/api/exchanges/%2F/nope", nil, 404, "Not Found", ""},
		{"DELETE", "/api/queues/%2F/nope", nil, 404, "Not Found", ""},
		{"DELETE", "/api/exchanges/%2F/mo-x", nil, 204, "", ""},
		{"DELETE", "/api/exchanges/%2F/mo-y", nil, 204, "", ""},
	} {
		code, loc, e := a.callWithHeaders(tc.method, tc.path, tc.body)
		if code != tc.code || (tc.reason != "" && e.Reason != tc.reason) || tc.location != loc {
			t.Errorf("%s %s: %d %+v Location %q; want %d %q Location %q", tc.method, tc.path, code, e, loc, tc.code, tc.reason, tc.location)
		}
	}
	// What the API made is what AMQP sees, and the other way round.
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	q, err := ch.QueueDeclarePassive("mo-q", true, false, false, false, rmq.Table{"x-max-length": int32(10)})
	if err != nil || q.Messages != 0 {
		t.Fatalf("the API's queue over AMQP: %+v %v", q, err)
	}
	must(t, ch.ExchangeDeclare("mo-amqp", "fanout", false, true, false, false, nil))
	var x struct {
		Name, Type, Vhost string
		AutoDelete        bool `json:"auto_delete"`
		Durable           bool
	}
	if code := a.call("GET", "/api/exchanges/%2F/mo-amqp", "guest", "guest", nil, &x); code != 200 || x.Type != "fanout" || !x.AutoDelete || x.Durable || x.Vhost != "/" {
		t.Fatalf("an AMQP exchange through the API: %d %+v", code, x)
	}
	must(t, ch.QueueBind("mo-q", "k", "mo-amqp", false, nil))
	var bs []struct {
		Source, Destination, RoutingKey string
		DestinationType                 string `json:"destination_type"`
		PropertiesKey                   string `json:"properties_key"`
	}
	a.call("GET", "/api/bindings/%2F", "guest", "guest", nil, &bs)
	found, implicit := false, false
	for _, b := range bs {
		found = found || (b.Source == "mo-amqp" && b.Destination == "mo-q" && b.DestinationType == "queue" && b.PropertiesKey == "k")
		implicit = implicit || (b.Source == "" && b.Destination == "mo-q")
	}
	if !found || !implicit {
		t.Fatalf("bindings: %+v", bs)
	}
	must(t, ch.ExchangeDelete("mo-amqp", false, false))
}

// callWithHeaders is call that also returns the Location header and the
// error body.
func (a *api) callWithHeaders(method, path string, body any) (int, string, struct{ Error, Reason string }) {
	a.t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	req.SetBasicAuth("guest", "guest")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error, Reason string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, resp.Header.Get("Location"), e
}

// Every value a client can send encodes: a connection whose
// client_properties carry a NaN double is listed (as null) and does not
// empty GET /api/connections for everyone, as it did.
func TestConnectionsListWithNaNProperty(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	r := testutil.DialRaw(t, b.Addr)
	r.Write([]byte("AMQP\x00\x00\x09\x01"))
	r.Expect((*amqp.ConnectionStart)(nil))
	r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"product": "odd", "nan": math.NaN(), "inf": math.Inf(1),
		"bytes": []byte("raw"), "nested": amqp.Table{"f": float32(math.NaN())}}, Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune := r.Expect((*amqp.ConnectionTune)(nil)).(*amqp.ConnectionTune)
	r.Send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax})
	r.Send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	r.Expect((*amqp.ConnectionOpenOk)(nil))
	var conns []struct {
		ClientProperties map[string]any `json:"client_properties"`
	}
	if code := a.call("GET", "/api/connections", "guest", "guest", nil, &conns); code != 200 || len(conns) != 1 {
		t.Fatalf("GET /api/connections: %d %+v", code, conns)
	}
	p := conns[0].ClientProperties
	if p["product"] != "odd" || p["nan"] != nil || p["bytes"] != "raw" {
		t.Fatalf("client_properties %+v", p)
	}
}

// Publishing and getting through the management API (what rabbitmqadmin's
// publish and get do): routed or not, properties and payloads (string and
// base64) as RabbitMQ shows them, and each ackmode. Also run against
// RabbitMQ.
func TestManagementPublishAndGet(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/queues/%2F/pg-q", map[string]any{"durable": true}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/queues/%2F/pg-q", "guest", "guest", nil, nil) })
	publish := func(key, payload, enc string, props map[string]any) bool {
		t.Helper()
		var out struct{ Routed bool }
		if code := a.call("POST", "/api/exchanges/%2F/amq.default/publish", "guest", "guest",
			map[string]any{"properties": props, "routing_key": key, "payload": payload, "payload_encoding": enc}, &out); code != 200 {
			t.Fatalf("publish: %d", code)
		}
		return out.Routed
	}
	if !publish("pg-q", "hello", "string", map[string]any{"delivery_mode": 2, "headers": map[string]any{"h": 1}, "content_type": "text/plain"}) {
		t.Fatal("not routed to pg-q")
	}
	if publish("nowhere", "x", "string", map[string]any{}) {
		t.Fatal("routed to nowhere")
	}
	if !publish("pg-q", "AAEC/w==", "base64", map[string]any{}) {
		t.Fatal("binary payload not routed")
	}
	_, _, e := a.callWithHeaders("POST", "/api/exchanges/%2F/nope/publish", map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "", "payload_encoding": "string"})
	if e.Reason != "404 NOT_FOUND - no exchange 'nope' in vhost '/'" {
		t.Fatalf("publish to a missing exchange: %+v", e)
	}
	var qb struct {
		Bytes      int64 `json:"message_bytes"`
		BytesReady int64 `json:"message_bytes_ready"`
	}
	testutil.Eventually(t, 10*time.Second, func() bool { // RabbitMQ: once its stats catch up
		a.call("GET", "/api/queues/%2F/pg-q", "guest", "guest", nil, &qb)
		return qb.Bytes == 9 && qb.BytesReady == 9
	}, "message_bytes of hello and the 4-byte payload: %+v", qb)
	type msg struct {
		Payload         string
		PayloadEncoding string `json:"payload_encoding"`
		PayloadBytes    int    `json:"payload_bytes"`
		Redelivered     bool
		MessageCount    int `json:"message_count"`
		Properties      json.RawMessage
	}
	get := func(count int, mode string) []msg {
		t.Helper()
		var out []msg
		if code := a.call("POST", "/api/queues/%2F/pg-q/get", "guest", "guest",
			map[string]any{"count": count, "ackmode": mode, "encoding": "auto", "truncate": 50000}, &out); code != 200 {
			t.Fatalf("get: %d", code)
		}
		return out
	}
	first := get(1, "ack_requeue_true")
	if len(first) != 1 || first[0].Payload != "hello" || first[0].PayloadEncoding != "string" || first[0].Redelivered || first[0].MessageCount != 1 {
		t.Fatalf("get ack_requeue_true: %+v", first)
	}
	var props map[string]any
	if err := json.Unmarshal(first[0].Properties, &props); err != nil || props["delivery_mode"] != float64(2) || props["content_type"] != "text/plain" {
		t.Fatalf("properties %s: %v", first[0].Properties, err)
	}
	both := get(5, "ack_requeue_false")
	if len(both) != 2 || !both[0].Redelivered || both[1].Payload != "AAEC/w==" || both[1].PayloadEncoding != "base64" || both[1].PayloadBytes != 4 || string(both[1].Properties) != "[]" {
		t.Fatalf("get ack_requeue_false: %+v", both)
	}
	if rest := get(5, "ack_requeue_false"); len(rest) != 0 {
		t.Fatalf("acked messages came back: %+v", rest)
	}
}

// RabbitMQ's health checks, as Docker and Kubernetes probes call them.
func TestHealthChecks(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	port := b.Addr[strings.LastIndex(b.Addr, ":")+1:]
	for _, tc := range []struct {
		path string
		code int
		want string // a substring of the body
	}{
		{"/api/health/checks/alarms", 200, `"status":"ok"`},
		{"/api/health/checks/local-alarms", 200, `"status":"ok"`},
		{"/api/health/checks/port-listener/" + port, 200, `"port":` + port},
		{"/api/health/checks/port-listener/1", 503, `"reason":"No active listener"`},
		{"/api/health/checks/virtual-hosts", 200, `"status":"ok"`},
		{"/api/health/checks/protocol-listener/amqp", 200, `"protocol":"amqp"`},
		{"/api/aliveness-test/%2F", 200, `"status":"ok"`},
		{"/api/aliveness-test/nope", 404, `"Not Found"`},
	} {
		code, body := a.raw("GET", tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %s; want %d with %s", tc.path, code, body, tc.code, tc.want)
		}
	}
	a.call("DELETE", "/api/queues/%2F/aliveness-test", "guest", "guest", nil, nil)
	if testutil.ExternalURL() != "" {
		return
	}
	// An alarm in force fails the alarm checks.
	alarmed := testutil.Start(t, broker.Options{MemoryHighWatermark: -1})
	a = newAPI(t, alarmed)
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, body := a.raw("GET", "/api/health/checks/alarms")
		return code == 503 && strings.Contains(body, `"resource":"memory"`) && strings.Contains(body, "There are alarms in effect in the cluster")
	}, "the memory alarm in the health check")
	if code, body := a.raw("GET", "/api/health/checks/local-alarms"); code != 503 || !strings.Contains(body, "There are alarms in effect on the node") {
		t.Fatalf("local-alarms: %d %s", code, body)
	}
}

// raw is a GET or DELETE with the answer's body as text.
func (a *api) raw(method, path string) (int, string) {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.url+path, nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A queue's message_stats count what it took in, delivered and had acked,
// and their rates are per second over the last sample (what KEDA's
// RabbitMQ scaler reads); lists take RabbitMQ's columns, sort, name and
// pagination parameters.
func TestQueueMessageStatsAndListParameters(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: time.Second}) // what newAPI serves
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	for _, q := range []string{"ms-a", "ms-b", "ms-c"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := ch.Consume("ms-a", "", false, false, false, false, nil)
	must(t, err)
	// 100 messages a second for 2.5 s, acked as they come.
	go func() {
		for d := range ds {
			_ = d.Ack(false)
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	for range 250 {
		<-tick.C
		must(t, ch.Publish("", "ms-a", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	tick.Stop()
	type stats struct {
		Publish        int64
		PublishDetails struct{ Rate float64 } `json:"publish_details"`
		DeliverGet     int64                  `json:"deliver_get"`
		Ack            int64
		AckDetails     struct{ Rate float64 } `json:"ack_details"`
	}
	var q struct {
		MessageStats stats `json:"message_stats"`
	}
	// The sample right after the burst has the rate of its last second.
	a.call("GET", "/api/queues/%2F/ms-a", "guest", "guest", nil, &q)
	if r := q.MessageStats.PublishDetails.Rate; r < 50 || r > 150 {
		t.Errorf("publish rate %.1f/s, published 100/s", r)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		a.call("GET", "/api/queues/%2F/ms-a", "guest", "guest", nil, &q)
		return q.MessageStats.Ack == 250
	}, "acks counted: %+v", q.MessageStats)
	if m := q.MessageStats; m.Publish != 250 || m.DeliverGet != 250 {
		t.Fatalf("message_stats %+v, want 250 published, delivered, acked", m)
	}
	// List parameters, as RabbitMQ 3.10 takes them.
	var page struct {
		FilteredCount int `json:"filtered_count"`
		ItemCount     int `json:"item_count"`
		PageCount     int `json:"page_count"`
		TotalCount    int `json:"total_count"`
		Items         []map[string]any
	}
	a.call("GET", "/api/queues/%2F?columns=name,messages&name=MS-&sort=name&sort_reverse=true&page=1&page_size=2", "guest", "guest", nil, &page)
	if page.FilteredCount != 3 || page.ItemCount != 2 || page.PageCount != 2 || len(page.Items) != 2 || page.Items[0]["name"] != "ms-c" || len(page.Items[0]) != 2 {
		t.Fatalf("a page: %+v", page)
	}
	if code, body := a.raw("GET", "/api/queues/%2F?page=1&page_size=1000"); code != 400 || !strings.Contains(body, "invalid_pagination_parameters") {
		t.Fatalf("page_size 1000: %d %s", code, body)
	}
	if code, body := a.raw("GET", "/api/queues/%2F?page=9&page_size=10"); code != 400 || !strings.Contains(body, "page_out_of_range") {
		t.Fatalf("page 9: %d %s", code, body)
	}
}

// /api/overview and /api/nodes carry the fields operators' tools read,
// with RabbitMQ's JSON types (checked against RabbitMQ 3.10.8 too).
func TestOverviewAndNodesShape(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	kinds := func(m map[string]any, want map[string]string) {
		t.Helper()
		for path, kind := range want {
			v := any(m)
			for _, p := range strings.Split(path, ".") {
				mm, _ := v.(map[string]any)
				v = mm[p]
			}
			got := "missing"
			switch v.(type) {
			case string:
				got = "string"
			case float64:
				got = "number"
			case bool:
				got = "bool"
			case []any:
				got = "list"
			case map[string]any:
				got = "object"
			}
			if got != kind {
				t.Errorf("%s: %s, want %s", path, got, kind)
			}
		}
	}
	var ov map[string]any
	a.call("GET", "/api/overview", "guest", "guest", nil, &ov)
	kinds(ov, map[string]string{
		"rabbitmq_version": "string", "management_version": "string", "product_name": "string", "cluster_name": "string",
		"node": "string", "rates_mode": "string", "listeners": "list", "exchange_types": "list",
		"queue_totals": "object", "object_totals.queues": "number", "object_totals.connections": "number",
		"object_totals.channels": "number", "object_totals.exchanges": "number", "object_totals.consumers": "number",
		"message_stats": "object",
	})
	var nodes []map[string]any
	a.call("GET", "/api/nodes", "guest", "guest", nil, &nodes)
	if len(nodes) != 1 {
		t.Fatalf("%d nodes", len(nodes))
	}
	kinds(nodes[0], map[string]string{
		"name": "string", "type": "string", "running": "bool", "mem_used": "number", "mem_limit": "number", "mem_alarm": "bool",
		"disk_free": "number", "disk_free_limit": "number", "disk_free_alarm": "bool", "fd_used": "number", "fd_total": "number",
		"sockets_used": "number", "sockets_total": "number", "proc_used": "number", "proc_total": "number", "uptime": "number",
		"run_queue": "number", "processors": "number", "os_pid": "string", "partitions": "list",
	})
	var one map[string]any
	if code := a.call("GET", "/api/nodes/"+nodes[0]["name"].(string), "guest", "guest", nil, &one); code != 200 || one["name"] != nodes[0]["name"] {
		t.Fatalf("GET /api/nodes/{name}: %d", code)
	}
}

// /api/channels and /api/consumers show a connection's channels and its
// consumers with RabbitMQ's fields (also run against RabbitMQ).
func TestChannelsAndConsumers(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "chan-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch1, _ := c.Channel()
	ch2, _ := c.Channel()
	q, err := ch1.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	must(t, ch2.Qos(10, 0, false))
	_, err = ch2.Consume(q.Name, "ctag-1", false, false, false, false, nil)
	must(t, err)
	testutil.Eventually(t, 15*time.Second, func() bool {
		var chans []struct {
			Name              string
			Number            int
			ConnectionDetails struct{ Name string } `json:"connection_details"`
		}
		a.call("GET", "/api/channels", "guest", "guest", nil, &chans)
		n := 0
		for _, ch := range chans {
			if strings.HasSuffix(ch.Name, ")") && ch.ConnectionDetails.Name != "" && ch.Number >= 1 {
				n++
			}
		}
		return n >= 2
	}, "two channels listed")
	testutil.Eventually(t, 15*time.Second, func() bool {
		var cons []struct {
			ConsumerTag   string `json:"consumer_tag"`
			AckRequired   bool   `json:"ack_required"`
			PrefetchCount int    `json:"prefetch_count"`
			Queue         struct{ Name, Vhost string }
		}
		a.call("GET", "/api/consumers/%2F", "guest", "guest", nil, &cons)
		for _, x := range cons {
			if x.ConsumerTag == "ctag-1" && x.AckRequired && x.PrefetchCount == 10 && x.Queue.Name == q.Name && x.Queue.Vhost == "/" {
				return true
			}
		}
		return false
	}, "the consumer listed")
}

// A queue's bindings and an exchange's as source and destination, and one
// connection by name (also run against RabbitMQ).
func TestObjectBindingsAndConnection(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	t.Cleanup(func() {
		for _, p := range []string{"/api/exchanges/%2F/eb-x", "/api/exchanges/%2F/eb-y", "/api/queues/%2F/eb-q"} {
			a.call("DELETE", p, "guest", "guest", nil, nil)
		}
	})
	a.admin("PUT", "/api/exchanges/%2F/eb-x", map[string]any{"type": "topic"}, 201)
	a.admin("PUT", "/api/exchanges/%2F/eb-y", map[string]any{"type": "fanout"}, 201)
	a.admin("PUT", "/api/queues/%2F/eb-q", map[string]any{}, 201)
	a.admin("POST", "/api/bindings/%2F/e/eb-x/q/eb-q", map[string]any{"routing_key": "k"}, 201)
	a.admin("POST", "/api/bindings/%2F/e/eb-x/e/eb-y", map[string]any{"routing_key": "z"}, 201)
	keys := func(path string) string {
		var bs []struct {
			Source      string
			Destination string
			RoutingKey  string `json:"routing_key"`
		}
		a.call("GET", path, "guest", "guest", nil, &bs)
		var out []string
		for _, b := range bs {
			out = append(out, b.Source+">"+b.Destination+":"+b.RoutingKey)
		}
		return strings.Join(out, ",")
	}
	for path, want := range map[string]string{
		"/api/queues/%2F/eb-q/bindings":                ">eb-q:eb-q,eb-x>eb-q:k",
		"/api/exchanges/%2F/eb-x/bindings/source":      "eb-x>eb-q:k,eb-x>eb-y:z",
		"/api/exchanges/%2F/eb-y/bindings/destination": "eb-x>eb-y:z",
	} {
		if got := keys(path); got != want {
			t.Errorf("GET %s: %s, want %s", path, got, want)
		}
	}
	c, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "by-name"}})
	must(t, err)
	defer c.Close()
	var name string
	testutil.Eventually(t, 10*time.Second, func() bool {
		var conns []struct {
			Name             string
			ClientProperties struct {
				ConnectionName string `json:"connection_name"`
			} `json:"client_properties"`
		}
		a.call("GET", "/api/connections", "guest", "guest", nil, &conns)
		for _, x := range conns {
			if x.ClientProperties.ConnectionName == "by-name" {
				name = x.Name
			}
		}
		return name != ""
	}, "the connection listed")
	var one struct{ Name, User string }
	if code := a.call("GET", "/api/connections/"+neturl.PathEscape(name), "guest", "guest", nil, &one); code != 200 || one.Name != name || one.User != "guest" {
		t.Fatalf("GET /api/connections/{name}: %d %+v", code, one)
	}
}

// consumer_utilisation is the share of the last sample in which the
// queue's consumers could take messages at once: about none for a
// consumer at its prefetch that never acks with messages waiting, most
// for a consumer that keeps up; 0 without consumers, as RabbitMQ shows.
func TestConsumerUtilisation(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: 500 * time.Millisecond}) // what newAPI serves
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	for _, q := range []string{"cu-stuck", "cu-idle", "cu-none"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	must(t, ch.Qos(1, 0, false))
	_, err := ch.Consume("cu-stuck", "", false, false, false, false, nil) // never acks
	must(t, err)
	_, err = ch.Consume("cu-idle", "", true, false, false, false, nil) // takes all at once
	must(t, err)
	for range 5 {
		must(t, ch.Publish("", "cu-stuck", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	util := func(q string) any {
		var out map[string]any
		a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &out)
		return out["consumer_utilisation"]
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		u, ok := util("cu-stuck").(float64)
		return ok && u < 0.2
	}, "a full consumer with messages waiting: utilisation %v", util("cu-stuck"))
	testutil.Eventually(t, 10*time.Second, func() bool {
		u, ok := util("cu-idle").(float64)
		return ok && u > 0.8
	}, "a consumer with room: utilisation %v", util("cu-idle"))
	if u := util("cu-none"); u != float64(0) {
		t.Fatalf("no consumers: utilisation %v, want 0 (as RabbitMQ 3.10.8)", u)
	}
}
