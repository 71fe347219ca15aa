package federation_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/internal/poll"
)

// rabbitAPI calls the RabbitMQ management API as guest; out, if not nil,
// receives the JSON answer.
func rabbitAPI(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://localhost:15672/api/"+path, strings.NewReader(body))
	must(t, err)
	req.Close = true // no idle connection outlives the test (goleak)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		must(t, json.Unmarshal(b.Bytes(), out))
	}
	return resp.StatusCode
}

// rabbitVhost makes a vhost on the real RabbitMQ 3.10.8 (guest may use
// it), deleted when the test ends. The test runs only with
// FEDERATION_RABBITMQ=1 (RabbitMQ on localhost:5672 and :15672,
// guest/guest), as shovel's BenchmarkRabbitMQShovel.
func rabbitVhost(t *testing.T, vh string) string {
	t.Helper()
	if os.Getenv("FEDERATION_RABBITMQ") != "1" {
		t.Skip("FEDERATION_RABBITMQ is not 1: no RabbitMQ to federate from")
	}
	rabbitAPI(t, http.MethodDelete, "vhosts/"+vh, "", nil)
	if c := rabbitAPI(t, http.MethodPut, "vhosts/"+vh, "", nil); c >= 300 {
		t.Fatalf("PUT vhost: %d", c)
	}
	t.Cleanup(func() { rabbitAPI(t, http.MethodDelete, "vhosts/"+vh, "", nil) })
	if c := rabbitAPI(t, http.MethodPut, "permissions/"+vh+"/guest", `{"configure":".*","write":".*","read":".*"}`, nil); c >= 300 {
		t.Fatalf("PUT permissions: %d", c)
	}
	return "amqp://guest:guest@localhost:5672/" + vh
}

// TestRabbitMQUpstream: railmq as the downstream of RabbitMQ 3.10.8.
// The exchange link makes upstream what RabbitMQ's own plugin makes
// (notes/shovel-rabbit.md, "What a federated exchange creates
// upstream", seen from a RabbitMQ downstream): the queue
// "federation: fx -> CLUSTER:VHOST:fx" with x-expires, x-message-ttl,
// x-internal-purpose; the internal exchange "... B" of type
// x-federation-upstream, durable, auto_delete, internal, with
// x-downstream-name, x-downstream-vhost, x-internal-purpose, x-max-hops;
// the binding of fx with the downstream's key and x-bound-from. A
// message published to RabbitMQ reaches railmq's binding with
// x-received-from naming rabbit@vm. The queue link pulls RabbitMQ's
// queue into railmq's once railmq's queue has a consumer.
func TestRabbitMQUpstream(t *testing.T) {
	upURL := rabbitVhost(t, "fed-rmq-up")
	down := startNode(t)
	down.addVhost("fed-down")
	dch := dial(t, down.url("fed-down"))
	must(t, dch.ExchangeDeclare("fx", "topic", true, false, false, false, nil))
	_, err := dch.QueueDeclare("sink", true, false, false, false, nil)
	must(t, err)
	must(t, dch.QueueBind("sink", "a.#", "fx", false, nil))
	_, err = dch.QueueDeclare("fq", true, false, false, false, nil)
	must(t, err)

	u := upstream(t, "up1", map[string]any{"uri": upURL, "max-hops": float64(2), "expires": float64(3600000),
		"message-ttl": float64(600000), "prefetch-count": float64(100), "reconnect-delay": float64(1)})
	opts := federation.Options{ClusterName: "railmq-down", Vhost: "fed-down"}
	xl := federation.NewExchangeLink(u, federation.ExchangeSpec{Name: "fx", Type: "topic", Durable: true},
		newPublisher(t, down.url("fed-down")), newBindings("a.#"), opts)
	xl.Start()
	t.Cleanup(xl.Stop)
	waitRunning(t, xl)

	qname := "federation: fx -> railmq-down:fed-down:fx"
	var q struct {
		Durable   bool           `json:"durable"`
		Arguments map[string]any `json:"arguments"`
		Consumers int            `json:"consumers"`
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		return rabbitAPI(t, http.MethodGet, "queues/fed-rmq-up/"+url.PathEscape(qname), "", &q) == 200 && q.Consumers == 1
	}, "upstream queue %q: %+v", qname, q)
	if !q.Durable || len(q.Arguments) != 3 || q.Arguments["x-expires"] != float64(3600000) ||
		q.Arguments["x-message-ttl"] != float64(600000) || q.Arguments["x-internal-purpose"] != "federation" {
		t.Fatalf("upstream queue %+v", q)
	}
	var x struct {
		Type       string         `json:"type"`
		Durable    bool           `json:"durable"`
		AutoDelete bool           `json:"auto_delete"`
		Internal   bool           `json:"internal"`
		Arguments  map[string]any `json:"arguments"`
	}
	if c := rabbitAPI(t, http.MethodGet, "exchanges/fed-rmq-up/"+url.PathEscape(qname+" B"), "", &x); c != 200 {
		t.Fatalf("internal exchange: %d", c)
	}
	if x.Type != "x-federation-upstream" || !x.Durable || !x.AutoDelete || !x.Internal || len(x.Arguments) != 4 ||
		x.Arguments["x-downstream-name"] != "railmq-down" || x.Arguments["x-downstream-vhost"] != "fed-down" ||
		x.Arguments["x-internal-purpose"] != "federation" || x.Arguments["x-max-hops"] != float64(2) {
		t.Fatalf("internal exchange %+v", x)
	}
	var binds []struct {
		Destination string         `json:"destination"`
		RoutingKey  string         `json:"routing_key"`
		Arguments   map[string]any `json:"arguments"`
	}
	if c := rabbitAPI(t, http.MethodGet, "exchanges/fed-rmq-up/fx/bindings/source", "", &binds); c != 200 || len(binds) != 1 {
		t.Fatalf("bindings of fx: %d %+v", c, binds)
	}
	bf, _ := json.Marshal(binds[0].Arguments)
	if binds[0].Destination != qname+" B" || binds[0].RoutingKey != "a.#" ||
		string(bf) != `{"x-bound-from":[{"cluster-name":"railmq-down","exchange":"fed-down:fx B","hops":2,"vhost":"fed-down"}]}` {
		t.Fatalf("binding %+v %s", binds[0], bf)
	}

	uch := dial(t, upURL)
	must(t, uch.Publish("fx", "a.b", false, false, rmq.Publishing{Headers: rmq.Table{"h": "v"}, Body: []byte("m1")}))
	d := get(t, dch, "sink")
	rf, _ := d.Headers["x-received-from"].([]any)
	if string(d.Body) != "m1" || d.RoutingKey != "a.b" || d.Headers["h"] != "v" || len(rf) != 1 {
		t.Fatalf("got %q %q %v", d.Body, d.RoutingKey, d.Headers)
	}
	want := rmq.Table{"cluster-name": "rabbit@vm", "exchange": "fx", "redelivered": false,
		"uri": "amqp://localhost:5672/fed-rmq-up", "vhost": "fed-rmq-up"}
	if e := rf[0].(rmq.Table); len(e) != len(want) || e["exchange"] != "fx" || e["uri"] != want["uri"] ||
		e["vhost"] != want["vhost"] || e["redelivered"] != false || e["cluster-name"] != want["cluster-name"] {
		t.Fatalf("x-received-from %v, want %v", e, want)
	}

	// The queue link.
	_, err = uch.QueueDeclare("fq", true, false, false, false, nil)
	must(t, err)
	must(t, uch.Publish("", "fq", false, false, rmq.Publishing{Body: []byte("q1")}))
	ql := federation.NewQueueLink(u, federation.QueueSpec{Name: "fq", Durable: true},
		newPublisher(t, down.url("fed-down")), newDemand(t, down.url("fed-down"), "fq"), opts)
	ql.Start()
	t.Cleanup(ql.Stop)
	waitRunning(t, ql)
	dels, err := dch.Consume("fq", "", false, false, false, false, nil)
	must(t, err)
	select {
	case d = <-dels:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing pulled from RabbitMQ's fq")
	}
	rf, _ = d.Headers["x-received-from"].([]any)
	if string(d.Body) != "q1" || d.RoutingKey != "fq" || len(rf) != 1 || rf[0].(rmq.Table)["uri"] != "amqp://localhost:5672/fed-rmq-up" {
		t.Fatalf("got %q %q %v", d.Body, d.RoutingKey, d.Headers)
	}
	must(t, d.Ack(false))
}

// TestRabbitMQDownstream: railmq as the upstream of RabbitMQ 3.10.8's
// own federation plugin (the other direction of the issue): RabbitMQ
// declares its x-federation-upstream exchange, which railmq refuses with
// 503 (an unknown type), falls back to a fanout (ensure_internal_exchange
// in rabbit_federation_exchange_link.erl v3.10.8), binds with
// x-bound-from and consumes; its queue link needs railmq's
// consumer_priorities capability. Messages published to railmq reach
// RabbitMQ's binding and RabbitMQ's consumer.
func TestRabbitMQDownstream(t *testing.T) {
	downURL := rabbitVhost(t, "fed-rmq-down")
	up := startNode(t)
	up.addVhost("fed-up")
	// RabbitMQ's links go before railmq stops (cleanups run last first).
	t.Cleanup(func() { rabbitAPI(t, http.MethodDelete, "vhosts/fed-rmq-down", "", nil) })
	uch := dial(t, up.url("fed-up"))
	dch := dial(t, downURL)
	must(t, dch.ExchangeDeclare("fx", "topic", true, false, false, false, nil))
	_, err := dch.QueueDeclare("sink", true, false, false, false, nil)
	must(t, err)
	must(t, dch.QueueBind("sink", "a.#", "fx", false, nil))
	_, err = dch.QueueDeclare("fq", true, false, false, false, nil)
	must(t, err)
	body, _ := json.Marshal(map[string]any{"value": map[string]any{"uri": up.url("fed-up"), "reconnect-delay": 1}})
	if c := rabbitAPI(t, http.MethodPut, "parameters/federation-upstream/fed-rmq-down/up1", string(body), nil); c >= 300 {
		t.Fatalf("PUT upstream: %d", c)
	}
	if c := rabbitAPI(t, http.MethodPut, "policies/fed-rmq-down/fed",
		`{"pattern":"^f","apply-to":"all","definition":{"federation-upstream":"up1"},"priority":1}`, nil); c >= 300 {
		t.Fatalf("PUT policy: %d", c)
	}
	var links []map[string]any
	poll.Eventually(t, 60*time.Second, func() bool {
		links = nil
		if rabbitAPI(t, http.MethodGet, "federation-links/fed-rmq-down", "", &links) != 200 || len(links) != 2 {
			return false
		}
		for _, l := range links {
			if l["status"] != "running" {
				return false
			}
		}
		return true
	}, "RabbitMQ's links: %v", links)

	// RabbitMQ's binding reached railmq: publish until one arrives.
	poll.Eventually(t, 30*time.Second, func() bool {
		must(t, uch.Publish("fx", "a.b", false, false, rmq.Publishing{Body: []byte("m1")}))
		_, ok, err := dch.Get("sink", true)
		must(t, err)
		return ok
	}, "nothing published to railmq's fx reached RabbitMQ's sink")

	_, err = uch.QueueDeclare("fq", true, false, false, false, nil)
	must(t, err)
	must(t, uch.Publish("", "fq", false, false, rmq.Publishing{Body: []byte("q1")}))
	dels, err := dch.Consume("fq", "", false, false, false, false, nil)
	must(t, err)
	select {
	case d := <-dels:
		rf, _ := d.Headers["x-received-from"].([]any)
		if string(d.Body) != "q1" || len(rf) != 1 {
			t.Fatalf("got %q %v", d.Body, d.Headers)
		}
		must(t, d.Ack(false))
	case <-time.After(30 * time.Second):
		t.Fatal("RabbitMQ's fq pulled nothing from railmq's fq")
	}
	rabbitAPI(t, http.MethodDelete, "policies/fed-rmq-down/fed", "", nil)
}
