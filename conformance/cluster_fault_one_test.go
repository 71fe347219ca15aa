package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// The fault suite's one-member quorum queue (x-quorum-initial-group-size
// 1, as a standalone node's quorum queues are, and as RabbitMQ users
// declare them on a cluster to save disk): beside the three-member
// queue, every round publishes a few confirmed messages to it, and after
// the round it must serve again (a publish confirmed) whichever node the
// fault hit, its member's included (killed, restarted, paused, cut off).
// At the end every message it confirmed must come out of it. A wipe
// spares its node: a queue of one member has no other copy of its log,
// in RabbitMQ as in railmq.

type oneMember struct {
	t     *testing.T
	nodes []*faultNode
	name  string
	home  int // the node of its only member
	next  int
	// confirmed are the bodies the queue confirmed; hits counts the
	// rounds whose fault hit its member's node.
	confirmed map[string]bool
	hits      map[string]int
}

// newOneMember declares the one-member queue on nodes[at] (whose node
// its member is, as RabbitMQ's client-local leader locator places it).
func newOneMember(t *testing.T, nodes []*faultNode, at int) *oneMember {
	o := &oneMember{t: t, nodes: nodes, name: "fault-q1", home: -1, confirmed: map[string]bool{}, hits: map[string]int{}}
	declareQuorum(t, nodes[at].url(), o.name, rmq.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int32(1)})
	testutil.Eventually(t, 30*time.Second, func() bool {
		v, ok := nodes[at].queue(o.name)
		if !ok {
			return false
		}
		for i, n := range nodes {
			if n.name == v.Leader {
				o.home = i
			}
		}
		return o.home >= 0
	}, "the one-member queue's leader")
	return o
}

// publish publishes k messages through the member's node, with confirms,
// and records those confirmed (before a fault: every node is up).
func (o *oneMember) publish(k int) {
	c, err := rmq.DialConfig(o.nodes[o.home].url(), rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
	if err != nil {
		o.t.Fatalf("one-member queue: dial %s: %v", o.nodes[o.home].name, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	must(o.t, err)
	must(o.t, ch.Confirm(false))
	for range k {
		o.next++
		body := fmt.Sprintf("one-%d", o.next)
		dc, err := ch.PublishWithDeferredConfirm("", o.name, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(body)})
		must(o.t, err)
		select {
		case <-dc.Done():
			if dc.Acked() {
				o.confirmed[body] = true
			}
		case <-time.After(10 * time.Second):
			o.t.Fatalf("one-member queue: no confirm of %s within 10 s, every node up", body)
		}
	}
}

// servesAgain polls, once the round's fault is healed, until a publish
// through the member's node is confirmed.
func (o *oneMember) servesAgain(round int, kind string, victim int, within time.Duration) {
	if victim == o.home {
		o.hits[kind]++
	}
	start := time.Now()
	testutil.Eventually(o.t, within, func() bool {
		c, err := rmq.DialConfig(o.nodes[o.home].url(), rmq.Config{Dial: rmq.DefaultDial(time.Second)})
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil || ch.Confirm(false) != nil {
			return false
		}
		o.next++
		body := fmt.Sprintf("one-%d", o.next)
		dc, err := ch.PublishWithDeferredConfirm("", o.name, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(body)})
		if err != nil {
			return false
		}
		select {
		case <-dc.Done():
		case <-time.After(2 * time.Second):
			return false
		}
		if dc.Acked() {
			o.confirmed[body] = true
		}
		return dc.Acked()
	}, "round %d (%s of %s): the one-member queue (member on %s) serving again", round, kind, o.nodes[victim].name, o.nodes[o.home].name)
	if victim == o.home {
		o.t.Logf("round %d: %s of the one-member queue's node: it served again %v after the heal", round, kind, time.Since(start).Round(time.Millisecond))
	}
}

// drain consumes the queue through its member's node and fails the test
// for every confirmed message that does not come out.
func (o *oneMember) drain() {
	c := dial(o.t, o.nodes[o.home].url())
	defer c.Close()
	ch, err := c.Channel()
	must(o.t, err)
	must(o.t, ch.Qos(500, 0, false))
	ds, err := ch.Consume(o.name, "drain-one", false, false, false, false, nil)
	must(o.t, err)
	got := map[string]bool{}
	for {
		select {
		case d := <-ds:
			got[string(d.Body)] = true
			must(o.t, d.Ack(false))
			continue
		case <-time.After(3 * time.Second):
		}
		break
	}
	var lost []string
	for b := range o.confirmed {
		if !got[b] {
			lost = append(lost, b)
		}
	}
	o.t.Logf("the one-member queue: %d confirmed, %d delivered at the end; rounds whose fault hit its node: %v", len(o.confirmed), len(got), o.hits)
	if len(lost) > 0 {
		o.t.Errorf("the one-member queue lost %d confirmed messages: %v", len(lost), lost[:min(len(lost), 20)])
	}
}
