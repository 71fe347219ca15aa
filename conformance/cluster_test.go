package conformance

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/testutil"
)

// clusterNode is one broker of a test cluster, with its management API.
type clusterNode struct {
	name, addr string
	b          *testutil.Broker
	stop       func()
	api        string
	dir        string
	peers      map[string]string
}

func startClusterNode(t *testing.T, name string, peers map[string]string, join bool) *clusterNode {
	t.Helper()
	return startClusterNodeIn(t, t.TempDir(), name, peers, join)
}

// restart starts a stopped node again on its data.
func (n *clusterNode) restart(t *testing.T) *clusterNode {
	t.Helper()
	return startClusterNodeIn(t, n.dir, n.name, n.peers, false)
}

func startClusterNodeIn(t *testing.T, dir, name string, peers map[string]string, join bool) *clusterNode {
	t.Helper()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir, Cluster: &cluster.NodeConfig{
		Name: name, Listen: peers[name], Peers: peers, Secret: []byte("test-cookie"), Join: join,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond}})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	return &clusterNode{name: name, addr: peers[name], b: b, stop: stop, api: hs.URL, dir: dir, peers: peers}
}

// startCluster starts n brokers, rabbit1@localhost ..., that bootstrap a
// cluster of them all.
func startCluster(t *testing.T, n int) []*clusterNode {
	t.Helper()
	peers := map[string]string{}
	for i := 1; i <= n; i++ {
		peers[fmt.Sprintf("rabbit%d@localhost", i)] = testutil.FreePort(t)
	}
	var nodes []*clusterNode
	for i := 1; i <= n; i++ {
		nodes = append(nodes, startClusterNode(t, fmt.Sprintf("rabbit%d@localhost", i), peers, false))
	}
	return nodes
}

// TestClusterMembership: three brokers started with the same peers form
// a cluster (railmqctl cluster status on each: three members, one
// leader); a fourth started with --cluster-join is added with railmqctl
// cluster join on the leader (a follower refuses, naming the leader), and
// removed with cluster leave; the leader stopped, the others elect one.
func TestClusterMembership(t *testing.T) {
	testutil.InProcess(t)
	ctl := testutil.Command(t, "railmqctl")
	run := func(api string, args ...string) (string, error) {
		out, err := exec.Command(ctl, append([]string{"--url", api}, args...)...).CombinedOutput()
		return string(out), err
	}
	nodes := startCluster(t, 3)
	leaderOf := func(ns []*clusterNode) (lead *clusterNode) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, func() bool {
			seen := map[string]int{}
			for _, n := range ns {
				out, err := run(n.api, "cluster", "status")
				if err != nil {
					return false
				}
				for _, n2 := range ns {
					if strings.Contains(out, "leader "+n2.name+"\n") {
						seen[n2.name]++
						if seen[n2.name] == len(ns) {
							lead = n2
						}
					}
				}
			}
			return lead != nil
		}, "the nodes do not agree on a leader")
		return lead
	}
	// The leader's status lists every member, and each node's metrics
	// say whether it leads. On a busy machine the leadership may move
	// between the reads: the whole check is made again on the leader the
	// nodes then agree on.
	var lead *clusterNode
	var out string
	testutil.Eventually(t, 60*time.Second, func() bool {
		lead = leaderOf(nodes)
		out, _ = run(lead.api, "cluster", "status")
		for _, n := range nodes {
			if !strings.Contains(out, n.name) || !strings.Contains(out, n.addr) {
				t.Fatalf("cluster status lacks %s at %s:\n%s", n.name, n.addr, out)
			}
		}
		if !strings.Contains(out, "leader "+lead.name+"\n") {
			return false // moved since
		}
		for _, n := range nodes {
			ps := httptest.NewServer(n.b.PrometheusHandler())
			m := getMetrics(t, ps.URL+"/metrics")
			ps.Close()
			want := 0.0
			if n == lead {
				want = 1
			}
			if m.series["railmq_cluster_members"] != 3 || m.series["railmq_cluster_term"] < 1 {
				t.Fatalf("%s's metrics: members %v term %v", n.name, m.series["railmq_cluster_members"], m.series["railmq_cluster_term"])
			}
			if m.series["railmq_cluster_leader"] != want {
				t.Logf("%s's metrics: leader %v, want %v (the leadership moved?)", n.name, m.series["railmq_cluster_leader"], want)
				return false
			}
		}
		return true
	}, "the leader's status and every node's leader metric agree")
	t.Logf("cluster status on the leader:\n%s", out)

	// /api/nodes lists every member, as rabbitmqadmin list nodes reads it.
	var ns []map[string]any
	(&api{t: t, url: lead.api}).call("GET", "/api/nodes", "guest", "guest", nil, &ns)
	if len(ns) != 3 {
		t.Errorf("/api/nodes lists %d nodes, want 3: %v", len(ns), ns)
	}
	for _, n := range ns {
		if n["running"] != true {
			t.Errorf("/api/nodes: %v is not running", n["name"])
		}
	}

	// A fourth node joins, and leaves.
	peers4 := map[string]string{"rabbit4@localhost": testutil.FreePort(t)}
	fourth := startClusterNode(t, "rabbit4@localhost", peers4, true)
	// Membership changes go to the leader; on a loaded machine the
	// leadership may move between finding the leader and asking it, so
	// a refusal naming another leader is followed there.
	onLeader := func(args ...string) (string, error) {
		var out string
		var err error
		for range 5 {
			out, err = run(leaderOf(nodes).api, args...)
			if err == nil || !strings.Contains(out, "is not the cluster's leader") {
				break
			}
		}
		return out, err
	}
	joined, refused := false, false
	for attempt := 0; attempt < 5 && !joined && !refused; attempt++ {
		lead = leaderOf(nodes)
		var follower *clusterNode
		for _, n := range nodes {
			if n != lead {
				follower = n
			}
		}
		out, err := run(follower.api, "cluster", "join", fourth.name, fourth.addr)
		switch {
		case err == nil:
			joined = true // the follower had become the leader meanwhile
		case strings.Contains(out, "this node is not the cluster's leader; the leader is "):
			named := false
			for _, n := range nodes {
				named = named || (n != follower && strings.Contains(out, "the leader is "+n.name))
			}
			if !named {
				t.Errorf("join on a follower: %v\n%s\nwant a refusal naming the leader", err, out)
			}
			refused = true
		}
	}
	if !refused && !joined {
		t.Errorf("a join on a follower was neither refused nor done")
	}
	if !joined {
		if out, err := onLeader("cluster", "join", fourth.name, fourth.addr); err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
	}
	all := append(append([]*clusterNode{}, nodes...), fourth)
	testutil.Eventually(t, 15*time.Second, func() bool {
		for _, n := range all {
			out, err := run(n.api, "cluster", "status")
			if err != nil {
				return false
			}
			for _, m := range all {
				if !strings.Contains(out, m.name+"  "+m.addr) {
					return false
				}
			}
		}
		return true
	}, "not every node sees the fourth")
	testutil.Eventually(t, 15*time.Second, func() bool {
		out, _ := run(fourth.api, "cluster", "status")
		return strings.Contains(out, "leader "+leaderOf(nodes).name)
	}, "the joined node does not follow the leader")
	if out, err := onLeader("cluster", "leave", fourth.name); err != nil {
		t.Fatalf("leave: %v\n%s", err, out)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		out, err := onLeader("cluster", "status")
		return err == nil && !strings.Contains(out, "rabbit4")
	}, "the fourth is still a member")
	fourth.stop()

	// The leader goes: the other two elect one of themselves.
	lead = leaderOf(nodes)
	lead.stop()
	var rest []*clusterNode
	for _, n := range nodes {
		if n != lead {
			rest = append(rest, n)
		}
	}
	if l2 := leaderOf(rest); l2 == lead {
		t.Fatal("the stopped node still leads")
	}
	var ns2 []map[string]any
	(&api{t: t, url: rest[0].api}).call("GET", "/api/nodes", "guest", "guest", nil, &ns2)
	for _, n := range ns2 {
		if n["name"] == lead.name && n["running"] != false {
			t.Errorf("/api/nodes shows the stopped %s running", lead.name)
		}
	}
}

// TestClusterReplicatesUsers: users and permissions are cluster-wide. A
// user added on one node's API and given permissions on another's logs
// in over AMQP on the third; deleted on the third, its connection there
// is closed and it cannot log in anywhere.
func TestClusterReplicatesUsers(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a := make([]*api, 3)
	for i, n := range nodes {
		a[i] = &api{t: t, url: n.api}
	}
	// Once there is a leader, writes on any node go through.
	testutil.Eventually(t, 15*time.Second, func() bool {
		return a[0].call("PUT", "/api/users/app", "guest", "guest", map[string]any{"password": "app-pw", "tags": ""}, nil) == 201
	}, "PUT user on node 1 did not succeed")
	testutil.Eventually(t, 5*time.Second, func() bool { return a[1].call("GET", "/api/users/app", "guest", "guest", nil, nil) == 200 },
		"node 2 does not see the user")
	if c := a[1].call("PUT", "/api/permissions/%2F/app", "guest", "guest", map[string]any{"configure": "^app-", "write": ".*", "read": ".*"}, nil); c != 201 {
		t.Fatalf("PUT permissions on node 2: %d", c)
	}
	// Node 3 applies the writes as they reach it (a node sees a write
	// when it has applied it; the writer, before its API answers).
	url3 := "amqp://app:app-pw@" + nodes[2].b.Addr + "/"
	var conn *rmq.Connection
	testutil.Eventually(t, 5*time.Second, func() bool {
		c, err := rmq.Dial(url3)
		conn = c
		return err == nil
	}, "the replicated user cannot log in on node 3")
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	if _, err := ch.QueueDeclare("app-jobs", false, true, false, false, nil); err != nil {
		t.Fatalf("the replicated user cannot declare on node 3: %v", err)
	}
	if _, err := ch.QueueDeclare("other", false, true, false, false, nil); err == nil {
		t.Fatal("the replicated permission allowed configure outside ^app-")
	}
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	if c := a[2].call("DELETE", "/api/users/app", "guest", "guest", nil, nil); c != 204 {
		t.Fatalf("DELETE user on node 3: %d", c)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 {
			t.Errorf("the deleted user's connection closed with %v, want 320", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("the deleted user's connection stayed open")
	}
	// In parallel: a refused login is answered after RabbitMQ's delay.
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(15 * time.Second); ; {
				c, err := rmq.Dial("amqp://app:app-pw@" + n.b.Addr + "/")
				if err != nil {
					return
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Errorf("the deleted user still logs in on node %d", i+1)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// TestClusterReplicatesVHosts: a vhost made on one node exists on all,
// with its maker's permissions; deleted on another, its connections
// everywhere are closed (320).
func TestClusterReplicatesVHosts(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a := make([]*api, 3)
	for i, n := range nodes {
		a[i] = &api{t: t, url: n.api}
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return a[1].call("PUT", "/api/vhosts/orders", "guest", "guest", map[string]any{"description": "orders team"}, nil) == 201
	}, "PUT vhost on node 2 did not succeed")
	var conn *rmq.Connection
	testutil.Eventually(t, 5*time.Second, func() bool {
		var v map[string]any
		if a[2].call("GET", "/api/vhosts/orders", "guest", "guest", nil, &v) != 200 || v["description"] != "orders team" {
			return false
		}
		c, err := rmq.Dial("amqp://guest:guest@" + nodes[2].b.Addr + "/orders")
		conn = c
		return err == nil
	}, "node 3 lacks the vhost or guest's permissions in it")
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	if c := a[0].call("DELETE", "/api/vhosts/orders", "guest", "guest", nil, nil); c != 204 {
		t.Fatalf("DELETE vhost on node 1: %d", c)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 {
			t.Errorf("node 3's connection to the deleted vhost closed with %v, want 320", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("node 3's connection to the deleted vhost stayed open")
	}
	for i := range nodes {
		testutil.Eventually(t, 5*time.Second, func() bool { return a[i].call("GET", "/api/vhosts/orders", "guest", "guest", nil, nil) == 404 },
			"node %d still has the vhost", i+1)
	}
}

// TestClusterReplicatesPolicies: a policy set on one node applies to the
// queues of another; cleared, it no longer does.
func TestClusterReplicatesPolicies(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a1, a3 := &api{t: t, url: nodes[0].api}, &api{t: t, url: nodes[2].api}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return a1.call("PUT", "/api/policies/%2F/cap", "guest", "guest", map[string]any{"pattern": "^capped", "definition": map[string]any{"max-length": 2}, "apply-to": "queues"}, nil) == 201
	}, "PUT policy on node 1 did not succeed")
	conn := dial(t, nodes[2].b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("capped-q", false, false, false, false, nil)
	must(t, err)
	var q map[string]any
	testutil.Eventually(t, 5*time.Second, func() bool {
		a3.call("GET", "/api/queues/%2F/capped-q", "guest", "guest", nil, &q)
		return q["policy"] == "cap"
	}, "node 3's queue has policy %v, want cap", q["policy"])
	for i := 0; i < 5; i++ {
		must(t, ch.Publish("", "capped-q", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		qi, err := ch.QueueDeclarePassive("capped-q", false, false, false, false, nil)
		return err == nil && qi.Messages == 2
	},
		"node 3's queue is not held to the replicated max-length of 2")
	if c := a3.call("DELETE", "/api/policies/%2F/cap", "guest", "guest", nil, nil); c != 204 {
		t.Fatalf("DELETE policy on node 3: %d", c)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		var q1 map[string]any
		return a1.call("GET", "/api/policies/%2F/cap", "guest", "guest", nil, &q1) == 404
	}, "node 1 still has the policy")
}

// TestClusterImportsDefinitionsEverywhere: a definitions import on one
// node (a vhost, a user, its permissions) is in force on the others.
func TestClusterImportsDefinitionsEverywhere(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	a1 := &api{t: t, url: nodes[0].api}
	defs := map[string]any{
		"vhosts":      []any{map[string]any{"name": "billing"}},
		"users":       []any{map[string]any{"name": "biller", "password": "b-pw", "tags": ""}},
		"permissions": []any{map[string]any{"user": "biller", "vhost": "billing", "configure": ".*", "write": ".*", "read": ".*"}},
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return a1.call("POST", "/api/definitions", "guest", "guest", defs, nil)/100 == 2
	}, "the import on node 1 did not succeed")
	testutil.Eventually(t, 5*time.Second, func() bool {
		c, err := rmq.Dial("amqp://biller:b-pw@" + nodes[1].b.Addr + "/billing")
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the imported user cannot use the imported vhost on node 2")
}

// TestClusterReplicatesExchanges: an exchange declared on one node exists
// on all; an inequivalent redeclare on another is refused with RabbitMQ's
// 406; two inequivalent declares racing on two nodes: one wins, the other
// is refused, and every node has the winner; deleted on one node, it is
// gone from all.
func TestClusterReplicatesExchanges(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	chans := make([]*rmq.Channel, 3)
	for i, n := range nodes {
		c := dial(t, n.b.URL)
		ch, err := c.Channel()
		must(t, err)
		chans[i] = ch
	}
	reopen := func(i int) {
		c := dial(t, nodes[i].b.URL)
		ch, err := c.Channel()
		must(t, err)
		chans[i] = ch
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		if err := chans[0].ExchangeDeclare("orders-x", "topic", true, false, false, false, nil); err != nil {
			reopen(0) // no leader yet: the channel was closed
			return false
		}
		return true
	}, "declare on node 1 did not succeed")
	for i := 1; i < 3; i++ {
		testutil.Eventually(t, 5*time.Second, func() bool {
			if err := chans[i].ExchangeDeclarePassive("orders-x", "topic", true, false, false, false, nil); err != nil {
				reopen(i)
				return false
			}
			return true
		}, "node %d lacks the exchange", i+1)
	}
	err := chans[2].ExchangeDeclare("orders-x", "fanout", true, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders-x' in vhost '/': received 'fanout' but current is 'topic'")
	reopen(2)

	// Two inequivalent declares race on nodes 1 and 2.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, kind := range []string{"direct", "fanout"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = chans[i].ExchangeDeclare("race-x", kind, true, false, false, false, nil)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("racing inequivalent declares: %v and %v, want exactly one refused", errs[0], errs[1])
	}
	winner := "direct"
	if errs[0] != nil {
		winner = "fanout"
		reopen(0)
	} else {
		reopen(1)
	}
	for i := range nodes {
		testutil.Eventually(t, 5*time.Second, func() bool {
			if err := chans[i].ExchangeDeclarePassive("race-x", winner, true, false, false, false, nil); err != nil {
				reopen(i)
				return false
			}
			// A declare of the winner's type is equivalent there.
			if err := chans[i].ExchangeDeclare("race-x", winner, true, false, false, false, nil); err != nil {
				reopen(i)
				return false
			}
			return true
		}, "node %d does not have race-x as %s", i+1, winner)
	}

	must(t, chans[1].ExchangeDelete("orders-x", false, false))
	for i := range nodes {
		testutil.Eventually(t, 5*time.Second, func() bool {
			err := chans[i].ExchangeDeclarePassive("orders-x", "topic", true, false, false, false, nil)
			if err != nil {
				reopen(i)
			}
			var e *rmq.Error
			return errors.As(err, &e) && e.Code == 404
		}, "node %d still has the deleted exchange", i+1)
	}
}
