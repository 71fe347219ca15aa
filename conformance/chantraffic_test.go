package conformance

import (
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"
)

// channelTraffic makes traffic the API and the metrics count per
// channel, on conn: pub, in confirm mode, declares a queue (declare),
// publishes 5 messages to it and 1 to nowhere (unroutable), all
// confirmed, then takes one by basic.get and acks it and one more
// without ack; cons, prefetch 7, consumes the queue as tag (the rest,
// 3, stay unacked there).
func channelTraffic(t *testing.T, conn *rmq.Connection, declare func(*rmq.Channel) (rmq.Queue, error), nowhere, tag string) (pub, cons *rmq.Channel) {
	t.Helper()
	pub, err := conn.Channel()
	must(t, err)
	must(t, pub.Confirm(false))
	q, err := declare(pub)
	must(t, err)
	confirms := pub.NotifyPublish(make(chan rmq.Confirmation, 8))
	for i := 0; i < 5; i++ {
		must(t, pub.Publish("", q.Name, false, false, rmq.Publishing{Body: []byte("hello")}))
	}
	must(t, pub.Publish("", nowhere, false, false, rmq.Publishing{Body: []byte("x")}))
	for i := 0; i < 6; i++ {
		if c := <-confirms; !c.Ack {
			t.Fatalf("publish %d nacked", c.DeliveryTag)
		}
	}
	m, ok, err := pub.Get(q.Name, false)
	must(t, err)
	if !ok {
		t.Fatal("basic.get: empty")
	}
	must(t, m.Ack(false))
	if _, ok, err := pub.Get(q.Name, true); err != nil || !ok {
		t.Fatalf("basic.get no-ack: %v %v", ok, err)
	}
	cons, err = conn.Channel()
	must(t, err)
	must(t, cons.Qos(7, 0, false))
	_, err = cons.Consume(q.Name, tag, false, false, false, false, nil)
	must(t, err)
	return pub, cons
}
