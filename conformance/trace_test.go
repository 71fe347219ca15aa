package conformance

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Firehose tracing as RabbitMQ 3.10.8's. There, in a vhost with
// `rabbitmqctl trace_on -p logs-trace`, a pika client on channel 2
// publishing to direct exchange tx (key k, bound to tq1) with properties,
// then to the default exchange, then basic.get, nack with requeue and
// basic.get again, had a queue bound to amq.rabbitmq.trace with "#"
// receive (pika's view):
//
//	publish.tx  headers={'exchange_name': 'tx', 'routing_keys': ['k'], 'properties': {'timestamp': 1700000000,
//	            'message_id': 'm1', 'expiration': '60000', 'priority': 3, 'delivery_mode': 2, 'headers': {'a': 1},
//	            'content_type': 'text/plain'}, 'node': 'rabbit@vm', 'vhost': 'logs-trace',
//	            'connection': '127.0.0.1:56346 -> 127.0.0.1:5672', 'channel': 2, 'user': 'guest', 'routed_queues': ['tq1']}
//	publish.    headers={'exchange_name': '', 'routing_keys': ['tq1'], 'properties': {}, 'node': 'rabbit@vm', ...,
//	            'routed_queues': ['tq1']}
//	deliver.tq1 headers={'exchange_name': 'tx', 'routing_keys': ['k'], 'properties': {...}, 'node': 'rabbit@vm',
//	            'redelivered': 0, 'vhost': 'logs-trace', 'connection': '...', 'channel': 2, 'user': 'guest'}
//	deliver.tq1 ... 'redelivered': 1 ...
//
// each with the original body and no other property. amq.rabbitmq.trace
// is in every vhost (topic, durable, internal), and /api/vhosts shows
// "tracing", which PUT /api/vhosts/{vhost} {"tracing": true} turns on
// (HTTP 204 for the existing vhost there).
func TestTraceFirehose(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	hs := httptest.NewServer(e.b.ManagementHandler())
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		return resp.StatusCode
	}
	tracing := func() bool {
		var vh struct {
			Tracing bool `json:"tracing"`
		}
		call("GET", "/api/vhosts/%2F", "", &vh)
		return vh.Tracing
	}
	var x struct {
		Type     string `json:"type"`
		Durable  bool   `json:"durable"`
		Internal bool   `json:"internal"`
	}
	if call("GET", "/api/exchanges/%2F/amq.rabbitmq.trace", "", &x) != 200 || x.Type != "topic" || !x.Durable || !x.Internal {
		t.Fatalf("amq.rabbitmq.trace: %+v", x)
	}
	if tracing() {
		t.Fatal("tracing on at start")
	}

	// The tracer's queue, on its own connection.
	tc := dial(t, e.b.URL)
	defer tc.Close()
	tch := e.channel(tc)
	tq, err := tch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	must(t, tch.QueueBind(tq.Name, "#", "amq.rabbitmq.trace", false, nil))
	copies, err := tch.Consume(tq.Name, "", true, false, false, false, nil)
	must(t, err)

	must(t, e.ch.ExchangeDeclare("tx", "direct", false, true, false, false, nil))
	e.queue("tq1", nil)
	must(t, e.ch.QueueBind("tq1", "k", "tx", false, nil))
	e.publish("tx", "k", "before") // tracing off: no copy
	e.waitCount("tq1", 1)
	if _, ok, err := e.ch.Get("tq1", true); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}

	if code := call("PUT", "/api/vhosts/%2F", `{"tracing": true}`, nil); code != 204 {
		t.Fatalf("PUT tracing: %d", code)
	}
	if !tracing() {
		t.Fatal("tracing not shown on")
	}
	if code := call("PUT", "/api/vhosts/%2F", `{"description": "traced"}`, nil); code != 204 || !tracing() {
		t.Fatalf("a PUT without tracing turned it off (%d)", code)
	}
	if code := call("PUT", "/api/vhosts/%2F", `{"tracing": "maybe"}`, nil); code != 400 {
		t.Fatalf("PUT tracing maybe: %d, want 400", code)
	}

	pc, err := rmq.DialConfig(e.b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "traced"}})
	must(t, err)
	defer pc.Close()
	_ = e.channel(pc) // channel 1: the publishes go on channel 2, as pika's
	pch := e.channel(pc)
	connName := pc.LocalAddr().String() + " -> " + e.b.Addr
	ts := time.Unix(1700000000, 0)
	must(t, pch.Publish("tx", "k", false, false, rmq.Publishing{ContentType: "text/plain", DeliveryMode: 2,
		Headers: rmq.Table{"a": int32(1)}, Priority: 3, MessageId: "m1", Timestamp: ts, Expiration: "60000", Body: []byte("hello")}))
	must(t, pch.Publish("", "tq1", false, false, rmq.Publishing{Body: []byte("direct")}))
	e.waitCount("tq1", 2)
	d, ok, err := pch.Get("tq1", false)
	if err != nil || !ok || string(d.Body) != "hello" {
		t.Fatalf("get: %v %v %q", ok, err, d.Body)
	}
	must(t, d.Nack(false, true))
	d, ok, err = pch.Get("tq1", true)
	if err != nil || !ok || !d.Redelivered {
		t.Fatalf("get again: %v %v %v", ok, err, d.Redelivered)
	}

	node := e.b.Server.NodeName()
	props := rmq.Table{"content_type": "text/plain", "delivery_mode": int32(2), "headers": rmq.Table{"a": int32(1)},
		"priority": int32(3), "message_id": "m1", "timestamp": int32(1700000000), "expiration": "60000"}
	want := []struct {
		key, body string
		headers   rmq.Table
	}{
		{"publish.tx", "hello", rmq.Table{"exchange_name": "tx", "routing_keys": []any{"k"}, "properties": props,
			"node": node, "vhost": "/", "connection": connName, "channel": int32(2), "user": "guest", "routed_queues": []any{"tq1"}}},
		{"publish.", "direct", rmq.Table{"exchange_name": "", "routing_keys": []any{"tq1"}, "properties": rmq.Table{},
			"node": node, "vhost": "/", "connection": connName, "channel": int32(2), "user": "guest", "routed_queues": []any{"tq1"}}},
		{"deliver.tq1", "hello", rmq.Table{"exchange_name": "tx", "routing_keys": []any{"k"}, "properties": props,
			"node": node, "redelivered": int32(0), "vhost": "/", "connection": connName, "channel": int32(2), "user": "guest"}},
		{"deliver.tq1", "hello", rmq.Table{"exchange_name": "tx", "routing_keys": []any{"k"}, "properties": props,
			"node": node, "redelivered": int32(1), "vhost": "/", "connection": connName, "channel": int32(2), "user": "guest"}},
	}
	for i, w := range want {
		c := recv(t, copies)
		if c.Exchange != "amq.rabbitmq.trace" || c.RoutingKey != w.key || string(c.Body) != w.body {
			t.Fatalf("copy %d: %s %q %q, want %q %q", i, c.Exchange, c.RoutingKey, c.Body, w.key, w.body)
		}
		if !reflect.DeepEqual(c.Headers, w.headers) {
			t.Errorf("copy %d (%s) headers:\n%#v\nwant\n%#v", i, w.key, c.Headers, w.headers)
		}
		if c.ContentType != "" || c.DeliveryMode != 0 || c.MessageId != "" || c.Priority != 0 {
			t.Errorf("copy %d has properties other than headers: %+v", i, c)
		}
	}

	// A consumer's deliveries are traced too: the message left in tq1,
	// then a new one.
	ds := e.consume("tq1", true)
	if d := recv(t, ds); string(d.Body) != "direct" {
		t.Fatalf("consumed %q", d.Body)
	}
	if c := recv(t, copies); c.RoutingKey != "deliver.tq1" || string(c.Body) != "direct" || c.Headers["redelivered"] != int32(0) {
		t.Fatalf("copy %q %q %v, want deliver.tq1 of direct", c.RoutingKey, c.Body, c.Headers)
	}
	must(t, pch.Publish("", "tq1", false, false, rmq.Publishing{Body: []byte("consumed")}))
	recv(t, ds)
	for _, key := range []string{"publish.", "deliver.tq1"} {
		if c := recv(t, copies); c.RoutingKey != key || string(c.Body) != "consumed" {
			t.Fatalf("copy %q %q, want %q", c.RoutingKey, c.Body, key)
		}
	}

	// Off: nothing is copied. Tracing back on then, the next copy is the
	// marker's.
	if code := call("PUT", "/api/vhosts/%2F", `{"tracing": false}`, nil); code != 204 || tracing() {
		t.Fatalf("PUT tracing false: %d", code)
	}
	must(t, pch.Publish("tx", "k", false, false, rmq.Publishing{Body: []byte("untraced")}))
	recv(t, ds)
	call("PUT", "/api/vhosts/%2F", `{"tracing": true}`, nil)
	must(t, pch.Publish("amq.direct", "nowhere", false, false, rmq.Publishing{Body: []byte("marker")}))
	if c := recv(t, copies); c.RoutingKey != "publish.amq.direct" || string(c.Body) != "marker" {
		t.Fatalf("after trace off and on, first copy %q %q, want the marker's", c.RoutingKey, c.Body)
	}
	call("PUT", "/api/vhosts/%2F", `{"tracing": false}`, nil)
}
