package replica

import (
	"testing"

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
