package conformance

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/queue"
)

// Ack coalescing (broker/lowat.go): a consumer's connection whose wake-ups
// bring only a few acks, with prefetch to spare, has its acks read with
// the next delivery or within 10 ms. These tests look at the broker's
// side of the socket (its SO_RCVLOWAT) to see the coalescing engage, and
// check that nothing an ack or a close does is lost or left waiting.

// serverLowat returns the receive low-water mark of the broker's socket
// of client connection c (the in-process broker's socket whose peer is
// c's local address), or -1 when there is none.
func serverLowat(t *testing.T, c *rmq.Connection) int {
	t.Helper()
	want := c.LocalAddr().(*net.TCPAddr)
	fds, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		sa, err := syscall.Getpeername(fd)
		if err != nil {
			continue
		}
		in4, ok := sa.(*syscall.SockaddrInet4)
		if !ok || in4.Port != want.Port || !net.IP(in4.Addr[:]).Equal(want.IP) {
			continue
		}
		v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
		must(t, err)
		return v
	}
	return -1
}

func coalesceQueue(t *testing.T, b *testutil.Broker, name string) *queue.Queue {
	t.Helper()
	q, err := b.Server.VHost("/").Queue(0, name)
	must(t, err)
	return q
}

// coalesceConsumer starts a broker with opts and a queue, consumes it with
// manual acks and prefetch 100 on a connection of its own, publishes n
// messages ("0", "1", ...) and returns them as received, unacked.
func coalesceConsumer(t *testing.T, opts broker.Options, name string, n int) (e *env, q *queue.Queue, cc *rmq.Connection, cch *rmq.Channel, ds <-chan rmq.Delivery, got []rmq.Delivery) {
	t.Helper()
	testutil.InProcess(t)
	e = setup(t, opts)
	e.queue(name, nil)
	q = coalesceQueue(t, e.b, name)
	cc = dial(t, e.b.URL)
	t.Cleanup(func() { cc.Close() })
	cch = openChannel(t, cc)
	must(t, cch.Qos(100, 0, false))
	ds, err := cch.Consume(name, "", false, false, false, false, nil)
	must(t, err)
	for i := range n {
		e.publish("", name, fmt.Sprint(i))
	}
	for range n {
		got = append(got, recv(t, ds))
	}
	return e, q, cc, cch, ds, got
}

// raiseAndHold acks got[0] and waits for the mark raised past the acks of
// the other len(got)-1 deliveries outstanding, then acks held more and
// checks that they stay under it; it returns when the mark was seen up.
func raiseAndHold(t *testing.T, q *queue.Queue, cc *rmq.Connection, got []rmq.Delivery, held int) time.Time {
	t.Helper()
	out := len(got) - 1
	must(t, got[0].Ack(false))
	testutil.Eventually(t, 2*time.Second, func() bool { return q.Unacked() == int64(out) }, "unacked %d, want %d", q.Unacked(), out)
	// The reader parks after handling that ack, with out acks to come.
	testutil.Eventually(t, 2*time.Second, func() bool { return serverLowat(t, cc) == out*21+1 },
		"low-water mark %d, want %d (%d acks and a byte)", serverLowat(t, cc), out*21+1, out)
	raisedAt := time.Now()
	for _, d := range got[1 : 1+held] {
		must(t, d.Ack(false))
	}
	time.Sleep(100 * time.Millisecond)
	if n := q.Unacked(); n != int64(out) {
		t.Fatalf("unacked %d with %d acks under the mark, want %d (not held back)", n, held, out)
	}
	return raisedAt
}

// publishRecv publishes n messages ("more0", "more1", ...) to the queue
// and receives them from ds.
func publishRecv(t *testing.T, e *env, name string, ds <-chan rmq.Delivery, n int) []rmq.Delivery {
	t.Helper()
	var got []rmq.Delivery
	for i := range n {
		e.publish("", name, fmt.Sprint("more", i))
		got = append(got, recv(t, ds))
	}
	return got
}

// TestAckCoalescingEngagesAndReadsHeldAcks: after a wake-up that brought
// one ack, with 9 deliveries outstanding and prefetch to spare, the mark
// is raised past their acks; acks under it wait, also while deliveries
// go out within the room the raise left (the consumer back at half its
// prefetch of 100 unacked: 41 more), are read at once by the delivery
// that uses it up, and at the wait's deadline when no delivery follows.
// The wait is 3 s here, so that each state lasts long enough to be seen.
func TestAckCoalescingEngagesAndReadsHeldAcks(t *testing.T) {
	name := "coalesce-engage"
	e, q, cc, _, ds, got := coalesceConsumer(t, broker.Options{AckCoalescingWait: 3 * time.Second}, name, 10)
	if l := serverLowat(t, cc); l != 0 && l != 1 {
		t.Fatalf("low-water mark %d before any ack, want the default (0 or 1, both 1 byte)", l)
	}
	// Eight acks stay under the mark.
	raisedAt := raiseAndHold(t, q, cc, got, 8)
	// 40 deliveries within the room leave them held.
	more := publishRecv(t, e, name, ds, 40)
	time.Sleep(100 * time.Millisecond)
	if n := q.Unacked(); n != 49 && time.Since(raisedAt) < 2500*time.Millisecond {
		t.Fatalf("unacked %d after 40 deliveries within the room, want 49 (acks still held)", n)
	}
	// The 41st uses the room up: it reads them.
	e.publish("", name, "next")
	next := recv(t, ds)
	testutil.Eventually(t, 2*time.Second, func() bool { return q.Unacked() == 42 }, "unacked %d after the room's last delivery, want 42", q.Unacked())
	if time.Since(raisedAt) > 2500*time.Millisecond {
		t.Skipf("too slow a machine to tell the delivery from the deadline (%v)", time.Since(raisedAt))
	}

	// Now 42 outstanding: an ack under the mark waits for the deadline,
	// with no delivery after it.
	must(t, got[9].Ack(false))
	time.Sleep(50 * time.Millisecond)
	if n := q.Unacked(); n != 42 && time.Since(raisedAt) < 2900*time.Millisecond {
		t.Fatalf("unacked %d with an ack under the mark, want 42 (not held back)", n)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return q.Unacked() == 41 }, "unacked %d, want 41: held acks never read", q.Unacked())
	for _, d := range append(more, next) {
		must(t, d.Ack(false))
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return q.Unacked() == 0 }, "unacked %d, want 0", q.Unacked())
}

// TestAckCoalescingRaisesAgainAfterHeldAcks: the wake-up that reads the
// acks a raised mark held back raises it again past what is outstanding
// then, also when they are more than a busy consumer's few (20 here), so
// that the acks that follow wait for the next poke or deadline instead of
// each waking the broker.
func TestAckCoalescingRaisesAgainAfterHeldAcks(t *testing.T) {
	name := "coalesce-again"
	e, q, cc, _, ds, got := coalesceConsumer(t, broker.Options{AckCoalescingWait: 3 * time.Second}, name, 30)
	raisedAt := raiseAndHold(t, q, cc, got, 20)
	// The room the raise left: half the prefetch of 100 less 29 unacked.
	// Its last delivery reads the 20 held acks.
	more := publishRecv(t, e, name, ds, 21)
	testutil.Eventually(t, 2*time.Second, func() bool { return q.Unacked() == 30 }, "unacked %d after the room's last delivery, want 30", q.Unacked())
	testutil.Eventually(t, 2*time.Second, func() bool { return serverLowat(t, cc) == 30*21+1 },
		"low-water mark %d after reading 20 held acks, want %d (raised again past the 30 outstanding)", serverLowat(t, cc), 30*21+1)
	if time.Since(raisedAt) > 2500*time.Millisecond {
		t.Skipf("too slow a machine to tell the delivery from the deadline (%v)", time.Since(raisedAt))
	}
	for _, d := range append(got[21:], more...) {
		must(t, d.Ack(false))
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return q.Unacked() == 0 }, "unacked %d, want 0", q.Unacked())
}

// TestAckCoalescingClose: a channel.close sent while the mark is up (and
// smaller than it) is served within the wait (300 ms here), and the
// unacked deliveries go back to the queue flagged redelivered, as without
// coalescing.
func TestAckCoalescingClose(t *testing.T) {
	name := "coalesce-close"
	e, q, cc, cch, _, got := coalesceConsumer(t, broker.Options{AckCoalescingWait: 300 * time.Millisecond}, name, 20)
	must(t, got[0].Ack(false))
	testutil.Eventually(t, 5*time.Second, func() bool { return serverLowat(t, cc) > 1 }, "the mark was never raised")
	start := time.Now()
	must(t, cch.Close())
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("channel.close took %v", d)
	}
	e.waitCount(name, 19)
	if n := q.Unacked(); n != 0 {
		t.Fatalf("unacked %d after the close, want 0", n)
	}
	ch := openChannel(t, cc)
	for i := range 19 {
		d := e.get(ch, name, true)
		if !d.Redelivered || string(d.Body) != fmt.Sprint(i+1) {
			t.Fatalf("get %d: %q redelivered %v, want %q redelivered", i, d.Body, d.Redelivered, fmt.Sprint(i+1))
		}
	}
}

// TestAckCoalescingStream: a paced stream (bursts of 4 every millisecond)
// to a consumer that acks each delivery: every message arrives once, none
// redelivered, and the queue has nothing unacked soon after the last ack.
// The mark is seen raised during the stream.
func TestAckCoalescingStream(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	name := "coalesce-stream"
	e.queue(name, nil)
	q := coalesceQueue(t, e.b, name)

	cc := dial(t, e.b.URL)
	defer cc.Close()
	cch := openChannel(t, cc)
	must(t, cch.Qos(300, 0, false))
	ds, err := cch.Consume(name, "", false, false, false, false, nil)
	must(t, err)

	const n = 2000
	pc := dial(t, e.b.URL)
	defer pc.Close()
	pch := openChannel(t, pc)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n; {
			<-tick.C
			for j := 0; j < 4 && i < n; j++ {
				if pch.Publish("", name, false, false, rmq.Publishing{Body: []byte(strconv.Itoa(i))}) != nil {
					return
				}
				i++
			}
		}
	}()
	raised := false
	for i := range n {
		d := recv(t, ds)
		if d.Redelivered || string(d.Body) != strconv.Itoa(i) {
			t.Fatalf("delivery %d: %q redelivered %v", i, d.Body, d.Redelivered)
		}
		must(t, d.Ack(false))
		if i%100 == 50 && !raised {
			raised = serverLowat(t, cc) > 1
		}
	}
	none(t, ds, 50*time.Millisecond)
	testutil.Eventually(t, 5*time.Second, func() bool { return q.Unacked() == 0 }, "unacked %d after the last ack", q.Unacked())
	if !raised {
		t.Fatal("the mark was never seen raised during the stream")
	}
}

// TestAckCoalescingNotForPublishersOrWhenOff: a connection that publishes
// as well as consumes, and any connection with --coalesce-acks=false,
// keeps the mark at its default (1 byte; the kernel may show it as 0).
func TestAckCoalescingNotForPublishersOrWhenOff(t *testing.T) {
	testutil.InProcess(t)
	for _, tc := range []struct {
		name    string
		opts    broker.Options
		publish bool // publish on the consumer's connection
	}{
		{"publisher", broker.Options{}, true},
		{"off", broker.Options{NoAckCoalescing: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, tc.opts)
			name := "coalesce-" + tc.name
			e.queue(name, nil)
			cc := dial(t, e.b.URL)
			defer cc.Close()
			cch := openChannel(t, cc)
			must(t, cch.Qos(100, 0, false))
			ds, err := cch.Consume(name, "", false, false, false, false, nil)
			must(t, err)
			for i := range 30 {
				if tc.publish {
					must(t, cch.Publish("", name, false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}))
				} else {
					e.publish("", name, fmt.Sprint(i))
				}
			}
			var got []rmq.Delivery
			for range 30 {
				got = append(got, recv(t, ds))
			}
			for _, d := range got {
				must(t, d.Ack(false))
				time.Sleep(time.Millisecond)
				if l := serverLowat(t, cc); l != 0 && l != 1 {
					t.Fatalf("low-water mark %d, want the default (0 or 1)", l)
				}
			}
		})
	}
}
