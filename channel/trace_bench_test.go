package channel

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkPublishTrace publishes 16-byte messages through amq.direct to
// one queue (x-max-length 1, so that it keeps one), with firehose tracing
// off and on. Off must cost what BenchmarkHandleContent/16 and
// BenchmarkPublish16 cost without tracing in the code at all (one atomic
// load per publish: vhost/trace.go); on, each publish also routes its
// copy to a queue bound to amq.rabbitmq.trace with "#".
func BenchmarkPublishTrace(b *testing.B) {
	props := (&amqp.Properties{Flags: amqp.FlagContentType, ContentType: "application/json"}).Append(nil)
	for _, on := range []bool{false, true} {
		b.Run("tracing="+strconv.FormatBool(on), func(b *testing.B) {
			var mem atomic.Int64
			vh := vhost.New("/", &mem, nil, nil, 0, 0)
			defer vh.Close()
			for _, q := range []string{"q", "trace"} {
				if _, _, _, err := vh.DeclareQueue(vhost.QueueDecl{Name: q, Args: amqp.Table{"x-max-length": int32(1)}}, queue.Config{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := vh.Bind(0, "q", false, "amq.direct", "k", nil); err != nil {
				b.Fatal(err)
			}
			if err := vh.Bind(0, "trace", false, vhost.TraceExchange, "#", nil); err != nil {
				b.Fatal(err)
			}
			vh.SetTracing(on, "bench@localhost")
			c := New(Config{Number: 1, Sink: &sink{}, VHost: vh, MaxMessageSize: 128 << 20, ConnName: "127.0.0.1:1 -> 127.0.0.1:5672", User: "guest"})
			defer c.Close()
			fs := contentFrames(b, props, make([]byte, 16))
			pub := &amqp.BasicPublish{Exchange: "amq.direct", RoutingKey: "k"}
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
		})
	}
}
