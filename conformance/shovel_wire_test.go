package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// A dynamic shovel is a durable runtime parameter: after a restart of
// the broker it is listed and runs again, and moves what is published to
// its source on the restarted broker; what it moved before (persistent,
// on-confirm) is still at the destination, none lost. RabbitMQ recovers its
// shovel parameters at boot the same way (rabbit_runtime_parameters are
// in the metadata store; rabbit_shovel_dyn_worker_sup_sup starts a worker
// for each).
func TestShovelRunsAgainAfterRestart(t *testing.T) {
	testutil.InProcess(t)
	dir := t.TempDir()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sw-up", "sw-down")
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sw-up/s1",
		`{"value":{"src-uri":"amqp:///sw-up","src-queue":"src","dest-uri":"amqp:///sw-down","dest-queue":"dst","ack-mode":"on-confirm"}}`, 201)
	running := func(a *api) func() bool {
		return func() bool {
			s := sapiStatus(t, a, "sw-up", "s1")
			return s != nil && s["state"] == "running"
		}
	}
	poll.Eventually(t, 30*time.Second, running(a), "running")
	publish := func(url string, from, to int) {
		c := dial(t, url)
		defer c.Close()
		ch := openChannel(t, c)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			dc, err := ch.PublishWithDeferredConfirm("", "src", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint(i))})
			if err != nil || !dc.Wait() {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish("amqp://guest:guest@"+b.Addr+"/sw-up", 0, 10)
	stop()

	// The stored parameter is read at start and its shovel runs again.
	b2, _ := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	publish("amqp://guest:guest@"+b2.Addr+"/sw-up", 10, 20)
	a2 := newAPI(t, b2)
	sapiEqualJSON(t, "parameter after the restart", sapiJSON(t, sapiWantStatus(t, a2, "GET", "/api/parameters/shovel/sw-up/s1", "", 200)),
		`{"value":{"src-uri":"amqp:///sw-up","src-queue":"src","dest-uri":"amqp:///sw-down","dest-queue":"dst","ack-mode":"on-confirm"},"vhost":"sw-up","component":"shovel","name":"s1"}`)
	poll.Eventually(t, 30*time.Second, running(a2), "running after the restart")
	c := dial(t, "amqp://guest:guest@"+b2.Addr+"/sw-down")
	ch := openChannel(t, c)
	seen := map[string]int{}
	poll.Eventually(t, 30*time.Second, func() bool {
		for {
			m, ok, err := ch.Get("dst", true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return len(seen) == 20
			}
			seen[string(m.Body)]++
		}
	}, "the 20 messages at dst")
	for i := 0; i < 20; i++ {
		if seen[fmt.Sprint(i)] == 0 {
			t.Fatalf("message %d not moved: %v", i, seen)
		}
	}
	// Deleted, it stays deleted through another restart.
	sapiWantStatus(t, a2, "DELETE", "/api/parameters/shovel/sw-up/s1", "", 204)
	if l := sapiShovels(t, a2, "/api/shovels/sw-up"); len(l) != 0 {
		t.Fatalf("shovels after the delete: %v", l)
	}
}

// A shovel's local connections (host-less URIs) do not go through TCP:
// they are direct connections, as RabbitMQ's ("protocol":"Direct 0-9-1",
// "user":"none", rabbit_shovel's amqp_params_direct), named "Shovel
// <name>".
func TestShovelLocalConnectionsAreDirect(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sw-dc")
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sw-dc/s1",
		`{"value":{"src-uri":"amqp:///sw-dc","src-queue":"src","dest-uri":"amqp:///sw-dc","dest-queue":"dst"}}`, 201)
	poll.Eventually(t, 30*time.Second, func() bool {
		s := sapiStatus(t, a, "sw-dc", "s1")
		return s != nil && s["state"] == "running"
	}, "running")
	var conns []map[string]any
	if got := a.call("GET", "/api/connections", "guest", "guest", nil, &conns); got != 200 {
		t.Fatalf("GET /api/connections: %d", got)
	}
	n := 0
	for _, c := range conns {
		props, _ := c["client_properties"].(map[string]any)
		if props["connection_name"] != "Shovel s1" {
			continue
		}
		n++
		if c["protocol"] != "Direct 0-9-1" || c["user"] != "none" || c["vhost"] != "sw-dc" {
			t.Fatalf("shovel connection: protocol %v user %v vhost %v", c["protocol"], c["user"], c["vhost"])
		}
	}
	if n != 2 {
		t.Fatalf("%d shovel connections, want 2 (source and destination): %v", n, conns)
	}
}

// In a cluster a dynamic shovel runs on one node, the metadata store's
// leader; when that node goes, the new leader runs it (RabbitMQ's dynamic
// shovels run on one node and move to another when it goes,
// rabbit_shovel_dyn_worker_sup_sup under mirrored_supervisor). Its
// parameter is on every node.
func TestShovelClusterRunsOnOneNode(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	first := &api{t: t, url: nodes[0].api}
	poll.Eventually(t, 30*time.Second, func() bool {
		got, _ := sapiGuest(t, first, "PUT", "/api/vhosts/sw-cl", "")
		return got == 201 || got == 204
	}, "vhost made")
	if got, _ := sapiGuest(t, first, "PUT", "/api/permissions/sw-cl/guest", `{"configure":".*","write":".*","read":".*"}`); got != 201 && got != 204 {
		t.Fatalf("permissions: %d", got)
	}
	sapiWantStatus(t, first, "PUT", "/api/parameters/shovel/sw-cl/s1",
		`{"value":{"src-uri":"amqp:///sw-cl","src-queue":"src","dest-uri":"amqp:///sw-cl","dest-queue":"dst","src-queue-args":{"x-queue-type":"quorum"},"dest-queue-args":{"x-queue-type":"quorum"}}}`, 201)
	// Quorum queues, so that both outlive the node that declared them.
	// runner is the one node that runs it, once every live node lists it
	// running there (the management API of any node lists the cluster's
	// shovels with the node that runs each, as RabbitMQ's asks every
	// node: rabbit_shovel_mgmt_util:status/2).
	runner := func(live []*clusterNode) *clusterNode {
		var r *clusterNode
		poll.Eventually(t, 30*time.Second, func() bool {
			r = nil
			on := map[any]bool{}
			for _, nd := range live {
				a := &api{t: t, url: nd.api}
				if got, _ := sapiGuest(t, a, "GET", "/api/parameters/shovel/sw-cl/s1", ""); got != 200 {
					return false
				}
				if l := sapiShovels(t, a, "/api/shovels/sw-cl"); len(l) != 1 || l[0]["state"] != "running" {
					return false
				} else {
					on[l[0]["node"]] = true
				}
			}
			for _, nd := range live {
				if on[nd.name] {
					r = nd
				}
			}
			return len(on) == 1 && r != nil
		}, "the shovel running on exactly one node, listed so by every node")
		return r
	}
	r1 := runner(nodes)
	if st := r1.b.Server.Cluster().Status(); st.State != "Leader" {
		t.Fatalf("the shovel runs on %s, a %s", r1.name, st.State)
	}
	var live []*clusterNode
	for _, n := range nodes {
		if n != r1 {
			live = append(live, n)
		}
	}
	// A follower restarts it where it runs.
	follower := &api{t: t, url: live[0].api}
	sapiWantStatus(t, follower, "DELETE", "/api/shovels/vhost/sw-cl/s1/restart", "", 204)
	if runner(nodes) != r1 {
		t.Fatal("restarted elsewhere")
	}
	r1.stop()
	r2 := runner(live)
	// While the quorum queues' leaders move with the stopped node a
	// command may fail with 541 (its outcome unknown): as a client does,
	// publish again (with a confirm) and read again on a new channel.
	var ch *rmq.Channel
	reopen := func() *rmq.Channel { // 541 closes the connection
		return openChannel(t, dial(t, r2.b.URL+"sw-cl"))
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		ch = reopen()
		if ch.Confirm(false) != nil {
			return false
		}
		dc, err := ch.PublishWithDeferredConfirm("", "src", false, false, rmq.Publishing{Body: []byte("after")})
		return err == nil && dc.Wait()
	}, "a confirmed publish to src through %s", r2.name)
	poll.Eventually(t, 30*time.Second, func() bool {
		m, ok, err := ch.Get("dst", true)
		if err != nil {
			ch = reopen()
			return false
		}
		return ok && string(m.Body) == "after"
	}, "moved by the shovel on %s", r2.name)
}
