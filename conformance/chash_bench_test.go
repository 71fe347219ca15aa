package conformance

import (
	"strconv"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"
)

// BenchmarkPublishConsistentHashTCP is the publish rate a real client sees
// routing over 16 queues, side by side: a direct exchange with a binding
// per key (1024 keys, 64 to a queue) and a consistent-hash exchange with
// the 16 queues at weight 1. amqp091-go publishes 256-byte messages with
// the keys in turn, in confirm mode with up to 256 unconfirmed, to an
// in-process broker over loopback TCP; each queue keeps its last 1024.
func BenchmarkPublishConsistentHashTCP(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	for _, kind := range []string{"direct", "x-consistent-hash"} {
		b.Run(kind, func(b *testing.B) {
			ch := benchChannel(b)
			if err := ch.ExchangeDeclare("bx", kind, false, false, false, false, nil); err != nil {
				b.Fatal(err)
			}
			for q := range 16 {
				name := "bq" + strconv.Itoa(q)
				if _, err := ch.QueueDeclare(name, false, false, false, false, rmq.Table{"x-max-length": int32(1024)}); err != nil {
					b.Fatal(err)
				}
				if kind != "direct" {
					if err := ch.QueueBind(name, "1", "bx", false, nil); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for k := q; k < len(keys); k += 16 {
					if err := ch.QueueBind(name, keys[k], "bx", false, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			publishConfirmed(b, ch, "bx", rmq.Transient, 256, func(i int) (string, rmq.Table) {
				return keys[i%len(keys)], nil
			})
		})
	}
}
