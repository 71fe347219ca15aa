package channel

import (
	"bufio"
	"bytes"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
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

// BenchmarkPublish16 publishes 16-byte messages with rotating routing keys
// through an exchange bound to 16 queues: a direct exchange with a
// binding per key, against a consistent-hash exchange with the 16 queues
// at weight 1. Each queue keeps one message (x-max-length 1, drop-head),
// so both do the same queue work and what differs is the routing.
func BenchmarkPublish16(b *testing.B) {
	props := (&amqp.Properties{Flags: amqp.FlagContentType, ContentType: "application/json"}).Append(nil)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	for _, kind := range []string{"direct", "x-consistent-hash"} {
		b.Run(kind, func(b *testing.B) {
			var mem atomic.Int64
			vh := vhost.New("/", &mem, nil, nil, 0, 0)
			defer vh.Close()
			if err := vh.DeclareExchange(vhost.ExchangeDecl{Name: "x", Type: kind}); err != nil {
				b.Fatal(err)
			}
			for i := range 16 {
				name := "q" + strconv.Itoa(i)
				if _, _, _, err := vh.DeclareQueue(vhost.QueueDecl{Name: name, Args: amqp.Table{"x-max-length": int32(1)}}, queue.Config{}); err != nil {
					b.Fatal(err)
				}
				if kind == "direct" {
					for j := i; j < len(keys); j += 16 {
						if err := vh.Bind(0, name, false, "x", keys[j], nil); err != nil {
							b.Fatal(err)
						}
					}
				} else if err := vh.Bind(0, name, false, "x", "1", nil); err != nil {
					b.Fatal(err)
				}
			}
			c := New(Config{Number: 1, Sink: &sink{}, VHost: vh, MaxMessageSize: 128 << 20})
			defer c.Close()
			fs := contentFrames(b, props, make([]byte, 16))
			pubs := make([]*amqp.BasicPublish, len(keys))
			for i, k := range keys {
				pubs[i] = &amqp.BasicPublish{Exchange: "x", RoutingKey: k}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := c.HandleMethod(pubs[i%len(pubs)]); err != nil {
					b.Fatal(err)
				}
				for _, f := range fs {
					if err := c.HandleContent(f); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
