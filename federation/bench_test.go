package federation_test

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/internal/poll"
)

// BenchmarkExchangeLink moves b.N persistent 1 KiB messages, published to
// the upstream exchange of one railmq broker, through an on-confirm
// exchange link (prefetch-count 1000) into a durable queue of another,
// the Publisher being the test's amqp091-go one with publisher confirms.
func BenchmarkExchangeLink(b *testing.B) {
	up, down := startNode(b), startNode(b)
	uch, dch := dial(b, up.url("/")), dial(b, down.url("/"))
	for _, ch := range []*rmq.Channel{uch, dch} {
		if err := ch.ExchangeDeclare("fx", "fanout", true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := dch.QueueDeclare("sink", true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := dch.QueueBind("sink", "", "fx", false, nil); err != nil {
		b.Fatal(err)
	}
	u, err := federation.ParseUpstream("up", map[string]any{"uri": up.url("/"), "prefetch-count": float64(1000)})
	if err != nil {
		b.Fatal(err)
	}
	l := federation.NewExchangeLink(u, federation.ExchangeSpec{Name: "fx", Type: "fanout", Durable: true},
		newPublisher(b, down.url("/")), newBindings(""), federation.Options{ClusterName: "down", Vhost: "/"})
	l.Start()
	b.Cleanup(l.Stop)
	poll.Eventually(b, 30*time.Second, func() bool { return l.Status().State == federation.Running }, "not running")
	if err := uch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	var last *rmq.DeferredConfirmation
	for range b.N {
		if last, err = uch.PublishWithDeferredConfirm("fx", "", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := last.WaitContext(b.Context()); err != nil {
		b.Fatal(err)
	}
	poll.Eventually(b, 10*time.Minute, func() bool { return l.Status().Forwarded >= uint64(b.N) }, "forwarded %d of %d", l.Status().Forwarded, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
