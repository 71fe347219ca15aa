package channel

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// nopSink takes deliveries and methods without keeping them.
type nopSink struct{ tag uint64 }

func (s *nopSink) SendMethod(uint16, amqp.Method)                       {}
func (s *nopSink) SendContent(uint16, amqp.Method, []byte, []byte) bool { return false }
func (s *nopSink) AppendContent(_ uint16, m amqp.Method, _, _ []byte) bool {
	if d, ok := m.(*amqp.BasicDeliver); ok {
		s.tag = d.DeliveryTag
	}
	return false
}
func (s *nopSink) Wake()                 {}
func (s *nopSink) Flush()                {}
func (s *nopSink) NotifyWritable(func()) {}
func (s *nopSink) Schedule(fn func())    { fn() }

// BenchmarkConsumeAck is the plain worker's path through a channel: a
// publish (basic.publish, header, body) to a queue with a manual-ack
// consumer on the same channel, its delivery, and basic.ack of it; with
// a consumer timeout (the broker's default), whose deadline a lease
// would move. A channel that never publishes to amq.railmq.lease or
// .retry pays for the feature two string comparisons per publish (the
// exchange name) and a zero field per unacked delivery.
func BenchmarkConsumeAck(b *testing.B) {
	props := (&amqp.Properties{Flags: amqp.FlagContentType, ContentType: "application/json"}).Append(nil)
	for _, size := range []int{16, 1024} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			var mem atomic.Int64
			vh := vhost.New("/", &mem, nil, nil, 0, 0)
			defer vh.Close()
			if _, _, _, err := vh.DeclareQueue(vhost.QueueDecl{Name: "work"}, queue.Config{}); err != nil {
				b.Fatal(err)
			}
			s := &nopSink{}
			c := New(Config{Number: 1, Sink: s, VHost: vh, MaxMessageSize: 128 << 20, ConsumerTimeout: 30 * 60e9})
			defer c.Close()
			if err := c.HandleMethod(&amqp.BasicConsume{Queue: "work", ConsumerTag: "w"}); err != nil {
				b.Fatal(err)
			}
			fs := contentFrames(b, props, make([]byte, size))
			pub := &amqp.BasicPublish{RoutingKey: "work"}
			ack := &amqp.BasicAck{}
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
				ack.DeliveryTag = s.tag
				if err := c.HandleMethod(ack); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLease is the cost of a lease itself: a publish to
// amq.railmq.lease with x-lease-ms for an unacked delivery.
func BenchmarkLease(b *testing.B) {
	var mem atomic.Int64
	vh := vhost.New("/", &mem, nil, nil, 0, 0)
	defer vh.Close()
	if _, _, _, err := vh.DeclareQueue(vhost.QueueDecl{Name: "work"}, queue.Config{}); err != nil {
		b.Fatal(err)
	}
	s := &nopSink{}
	c := New(Config{Number: 1, Sink: s, VHost: vh, MaxMessageSize: 128 << 20, ConsumerTimeout: 30 * 60e9})
	defer c.Close()
	if err := c.HandleMethod(&amqp.BasicConsume{Queue: "work", ConsumerTag: "w"}); err != nil {
		b.Fatal(err)
	}
	if err := c.HandleMethod(&amqp.BasicPublish{RoutingKey: "work"}); err != nil {
		b.Fatal(err)
	}
	for _, f := range contentFrames(b, nil, []byte("job")) {
		if err := c.HandleContent(f); err != nil {
			b.Fatal(err)
		}
	}
	if c.outstanding != 1 {
		b.Fatalf("%d unacked, want 1", c.outstanding)
	}
	props := (&amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"x-lease-ms": int32(60000)}}).Append(nil)
	fs := contentFrames(b, props, nil)
	pub := &amqp.BasicPublish{Exchange: vhost.LeaseExchange, RoutingKey: strconv.FormatUint(s.tag, 10)}
	before := c.cfg.Totals.LeasesExtended.Load()
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
	if c.cfg.Totals.LeasesExtended.Load() == before {
		b.Fatal("no lease taken")
	}
}
