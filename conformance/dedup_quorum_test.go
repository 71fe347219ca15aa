package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// A deduplicating quorum queue (x-message-deduplication; the plugin has
// none: its README, "Mirrored and Quorum queues are currently not
// supported") keeps its ids in its replicated state: a publisher whose
// message the leader confirmed retries it after the leader's node
// stopped, on another node, and the new leader recognises it: acked with
// x-deduplication-confirm ack, nacked without, and stored once either
// way. A publish through a follower (forwarded to the leader) is
// recognised the same.
func TestDedupConfirmQuorumFailover(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	ackArgs := rmq.Table{"x-queue-type": "quorum", "x-message-deduplication": true, "x-deduplication-confirm": "ack"}
	defArgs := rmq.Table{"x-queue-type": "quorum", "x-message-deduplication": true}
	declareQuorum(t, nodes[0].b.URL, "dqq-ack", ackArgs)
	declareQuorum(t, nodes[0].b.URL, "dqq-def", defArgs)
	declareQuorum(t, nodes[0].b.URL, "dqq-plain", quorumArgs)

	// Confirmed by the leader (node 1, which declared them).
	ch0 := confirmChannel(t, dial(t, nodes[0].b.URL))
	for _, q := range []string{"dqq-ack", "dqq-def", "dqq-plain"} {
		if !dedupPub(t, ch0, "", q, false, "order-1", nil) {
			t.Fatalf("%s: first publish nacked", q)
		}
	}
	// A retry through a follower, before the failover.
	ch2 := confirmChannel(t, dial(t, nodes[2].b.URL))
	if !dedupPub(t, ch2, "", "dqq-ack", false, "order-1", nil) {
		t.Fatal("retry through a follower nacked on the ack queue")
	}
	if dedupPub(t, ch2, "", "dqq-def", false, "order-1", nil) {
		t.Fatal("retry through a follower acked on the default queue")
	}

	nodes[0].stop() // the queues' leader
	// The retry on node 2, once a new leader serves the queue: an ack on
	// the ack queue is the only answer that ends the wait (a nack there
	// would be a failure to store, retried as a publisher would).
	var ch1 *rmq.Channel
	testutil.Eventually(t, 30*time.Second, func() bool {
		c, err := rmq.Dial(nodes[1].b.URL)
		if err != nil {
			return false
		}
		ch, err := c.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			c.Close()
			return false
		}
		dc, err := ch.PublishWithDeferredConfirm("", "dqq-ack", false, false, rmq.Publishing{
			Headers: rmq.Table{"x-deduplication-header": "order-1"}, DeliveryMode: rmq.Persistent, Body: []byte("order-1")})
		if err != nil || !dc.Wait() {
			c.Close()
			return false
		}
		ch1 = ch
		t.Cleanup(func() { c.Close() })
		return true
	}, "the retry after the failover was never acked")
	if dedupPub(t, ch1, "", "dqq-def", false, "order-1", nil) {
		t.Fatal("retry after the failover acked on the default queue: the id was forgotten")
	}
	if !dedupPub(t, ch1, "", "dqq-def", false, "order-1", ackHeader) {
		t.Fatal("retry after the failover with header ack nacked")
	}
	// The plain quorum queue does not deduplicate: it stores the retry.
	if !dedupPub(t, ch1, "", "dqq-plain", false, "order-1", nil) {
		t.Fatal("plain quorum queue: retry nacked")
	}
	if !dedupPub(t, ch1, "", "dqq-ack", false, "order-2", nil) {
		t.Fatal("a new id after the failover nacked")
	}
	for q, want := range map[string]int{"dqq-ack": 2, "dqq-def": 1, "dqq-plain": 2} {
		testutil.Eventually(t, 10*time.Second, func() bool {
			st, err := ch1.QueueDeclarePassive(q, true, false, false, false, nil)
			return err == nil && st.Messages == want
		}, "%s: want %d messages", q, want)
	}
	for _, want := range []string{"order-1", "order-2"} {
		d, ok, err := ch1.Get("dqq-ack", true)
		must(t, err)
		if !ok || string(d.Body) != want {
			t.Fatalf("got %q (%v), want %q", d.Body, ok, want)
		}
	}
	// Taken off the queue, the id is free again (as on a classic queue).
	if !dedupPub(t, ch1, "", "dqq-ack", false, "order-1", nil) {
		t.Fatal("order-1 after it was consumed: nacked")
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		st, err := ch1.QueueDeclarePassive("dqq-ack", true, false, false, false, nil)
		return err == nil && st.Messages == 1
	}, "order-1 stored again after it was consumed")
}
