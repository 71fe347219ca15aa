package channel

import (
	"bufio"
	"bytes"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/vhost"
)

// contentFrames splits a message into its header and body frames as a
// client sends them with frame_max 128 KiB.
func contentFrames(tb testing.TB, props, body []byte) []amqp.Frame {
	tb.Helper()
	const frameMax = 131072
	wire := amqp.AppendContent(nil, 1, amqp.ClassBasic, props, body, frameMax)
	fr := amqp.NewFrameReader(bufio.NewReader(bytes.NewReader(wire)))
	fr.Max = frameMax
	var fs []amqp.Frame
	for range 1 + (len(body)+frameMax-amqp.FrameOverhead-1)/(frameMax-amqp.FrameOverhead) {
		f, err := fr.ReadFrame()
		if err != nil {
			tb.Fatal(err)
		}
		f.Payload = append([]byte(nil), f.Payload...) // the reader reuses its buffer
		fs = append(fs, f)
	}
	return fs
}

// BenchmarkHandleContent assembles and publishes messages as the
// connection's reader hands them over: basic.publish, its header and body
// frames. The routing key reaches no queue, so what is measured is the
// channel's assembly and routing, not a queue's.
func BenchmarkHandleContent(b *testing.B) {
	props := (&amqp.Properties{Flags: amqp.FlagDeliveryMode | amqp.FlagContentType, DeliveryMode: 2, ContentType: "application/json"}).Append(nil)
	for _, size := range []int{16, 1024, 65536, 1 << 20} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			var mem atomic.Int64
			vh := vhost.New("/", &mem, nil, nil, 0, 0)
			defer vh.Close()
			c := New(Config{Number: 1, Sink: &sink{}, VHost: vh, MaxMessageSize: 128 << 20})
			defer c.Close()
			fs := contentFrames(b, props, make([]byte, size))
			pub := &amqp.BasicPublish{Exchange: "amq.direct", RoutingKey: "nowhere"}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.HandleMethod(pub); err != nil {
					b.Fatal(err)
				}
				for _, f := range fs {
					if err := c.HandleContent(f); err != nil {
						b.Fatal(err)
					}
				}
			}
			if got := mem.Load(); got != 0 {
				b.Fatalf("memory counter %d after the run", got)
			}
		})
	}
}
