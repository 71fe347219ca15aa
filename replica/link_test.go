package replica

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
)

// TestLinkCodec: what one node writes on the cluster link, the other
// reads back as it was.
func TestLinkCodec(t *testing.T) {
	d := queue.Delivery{Seq: 1 << 40, Redelivered: true, Count: 3, Msg: &queue.Message{Exchange: "x", RoutingKey: "k",
		Props: []byte{0x10, 0, 2}, Body: []byte("body"), Persistent: true, Priority: 4, Enqueued: 99, Expires: 100}}
	r := &lread{p: appendDelivery(nil, d)}
	got, ok := readDelivery(r)
	if !ok || len(r.p) != 0 || got.Seq != d.Seq || !got.Redelivered || got.Count != 3 || string(got.Msg.Body) != "body" ||
		got.Msg.Exchange != "x" || got.Msg.RoutingKey != "k" || !got.Msg.Persistent || got.Msg.Priority != 4 || got.Msg.Expires != 100 {
		t.Fatalf("read back %+v %+v (ok %v)", got, got.Msg, ok)
	}
	s := &lread{p: appendSeqs(lbuf(nil).u64(7).u8(settleRequeue), []queue.Delivery{{Seq: 5}, {Seq: 1 << 50}})}
	cid, op, seqs, ok := readSettle(s)
	if !ok || cid != 7 || op != settleRequeue || len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 1<<50 {
		t.Fatalf("settle read back %d %d %v %v", cid, op, seqs, ok)
	}
}

// FuzzLinkFrames: no input makes the link's decoders panic or read past
// the frame; what they accept, they accept whole.
func FuzzLinkFrames(f *testing.F) {
	f.Add([]byte(appendDelivery(nil, queue.Delivery{Seq: 3, Msg: &queue.Message{Body: []byte("b")}})))
	f.Add([]byte(appendSeqs(lbuf(nil).u64(1).u8(settleAck), []queue.Delivery{{Seq: 1}})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, p []byte) {
		if d, ok := readDelivery(&lread{p: p}); ok && d.Msg == nil {
			t.Fatal("a delivery without its message")
		}
		if _, _, seqs, ok := readSettle(&lread{p: p}); ok && len(seqs) > len(p) {
			t.Fatalf("%d seqs out of %d bytes", len(seqs), len(p))
		}
		r := &lread{p: p}
		_, _, _ = r.u64(), r.str(), r.blob()
	})
}

// frame is one frame as readLinkFrame returns it.
type frame struct {
	kind    byte
	payload []byte
}

// readFrames reads n frames from conn.
func readFrames(conn net.Conn, n int) ([]frame, error) {
	br := bufio.NewReader(conn)
	out := make([]frame, 0, n)
	for len(out) < n {
		kind, p, err := readLinkFrame(br)
		if err != nil {
			return out, err
		}
		out = append(out, frame{kind, p})
	}
	return out, nil
}

// TestLinkWriter: frames come out whole and in order, and the bytes
// waiting are counted in the memory figure until they are written.
func TestLinkWriter(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	var mem atomic.Int64
	w := newLinkWriter(a, &mem)
	const n = 500
	type read struct {
		fs  []frame
		err error
	}
	got := make(chan read, 1)
	go func() {
		fs, err := readFrames(b, n)
		got <- read{fs, err}
	}()
	for i := 0; i < n; i++ {
		if err := w.write(lkDeliver, lbuf(nil).u64(uint64(i)).blob(make([]byte, i))); err != nil {
			t.Fatal(err)
		}
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("after %d frames: %v", len(r.fs), r.err)
	}
	for i, f := range r.fs {
		r := &lread{p: f.payload}
		if f.kind != lkDeliver || r.u64() != uint64(i) || len(r.blob()) != i || r.bad || len(r.p) != 0 {
			t.Fatalf("frame %d: kind %d, %d bytes", i, f.kind, len(f.payload))
		}
	}
	poll.Eventually(t, 5*time.Second, func() bool { return mem.Load() == 0 }, "%d bytes still counted", mem.Load())
	w.close()
	if err := w.write(lkCredit, nil); err == nil {
		t.Fatal("a closed link took a frame")
	}
}

// TestLinkWriterStalledPeer: a peer that reads nothing holds up no
// writer. Every write returns at once (it only appends to the buffer;
// before, the 64 KiB buffer filled and the next write waited for the
// socket up to its 30 s deadline, under the queue's exec when a
// delivery); what waits is counted in the memory figure; close ends the
// writer goroutine, blocked in the socket, and uncounts what it
// dropped.
func TestLinkWriterStalledPeer(t *testing.T) {
	a, b := net.Pipe() // synchronous: nothing written to a gets anywhere until b is read
	defer b.Close()
	var mem atomic.Int64
	w := newLinkWriter(a, &mem)
	const n = 1000
	body := make([]byte, 1<<10)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := w.write(lkDeliver, lbuf(nil).u64(uint64(i)).blob(body)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writes to a stalled link were held up")
	}
	if got, want := mem.Load(), int64(n*len(body)); got < want {
		t.Fatalf("%d bytes counted waiting, want at least %d", got, want)
	}
	closed := make(chan struct{})
	go func() { w.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close waited for the stalled peer")
	}
	if got := mem.Load(); got != 0 {
		t.Fatalf("%d bytes still counted after close", got)
	}
}
