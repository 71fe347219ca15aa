package replica

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// vhostHost is a Host with one vhost and no metadata store.
type vhostHost struct{ v *vhost.VHost }

func (h vhostHost) VHost(name string) *vhost.VHost {
	if name == h.v.Name() {
		return h.v
	}
	return nil
}

func (h vhostHost) DropQueue(string, string) error { return nil }

func declare(t *testing.T, v *vhost.VHost, name string) *queue.Queue {
	t.Helper()
	q, _, _, err := v.DeclareQueue(vhost.QueueDecl{Name: name}, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// within runs f and fails the test if it has not returned within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: held up over %v", what, d)
		<-done
	}
}

// TestStalledLinkHoldsNoQueue: another node consumes a queue homed here
// and then reads nothing from its link (a stalled peer). The queue goes
// on delivering to it, within the consumer's credit (linkWindow for a
// no-ack consumer), and nothing waits for the socket: a publisher
// publishing to that queue and to an unrelated one is not held up, both
// queues answer their synchronous operations (which need their exec), and
// the rest of the messages wait in the queue. Before, a delivery wrote
// the socket under the queue's exec once the link's 64 KiB buffer was
// full, and held it (and the publisher that delivered inline) up to the
// write's 30 s deadline.
func TestStalledLinkHoldsNoQueue(t *testing.T) {
	var mem, linkMem atomic.Int64
	v := vhost.New("/", &mem, nil, nil, 0, 0)
	defer v.Close()
	cq, other := declare(t, v, "cq"), declare(t, v, "other")
	m := New(Options{Host: vhostHost{v}, Memory: &linkMem})
	defer m.Close()
	home, b := net.Pipe()
	// The other node: a link that sends, and never reads what comes back.
	peer := cluster.NewConn(newStalled(b), cluster.ConnConfig{})
	defer peer.Close()
	if !m.accept(home) {
		t.Fatal("the session was refused")
	}
	// consume: cid, vhost, queue, tag, flags (1: no-ack), prefetch, priority
	if err := peer.Call(lkConsume, cluster.Enc(nil).Uvarint(7).Str("/").Str("cq").Str("ctag").U8(1).Uvarint(0).Varint(0),
		func([]byte, error) {}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() bool { return cq.Consumers() == 1 }, "the other node's consumer is not on the queue")

	const n = 2 * linkWindow
	body := make([]byte, 4<<10)
	within(t, 10*time.Second, "a publisher to the stalled link's queue and an unrelated one", func() {
		for i := 0; i < n; i++ {
			cq.Publish(&queue.Message{RoutingKey: "cq", Body: body})
			other.Publish(&queue.Message{RoutingKey: "other", Body: body})
		}
	})
	for _, q := range []*queue.Queue{cq, other} {
		within(t, 10*time.Second, q.Name()+"'s stats", func() {
			if _, _, err := q.Stats(); err != nil {
				t.Error(err)
			}
		})
	}
	// linkWindow deliveries went to the link; the rest wait for credit.
	poll.Eventually(t, 10*time.Second, func() bool {
		ready, _, _ := cq.Stats()
		return ready == n-linkWindow
	}, "cq does not hold the %d messages beyond the consumer's credit", n-linkWindow)
	if ready, _, _ := other.Stats(); ready != n {
		t.Fatalf("other holds %d, want %d", ready, n)
	}
	if got := linkMem.Load(); got < int64(linkWindow*len(body)) {
		t.Fatalf("%d bytes counted waiting on the link, want at least %d", got, linkWindow*len(body))
	}
	within(t, 10*time.Second, "Close with a stalled peer", m.Close)
	if got := linkMem.Load(); got != 0 {
		t.Fatalf("%d bytes still counted after Close", got)
	}
	poll.Eventually(t, 5*time.Second, func() bool { return cq.Consumers() == 0 }, "the link's consumer outlived it")
}
