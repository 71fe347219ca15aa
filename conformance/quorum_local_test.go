package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Quorum queues on a standalone node (issue [17]): x-queue-type quorum
// declares a queue of one member, with the cluster's state machine, that
// confirms once its log has the message on disk and keeps its messages,
// bindings and delivery counts across restarts.

// TestQuorumQueueStandalone declares, publishes with confirms, consumes,
// restarts and deletes a quorum queue on a node started without a
// cluster.
func TestQuorumQueueStandalone(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	q, err := ch.QueueDeclare("jobs", true, false, false, false, quorumArgs)
	must(t, err)
	if q.Name != "jobs" || q.Messages != 0 {
		t.Fatalf("declare-ok %+v", q)
	}
	// A redeclare is equivalent; a classic one is refused as RabbitMQ
	// 3.10.8 refuses it.
	_, err = ch.QueueDeclare("jobs", true, false, false, false, quorumArgs)
	must(t, err)
	_, err = ch.QueueDeclare("jobs", true, false, false, false, rmq.Table{"x-queue-type": "classic"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'jobs' in vhost '/': received 'classic' but current is 'quorum'")
	ch = reopen(t, c)
	must(t, ch.ExchangeDeclare("work", "direct", true, false, false, false, nil))
	must(t, ch.QueueBind("jobs", "j", "work", false, nil))
	bodies := make([]string, 50)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("job %d", i)
	}
	publishPersistent(t, ch, "work", "j", bodies...)
	q, err = ch.QueueDeclarePassive("jobs", true, false, false, false, nil)
	must(t, err)
	if q.Messages != 50 {
		t.Fatalf("%d ready, want 50", q.Messages)
	}
	// Take 10 and leave them unacked: they come back redelivered after
	// the restart, with x-delivery-count.
	must(t, ch.Qos(10, 0, false))
	msgs, err := ch.Consume("jobs", "", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 10; i++ {
		m := recv(t, msgs)
		if string(m.Body) != bodies[i] || m.Redelivered {
			t.Fatalf("delivery %d: %q redelivered=%v", i, m.Body, m.Redelivered)
		}
	}
	c.Close()
	r.restart()

	c, ch = r.dial()
	defer c.Close()
	q, err = ch.QueueDeclarePassive("jobs", true, false, false, false, nil)
	must(t, err)
	if q.Messages != 50 {
		t.Fatalf("after the restart %d ready, want 50", q.Messages)
	}
	msgs, err = ch.Consume("jobs", "", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 50; i++ {
		m := recv(t, msgs)
		if string(m.Body) != bodies[i] {
			t.Fatalf("delivery %d: %q, want %q", i, m.Body, bodies[i])
		}
		if again := i < 10; m.Redelivered != again {
			t.Fatalf("delivery %d redelivered=%v", i, m.Redelivered)
		}
		if i < 10 && m.Headers["x-delivery-count"] != int64(1) {
			t.Fatalf("delivery %d: x-delivery-count %v, want 1", i, m.Headers["x-delivery-count"])
		}
		must(t, m.Ack(false))
	}
	// The binding came back: a publish routes to the queue.
	publishPersistent(t, ch, "work", "j", "after")
	m := recv(t, msgs)
	if string(m.Body) != "after" {
		t.Fatalf("got %q", m.Body)
	}
	must(t, m.Ack(false))
	ch = reopen(t, c)
	_, err = ch.QueueDelete("jobs", false, false, false)
	must(t, err)
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	_, err = ch.QueueDeclarePassive("jobs", true, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'jobs' in vhost '/'")
}

func reopen(t *testing.T, c *rmq.Connection) *rmq.Channel {
	t.Helper()
	ch, err := c.Channel()
	must(t, err)
	return ch
}

// TestQuorumQueueStandaloneJoinsCluster: a standalone node's quorum queue,
// with its messages and a binding, goes on when the node's data starts a
// cluster: the cluster's metadata store adopts it, the other node
// follows it, grow makes that node a member (RabbitMQ 4's POST
// /api/queues/quorum/replicas/on/NODE/grow), the other node serves its
// messages in order, and delete_member takes the member away again.
func TestQuorumQueueStandaloneJoinsCluster(t *testing.T) {
	bodies := make([]string, 20)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	dir := standaloneQuorum(t, "legacy", "k", bodies...)

	peers := map[string]string{"rabbit1@localhost": testutil.FreePort(t), "rabbit2@localhost": testutil.FreePort(t)}
	n1 := startClusterNodeIn(t, dir, "rabbit1@localhost", peers, false)
	n2 := startClusterNode(t, "rabbit2@localhost", peers, false)
	ready := func(n *clusterNode, want int) bool {
		got, ok := readyCount(n.b.URL, "legacy")
		return ok && got == want
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return ready(n1, 20) }, "node 1 does not serve its standalone quorum queue")
	testutil.Eventually(t, 30*time.Second, func() bool { return ready(n2, 20) }, "node 2 does not follow the adopted queue")
	a1 := &api{t: t, url: n1.api}
	members := func() []string {
		var q struct{ Members []string }
		if a1.call("GET", "/api/queues/%2F/legacy", "guest", "guest", nil, &q) != 200 {
			return nil
		}
		return q.Members
	}
	if m := members(); len(m) != 1 || m[0] != "rabbit1@localhost" {
		t.Fatalf("members %v, want [rabbit1@localhost]", m)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		return a1.call("POST", "/api/queues/quorum/replicas/on/rabbit2@localhost/grow", "guest", "guest",
			map[string]any{"vhost_pattern": "^/$", "queue_pattern": "^legacy$", "strategy": "all"}, nil) == 204 && len(members()) == 2
	}, "grow did not make node 2 a member: %v", members())
	var st []map[string]any
	if code := a1.call("GET", "/api/queues/quorum/%2F/legacy/status", "guest", "guest", nil, &st); code != 200 || len(st) != 2 {
		t.Fatalf("status %d %v", code, st)
	}
	// Node 2 serves the messages, in order, and the binding routes.
	c2, err := rmq.Dial(n2.b.URL)
	must(t, err)
	defer c2.Close()
	ch2 := reopen(t, c2)
	for i := range bodies {
		m, ok, err := ch2.Get("legacy", true)
		must(t, err)
		if !ok || string(m.Body) != bodies[i] {
			t.Fatalf("get %d on node 2: %q %v, want %q", i, m.Body, ok, bodies[i])
		}
	}
	publishPersistent(t, ch2, "amq.direct", "k", "routed")
	testutil.Eventually(t, 10*time.Second, func() bool { return ready(n1, 1) }, "the binding did not route")
	if code := a1.call("DELETE", "/api/queues/quorum/%2F/legacy/replicas/delete", "guest", "guest", map[string]any{"node": "rabbit2@localhost"}, nil); code != 202 {
		t.Fatalf("delete_member: %d", code)
	}
	if m := members(); len(m) != 1 {
		t.Fatalf("members after delete_member %v", m)
	}
	// The last member stays: RabbitMQ's 503.
	if code := a1.call("DELETE", "/api/queues/quorum/%2F/legacy/replicas/delete", "guest", "guest", map[string]any{"node": "rabbit1@localhost"}, nil); code != 503 {
		t.Fatalf("deleting the last member: %d, want 503", code)
	}
}

// TestQuorumQueueStandaloneJoinsRunningCluster: a standalone node's data,
// started with --cluster-join and added to a running cluster, brings its
// quorum queue with it: the cluster's other node serves its messages.
func TestQuorumQueueStandaloneJoinsRunningCluster(t *testing.T) {
	dir := standaloneQuorum(t, "carried", "", "x", "y", "z")

	n1 := startClusterNode(t, "rabbit1@localhost", map[string]string{"rabbit1@localhost": testutil.FreePort(t)}, false)
	n2 := startClusterNodeIn(t, dir, "rabbit2@localhost", map[string]string{"rabbit2@localhost": testutil.FreePort(t)}, true)
	testutil.Eventually(t, 20*time.Second, func() bool {
		return (&api{t: t, url: n1.api}).call("PUT", "/api/cluster/members/rabbit2@localhost", "guest", "guest",
			map[string]any{"address": n2.addr}, nil) == 201
	}, "node 1 did not add node 2")
	var got []string
	testutil.Eventually(t, 30*time.Second, func() bool {
		if n, ok := readyCount(n1.b.URL, "carried"); !ok || n != 3 {
			return false
		}
		c, err := rmq.Dial(n1.b.URL)
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		for range 3 {
			m, ok, err := ch.Get("carried", true)
			if err != nil || !ok {
				return false
			}
			got = append(got, string(m.Body))
		}
		return true
	}, "node 1 does not serve the joined node's quorum queue")
	if fmt.Sprint(got) != "[x y z]" {
		t.Fatalf("got %v", got)
	}
}

// standaloneQuorum runs a standalone node on a new data dir until it has
// quorum queue name (bound from amq.direct by key, if any) holding
// bodies, and returns the dir.
func standaloneQuorum(t *testing.T, name, key string, bodies ...string) string {
	t.Helper()
	testutil.InProcess(t)
	dir := t.TempDir()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	c, err := rmq.Dial(b.URL)
	must(t, err)
	ch := reopen(t, c)
	_, err = ch.QueueDeclare(name, true, false, false, false, quorumArgs)
	must(t, err)
	ex, rk := "", name
	if key != "" {
		must(t, ch.QueueBind(name, key, "amq.direct", false, nil))
		ex, rk = "amq.direct", key
	}
	publishPersistent(t, ch, ex, rk, bodies...)
	c.Close()
	stop()
	return dir
}

// readyCount is queue name's ready count on the broker at url (a passive
// declare on a connection of its own); false if it cannot be had yet.
func readyCount(url, name string) (int, bool) {
	c, err := rmq.Dial(url)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return 0, false
	}
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return q.Messages, err == nil
}

// TestQuorumQueueStandaloneRenamed: a standalone node started again
// under another name (a container recreated gets a new host name, and
// railmq@HOST with it; or RABBITMQ_NODENAME set later) serves its quorum
// queue: the group's one member takes the new name, and what the old
// name's consumers held comes back, redelivered. Without the rename the
// member is no voter of its own group and the queue never answers.
func TestQuorumQueueStandaloneRenamed(t *testing.T) {
	r := newRestartable(t, broker.Options{NodeName: "rabbit@old-box"})
	c, ch := r.dial()
	_, err := ch.QueueDeclare("renamed", true, false, false, false, quorumArgs)
	must(t, err)
	publishPersistent(t, ch, "", "renamed", "a", "b", "c")
	must(t, ch.Qos(1, 0, false))
	msgs, err := ch.Consume("renamed", "", false, false, false, false, nil)
	must(t, err)
	if m := recv(t, msgs); string(m.Body) != "a" {
		t.Fatalf("got %q", m.Body)
	}
	c.Close()
	r.stop()
	r.opts.NodeName = "rabbit@new-box"
	r.start()

	c, ch = r.dial()
	defer c.Close()
	q, err := ch.QueueDeclarePassive("renamed", true, false, false, false, nil)
	must(t, err)
	if q.Messages != 3 {
		t.Fatalf("after the rename %d ready, want 3", q.Messages)
	}
	msgs, err = ch.Consume("renamed", "", false, false, false, false, nil)
	must(t, err)
	for i, want := range []string{"a", "b", "c"} {
		m := recv(t, msgs)
		if string(m.Body) != want || m.Redelivered != (i == 0) {
			t.Fatalf("delivery %d: %q redelivered=%v, want %q", i, m.Body, m.Redelivered, want)
		}
		must(t, m.Ack(false))
	}
}
