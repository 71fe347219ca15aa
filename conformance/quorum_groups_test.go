package conformance

import (
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Message groups on quorum queues (docs/groups.md): the same rule as on
// a classic queue (groups_test.go), applied by the queue's replicated
// state machine (cluster/fifo_groups.go). railmq's own: RabbitMQ has no
// such argument.

func quorumGroupArgs() rmq.Table {
	return rmq.Table{"x-queue-type": "quorum", "x-message-group-header": groupHeader}
}

// quorumGroupQueue declares a grouped quorum queue (durable, as quorum
// queues are) on e's channel.
func quorumGroupQueue(t *testing.T, e *env, name string) string {
	t.Helper()
	_, err := e.ch.QueueDeclare(name, true, false, false, false, quorumGroupArgs())
	must(t, err)
	return name
}

// Four competing consumers with random ack delays: every group's messages
// arrive in publish order and never at two consumers at once, all of
// them, and the groups are spread over the consumers.
func TestQuorumGroupsOrderCompetingConsumers(t *testing.T) {
	e := setup(t, broker.Options{})
	q := quorumGroupQueue(t, e, "qgrp-order")
	const groups, per = 8, 200
	publishAll(t, e.conn, q, interleaved(groups, per, true))
	chk := newGroupChecker()
	served := consumeChecked(t, e, q, 4, 10, chk, groups*per, func(d rmq.Delivery) bool { return false })
	chk.check(t)
	if chk.delivered != groups*per {
		t.Fatalf("%d deliveries, want %d (no redelivery without a nack)", chk.delivered, groups*per)
	}
	for who, n := range served {
		if n == 0 {
			t.Fatalf("consumer %s got nothing: groups not spread (%v)", who, served)
		}
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// A nack with requeue puts the message back at its group's head: the
// group goes on from it, in order, with competing consumers (prefetch 1,
// as on a classic queue: docs/groups.md).
func TestQuorumGroupsNackRequeueKeepsOrder(t *testing.T) {
	e := setup(t, broker.Options{})
	q := quorumGroupQueue(t, e, "qgrp-nack")
	const groups, per = 2, 150
	publishAll(t, e.conn, q, interleaved(groups, per, true))
	chk := newGroupChecker()
	consumeChecked(t, e, q, 3, 1, chk, groups*per, func(d rmq.Delivery) bool {
		_, n := groupOf(d)
		return n%7 == 3 // nacked once (the redelivery is acked)
	})
	chk.check(t)
}

// A group is held by the consumer with its unacked messages; basic.cancel
// leaves them with the channel, so the group waits for their acks;
// closing the holder's channel returns its messages, which the next
// consumer gets from the first unacked one, redelivered, in order.
func TestQuorumGroupsReleaseOnCancelAndClose(t *testing.T) {
	e := setup(t, broker.Options{})
	q := quorumGroupQueue(t, e, "qgrp-release")
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("a", 0, true), groupMsg("a", 1, true), groupMsg("a", 2, true), groupMsg("a", 3, true)})
	chA := e.channel(e.conn)
	must(t, chA.Qos(2, 0, false))
	dsA, err := chA.Consume(q, "A", false, false, false, false, nil)
	must(t, err)
	a0, a1 := recv(t, dsA), recv(t, dsA)
	if string(a0.Body) != "a:0" || string(a1.Body) != "a:1" {
		t.Fatalf("A got %s, %s", a0.Body, a1.Body)
	}
	chB := e.channel(e.conn)
	must(t, chB.Qos(10, 0, false))
	dsB, err := chB.Consume(q, "B", false, false, false, false, nil)
	must(t, err)
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("b", 0, true)})
	if d := recv(t, dsB); string(d.Body) != "b:0" {
		t.Fatalf("B got %s, want b:0 (group a is held by A)", d.Body)
	} else {
		must(t, d.Ack(false))
	}
	none(t, dsB, 200*time.Millisecond)
	must(t, chA.Cancel("A", false))
	none(t, dsB, 200*time.Millisecond)
	must(t, a0.Ack(false)) // a:1 still held
	none(t, dsB, 200*time.Millisecond)
	must(t, a1.Ack(false)) // released
	for _, want := range []string{"a:2", "a:3"} {
		if d := recv(t, dsB); string(d.Body) != want {
			t.Fatalf("B got %s, want %s", d.Body, want)
		}
	}
	must(t, chB.Close()) // with a:2 and a:3 unacked
	chC := e.channel(e.conn)
	dsC, err := chC.Consume(q, "C", false, false, false, false, nil)
	must(t, err)
	for _, want := range []string{"a:2", "a:3"} {
		d := recv(t, dsC)
		if string(d.Body) != want || !d.Redelivered {
			t.Fatalf("C got %s (redelivered %v), want %s redelivered", d.Body, d.Redelivered, want)
		}
		must(t, d.Ack(false))
	}
	// Messages without the header hold nothing: two consumers of prefetch
	// 1 have one each at once.
	chD := e.channel(e.conn)
	must(t, chD.Qos(1, 0, false))
	dsD, err := chD.Consume(q, "D", false, false, false, false, nil)
	must(t, err)
	must(t, chC.Qos(1, 0, false))
	must(t, chC.Cancel("C", false))
	dsC, err = chC.Consume(q, "C2", false, false, false, false, nil)
	must(t, err)
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("", 0, true), groupMsg("", 1, true)})
	recv(t, dsC)
	recv(t, dsD)
}

// Fairness: a group with a backlog of 5,000 does not starve 50 groups of
// one message published after it: all 50 come within the first 60
// deliveries (the rotation gives each its turn after the backlog's
// first message).
func TestQuorumGroupsFairness(t *testing.T) {
	e := setup(t, broker.Options{})
	q := quorumGroupQueue(t, e, "qgrp-fair")
	var ps []rmq.Publishing
	for n := range 5000 {
		ps = append(ps, groupMsg("noisy", n, true))
	}
	for g := range 50 {
		ps = append(ps, groupMsg("single"+strconv.Itoa(g), 0, true))
	}
	publishAll(t, e.conn, q, ps)
	chk := newGroupChecker()
	ch := e.channel(e.conn)
	must(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume(q, "c", false, false, false, false, nil)
	must(t, err)
	singles := 0
	for i := 1; singles < 50; i++ {
		d := recv(t, ds)
		chk.deliver("c", d)
		if g, _ := groupOf(d); strings.HasPrefix(g, "single") {
			singles++
		}
		chk.settle(d, false)
		must(t, d.Ack(false))
		if i > 60 {
			t.Fatalf("%d deliveries and only %d of the 50 singles", i, singles)
		}
	}
	chk.check(t)
}

// A grouped quorum queue keeps each group's order and holder rule across a
// restart: acked messages stay gone, unacked ones come back first in their
// groups, redelivered, and the rest follow in order.
func TestQuorumGroupsRestartKeepsOrder(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	conn, ch := r.dial()
	q := "qgrp-restart"
	_, err := ch.QueueDeclare(q, true, false, false, false, quorumGroupArgs())
	must(t, err)
	const groups, per = 5, 40
	publishAll(t, conn, q, interleaved(groups, per, true))
	must(t, ch.Qos(groups*15, 0, false))
	ds, err := ch.Consume(q, "c", false, false, false, false, nil)
	must(t, err)
	for range groups * 15 {
		d := recv(t, ds)
		if _, n := groupOf(d); n < 10 {
			must(t, d.Ack(false))
		}
	}
	conn.Close()
	r.restart()
	e := &env{t: t, b: r.b, conn: dial(t, r.b.URL)}
	chk := newGroupChecker()
	for g := range groups {
		chk.next["g"+strconv.Itoa(g)] = 10
	}
	var mu sync.Mutex
	unflagged := []string{}
	consumeChecked(t, e, q, 2, 5, chk, groups*(per-10), func(d rmq.Delivery) bool {
		if _, n := groupOf(d); n < 15 && !d.Redelivered {
			mu.Lock()
			unflagged = append(unflagged, string(d.Body))
			mu.Unlock()
		}
		return false
	})
	chk.check(t)
	if len(unflagged) > 0 {
		t.Fatalf("not flagged redelivered: %v", unflagged)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// Failover: a grouped quorum queue on three nodes; a consumer on a
// follower acks the first 10 of each group and holds 5 more; the leader's
// node stops; the consumer's connection goes (its messages return); two
// competing consumers on the third node take the rest from the new
// leader: each group from its first unacked message, in order, one
// consumer at a time, nothing lost.
func TestQuorumGroupsFailover(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	q := "qgrp-failover"
	declareQuorum(t, nodes[0].b.URL, q, quorumGroupArgs())
	const groups, per = 4, 50
	publishAll(t, dial(t, nodes[0].b.URL), q, interleaved(groups, per, true))
	c1 := dial(t, nodes[1].b.URL)
	ch1, err := c1.Channel()
	must(t, err)
	must(t, ch1.Qos(groups*15, 0, false))
	ds, err := ch1.Consume(q, "c", false, false, false, false, nil)
	must(t, err)
	for range groups * 15 {
		d := recv(t, ds)
		if _, n := groupOf(d); n < 10 {
			must(t, d.Ack(false))
		}
	}
	nodes[0].stop() // the queue's leader (it declared the queue)
	c1.Close()
	var e *env
	testutil.Eventually(t, 30*time.Second, func() bool {
		c, err := rmq.Dial(nodes[2].b.URL)
		if err != nil {
			return false
		}
		ch, err := c.Channel()
		if err == nil {
			_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		}
		if err != nil {
			c.Close()
			return false
		}
		e = &env{t: t, b: nodes[2].b, conn: c, ch: ch}
		t.Cleanup(func() { c.Close() })
		return true
	}, "the queue never served on node 3 after its leader stopped")
	chk := newGroupChecker()
	for g := range groups {
		chk.next["g"+strconv.Itoa(g)] = 10
	}
	consumeChecked(t, e, q, 2, 5, chk, groups*(per-10), func(d rmq.Delivery) bool { return false })
	chk.check(t)
	testutil.Eventually(t, 10*time.Second, func() bool {
		st, err := e.ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil && st.Messages == 0
	}, "messages left after the failover")
}

// The same rule through pika (Python) on a grouped quorum queue: two
// consumers of prefetch 5, three groups; a checker sees every delivery.
func TestQuorumGroupsPika(t *testing.T) {
	e := setup(t, broker.Options{})
	q := quorumGroupQueue(t, e, "qgrp-pika")
	out, err := exec.Command("/usr/bin/python3", "-c", groupsPikaScript, e.b.URL, q).CombinedOutput()
	if err != nil {
		t.Fatalf("pika: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "delivered 90 violations 0") {
		t.Fatalf("pika: %s", out)
	}
}

// A policy's message-group-header groups a quorum queue declared without
// the argument (through its log: cluster.GroupHeader); the queue's own
// argument wins over the policy's.
func TestQuorumGroupsPolicy(t *testing.T) {
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/qgrppol", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/policies/%2F/qgrppol", map[string]any{"pattern": "^qgrppol-", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"message-group-header": "tenant"}}, 201)
	_, err := e.ch.QueueDeclare("qgrppol-q", true, false, false, false, quorumArgs)
	must(t, err)
	_, err = e.ch.QueueDeclare("qgrppol-own", true, false, false, false, quorumGroupArgs())
	must(t, err)
	for _, c := range []struct{ q, header string }{{"qgrppol-q", "tenant"}, {"qgrppol-own", groupHeader}} {
		publishAll(t, e.conn, c.q, []rmq.Publishing{
			{Headers: rmq.Table{c.header: "x"}, Body: []byte("x0")},
			{Headers: rmq.Table{c.header: "x"}, Body: []byte("x1")},
		})
		chA, chB := e.channel(e.conn), e.channel(e.conn)
		must(t, chA.Qos(1, 0, false))
		must(t, chB.Qos(1, 0, false))
		dA, err := chA.Consume(c.q, "A", false, false, false, false, nil)
		must(t, err)
		if d := recv(t, dA); string(d.Body) != "x0" {
			t.Fatalf("%s: A got %s", c.q, d.Body)
		}
		dB, err := chB.Consume(c.q, "B", false, false, false, false, nil)
		must(t, err)
		none(t, dB, 300*time.Millisecond) // x1 waits for A's ack: grouped by c.header
		must(t, chA.Close())
		if d := recv(t, dB); string(d.Body) != "x0" {
			t.Fatalf("%s: B got %s after A closed, want x0", c.q, d.Body)
		}
		must(t, chB.Close())
	}
}
