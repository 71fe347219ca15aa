package replica

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// testNode is a cluster node on loopback with its manager and a vhost
// "/" (no store): the parts of a broker the manager works with.
type testNode struct {
	name    string
	node    *cluster.Node
	m       *Manager
	v       *vhost.VHost
	mem     atomic.Int64 // the queues' and the links' bytes
	dropped []string     // DropQueue's calls
	mu      sync.Mutex
}

func (n *testNode) VHost(name string) *vhost.VHost {
	if name == "/" {
		return n.v
	}
	return nil
}

func (n *testNode) DropQueue(vh, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropped = append(n.dropped, vh+"/"+name)
	return nil
}

// close closes the node as the broker's Shutdown does: the vhost's
// queues, the manager, the cluster node.
func (n *testNode) close(t *testing.T) {
	if n.v == nil {
		return
	}
	n.v.Close()
	n.m.Close()
	if err := n.node.Close(); err != nil {
		t.Errorf("%s: %v", n.name, err)
	}
	n.v = nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startNodes starts n nodes, node0 ..., that bootstrap a cluster of
// them all, each with its manager attached before its raft starts and
// serving links, as broker.New does.
func startNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	peers := map[string]string{}
	var dirs []string // made before the cleanup below: removed after it
	for i := 0; i < n; i++ {
		peers[fmt.Sprintf("node%d", i)] = freeAddr(t)
		dirs = append(dirs, t.TempDir())
	}
	var nodes []*testNode
	t.Cleanup(func() {
		for _, tn := range nodes {
			tn.close(t)
		}
	})
	for i := 0; i < n; i++ {
		tn := &testNode{name: fmt.Sprintf("node%d", i)}
		tn.v = vhost.New("/", &tn.mem, nil, nil, 0, 0)
		tn.m = New(Options{Host: tn, Memory: &tn.mem})
		tn.v.SetQuorum(tn.m)
		nd, err := cluster.StartNode(cluster.NodeConfig{Name: tn.name, Listen: peers[tn.name], Peers: peers, Secret: []byte("cookie"),
			DataDir: dirs[i], HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
			WriteTimeout: 3 * time.Second, OnNode: tn.m.Attach})
		if err != nil {
			tn.m.Close()
			tn.v.Close()
			t.Fatal(err)
		}
		tn.node = nd
		nodes = append(nodes, tn)
		if err := tn.m.Listen(); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// sink is a consumer's channel: it takes up to room deliveries unacked
// (0: any number), and records them and its cancellation.
type sink struct {
	mu        sync.Mutex
	room      int
	got       []queue.Delivery
	cancelled bool
}

func (s *sink) Deliver(_ *queue.Consumer, _ *queue.Queue, d queue.Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.room > 0 && len(s.got) >= s.room {
		return false
	}
	s.got = append(s.got, d)
	return true
}

func (s *sink) Cancelled(*queue.Consumer) {
	s.mu.Lock()
	s.cancelled = true
	s.mu.Unlock()
}

// take returns what was delivered and makes room for as many more.
func (s *sink) take() []queue.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.got
	s.got = nil
	return ds
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *sink) isCancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// confirms is a publisher's confirms.
type confirms chan error

func (c confirms) Done(err error) { c <- err }

func (c confirms) await(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case err := <-c:
			if err != nil {
				t.Fatalf("confirm %d: %v", i, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d confirms", i, n)
		}
	}
}

func publish(t *testing.T, q *queue.Queue, bodies ...string) {
	t.Helper()
	c := make(confirms, len(bodies))
	for _, b := range bodies {
		if !q.PublishConfirm(&queue.Message{RoutingKey: q.Name(), Body: []byte(b)}, c, nil) {
			t.Fatalf("%s refused a publish", q.Name())
		}
	}
	c.await(t, len(bodies))
}

func bodies(ds []queue.Delivery) string {
	var s []string
	for _, d := range ds {
		s = append(s, string(d.Msg.Body))
	}
	return strings.Join(s, ",")
}

func (m *Manager) quorumCount() int {
	m.quorumMu.Lock()
	defer m.quorumMu.Unlock()
	return len(m.quorum)
}

func (m *Manager) creatingCount() int {
	m.quorumMu.Lock()
	defer m.quorumMu.Unlock()
	return len(m.creating)
}

func (m *Manager) linkCounts() (links, proxies, sessions int) {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	return len(m.links), len(m.proxies), len(m.sessions)
}

// TestManagerQuorumQueues: a quorum queue's group proposed by one node
// is started on all three (the creator bootstraps it); each manager
// tracks its handle; a publish on one node is confirmed once committed
// and delivered to a consumer on another, held until its first Kick and
// within its room, and settled by its acks; the leader's Tick expires
// messages whose TTL ran out (nothing else does); Stop cancels the
// node's consumers, proposes nothing, forgets the queue and stops its
// handle.
func TestManagerQuorumQueues(t *testing.T) {
	nodes := startNodes(t, 3)
	id, voters := nodes[0].m.NewGroup(0)
	if len(voters) != 3 || voters[0] != nodes[0].name || nodes[0].m.creatingCount() != 1 {
		t.Fatalf("NewGroup: voters %v, creating %d", voters, nodes[0].m.creatingCount())
	}
	args := amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int32(200)}
	qs := make([]*queue.Queue, len(nodes))
	for i, tn := range nodes {
		q, err := tn.m.Start(queue.Config{Name: "qq", VHost: "/", Durable: true, Args: args}, voters, id)
		if err != nil {
			t.Fatal(err)
		}
		qs[i] = q
		if !q.Replicated() || tn.m.quorumCount() != 1 || tn.m.creatingCount() != 0 {
			t.Fatalf("%s: replicated %v, tracks %d quorum queues, creating %d", tn.name, q.Replicated(), tn.m.quorumCount(), tn.m.creatingCount())
		}
	}

	// A consumer on node 2, room for 2: held until its Kick.
	s := &sink{room: 2}
	c := &queue.Consumer{Tag: "c", Prefetch: 2, Sink: s}
	if err := qs[2].Consume(c); err != nil {
		t.Fatal(err)
	}
	publish(t, qs[0], "a", "b", "c")
	poll.Eventually(t, 10*time.Second, func() bool {
		ready, _, _ := qs[2].Stats()
		return ready == 1
	}, "node 2 does not see 2 of the 3 messages checked out")
	if n := s.count(); n != 0 {
		t.Fatalf("%d deliveries before the consumer's first Kick", n)
	}
	qs[2].Kick(c, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return s.count() == 2 }, "the Kick delivered %d, want 2", s.count())
	ds := s.take()
	if got := bodies(ds); got != "a,b" {
		t.Fatalf("delivered %s", got)
	}
	qs[2].Ack(ds, nil)
	qs[2].Kick(c, nil)
	poll.Eventually(t, 10*time.Second, func() bool { return s.count() == 1 }, "after the acks, the third message did not come")
	ds = s.take()
	qs[2].Ack(ds, nil)
	poll.Eventually(t, 10*time.Second, func() bool {
		for _, q := range qs {
			if ready, _, _ := q.Stats(); ready != 0 || q.Unacked() != 0 {
				return false
			}
		}
		return true
	}, "the acks were not applied everywhere")
	qs[2].Cancel(c)
	poll.Eventually(t, 10*time.Second, func() bool {
		_, consumers, _ := qs[0].Stats()
		return consumers == 0
	}, "the cancel was not applied")

	// TTL: expired by the leader's Tick only.
	publish(t, qs[1], "x", "y", "z")
	published := time.Now()
	poll.Eventually(t, 5*time.Second, func() bool { return time.Since(published) > 300*time.Millisecond }, "time stands still")
	for _, q := range qs {
		if ready, _, _ := q.Stats(); ready != 3 {
			t.Fatalf("%d ready before any tick, want 3", ready)
		}
	}
	poll.Eventually(t, 10*time.Second, func() bool {
		for _, tn := range nodes {
			tn.m.Tick()
		}
		for _, q := range qs {
			if ready, _, _ := q.Stats(); ready != 0 {
				return false
			}
		}
		return true
	}, "the ticks did not expire the messages")

	// Stop: the consumers here are cancelled, the handle stopped.
	s2 := &sink{}
	c2 := &queue.Consumer{Tag: "c2", Sink: s2, NoAck: true}
	if err := qs[1].Consume(c2); err != nil {
		t.Fatal(err)
	}
	for i, tn := range nodes {
		tn.m.Stop(qs[i])
		if tn.m.quorumCount() != 0 {
			t.Fatalf("%s still tracks the queue", tn.name)
		}
		select {
		case <-qs[i].Done():
		default:
			t.Fatalf("%s: the handle is not stopped", tn.name)
		}
		tn.m.Tick() // nothing to tick
	}
	if !s2.isCancelled() {
		t.Fatal("the consumer on node 1 was not cancelled")
	}
	if qs[1].PublishConfirm(&queue.Message{Body: []byte("late")}, nil, nil) {
		t.Fatal("a stopped quorum queue took a publish")
	}
}

// TestManagerQuorumDelete: a quorum queue's delete refuses if-unused
// and if-empty, and asks the node to drop its definition.
func TestManagerQuorumDelete(t *testing.T) {
	nodes := startNodes(t, 1)
	m := nodes[0].m
	id, voters := m.NewGroup(3)
	if len(voters) != 1 {
		t.Fatalf("voters %v on a 1-node cluster", voters)
	}
	q, err := m.Start(queue.Config{Name: "qd", VHost: "/", Durable: true, Args: amqp.Table{"x-queue-type": "quorum"}}, voters, id)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, q, "m")
	// if-unused and if-empty are refused whatever the queue holds, as
	// RabbitMQ refuses them for quorum queues (RabbitMQ 3.10.8 answered
	// 540 "NOT_IMPLEMENTED - cannot delete queue 'probe-qq' in vhost '/'.
	// queue.delete operations with if-unused flag set are not supported
	// by quorum queues", and the same with if-empty).
	for _, tc := range []struct {
		ifUnused, ifEmpty bool
		flag              string
	}{{true, false, "if-unused"}, {false, true, "if-empty"}, {true, true, "if-unused"}} {
		_, err := q.Delete(tc.ifUnused, tc.ifEmpty)
		var ae *amqp.Error
		want := "NOT_IMPLEMENTED - cannot delete queue 'qd' in vhost '/'. queue.delete operations with " + tc.flag + " flag set are not supported by quorum queues"
		if !errors.As(err, &ae) || ae.Code != amqp.NotImplemented || ae.Text != want {
			t.Fatalf("delete if-unused %v if-empty %v: %v, want 540 %q", tc.ifUnused, tc.ifEmpty, err, want)
		}
	}
	n, err := q.Delete(false, false)
	if err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	nodes[0].mu.Lock()
	dropped := strings.Join(nodes[0].dropped, " ")
	nodes[0].mu.Unlock()
	if dropped != "//qd" {
		t.Fatalf("dropped %q", dropped)
	}
	m.Stop(q) // as the definition's deletion, applied, does
	if m.quorumCount() != 0 {
		t.Fatal("the deleted queue is still tracked")
	}
}

// TestManagerProxies: node 1's handle of a classic queue homed on node 0
// forwards publishes (confirmed once the home has them), consumes (held
// until the first Kick, credit-bound), acks, gets and purges over the
// link; its Tick refreshes its counts from the home; Stop forgets it.
// When the home's manager closes, the link breaks: node 1's consumer is
// cancelled, its link forgotten, and a consume refused with 404.
func TestManagerProxies(t *testing.T) {
	nodes := startNodes(t, 2)
	home, away := nodes[0], nodes[1]
	hq := declare(t, home.v, "cq")
	p := away.m.Proxy(queue.Config{Name: "cq", VHost: "/"}, home.name)
	if _, proxies, _ := away.m.linkCounts(); proxies != 1 || Home(p) != home.name {
		t.Fatalf("%d proxies, home %q", proxies, Home(p))
	}
	publish(t, p, "1", "2", "3", "4")
	poll.Eventually(t, 5*time.Second, func() bool { return hq.Ready() == 4 }, "the home holds %d, want 4", hq.Ready())
	if links, _, _ := away.m.linkCounts(); links != 1 {
		t.Fatalf("%d links from node 1", links)
	}
	if _, _, sessions := home.m.linkCounts(); sessions != 1 {
		t.Fatalf("%d sessions on the home", sessions)
	}
	poll.Eventually(t, 5*time.Second, func() bool {
		away.m.Tick()
		return p.Ready() == 4
	}, "node 1's Tick did not refresh the counts: %d ready", p.Ready())

	s := &sink{room: 2}
	c := &queue.Consumer{Tag: "c", Prefetch: 2, Sink: s}
	if err := p.Consume(c); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() bool { return hq.Unacked() == 2 }, "the home did not deliver the consumer's prefetch")
	if n := s.count(); n != 0 {
		t.Fatalf("%d deliveries before the first Kick", n)
	}
	p.Kick(c, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return s.count() == 2 }, "the Kick delivered %d, want 2", s.count())
	ds := s.take()
	if got := bodies(ds); got != "1,2" {
		t.Fatalf("delivered %s", got)
	}
	p.Ack(ds, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return s.count() == 2 }, "after the acks, %d more delivered, want 2", s.count())
	ds = s.take()
	// Cancel before the requeue: the other way round the home may hand
	// the requeued messages straight back to the still-live consumer (its
	// credit came back with them), as RabbitMQ may.
	p.Cancel(c)
	p.Requeue(ds, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return hq.Ready() == 2 && hq.Consumers() == 0 }, "the requeue and cancel did not reach the home")

	d, ok, remaining, err := p.Get(false)
	if err != nil || !ok || remaining != 1 || string(d.Msg.Body) != "3" || !d.Redelivered {
		t.Fatalf("get: %q redelivered %v, ok %v, %d remaining, %v", d.Msg.Body, d.Redelivered, ok, remaining, err)
	}
	p.Ack([]queue.Delivery{d}, nil)
	if n, err := p.Purge(); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}

	// The home goes: the link breaks, its consumers here are cancelled.
	s2 := &sink{}
	c2 := &queue.Consumer{Tag: "c2", Sink: s2, NoAck: true}
	if err := p.Consume(c2); err != nil {
		t.Fatal(err)
	}
	home.m.Close()
	poll.Eventually(t, 5*time.Second, s2.isCancelled, "the consumer outlived its home's link")
	poll.Eventually(t, 5*time.Second, func() bool {
		links, _, _ := away.m.linkCounts()
		return links == 0
	}, "the broken link is still node 1's")
	var ae *amqp.Error
	if err := p.Consume(&queue.Consumer{Tag: "c3", Sink: &sink{}}); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Fatalf("a consume with the home gone: %v, want 404", err)
	}

	away.m.Stop(p)
	if _, proxies, _ := away.m.linkCounts(); proxies != 0 {
		t.Fatal("the stopped proxy is still tracked")
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("the proxy's handle is not stopped")
	}
}

// TestManagerCloseWaits: Close ends the links both ways and returns once
// every goroutine the manager started has returned (the accept loop,
// each link's reader and writer, the refreshes its Tick started); none
// starts after it.
func TestManagerCloseWaits(t *testing.T) {
	nodes := startNodes(t, 2)
	home, away := nodes[0], nodes[1]
	declare(t, home.v, "cq")
	p := away.m.Proxy(queue.Config{Name: "cq", VHost: "/"}, home.name)
	publish(t, p, "m")
	c := &queue.Consumer{Tag: "c", Sink: &sink{}, NoAck: true}
	if err := p.Consume(c); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		away.m.Tick() // refreshes in flight while it closes
	}
	away.m.Close()
	home.m.Close()
	// A goroutine whose deferred wg.Done let Close return may still be
	// on its way out (seen "runnable" at its closing brace on a busy
	// machine): it must be gone within moments, never linger.
	var g []string
	poll.Eventually(t, time.Second, func() bool { g = replicaGoroutines(); return len(g) == 0 },
		"goroutines of the manager after Close:\n%s", goroutineList{&g})
	if _, err := away.m.link(home.name); err == nil {
		t.Fatal("a closed manager dialled a link")
	}
	if away.m.spawn(func() {}) {
		t.Fatal("a closed manager started a goroutine")
	}
	away.m.Tick() // starts nothing
	away.m.Close()
}

// replicaGoroutines lists the goroutines, other than the caller's, with
// a frame in this package (not a test's).
func replicaGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	gs := strings.Split(string(buf), "\n\n")
	var out []string
	for _, g := range gs[1:] { // the first is the caller's
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "github.com/railmq/railmq/replica.") && !strings.Contains(line, "replica.Test") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// goroutineList prints the goroutines *g holds when the message is made
// (after the last poll), not when the call was.
type goroutineList struct{ g *[]string }

func (l goroutineList) String() string { return strings.Join(*l.g, "\n\n") }
