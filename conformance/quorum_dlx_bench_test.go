package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// BenchmarkQuorumDeadLetterTCP is the rate at which a quorum queue's
// dead letters reach their target, at most once and at least once side
// by side: b.N persistent 1 KiB messages in a quorum queue (published
// before the timer starts), a consumer with prefetch 256 nacking each
// without requeue, and a durable classic queue bound to the dead-letter
// exchange; timed until the target holds them all.
func BenchmarkQuorumDeadLetterTCP(b *testing.B) {
	for _, strategy := range []string{"at-most-once", "at-least-once"} {
		b.Run(strategy, func(b *testing.B) {
			ch := benchChannel(b)
			if err := ch.ExchangeDeclare("bdlx", "fanout", true, false, false, false, nil); err != nil {
				b.Fatal(err)
			}
			if _, err := ch.QueueDeclare("bdead", true, false, false, false, nil); err != nil {
				b.Fatal(err)
			}
			if err := ch.QueueBind("bdead", "", "bdlx", false, nil); err != nil {
				b.Fatal(err)
			}
			if _, err := ch.QueueDeclare("bsrc", true, false, false, false, qqArgs("x-dead-letter-exchange", "bdlx",
				"x-dead-letter-strategy", strategy, "x-overflow", "reject-publish")); err != nil {
				b.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			var dcs []*rmq.DeferredConfirmation
			for i := 0; i < b.N; i++ {
				dc, err := ch.PublishWithDeferredConfirm("", "bsrc", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
				if err != nil {
					b.Fatal(err)
				}
				dcs = append(dcs, dc)
				if len(dcs) == 256 {
					for _, dc := range dcs {
						if !dc.Wait() {
							b.Fatal("nacked")
						}
					}
					dcs = dcs[:0]
				}
			}
			for _, dc := range dcs {
				if !dc.Wait() {
					b.Fatal("nacked")
				}
			}
			if err := ch.Qos(256, 0, false); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1024)
			b.ResetTimer()
			ds, err := ch.Consume("bsrc", "", false, false, false, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				select {
				case d := <-ds:
					if err := d.Nack(false, false); err != nil {
						b.Fatal(err)
					}
				case <-time.After(30 * time.Second):
					b.Fatalf("%d of %d delivered", i, b.N)
				}
			}
			deadline := time.Now().Add(5 * time.Minute)
			for {
				q, err := ch.QueueDeclarePassive("bdead", true, false, false, false, nil)
				if err != nil {
					b.Fatal(err)
				}
				if q.Messages == b.N {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d dead-lettered", q.Messages, b.N)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
