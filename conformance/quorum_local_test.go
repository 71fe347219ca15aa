package conformance

import (
	"fmt"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
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
