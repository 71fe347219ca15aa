package conformance

// railmq and RabbitMQ 3.10.8 federated both ways, through each broker's
// own management API: railmq the downstream of a RabbitMQ upstream (its
// links, wired by a policy, consume from RabbitMQ), and RabbitMQ's own
// federation plugin the downstream of a railmq upstream (RabbitMQ
// declares on railmq the queue and the x-federation-upstream exchange of
// rabbit_federation_exchange_link.erl and consumes from railmq's queue
// with rabbit_federation_queue_link.erl).
//
// They need a RabbitMQ with the federation plugin on localhost:5672 and
// :15672 (guest/guest): they run with FEDERATION_RABBITMQ=1, as the
// federation package's tests against RabbitMQ do.

import (
	"os"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbitOf is the management API of the RabbitMQ on this machine, or a
// skip when FEDERATION_RABBITMQ is not 1.
func rabbitOf(t *testing.T) *api {
	t.Helper()
	if os.Getenv("FEDERATION_RABBITMQ") != "1" {
		t.Skip("FEDERATION_RABBITMQ is not 1: no RabbitMQ to federate with")
	}
	return &api{t: t, url: "http://localhost:15672"}
}

// fedGet takes one message from q, waiting for it.
func fedGet(t *testing.T, ch *rmq.Channel, q string) rmq.Delivery {
	t.Helper()
	var d rmq.Delivery
	poll.Eventually(t, 30*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}, "no message in %s", q)
	return d
}

// fedSetUp makes vhost upVh on up and downVh on down, exchange fx of
// kind and queue fq in both, downstream a queue sink bound to fx with
// key, and downstream the upstream "up" (upURI) and a policy federating
// what starts with f from it.
func fedSetUp(t *testing.T, up *api, upVh string, down *api, downVh, kind, key, upURI string) {
	t.Helper()
	sapiVhosts(t, up, upVh)
	sapiVhosts(t, down, downVh)
	for x, vh := range map[*api]string{up: upVh, down: downVh} {
		sapiWantStatus(t, x, "PUT", "/api/exchanges/"+vh+"/fx", `{"type":"`+kind+`","durable":true}`, 201)
		sapiWantStatus(t, x, "PUT", "/api/queues/"+vh+"/fq", `{"durable":true}`, 201)
	}
	sapiWantStatus(t, down, "PUT", "/api/queues/"+downVh+"/sink", `{"durable":true}`, 201)
	sapiWantStatus(t, down, "POST", "/api/bindings/"+downVh+"/e/fx/q/sink", `{"routing_key":"`+key+`"}`, 201)
	sapiWantStatus(t, down, "PUT", "/api/parameters/federation-upstream/"+downVh+"/up", `{"value":{"uri":"`+upURI+`","reconnect-delay":1}}`, 201)
	sapiWantStatus(t, down, "PUT", "/api/policies/"+downVh+"/fed", `{"pattern":"^f","apply-to":"all","definition":{"federation-upstream":"up"}}`, 201)
}

// railmq's links consume from RabbitMQ: an exchange and a queue federated
// by a policy on railmq from a RabbitMQ upstream.
func TestFederationFromRabbitMQ(t *testing.T) {
	r := rabbitOf(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	fedSetUp(t, r, "fedi-up", a, "fedi-down", "topic", "a.#", "amqp://guest:guest@localhost:5672/fedi-up")
	poll.Eventually(t, 30*time.Second, func() bool {
		ls := fapiLinks(t, a, "/api/federation-links/fedi-down")
		return len(ls) == 2 && ls[0]["status"] == "running" && ls[1]["status"] == "running"
	}, "railmq's two links running")

	uch := openChannel(t, dial(t, "amqp://guest:guest@localhost:5672/fedi-up"))
	dch := openChannel(t, dial(t, "amqp://guest:guest@"+b.Addr+"/fedi-down"))
	// The binding reaches RabbitMQ's fx asynchronously: publish until one
	// arrives.
	var m rmq.Delivery
	poll.Eventually(t, 30*time.Second, func() bool {
		if err := uch.Publish("fx", "a.b", false, false, rmq.Publishing{Body: []byte("x1")}); err != nil {
			t.Fatal(err)
		}
		var ok bool
		var err error
		m, ok, err = dch.Get("sink", true)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}, "a message published to RabbitMQ's fx at railmq's sink")
	rf, _ := m.Headers["x-received-from"].([]any)
	if len(rf) != 1 || rf[0].(rmq.Table)["cluster-name"] != sapiClusterName(t, r) || rf[0].(rmq.Table)["exchange"] != "fx" {
		t.Fatalf("x-received-from %v", m.Headers["x-received-from"])
	}

	// The queue: published at RabbitMQ, pulled by a consumer at railmq.
	if err := uch.Publish("", "fq", false, false, rmq.Publishing{Body: []byte("q1"), DeliveryMode: 2}); err != nil {
		t.Fatal(err)
	}
	ds, err := dch.Consume("fq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "q1" || d.Headers["x-original-routing-key"] != "fq" {
			t.Fatalf("pulled %q %v", d.Body, d.Headers)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("railmq's consumer got nothing from RabbitMQ's fq")
	}
}

// RabbitMQ's federation plugin consumes from railmq: railmq must take
// what the plugin declares (the x-federation-upstream exchange with its
// x-max-hops long, the upstream queue with x-internal-purpose) and serve
// its consumer with priority -1.
func TestFederationToRabbitMQ(t *testing.T) {
	r := rabbitOf(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	fedSetUp(t, a, "fedo-up", r, "fedo-down", "fanout", "", "amqp://guest:guest@"+b.Addr+"/fedo-up")
	poll.Eventually(t, 30*time.Second, func() bool {
		n := 0
		for _, l := range fapiLinks(t, r, "/api/federation-links/fedo-down") {
			if l["status"] == "running" {
				n++
			}
		}
		return n == 2
	}, "RabbitMQ's two links to railmq running")

	// What the plugin made on railmq.
	var xs []map[string]any
	if got := a.call("GET", "/api/exchanges/fedo-up", "guest", "guest", nil, &xs); got != 200 {
		t.Fatalf("exchanges: %d", got)
	}
	found := false
	for _, x := range xs {
		if x["type"] == "x-federation-upstream" && x["internal"] == true {
			found = true
		}
	}
	if !found {
		t.Fatalf("no x-federation-upstream exchange on railmq: %v", xs)
	}

	uch := openChannel(t, dial(t, "amqp://guest:guest@"+b.Addr+"/fedo-up"))
	dch := openChannel(t, dial(t, "amqp://guest:guest@localhost:5672/fedo-down"))
	if err := uch.Publish("fx", "", false, false, rmq.Publishing{Body: []byte("x1")}); err != nil {
		t.Fatal(err)
	}
	m := fedGet(t, dch, "sink")
	rf, _ := m.Headers["x-received-from"].([]any)
	if string(m.Body) != "x1" || len(rf) != 1 || rf[0].(rmq.Table)["cluster-name"] != sapiClusterName(t, a) {
		t.Fatalf("at RabbitMQ's sink: %q %v", m.Body, m.Headers)
	}

	if err := uch.Publish("", "fq", false, false, rmq.Publishing{Body: []byte("q1"), DeliveryMode: 2}); err != nil {
		t.Fatal(err)
	}
	ds, err := dch.Consume("fq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "q1" {
			t.Fatalf("pulled %q", d.Body)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RabbitMQ's consumer got nothing from railmq's fq")
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		q, err := uch.QueueDeclarePassive("fq", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages == 0
	}, "railmq's fq emptied by RabbitMQ's queue link")
}
