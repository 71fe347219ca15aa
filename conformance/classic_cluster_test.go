package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestClassicQueueServedByEveryNode: in a cluster, a classic queue lives
// on the node that declared it (its home) and every node serves it, as
// in RabbitMQ 4: node 2 and node 3 see it (passive declare, the API,
// which names its home), a binding made on node 2 routes publishes made
// on node 2, a publisher on node 2 gets its confirms once the home has
// the messages on disk, a consumer on node 3 gets them in order, a
// requeue and a closed channel bring messages back flagged redelivered,
// basic.get and purge work from node 3, and a delete on node 2 deletes it
// everywhere.
func TestClassicQueueServedByEveryNode(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "warmup", quorumArgs) // the cluster has its leaders
	chans := clusterChannels(t, nodes)
	_, err := chans[0].QueueDeclare("cq", true, false, false, false, nil)
	must(t, err)
	q, err := chans[2].QueueDeclarePassive("cq", true, false, false, false, nil)
	must(t, err)
	if q.Messages != 0 || q.Consumers != 0 {
		t.Fatalf("node 3 sees %+v", q)
	}
	// A redeclare elsewhere is a declare of the same queue; an
	// inequivalent one is refused there as it would be at home.
	_, err = chans[1].QueueDeclare("cq", true, false, false, false, nil)
	must(t, err)
	must(t, chans[1].QueueBind("cq", "k", "amq.direct", false, nil))

	// The home node is named by the API on the other nodes.
	var view struct {
		Node string `json:"node"`
		Type string `json:"type"`
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		req, _ := http.NewRequest("GET", nodes[2].api+"/api/queues/%2F/cq", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&view) == nil
	}, "node 3's API does not show the queue")
	if view.Node != nodes[0].name || view.Type != "classic" {
		t.Fatalf("node 3's API shows node %q type %q, want %q classic", view.Node, view.Type, nodes[0].name)
	}

	must(t, chans[1].Confirm(false))
	confirms := chans[1].NotifyPublish(make(chan rmq.Confirmation, 1000))
	const n = 400
	for i := 0; i < n; i++ {
		ex, key := "", "cq"
		if i%2 == 1 {
			ex, key = "amq.direct", "k"
		}
		must(t, chans[1].Publish(ex, key, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint(i))}))
	}
	awaitAcks(t, confirms, n)
	q, err = chans[0].QueueDeclarePassive("cq", true, false, false, false, nil)
	must(t, err)
	if q.Messages != n {
		t.Fatalf("the home holds %d messages, want %d", q.Messages, n)
	}
	// Prometheus: the home reports the queue, the other nodes do not
	// (summed over the nodes, as Grafana does, it counts once).
	for i, node := range nodes {
		ps := httptest.NewServer(node.b.PrometheusHandler())
		m := getMetrics(t, ps.URL+"/metrics/per-object")
		ps.Close()
		got, ok := m.series[`rabbitmq_queue_messages_ready{queue="cq",vhost="/"}`]
		if i == 0 && (!ok || got != n) || i > 0 && ok {
			t.Errorf("node %d's per-object metrics: cq ready %v (reported %v)", i+1, got, ok)
		}
	}

	must(t, chans[2].Qos(10, 0, false))
	ds, err := chans[2].Consume("cq", "c3", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < n; i++ {
		select {
		case d := <-ds:
			if string(d.Body) != fmt.Sprint(i) || d.Redelivered {
				t.Fatalf("delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
			}
			if i == n-1 {
				must(t, d.Nack(false, true)) // the last one back to the queue
			} else {
				must(t, d.Ack(false))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d deliveries on node 3", i, n)
		}
	}
	select {
	case d := <-ds:
		if string(d.Body) != fmt.Sprint(n-1) || !d.Redelivered {
			t.Fatalf("after the requeue: %q redelivered=%v", d.Body, d.Redelivered)
		}
		if _, ok := d.Headers["x-delivery-count"]; ok {
			t.Fatal("a classic queue's redelivery carries x-delivery-count")
		}
		must(t, d.Ack(false))
	case <-time.After(10 * time.Second):
		t.Fatal("the requeued message did not come back")
	}
	must(t, chans[2].Cancel("c3", false))

	// Unacked when its channel closes: back, redelivered.
	must(t, chans[1].Publish("", "cq", false, false, rmq.Publishing{Body: []byte("held")}))
	c4 := dial(t, nodes[2].b.URL)
	ch4, err := c4.Channel()
	must(t, err)
	ds4, err := ch4.Consume("cq", "", false, false, false, false, nil)
	must(t, err)
	select {
	case d := <-ds4:
		if string(d.Body) != "held" {
			t.Fatalf("got %q", d.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	must(t, ch4.Close())
	var got rmq.Delivery
	testutil.Eventually(t, 5*time.Second, func() bool {
		d, ok, err := chans[2].Get("cq", false)
		if err == nil && ok {
			got = d
		}
		return ok
	}, "basic.get on node 3 got nothing")
	if string(got.Body) != "held" || !got.Redelivered {
		t.Fatalf("basic.get: %q redelivered=%v", got.Body, got.Redelivered)
	}
	must(t, got.Ack(false))

	for i := 0; i < 5; i++ {
		must(t, chans[1].Publish("", "cq", false, false, rmq.Publishing{Body: []byte("p")}))
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		q, err := chans[0].QueueDeclarePassive("cq", true, false, false, false, nil)
		return err == nil && q.Messages == 5
	}, "the home did not get the 5 messages")
	purged, err := chans[2].QueuePurge("cq", false)
	must(t, err)
	if purged != 5 {
		t.Fatalf("purge on node 3: %d, want 5", purged)
	}

	if _, err := chans[1].QueueDelete("cq", false, false, false); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		c := dial(t, n.b.URL)
		ch, err := c.Channel()
		must(t, err)
		_, err = ch.QueueDeclarePassive("cq", true, false, false, false, nil)
		if e, ok := err.(*rmq.Error); !ok || e.Code != 404 {
			t.Fatalf("node %d after the delete: %v, want 404", i+1, err)
		}
	}
}

// TestClassicQueueHomeDown: when a classic queue's home node stops, a
// consumer on another node gets basic.cancel, and a declare there is
// refused with RabbitMQ's 404 ("home node ... is down or
// inaccessible"); once the home is back, its confirmed messages are
// there and served from the other node again, redelivered where they
// had been delivered.
func TestClassicQueueHomeDown(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "warmup", quorumArgs)
	chans := clusterChannels(t, nodes)
	_, err := chans[0].QueueDeclare("cqd", true, false, false, false, nil)
	must(t, err)
	must(t, chans[1].Confirm(false))
	for i := 0; i < 10; i++ {
		dc, err := chans[1].PublishWithDeferredConfirm("", "cqd", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint(i))})
		must(t, err)
		if !dc.Wait() {
			t.Fatalf("publish %d nacked", i)
		}
	}
	cancels := chans[2].NotifyCancel(make(chan string, 1))
	ds, err := chans[2].Consume("cqd", "c", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 10; i++ {
		select {
		case d := <-ds:
			if string(d.Body) != fmt.Sprint(i) {
				t.Fatalf("delivery %d: %q", i, d.Body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 10 deliveries", i)
		}
	}
	nodes[0].stop()
	select {
	case tag := <-cancels:
		if tag != "c" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no basic.cancel when the queue's home stopped")
	}
	c := dial(t, nodes[2].b.URL)
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclarePassive("cqd", true, false, false, false, nil)
	want := fmt.Sprintf("NOT_FOUND - home node '%s' of durable queue 'cqd' in vhost '/' is down or inaccessible", nodes[0].name)
	if e, ok := err.(*rmq.Error); !ok || e.Code != 404 || e.Reason != want {
		t.Fatalf("declare with the home down: %v, want 404 %q", err, want)
	}

	nodes[0] = nodes[0].restart(t)
	c2 := dial(t, nodes[2].b.URL)
	ch2, err := c2.Channel()
	must(t, err)
	var ds2 <-chan rmq.Delivery
	testutil.Eventually(t, 15*time.Second, func() bool {
		ds2, err = ch2.Consume("cqd", "", false, false, false, false, nil)
		if err != nil {
			c2 = dial(t, nodes[2].b.URL)
			ch2, _ = c2.Channel()
			return false
		}
		return true
	}, "the queue is not served from node 3 after its home restarted")
	for i := 0; i < 10; i++ {
		select {
		case d := <-ds2:
			if string(d.Body) != fmt.Sprint(i) || !d.Redelivered {
				t.Fatalf("after the restart, delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
			}
			must(t, d.Ack(false))
		case <-time.After(10 * time.Second):
			t.Fatalf("after the restart: %d of 10 deliveries", i)
		}
	}
}
