package conformance

import (
	"fmt"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// BenchmarkTxCommit is what one atomic transaction costs a real client:
// amqp091-go publishing a 1 KiB persistent message to each of 1 or 10
// durable queues and committing (one atomic store write and one fsync
// per commit), against the same publishes in confirm mode, waiting for
// every confirm before the next round ("confirm": one group commit too,
// not atomic across the queues). In-process broker, loopback TCP.
func BenchmarkTxCommit(b *testing.B) {
	body := make([]byte, 1024)
	for _, n := range []int{1, 10} {
		for _, mode := range []string{"tx", "confirm"} {
			b.Run(fmt.Sprintf("queues=%d/%s", n, mode), func(b *testing.B) {
				testutil.InProcess(b)
				br := testutil.Start(b, broker.Options{DataDir: b.TempDir()})
				c, err := rmq.Dial(br.URL)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ch, err := c.Channel()
				if err != nil {
					b.Fatal(err)
				}
				var qs []string
				for i := range n {
					q := fmt.Sprintf("btx-%d", i)
					// Bounded: the run measures commits, not a growing backlog.
					if _, err := ch.QueueDeclare(q, true, false, false, false, rmq.Table{"x-max-length": int32(1000)}); err != nil {
						b.Fatal(err)
					}
					qs = append(qs, q)
				}
				if mode == "tx" {
					err = ch.Tx()
				} else {
					err = ch.Confirm(false)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(n * len(body)))
				b.ReportAllocs()
				dcs := make([]*rmq.DeferredConfirmation, n)
				for b.Loop() {
					for i, q := range qs {
						dcs[i], err = ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
						if err != nil {
							b.Fatal(err)
						}
					}
					if mode == "tx" {
						if err := ch.TxCommit(); err != nil {
							b.Fatal(err)
						}
						continue
					}
					for _, dc := range dcs {
						if !dc.Wait() {
							b.Fatal("nacked")
						}
					}
				}
			})
		}
	}
}
