package conformance

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// A dynamic shovel in a cluster runs on one node and, when that node
// goes, on another, and on-confirm loses no confirmed message on the way:
// RabbitMQ's dynamic shovels are children of a mirrored_supervisor
// (rabbit_shovel_dyn_worker_sup_sup, v3.10.8), started on one node and
// restarted on another when it goes; on-confirm acks a source message
// only once the destination confirmed it, so what the dead node had in
// flight is redelivered from the source (at least once). These tests
// move messages continuously between two quorum queues (they outlive any
// one node) while a publisher publishes to the source with confirms, take
// the node running the shovel away, and check that the shovel runs on
// another node within a bound and that every confirmed message reaches
// the destination.

// foNode is one node of a failover test: its AMQP URL (vhost included)
// and its management API.
type foNode struct {
	name, url string
	api       *api
	down      func() // stop or kill it
}

const (
	foVhost = "sw-fo"
	// foBound is how long the shovel may take to run again elsewhere once
	// its node is gone: an election and a leader-loop tick on a busy
	// machine, with a wide margin.
	foBound = 60 * time.Second
)

// foRunner is the one live node that runs the shovel, once every live
// node lists it running there (any node's API lists the cluster's
// shovels, with the node that runs each).
func foRunner(t *testing.T, live []*foNode, within time.Duration) *foNode {
	t.Helper()
	var r *foNode
	poll.Eventually(t, within, func() bool {
		r = nil
		on := map[any]bool{}
		for _, nd := range live {
			got, _ := sapiGuest(t, nd.api, "GET", "/api/parameters/shovel/"+foVhost+"/fo", "")
			if got != http.StatusOK {
				return false
			}
			l := sapiShovels(t, nd.api, "/api/shovels/"+foVhost)
			if len(l) != 1 || l[0]["state"] != "running" {
				return false
			}
			on[l[0]["node"]] = true
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

// foPublisher publishes numbered persistent messages to the source with
// confirms through one node until stopped, and records those confirmed.
// A publish whose channel or connection fails (a quorum queue's leader
// moving) is not confirmed; it reconnects and goes on.
type foPublisher struct {
	mu        sync.Mutex
	confirmed map[string]bool
	next      int
	stop      chan struct{}
	done      chan struct{}
}

func startFoPublisher(url string) *foPublisher {
	p := &foPublisher{confirmed: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for !p.stopped() {
			p.session(url)
		}
	}()
	return p
}

func (p *foPublisher) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// session publishes on one connection until it fails or the publisher
// stops, 20 messages in flight at most.
func (p *foPublisher) session(url string) {
	c, err := rmq.DialConfig(url, rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil || ch.Confirm(false) != nil {
		return
	}
	for !p.stopped() {
		var batch []*rmq.DeferredConfirmation
		var bodies []string
		for range 20 {
			p.next++
			body := fmt.Sprintf("fo-%d", p.next)
			dc, err := ch.PublishWithDeferredConfirm("", "src", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(body)})
			if err != nil {
				return
			}
			batch, bodies = append(batch, dc), append(bodies, body)
		}
		for i, dc := range batch {
			select {
			case <-dc.Done():
			case <-time.After(30 * time.Second):
				return
			}
			if dc.Acked() {
				p.mu.Lock()
				p.confirmed[bodies[i]] = true
				p.mu.Unlock()
			}
		}
	}
}

// finish stops the publisher and returns what was confirmed.
func (p *foPublisher) finish() map[string]bool {
	close(p.stop)
	<-p.done
	return p.confirmed
}

func (p *foPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.confirmed)
}

// foCollector consumes the destination through one node (manual acks,
// so that a delivery whose ack a failing channel loses comes again
// rather than going unseen), counting each body; it reconnects when its
// channel or connection fails (a quorum queue's leader moving).
type foCollector struct {
	mu   sync.Mutex
	seen map[string]int
	stop chan struct{}
	done chan struct{}
}

func startFoCollector(url string) *foCollector {
	c := &foCollector{seen: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			c.session(url)
			select {
			case <-c.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return c
}

func (c *foCollector) session(url string) {
	conn, err := rmq.DialConfig(url, rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil || ch.Qos(200, 0, false) != nil {
		return
	}
	ds, err := ch.Consume("dst", "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-c.stop:
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			c.mu.Lock()
			c.seen[string(d.Body)]++
			c.mu.Unlock()
			if d.Ack(false) != nil {
				return
			}
		}
	}
}

// has reports whether every body in want arrived, and how many distinct
// bodies did.
func (c *foCollector) has(want map[string]bool) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range want {
		if c.seen[b] == 0 {
			return false, len(c.seen)
		}
	}
	return true, len(c.seen)
}

func (c *foCollector) finish() map[string]int {
	close(c.stop)
	<-c.done
	return c.seen
}

// shovelFailover runs the scenario on nodes (all up, a cluster with the
// vhost foVhost and guest's permissions in it).
func shovelFailover(t *testing.T, nodes []*foNode) {
	declareQuorum(t, nodes[0].url, "src", rmq.Table{"x-queue-type": "quorum"})
	declareQuorum(t, nodes[0].url, "dst", rmq.Table{"x-queue-type": "quorum"})
	sapiWantStatus(t, nodes[0].api, "PUT", "/api/parameters/shovel/"+foVhost+"/fo",
		`{"value":{"src-uri":"amqp:///`+foVhost+`","src-queue":"src","dest-uri":"amqp:///`+foVhost+`","dest-queue":"dst","ack-mode":"on-confirm","src-prefetch-count":50}}`, 201)
	r1 := foRunner(t, nodes, 30*time.Second)
	var live []*foNode
	for _, n := range nodes {
		if n != r1 {
			live = append(live, n)
		}
	}
	// Publish through one survivor, collect through the other.
	pub := startFoPublisher(live[0].url)
	col := startFoCollector(live[1].url)
	poll.Eventually(t, 60*time.Second, func() bool { _, n := col.has(nil); return n >= 300 }, "300 messages moved by the shovel on %s", r1.name)

	r1.down()
	gone := time.Now()
	r2 := foRunner(t, live, foBound)
	took := time.Since(gone)
	// It moves again: what is confirmed from now on arrives too.
	mark := pub.count()
	poll.Eventually(t, 60*time.Second, func() bool { return pub.count() >= mark+300 }, "300 more confirmed after the failover")
	confirmed := pub.finish()
	poll.Eventually(t, 120*time.Second, func() bool { ok, _ := col.has(confirmed); return ok }, "every confirmed message at the destination")
	seen := col.finish()
	dup := 0
	for _, k := range seen {
		if k > 1 {
			dup++
		}
	}
	t.Logf("shovel ran on %s, then on %s %v after %s went; %d confirmed, %d distinct at the destination, %d more than once",
		r1.name, r2.name, took.Round(time.Millisecond), r1.name, len(confirmed), len(seen), dup)
}

// foVhostOn makes the test vhost through a node's API once the cluster
// answers, with guest's permissions.
func foVhostOn(t *testing.T, a *api) {
	poll.Eventually(t, 30*time.Second, func() bool {
		got, _ := sapiGuest(t, a, "PUT", "/api/vhosts/"+foVhost, "")
		return got == http.StatusCreated || got == http.StatusNoContent
	}, "vhost made")
	if got, _ := sapiGuest(t, a, "PUT", "/api/permissions/"+foVhost+"/guest", `{"configure":".*","write":".*","read":".*"}`); got != http.StatusCreated && got != http.StatusNoContent {
		t.Fatalf("permissions: %d", got)
	}
}

// In-process nodes; the shovel's node is shut down (stop).
func TestShovelClusterFailoverStop(t *testing.T) {
	testutil.InProcess(t)
	cn := startCluster(t, 3)
	var nodes []*foNode
	for _, n := range cn {
		nodes = append(nodes, &foNode{name: n.name, url: n.b.URL + foVhost, api: &api{t: t, url: n.api}, down: n.stop})
	}
	foVhostOn(t, nodes[0].api)
	shovelFailover(t, nodes)
}

// Real railmq processes; the shovel's node is killed (SIGKILL): what it
// had taken from the source and not yet acked there is redelivered to the
// next node's shovel.
func TestShovelClusterFailoverKill(t *testing.T) {
	testutil.InProcess(t)
	fns, _ := startFaultCluster(t, testutil.Binary(t))
	var nodes []*foNode
	for _, n := range fns {
		n := n
		nodes = append(nodes, &foNode{name: n.name, url: n.url() + foVhost, api: &api{t: t, url: "http://" + n.mgmt}, down: n.kill})
	}
	foVhostOn(t, nodes[0].api)
	shovelFailover(t, nodes)
}
