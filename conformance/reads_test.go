package conformance

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The broker handles frames as their bytes come, whatever the reads cut:
// a frame split anywhere across reads, a frame larger than the read
// buffer (2 KiB on a new connection, 64 KiB on a busy one), many frames
// to a read. (Push-mode reading, broker/push.go, handles the frames a read
// brings inside the socket's read callback and falls back to the plain
// reader for a frame that does not fit.)
func TestFramesAcrossReads(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(1, &amqp.QueueDeclare{Queue: "reads"})
	r.Expect((*amqp.QueueDeclareOk)(nil))

	var want [][]byte
	publish := func(stream []byte, body []byte) []byte {
		want = append(want, body)
		stream = amqp.AppendMethodFrame(stream, 1, &amqp.BasicPublish{RoutingKey: "reads"})
		return amqp.AppendContent(stream, 1, 60, nil, body, 131072)
	}
	body := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(len(want)*7 + i)
		}
		return p
	}

	// Split anywhere: small messages in pieces of 1 to 7 bytes, with a
	// pause after each so that every piece is a read of its own.
	var small []byte
	for _, n := range []int{0, 1, 100, 1500, 2030, 2100} {
		small = publish(small, body(n))
	}
	for i, k := 0, 1; i < len(small); i, k = i+k, k%7+1 {
		r.Write(small[i:min(i+k, len(small))])
		time.Sleep(100 * time.Microsecond)
	}
	// Larger than the read buffer: in 4 KiB pieces, then whole.
	var large []byte
	for _, n := range []int{5000, 70000, 131072 - 8 + 1000} { // the last in two body frames
		large = publish(large, body(n))
	}
	for i := 0; i < len(large); i += 4096 {
		r.Write(large[i:min(i+4096, len(large))])
		time.Sleep(100 * time.Microsecond)
	}
	r.Write(large) // the same three again
	want = append(want, want[len(want)-3:]...)
	// Many to a read: 2,000 publishes in one write.
	var many []byte
	for range 2000 {
		many = publish(many, body(16))
	}
	r.Write(many)
	// Still open and in step: a synchronous method's answer comes after
	// every publish before it was handled.
	r.Send(1, &amqp.QueueDeclare{Queue: "reads", Passive: true})
	ok := r.Expect((*amqp.QueueDeclareOk)(nil)).(*amqp.QueueDeclareOk)
	if int(ok.MessageCount) != len(want) {
		t.Fatalf("queue holds %d messages, want %d", ok.MessageCount, len(want))
	}

	ch := openChannel(t, dial(t, b.URL))
	for i, w := range want {
		d, got, err := ch.Get("reads", true)
		if err != nil || !got {
			t.Fatalf("get %d: %v %v", i, got, err)
		}
		if !bytes.Equal(d.Body, w) {
			t.Fatalf("message %d: %d bytes %s, want %d bytes %s", i, len(d.Body), head(d.Body), len(w), head(w))
		}
	}
}

func head(p []byte) string {
	if len(p) > 8 {
		p = p[:8]
	}
	return fmt.Sprint(p)
}
