package replica

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// TestLinkCodec: what one node writes on the cluster link, the other
// reads back as it was.
func TestLinkCodec(t *testing.T) {
	d := queue.Delivery{Seq: 1 << 40, Redelivered: true, Count: 3, Msg: &queue.Message{Exchange: "x", RoutingKey: "k",
		Props: []byte{0x10, 0, 2}, Body: []byte("body"), Persistent: true, Priority: 4, Enqueued: 99, Expires: 100}}
	r := cluster.NewDec(appendDelivery(nil, d))
	got, ok := readDelivery(&r)
	if !ok || r.End() != nil || got.Seq != d.Seq || !got.Redelivered || got.Count != 3 || string(got.Msg.Body) != "body" ||
		got.Msg.Exchange != "x" || got.Msg.RoutingKey != "k" || !got.Msg.Persistent || got.Msg.Priority != 4 || got.Msg.Expires != 100 {
		t.Fatalf("read back %+v %+v (ok %v)", got, got.Msg, ok)
	}
	s := cluster.NewDec(appendSeqs(cluster.Enc(nil).Uvarint(7).U8(settleRequeue), []queue.Delivery{{Seq: 5}, {Seq: 1 << 50}}))
	cid, op, seqs, ok := readSettle(&s)
	if !ok || cid != 7 || op != settleRequeue || len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 1<<50 {
		t.Fatalf("settle read back %d %d %v %v", cid, op, seqs, ok)
	}
	for st, want := range map[byte]error{stOK: nil, stRejected: queue.ErrRejected, stGone: queue.ErrDeleted, stDown: errHomeDown} {
		if err := answerError(st, &cluster.Dec{}); !errors.Is(err, want) {
			t.Errorf("status %d: %v, want %v", st, err, want)
		}
	}
	a := cluster.NewDec(cluster.Enc(nil).Uvarint(uint64(amqp.PreconditionFailed)).Str("no"))
	var ae *amqp.Error
	if err := answerError(stAMQP, &a); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || ae.Text != "no" {
		t.Fatalf("an AMQP error's answer read back as %v", err)
	}
}

// FuzzLinkFrames: no input makes the link's decoders panic or read past
// the frame; what they accept, they accept whole.
func FuzzLinkFrames(f *testing.F) {
	f.Add([]byte(appendDelivery(nil, queue.Delivery{Seq: 3, Msg: &queue.Message{Body: []byte("b")}})))
	f.Add([]byte(appendSeqs(cluster.Enc(nil).Uvarint(1).U8(settleAck), []queue.Delivery{{Seq: 1}})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, p []byte) {
		r := cluster.NewDec(p)
		if d, ok := readDelivery(&r); ok && d.Msg == nil {
			t.Fatal("a delivery without its message")
		}
		s := cluster.NewDec(p)
		if _, _, seqs, ok := readSettle(&s); ok && len(seqs) > len(p) {
			t.Fatalf("%d seqs out of %d bytes", len(seqs), len(p))
		}
		for _, kind := range []byte{lkDeliver, lkCancelled, lkPublish} {
			// This node's side takes the home's frames; a malformed one
			// is refused (the link breaks), never half-read.
			l := &peerLink{dead: true, cons: map[uint64]*proxyCons{}} // dead: frames it would send back go nowhere
			_ = l.handle(nil, cluster.Frame{Kind: kind, Body: p})
		}
	})
}

// stalledConn is a peer's end of a connection that reads nothing: what
// is written to the other end waits (net.Pipe takes nothing unless it is
// read) until Close.
type stalledConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func newStalled(c net.Conn) *stalledConn { return &stalledConn{Conn: c, closed: make(chan struct{})} }

func (s *stalledConn) Read([]byte) (int, error) {
	<-s.closed
	return 0, net.ErrClosed
}

func (s *stalledConn) Close() error {
	s.once.Do(func() { close(s.closed) })
	return s.Conn.Close()
}

// layerFunc is a link layer whose dials this test decides (the accepts
// and Close are the real layer's).
type layerFunc struct {
	cluster.Link
	dial func(addr string, timeout time.Duration) (net.Conn, error)
}

func (l layerFunc) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return l.dial(addr, timeout)
}

// setDial has m dial its links to homes with dial.
func (m *Manager) setDial(dial func(addr string, timeout time.Duration) (net.Conn, error)) {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	m.layer = layerFunc{Link: m.layer, dial: dial}
}

// TestLinkStalledHome: this node's link to a home that reads nothing (a
// stalled peer, over cluster.Conn). Publishing to the queue homed there
// returns at once, confirmed or not (the frames are only appended to the
// link's buffer: a publisher, or a queue dead-lettering under its exec,
// never waits for the socket); what waits is counted in the memory
// figure; Close returns though the link's writer is blocked in the
// socket, the confirms still waiting are nacked, and nothing is counted
// any more.
func TestLinkStalledHome(t *testing.T) {
	nodes := startNodes(t, 2)
	home, away := nodes[0], nodes[1]
	var peer *stalledConn
	away.m.setDial(func(string, time.Duration) (net.Conn, error) {
		a, b := net.Pipe()
		peer = newStalled(b)
		return a, nil
	})
	p := away.m.Proxy(queue.Config{Name: "cq", VHost: "/"}, home.name)
	base := away.mem.Load()
	const n = 1000
	body := make([]byte, 1<<10)
	c := make(confirms, n)
	within(t, 5*time.Second, "publishing to a stalled home", func() {
		for i := 0; i < n; i++ {
			var conf queue.Confirmer
			if i%2 == 0 {
				conf = c
			}
			if !p.PublishConfirm(&queue.Message{RoutingKey: "cq", Body: body}, conf, nil) {
				t.Fatal("the proxy refused a publish")
			}
		}
	})
	poll.Eventually(t, 5*time.Second, func() bool { return away.mem.Load()-base >= int64(n*len(body)) },
		"%d bytes counted waiting, want at least %d", away.mem.Load()-base, n*len(body))
	if len(c) != 0 {
		t.Fatalf("%d confirms from a home that read nothing", len(c))
	}
	within(t, 5*time.Second, "Close with a stalled home", away.m.Close)
	for i := 0; i < n/2; i++ {
		select {
		case err := <-c:
			if !errors.Is(err, errHomeDown) {
				t.Fatalf("confirm %d: %v, want a nack (the home cannot be reached)", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d confirms after Close", i, n/2)
		}
	}
	if got := away.mem.Load() - base; got != 0 {
		t.Fatalf("%d bytes still counted after Close", got)
	}
	_ = peer.Close()
}

// TestLinkDialHoldsNoExec: the link to a home is dialled on its own
// goroutine, never under the caller's locks. While the dial hangs (a
// home that does not answer), a confirmed publish to the queue homed
// there returns at once, and so does a queue dead-lettering into it (a
// TTL of 0: under the queue's exec, often on the publisher's goroutine),
// whose synchronous operations (which need its exec) still answer. When
// the dial fails the confirm is a nack, as it always was; once a dial
// succeeds the waiting frames go out in order and the dead-lettered
// message reaches its home.
func TestLinkDialHoldsNoExec(t *testing.T) {
	nodes := startNodes(t, 2)
	home, away := nodes[0], nodes[1]
	hq := declare(t, home.v, "cq")
	def := amqp.AppendTable(nil, amqp.Table{"type": "classic", "node": home.name, "durable": false, "auto_delete": false,
		"arguments": amqp.Table{}})[4:]
	if err := away.v.ApplyQueue("cq", def, false); err != nil {
		t.Fatal(err)
	}
	p, err := away.v.Queue(0, "cq")
	if err != nil || Home(p) != home.name {
		t.Fatalf("node 1's handle of cq: %v (home %q)", err, Home(p))
	}
	src, _, _, err := away.v.DeclareQueue(vhost.QueueDecl{Name: "src", Args: amqp.Table{"x-message-ttl": int32(0),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "cq"}}, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	real := away.m.layer
	dials := make(chan chan bool) // each dial asks whether to go through
	over := make(chan struct{})
	t.Cleanup(func() { close(over) }) // before the nodes close: a dial still waiting fails
	away.m.setDial(func(addr string, timeout time.Duration) (net.Conn, error) {
		ok := make(chan bool)
		select {
		case dials <- ok:
		case <-over:
			return nil, errors.New("the test is over")
		}
		if <-ok {
			return real.Dial(addr, timeout)
		}
		return nil, errors.New("no route to host")
	})
	release := func(through bool) {
		t.Helper()
		select {
		case ok := <-dials:
			ok <- through
		case <-time.After(5 * time.Second):
			t.Fatal("no dial of the home")
		}
	}

	// The home cannot be reached: the publisher is not held, then nacked.
	c := make(confirms, 1)
	within(t, 2*time.Second, "a confirmed publish while the home's link is dialled", func() {
		p.PublishConfirm(&queue.Message{RoutingKey: "cq", Body: []byte("lost")}, c, nil)
	})
	if len(c) != 0 {
		t.Fatal("confirmed before the dial ended")
	}
	release(false)
	select {
	case err := <-c:
		var ae *amqp.Error
		if !errors.Is(err, errHomeDown) || errors.As(err, &ae) {
			t.Fatalf("the publish to an unreachable home: %v, want a nack", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no confirm once the dial failed")
	}
	poll.Eventually(t, 5*time.Second, func() bool {
		links, _, _ := away.m.linkCounts()
		return links == 0
	}, "the failed link is still node 1's")

	// Dead-lettering into it while it is dialled holds no exec.
	within(t, 2*time.Second, "a publish to a queue dead-lettering into the home while its link is dialled", func() {
		src.Publish(&queue.Message{RoutingKey: "src", Props: (&amqp.Properties{}).Append(nil), Body: []byte("dead")})
	})
	within(t, 2*time.Second, "the dead-lettering queue's stats", func() {
		if _, _, err := src.Stats(); err != nil {
			t.Error(err)
		}
	})
	release(true)
	poll.Eventually(t, 10*time.Second, func() bool { return hq.Ready() == 1 }, "the dead-lettered message did not reach its home")
	d, ok, _, err := hq.Get(true)
	if err != nil || !ok || string(d.Msg.Body) != "dead" {
		t.Fatalf("the home holds %q (%v, %v)", d.Msg.Body, ok, err)
	}
	publish(t, p, "after") // the link is up: confirmed as ever
	if n := hq.Ready(); n != 1 {
		t.Fatalf("the home holds %d, want 1", n)
	}
}

// TestLinkFlowControl: publishers to a queue homed elsewhere wait (flow
// control: queue.Queue.Behind, the connection's reader stops reading)
// while more than linkFlowHigh bytes wait on the link to the home, and
// go on once no more than linkFlowLow do, so that a slow home slows its
// publishers instead of the link's buffer growing until its cap breaks
// the link.
func TestLinkFlowControl(t *testing.T) {
	nodes := startNodes(t, 2)
	home, away := nodes[0], nodes[1]
	resume := make(chan struct{})
	var resumed sync.Once
	defer resumed.Do(func() { close(resume) })
	away.m.setDial(func(string, time.Duration) (net.Conn, error) {
		a, b := net.Pipe()
		go func() {
			<-resume
			_, _ = io.Copy(io.Discard, b) // the home takes what was sent, answers nothing
		}()
		t.Cleanup(func() { b.Close() })
		return a, nil
	})
	q := away.m.Proxy(queue.Config{Name: "cq", VHost: "/"}, home.name)
	body := make([]byte, 64<<10)
	n := 0
	for ; !q.Behind() && n < 4*linkFlowHigh/len(body); n++ {
		if !q.PublishConfirm(&queue.Message{RoutingKey: "cq", Body: body}, nil, nil) {
			t.Fatal("the proxy refused a publish")
		}
	}
	if !q.Behind() {
		t.Fatalf("%d KiB published to a home that reads nothing, and the queue is not behind", n*len(body)>>10)
	}
	if sent := n * len(body); sent < linkFlowHigh {
		t.Fatalf("behind after %d bytes, under linkFlowHigh (%d)", sent, linkFlowHigh)
	}
	if q.CaughtUp() {
		t.Fatal("behind and caught up at once")
	}
	resumed.Do(func() { close(resume) })
	poll.Eventually(t, 10*time.Second, q.CaughtUp, "the home reads again, and the queue has not caught up")
	if q.Behind() {
		t.Fatal("caught up and still behind")
	}
}
