package conformance

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// clusterChannels opens a channel on each node once the cluster has a
// leader (a declare on node 1 went through).
func clusterChannels(t *testing.T, nodes []*clusterNode) []*rmq.Channel {
	t.Helper()
	chans := make([]*rmq.Channel, len(nodes))
	for i, n := range nodes {
		c := dial(t, n.b.URL)
		ch, err := c.Channel()
		must(t, err)
		chans[i] = ch
	}
	return chans
}

var quorumArgs = rmq.Table{"x-queue-type": "quorum"}

// declareQuorum declares a quorum queue on ch, retrying while the
// cluster elects its first leader.
func declareQuorum(t *testing.T, url string, name string, args rmq.Table) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, func() bool {
		c, err := rmq.Dial(url)
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclare(name, true, false, false, false, args)
		return err == nil
	}, "declaring quorum queue %s did not succeed", name)
}

// TestQuorumQueueServedByEveryNode: a quorum queue declared on node 1 is
// there on every node; a publisher on node 2 gets its confirms once the
// log has the messages; a consumer on node 3 gets them in order, acks
// some, and the rest come back redelivered, with x-delivery-count, when
// its channel closes; a binding made on node 3 routes publishes on node
// 1; basic.get, purge and delete work from any node.
func TestQuorumQueueServedByEveryNode(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "orders", quorumArgs)
	chans := clusterChannels(t, nodes)
	for i := range nodes {
		testutil.Eventually(t, 5*time.Second, func() bool {
			_, err := chans[i].QueueDeclarePassive("orders", true, false, false, false, nil)
			if err != nil {
				chans[i] = clusterChannels(t, nodes[i:i+1])[0]
			}
			return err == nil
		}, "node %d lacks the queue", i+1)
	}
	// A redeclare with the same arguments is fine on any node; another
	// type is refused as RabbitMQ refuses it.
	_, err := chans[1].QueueDeclare("orders", true, false, false, false, quorumArgs)
	must(t, err)
	_, err = chans[1].QueueDeclare("orders", true, false, false, false, rmq.Table{"x-queue-type": "classic"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'orders' in vhost '/': received 'classic' but current is 'quorum'")
	chans = clusterChannels(t, nodes)

	// Publish 200 on node 2, with confirms.
	must(t, chans[1].Confirm(false))
	confirms := chans[1].NotifyPublish(make(chan rmq.Confirmation, 200))
	for i := 0; i < 200; i++ {
		must(t, chans[1].Publish("", "orders", false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))}))
	}
	for i := 0; i < 200; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 200 confirms", i)
		}
	}
	// The management API of any node shows the queue's type, leader
	// (the declaring node), members and their progress.
	a := &api{t: t, url: nodes[1].api}
	testutil.Eventually(t, 5*time.Second, func() bool {
		var qj struct {
			Type, Leader, Node string
			Members, Online    []string
			Messages           int
			RailmqMembers      []struct {
				Name   string
				Online bool
				Lag    *uint64
			} `json:"railmq_members"`
		}
		if a.call("GET", "/api/queues/%2F/orders", "guest", "guest", nil, &qj) != 200 {
			return false
		}
		lagged := false
		for _, m := range qj.RailmqMembers {
			lagged = lagged || !m.Online || m.Lag == nil || *m.Lag != 0
		}
		return qj.Type == "quorum" && qj.Leader == nodes[0].name && qj.Node == qj.Leader &&
			len(qj.Members) == 3 && len(qj.Online) == 3 && qj.Messages == 200 && len(qj.RailmqMembers) == 3 && !lagged
	}, "GET /api/queues/%%2F/orders on node 2 does not show a quorum queue led by node 1 with 3 members caught up")

	// Its Raft figures are in the per-object metrics, under RabbitMQ's
	// names; node 1 leads it.
	for i, n := range nodes[:2] {
		ps := httptest.NewServer(n.b.PrometheusHandler())
		m := getMetrics(t, ps.URL+"/metrics/per-object")
		ps.Close()
		if m.series[`rabbitmq_raft_log_commit_index{queue="orders",vhost="/"}`] < 1 || m.types["rabbitmq_raft_term_total"] != "counter" {
			t.Errorf("node %d: no raft figures for the queue", i+1)
		}
		if lead := m.series[`railmq_quorum_queue_leader{queue="orders",vhost="/"}`]; lead != b2f(i == 0) {
			t.Errorf("node %d: railmq_quorum_queue_leader %v", i+1, lead)
		}
	}

	// Consume on node 3: in order; ack the first 50, then close.
	must(t, chans[2].Qos(20, 0, false))
	ds, err := chans[2].Consume("orders", "c1", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 60; i++ {
		select {
		case d := <-ds:
			if string(d.Body) != fmt.Sprint(i) || d.Redelivered {
				t.Fatalf("delivery %d: %q redelivered %v, want %d, first time", i, d.Body, d.Redelivered, i)
			}
			if i < 50 {
				must(t, d.Ack(false))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 60 deliveries", i)
		}
	}
	must(t, chans[2].Close())
	// 10 were delivered and not acked: they are first again, redelivered.
	var last int
	testutil.Eventually(t, 5*time.Second, func() bool {
		q, err := chans[0].QueueDeclarePassive("orders", true, false, false, false, nil)
		last = q.Messages
		if err != nil {
			t.Log(err)
		}
		return err == nil && q.Messages == 150
	}, "node 1 does not count 150 ready: %d", last)
	m, ok, err := chans[0].Get("orders", false)
	must(t, err)
	if !ok || string(m.Body) != "50" || !m.Redelivered || m.Headers["x-delivery-count"] != int64(1) {
		t.Fatalf("get: ok %v %q redelivered %v headers %v, want 50, redelivered, x-delivery-count 1", ok, m.Body, m.Redelivered, m.Headers)
	}
	must(t, m.Ack(false))
	// A binding made on node 3 routes on node 1.
	chans[2] = clusterChannels(t, nodes[2:])[0]
	must(t, chans[2].QueueBind("orders", "order.new", "amq.direct", false, nil))
	// Mandatory publishes come back until node 1 has applied the binding.
	returns := chans[0].NotifyReturn(make(chan rmq.Return, 100))
	testutil.Eventually(t, 5*time.Second, func() bool {
		must(t, chans[0].Publish("amq.direct", "order.new", true, false, rmq.Publishing{Body: []byte("routed")}))
		select {
		case <-returns:
			return false
		case <-time.After(200 * time.Millisecond):
			return true
		}
	}, "a publish to amq.direct on node 1 did not reach the queue")
	testutil.Eventually(t, 5*time.Second, func() bool {
		q, err := chans[1].QueueDeclarePassive("orders", true, false, false, false, nil)
		return err == nil && q.Messages == 150
	}, "node 2 does not count 150 ready")
	n, err := chans[1].QueuePurge("orders", false)
	must(t, err)
	if n != 150 {
		t.Fatalf("purged %d, want 150", n)
	}
	_, err = chans[2].QueueDelete("orders", false, false, false)
	must(t, err)
	for i := range nodes {
		testutil.Eventually(t, 5*time.Second, func() bool {
			_, err := chans[i].QueueDeclarePassive("orders", true, false, false, false, nil)
			if err != nil {
				chans[i] = clusterChannels(t, nodes[i:i+1])[0]
				return true
			}
			return false
		}, "node %d still has the deleted queue", i+1)
	}
}

// TestQuorumQueueDeclareRefusals: the properties a quorum queue cannot
// have, refused with RabbitMQ 3.10's texts.
func TestQuorumQueueDeclareRefusals(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "ok", quorumArgs)
	c := dial(t, nodes[0].b.URL)
	for _, tc := range []struct {
		name                           string
		durable, autoDelete, exclusive bool
		want                           string
	}{
		{"", true, false, false, "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"},
		{"q-ad", true, true, false, "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'q-ad' in vhost '/'"},
		{"q-ex", true, false, true, "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'q-ex' in vhost '/'"},
		{"q-nd", false, false, false, "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'q-nd' in vhost '/'"},
	} {
		ch, err := c.Channel()
		must(t, err)
		_, err = ch.QueueDeclare(tc.name, tc.durable, tc.autoDelete, tc.exclusive, false, quorumArgs)
		expectErr(t, err, 406, tc.want)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestQuorumQueueMinorityRefuses: a node left alone (the other two
// stopped) does not confirm publishes to a quorum queue; it nacks them
// once the write times out, and a client closing meanwhile is not held
// up by the publishes in flight.
func TestQuorumQueueMinorityRefuses(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "lonely", quorumArgs)
	chans := clusterChannels(t, nodes)
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, err := chans[2].QueueDeclarePassive("lonely", true, false, false, false, nil)
		if err != nil {
			chans[2] = clusterChannels(t, nodes[2:])[0]
		}
		return err == nil
	}, "node 3 lacks the queue")
	nodes[0].stop()
	nodes[1].stop()
	ch := chans[2]
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 10))
	for i := 0; i < 5; i++ {
		must(t, ch.Publish("", "lonely", false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte("x")}))
	}
	select {
	case c := <-confirms:
		if c.Ack {
			t.Fatalf("publish %d confirmed by a node without a quorum", c.DeliveryTag)
		}
	case <-time.After(1500 * time.Millisecond):
	}
	// Closing with publishes in flight is prompt.
	c2 := dial(t, nodes[2].b.URL)
	ch2, err := c2.Channel()
	must(t, err)
	must(t, ch2.Confirm(false))
	must(t, ch2.Publish("", "lonely", false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte("y")}))
	start := time.Now()
	must(t, c2.Close())
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closing a connection with a publish in flight took %v", d)
	}
	// The first five are nacked when the write times out.
	for i := 0; i < 5; i++ {
		select {
		case c := <-confirms:
			if c.Ack {
				t.Fatalf("publish %d confirmed by a node without a quorum", c.DeliveryTag)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of 5 nacks", i)
		}
	}
}

// TestQuorumQueueOnAJoinedNode: a node that joins the cluster after a
// quorum queue was declared follows its log too (the queue's leader adds
// it), and serves it: what was published before it joined is got there.
func TestQuorumQueueOnAJoinedNode(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "early", quorumArgs)
	ch := clusterChannels(t, nodes[:1])[0]
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 10))
	for i := 0; i < 10; i++ {
		must(t, ch.Publish("", "early", false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))}))
	}
	for i := 0; i < 10; i++ {
		if c := <-confirms; !c.Ack {
			t.Fatal("nacked")
		}
	}
	fourth := startClusterNode(t, "rabbit4@localhost", map[string]string{"rabbit4@localhost": testutil.FreePort(t)}, true)
	testutil.Eventually(t, 15*time.Second, func() bool {
		for _, n := range nodes {
			if (&api{t: t, url: n.api}).call("PUT", "/api/cluster/members/rabbit4@localhost", "guest", "guest",
				map[string]any{"address": fourth.addr}, nil) == 201 {
				return true
			}
		}
		return false
	}, "no node added the fourth")
	var got []string
	testutil.Eventually(t, 20*time.Second, func() bool {
		c, err := rmq.Dial(fourth.b.URL)
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		q, err := ch.QueueDeclarePassive("early", true, false, false, false, nil)
		if err != nil || q.Messages != 10 {
			return false
		}
		m, ok, err := ch.Get("early", true)
		if err == nil && ok {
			got = append(got, string(m.Body))
		}
		return ok
	}, "the fourth node does not serve the queue")
	if got[0] != "0" {
		t.Fatalf("got %q from the fourth node, want the first message, 0", got[0])
	}
}

// TestClusterDeclareThenUseElsewhere: what a client declares on one node
// it may use on another at once, as with RabbitMQ (whose declares are
// synchronous cluster-wide): a consume, a bind and a publish on node 2
// right after the declares on node 1 find the queue and the exchange.
func TestClusterDeclareThenUseElsewhere(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "warmup", quorumArgs)
	chans := clusterChannels(t, nodes)
	for i := 0; i < 20; i++ {
		q, x := fmt.Sprintf("q-%d", i), fmt.Sprintf("x-%d", i)
		_, err := chans[0].QueueDeclare(q, true, false, false, false, quorumArgs)
		must(t, err)
		must(t, chans[0].ExchangeDeclare(x, "direct", true, false, false, false, nil))
		must(t, chans[1].QueueBind(q, "k", x, false, nil))
		_, err = chans[2].Consume(q, "", true, false, false, false, nil)
		must(t, err)
		must(t, chans[1].Publish(x, "k", false, false, rmq.Publishing{Body: []byte("x")}))
		_, err = chans[2].QueueDeclarePassive(q, true, false, false, false, nil)
		must(t, err)
	}
}

// TestQuorumQueuePrefetch: a consumer of a quorum queue on a node that
// does not lead it gets no more unacked messages than its prefetch, even
// though the log checks out twice that to a prefetch of 16 or more (the
// next window waits on its node, broker/quorum.go credit); acking frees
// room at once. With prefetch 1 (fair dispatch), a busy consumer holds
// one message and no other: the rest go to the idle consumer, as in
// RabbitMQ.
func TestQuorumQueuePrefetch(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "pf", quorumArgs)
	declareQuorum(t, nodes[0].b.URL, "fair", quorumArgs)
	chans := clusterChannels(t, nodes)
	pub := chans[0]
	must(t, pub.Confirm(false))
	confirms := pub.NotifyPublish(make(chan rmq.Confirmation, 100))
	publish := func(q string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			must(t, pub.Publish("", q, false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))}))
		}
		awaitAcks(t, confirms, n)
	}
	none := func(ds <-chan rmq.Delivery, what string) {
		t.Helper()
		select {
		case d := <-ds:
			t.Fatalf("%s: got %q", what, d.Body)
		case <-time.After(500 * time.Millisecond):
		}
	}

	publish("pf", 100)
	c := chans[1] // node 2 follows: the queue's leader is node 1
	must(t, c.Qos(20, 0, false))
	ds, err := c.Consume("pf", "", false, false, false, false, nil)
	must(t, err)
	var last rmq.Delivery
	for i := 0; i < 20; i++ {
		last = recv(t, ds)
		if string(last.Body) != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %q", i, last.Body)
		}
	}
	none(ds, "a 21st unacked delivery with prefetch 20")
	// The management API counts them as RabbitMQ does: 20 unacked, 80
	// ready (the next 20, checked out and waiting on node 2, are ready to
	// the client's eye).
	api3 := &api{t: t, url: nodes[2].api}
	testutil.Eventually(t, 5*time.Second, func() bool {
		var qj struct {
			Ready   int `json:"messages_ready"`
			Unacked int `json:"messages_unacknowledged"`
		}
		return api3.call("GET", "/api/queues/%2F/pf", "guest", "guest", nil, &qj) == 200 && qj.Ready == 80 && qj.Unacked == 20
	}, "GET /api/queues/%%2F/pf does not show 80 ready and 20 unacked")
	must(t, last.Ack(true))
	for i := 20; i < 40; i++ {
		if d := recv(t, ds); string(d.Body) != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %q", i, d.Body)
		}
	}
	none(ds, "more than 20 unacked after acking 20")

	// Fair dispatch: A (node 2) holds its message; B (node 3) gets the
	// other three one by one as it acks.
	a, b := clusterChannels(t, nodes[1:2])[0], chans[2]
	must(t, a.Qos(1, 0, false))
	must(t, b.Qos(1, 0, false))
	da, err := a.Consume("fair", "a", false, false, false, false, nil)
	must(t, err)
	publish("fair", 1)
	recv(t, da) // A's, never acked
	db, err := b.Consume("fair", "b", false, false, false, false, nil)
	must(t, err)
	publish("fair", 3)
	for i := 0; i < 3; i++ {
		must(t, recv(t, db).Ack(false))
	}
	none(da, "a second message to the busy consumer with prefetch 1")
}

// awaitAcks waits for n publisher confirms on confirms, each an ack,
// 10 s at most for each.
func awaitAcks(t *testing.T, confirms <-chan rmq.Confirmation, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d confirms", i, n)
		}
	}
}
