package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestQuorumQueueDeadLetterAtLeastOnceLeaderChange: a quorum queue's
// held dead letters (at-least-once, with nowhere to go) are in its
// replicated state: every member shows them, and when the leader's node
// stops, the new leader sends them, once a queue is bound to the
// dead-letter exchange, and lets them go once that queue confirms them
// (RabbitMQ 4.3.5 rabbit_fifo_dlx:state_enter: the dead-letter worker
// starts on whichever member becomes leader and checks out every held
// dead letter).
func TestQuorumQueueDeadLetterAtLeastOnceLeaderChange(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	args := qqArgs("x-dead-letter-exchange", "alo-cx", "x-dead-letter-strategy", "at-least-once", "x-overflow", "reject-publish")
	declareQuorum(t, nodes[0].b.URL, "alo-c", args)
	ch := clusterChannels(t, nodes[:1])[0]
	must(t, ch.ExchangeDeclare("alo-cx", "fanout", true, false, false, false, nil))
	publishPersistent(t, ch, "", "alo-c", "d1", "d2", "d3")
	ch = clusterChannels(t, nodes[:1])[0]
	for i := 0; i < 3; i++ {
		nackOne(t, ch, "alo-c")
	}
	for _, n := range nodes {
		a := &api{t: t, url: n.api}
		testutil.Eventually(t, 10*time.Second, func() bool {
			s := qqStats(t, a, "alo-c")
			return s.DLX == 3 && s.Messages == 3 && s.Ready == 0 && s.Unacked == 0
		}, "%s shows alo-c as %+v, want 3 dead letters held", n.name, qqStats(t, a, "alo-c"))
	}

	nodes[0].stop() // the queue's leader (it declared it)
	var ch1 *rmq.Channel
	testutil.Eventually(t, 20*time.Second, func() bool {
		c, err := rmq.Dial(nodes[1].b.URL)
		if err != nil {
			return false
		}
		ch1, err = c.Channel()
		if err != nil {
			c.Close()
			return false
		}
		if _, err = ch1.QueueDeclare("alo-c-dead", true, false, false, false, quorumArgs); err != nil {
			c.Close()
			return false
		}
		t.Cleanup(func() { c.Close() })
		return true
	}, "no target declared once node 1 stopped")
	must(t, ch1.QueueBind("alo-c-dead", "", "alo-cx", false, nil))
	testutil.Eventually(t, 30*time.Second, func() bool {
		q, err := ch1.QueueDeclarePassive("alo-c-dead", true, false, false, false, nil)
		return err == nil && q.Messages == 3
	}, "the new leader did not send the held dead letters")
	a := &api{t: t, url: nodes[1].api}
	testutil.Eventually(t, 10*time.Second, func() bool {
		s := qqStats(t, a, "alo-c")
		return s.DLX == 0 && s.Messages == 0
	}, "alo-c still holds its dead letters: %+v", qqStats(t, a, "alo-c"))
	for _, want := range []string{"d1", "d2", "d3"} {
		d, ok, err := ch1.Get("alo-c-dead", true)
		must(t, err)
		if !ok || string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
	}
}
