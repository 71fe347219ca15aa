package channel

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// BenchmarkPublishDedup publishes 256-byte messages, each with a unique
// x-deduplication-header (so none is dropped), with deduplication off and
// on side by side: through a fanout exchange or a deduplication exchange
// (x-cache-size 65536: full after the first 65536, so each publish also
// evicts), and into a queue without or with x-message-deduplication. The
// queue keeps its last 1024 messages (x-max-length, drop-head), so that
// the run measures publishing, not a growing queue. The durable cases
// put a store under the vhost: a durable deduplication exchange writes
// each new id (and each eviction) to it, through the group commit. The
// "+ack" cases add x-deduplication-confirm ack (dedup_confirm.go), which
// is read for a duplicate only: with unique ids they cost what "on"
// does, and every "off" case what it did before the option existed.
func BenchmarkPublishDedup(b *testing.B) {
	for _, bc := range []struct {
		name, exchange, kind string
		durable, queueDedup  bool
		ack                  bool
	}{
		{name: "exchange/off", exchange: "x", kind: "fanout"},
		{name: "exchange/on", exchange: "x", kind: "x-message-deduplication"},
		{name: "exchange-durable/off", exchange: "x", kind: "fanout", durable: true},
		{name: "exchange-durable/on", exchange: "x", kind: "x-message-deduplication", durable: true},
		{name: "exchange/on+ack", exchange: "x", kind: "x-message-deduplication", ack: true},
		{name: "queue/off"},
		{name: "queue/on", queueDedup: true},
		{name: "queue/on+ack", queueDedup: true, ack: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var store *persist.Store
			if bc.durable {
				var err error
				store, err = persist.Open(persist.Options{Dir: b.TempDir(), GCInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
			}
			var mem atomic.Int64
			vh := vhost.New("/", &mem, nil, store, 0, 0)
			defer vh.Close()
			qargs := amqp.Table{"x-max-length": int32(1024)}
			if bc.queueDedup {
				qargs["x-message-deduplication"] = true
				if bc.ack {
					qargs["x-deduplication-confirm"] = "ack"
				}
			}
			q, _, _, err := vh.DeclareQueue(vhost.QueueDecl{Name: "q", Args: qargs}, queue.Config{})
			if err != nil {
				b.Fatal(err)
			}
			key := "q"
			if bc.exchange != "" {
				xargs := amqp.Table{"x-cache-size": int32(65536)}
				if bc.ack {
					xargs["x-deduplication-confirm"] = "ack"
				}
				err := vh.DeclareExchange(vhost.ExchangeDecl{Name: bc.exchange, Type: bc.kind, Durable: bc.durable, Args: xargs})
				if err != nil {
					b.Fatal(err)
				}
				if err := vh.Bind(0, "q", false, bc.exchange, "", nil); err != nil {
					b.Fatal(err)
				}
			}
			c := New(Config{Number: 1, Sink: &sink{}, VHost: vh, MaxMessageSize: 128 << 20})
			defer c.Close()
			const idLen = 16
			props := (&amqp.Properties{Flags: amqp.FlagHeaders | amqp.FlagContentType, ContentType: "application/json",
				Headers: amqp.Table{"x-deduplication-header": string(bytes.Repeat([]byte{'0'}, idLen))}}).Append(nil)
			fs := contentFrames(b, props, make([]byte, 256))
			at := bytes.Index(fs[0].Payload, bytes.Repeat([]byte{'0'}, idLen))
			id := fs[0].Payload[at : at+idLen]
			pub := &amqp.BasicPublish{Exchange: bc.exchange, RoutingKey: key}
			b.SetBytes(256)
			b.ReportAllocs()
			var n uint64
			for b.Loop() {
				n++
				for i, v := 0, n; i < idLen; i, v = i+1, v>>4 { // a unique id, in place
					id[idLen-1-i] = "0123456789abcdef"[v&15]
				}
				if err := c.HandleMethod(pub); err != nil {
					b.Fatal(err)
				}
				for _, f := range fs {
					if err := c.HandleContent(f); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			// Nothing was dropped as a duplicate: the queue took every one.
			poll.Eventually(b, 5*time.Second, func() bool {
				pub, _, _, _ := q.Counters()
				return pub == int64(n)
			}, "%d publishes taken by the queue", n)
		})
	}
}
