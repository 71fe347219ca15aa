package conformance

import (
	"fmt"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// pagedQueue declares a durable queue with args on a broker whose queues
// keep 16 messages in memory, and publishes n persistent messages to it
// with confirms, numbered from 0.
func pagedQueue(t *testing.T, name string, args rmq.Table, n int) *env {
	t.Helper()
	e := setup(t, broker.Options{QueueWindow: 16})
	if _, err := e.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete(name, false, false, false) })
	for i := range n {
		e.publishConfirmed("", name, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", i))})
	}
	return e
}

// takeInOrder reads want messages with basic.get and checks they are
// numbered first, first+1, ...
func takeInOrder(e *env, q string, first, want int) {
	e.t.Helper()
	for i := first; i < first+want; i++ {
		d, ok, err := e.ch.Get(q, true)
		if err != nil || !ok {
			e.t.Fatalf("get #%d: ok %v, %v", i, ok, err)
		}
		if got, w := string(d.Body), fmt.Sprintf("%04d", i); got != w {
			e.t.Fatalf("got %s, want %s", got, w)
		}
	}
	if d, ok, _ := e.ch.Get(q, true); ok {
		e.t.Fatalf("one more message than expected: %s", d.Body)
	}
}

// x-max-length with drop-head on a queue paged to the store: the oldest
// go even while they are still in the store, in order, to the
// dead-letter exchange, and the queue never reports more than its limit.
func TestPagedMaxLengthDropHead(t *testing.T) {
	e := pagedQueue(t, "paged-dlq", nil, 0)
	if _, err := e.ch.QueueDeclare("paged-maxlen", true, false, false, false, rmq.Table{
		"x-max-length":              int32(50),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "paged-dlq",
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete("paged-maxlen", false, false, false) })
	for i := range 200 {
		e.publishConfirmed("", "paged-maxlen", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", i))})
		if n := e.count("paged-maxlen"); n > 50 {
			t.Fatalf("after publish %d the queue reports %d messages, over its limit of 50", i, n)
		}
	}
	takeInOrder(e, "paged-maxlen", 150, 50)
	e.waitCount("paged-dlq", 150)
	takeInOrder(e, "paged-dlq", 0, 150)
}

// basic.get reads through the store: every message of a backlog far
// beyond the window, in order, then none.
func TestPagedGet(t *testing.T) {
	e := pagedQueue(t, "paged-get", nil, 300)
	if n := e.count("paged-get"); n != 300 {
		t.Fatalf("count %d", n)
	}
	takeInOrder(e, "paged-get", 0, 300)
}

// A purge while the queue reads its backlog from the store drops the
// backlog; what was read for it is not delivered afterwards, and later
// publishes come out alone, in order.
func TestPagedPurge(t *testing.T) {
	e := pagedQueue(t, "paged-purge", nil, 500)
	for i := range 20 { // reads begin as the window empties
		if d, ok, err := e.ch.Get("paged-purge", true); !ok || err != nil || string(d.Body) != fmt.Sprintf("%04d", i) {
			t.Fatalf("get %d: %v %v %q", i, ok, err, d.Body)
		}
	}
	n, err := e.ch.QueuePurge("paged-purge", false)
	if err != nil || n != 480 {
		t.Fatalf("purged %d, %v; want 480", n, err)
	}
	for i := range 5 {
		e.publishConfirmed("", "paged-purge", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("%04d", 1000+i))})
	}
	takeInOrder(e, "paged-purge", 1000, 5)
}

// The window is in bytes as well as messages: large persistent messages
// page to the store beyond QueueWindowBytes (ready and unacked bodies),
// so a backlog of them is not held in memory, and they come back in order.
func TestPagedByBytes(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{QueueWindowBytes: 1 << 20})
	if _, err := e.ch.QueueDeclare("paged-bytes", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ch.QueueDelete("paged-bytes", false, false, false) })
	body := make([]byte, 256<<10)
	for i := range 40 { // 10 MiB
		copy(body, fmt.Sprintf("%04d", i))
		e.publishConfirmed("", "paged-bytes", rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
	}
	if used := e.b.Server.MemoryUsed(); used > 2<<20 {
		t.Fatalf("queues hold %d bytes of a 10 MiB backlog with a 1 MiB window", used)
	}
	for i := range 40 {
		d, ok, err := e.ch.Get("paged-bytes", true)
		if err != nil || !ok || string(d.Body[:4]) != fmt.Sprintf("%04d", i) || len(d.Body) != len(body) {
			t.Fatalf("get %d: ok %v, %v, %q (%d bytes)", i, ok, err, d.Body[:min(4, len(d.Body))], len(d.Body))
		}
	}
}
