package conformance

import (
	"strconv"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// BenchmarkPublishDedupTCP is the publish rate a real client sees, with
// deduplication off and on side by side: amqp091-go publishing 256-byte
// messages, each with a unique x-deduplication-header (nothing is
// dropped), in confirm mode with up to 256 unconfirmed, to an in-process
// broker over loopback TCP. "exchange" routes through a fanout exchange
// (off) or a deduplication exchange of 65536 ids (on) into a queue that
// keeps its last 1024 messages; "durable" does the same with a durable
// exchange, persistent messages and a durable queue (every confirm waits
// for an fsync, and on, the exchange's window is written in the same
// commits); "queue" publishes through the default exchange into a queue
// without or with x-message-deduplication.
func BenchmarkPublishDedupTCP(b *testing.B) {
	for _, bc := range []struct {
		name       string
		kind       string // exchange type; "" publishes to the queue directly
		durable    bool
		queueDedup bool
	}{
		{name: "exchange/off", kind: "fanout"},
		{name: "exchange/on", kind: "x-message-deduplication"},
		{name: "durable/off", kind: "fanout", durable: true},
		{name: "durable/on", kind: "x-message-deduplication", durable: true},
		{name: "queue/off"},
		{name: "queue/on", queueDedup: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ch := benchChannel(b)
			qargs := rmq.Table{"x-max-length": int32(1024)}
			if bc.queueDedup {
				qargs["x-message-deduplication"] = true
			}
			if _, err := ch.QueueDeclare("bq", bc.durable, false, false, false, qargs); err != nil {
				b.Fatal(err)
			}
			ex, key := "", "bq"
			if bc.kind != "" {
				ex, key = "bx", ""
				if err := ch.ExchangeDeclare(ex, bc.kind, bc.durable, false, false, false, rmq.Table{"x-cache-size": int32(65536)}); err != nil {
					b.Fatal(err)
				}
				if err := ch.QueueBind("bq", "", ex, false, nil); err != nil {
					b.Fatal(err)
				}
			}
			mode := rmq.Transient
			if bc.durable {
				mode = rmq.Persistent
			}
			publishConfirmed(b, ch, ex, mode, 256, func(i int) (string, rmq.Table) {
				return key, rmq.Table{"x-deduplication-header": "id-" + strconv.Itoa(i)}
			})
		})
	}
}

// publishConfirmed publishes for b.Loop, in confirm mode with up to 256
// unconfirmed, size-byte messages of the delivery mode to exchange ex;
// next gives the i-th message's routing key and headers.
func publishConfirmed(b *testing.B, ch *rmq.Channel, ex string, mode uint8, size int, next func(i int) (string, rmq.Table)) {
	b.Helper()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	const window = 256
	var inflight []*rmq.DeferredConfirmation
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		key, h := next(i)
		dc, err := ch.PublishWithDeferredConfirm(ex, key, false, false, rmq.Publishing{Headers: h, DeliveryMode: mode, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		inflight = append(inflight, dc)
		if len(inflight) == window {
			for _, dc := range inflight {
				if !dc.Wait() {
					b.Fatal("nacked")
				}
			}
			inflight = inflight[:0]
		}
	}
	for _, dc := range inflight {
		if !dc.Wait() {
			b.Fatal("nacked")
		}
	}
}

// benchChannel starts an in-process broker for b and opens a channel on it.
func benchChannel(b *testing.B) *rmq.Channel {
	b.Helper()
	testutil.InProcess(b)
	br := testutil.Start(b, broker.Options{})
	c, err := rmq.Dial(br.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	return ch
}
