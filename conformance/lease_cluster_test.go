package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// A retry's hold on a quorum queue is in the queue's log: when the
// leader's node stops, the new leader still holds the message until its
// due time, then delivers it, flagged redelivered. The worker is on a
// follower's node; its retry is confirmed once the log has it.
func TestRetryHeldAcrossFailover(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "lease-fo", quorumArgs) // node 1 leads it
	ch := clusterChannels(t, nodes[:1])[0]
	publishPersistent(t, ch, "", "lease-fo", "job")
	wc := dial(t, nodes[1].b.URL)
	wch, err := wc.Channel()
	must(t, err)
	must(t, wch.Confirm(false))
	ds, err := wch.Consume("lease-fo", "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, ds)
	const delay = 6 * time.Second
	at := time.Now()
	if !leasePub(t, wch, retryX, tagKey(d), rmq.Table{"x-delay": int32(delay / time.Millisecond)}) {
		t.Fatal("retry nacked")
	}
	wc.Close() // the message is held, not unacked: nothing to requeue
	nodes[0].stop()
	var ds2 <-chan rmq.Delivery
	testutil.Eventually(t, 30*time.Second, func() bool {
		c, err := rmq.Dial(nodes[1].b.URL)
		if err != nil {
			return false
		}
		c2, err := c.Channel()
		if err == nil {
			ds2, err = c2.Consume("lease-fo", "", false, false, false, false, nil)
		}
		if err != nil {
			c.Close()
			return false
		}
		t.Cleanup(func() { c.Close() })
		return true
	}, "no consumer on node 2 once node 1 stopped")
	select {
	case got := <-ds2:
		if w := time.Since(at); w < delay {
			t.Fatalf("delivered %v after the retry, across a failover, want the %v hold", w, delay)
		}
		if string(got.Body) != "job" || !got.Redelivered {
			t.Fatalf("got %q redelivered=%v", got.Body, got.Redelivered)
		}
		must(t, got.Ack(false))
	case <-time.After(delay + 40*time.Second):
		t.Fatal("the held message was not delivered after the failover")
	}
}
