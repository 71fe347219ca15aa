package conformance

import (
	"fmt"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

// priorityBacklog publishes n messages of 64 KiB with confirms, priorities
// cycling through 0, 3, 9 (and 200, taken as the queue's highest), and
// returns the bodies' order a consumer must see: highest priority first,
// FIFO within a priority.
func priorityBacklog(t *testing.T, ch *rmq.Channel, q string, n int, mode uint8) []string {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	prios := []uint8{0, 3, 9, 200}
	byLane := map[int][]string{}
	body := make([]byte, 64<<10)
	for i := range n {
		p := prios[i%len(prios)]
		tag := fmt.Sprintf("%04d-p%d", i, p)
		copy(body, tag)
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: mode, Priority: p, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %s nacked", tag)
		}
		byLane[min(int(p), 10)] = append(byLane[min(int(p), 10)], tag)
	}
	var want []string
	for l := 10; l >= 0; l-- {
		want = append(want, byLane[l]...)
	}
	return want
}

func getInOrder(t *testing.T, ch *rmq.Channel, q string, want []string) {
	t.Helper()
	for i, w := range want {
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok {
			t.Fatalf("get #%d (want %s): ok %v, %v", i, w, ok, err)
		}
		if got := string(d.Body[:len(w)]); got != w || len(d.Body) != 64<<10 {
			t.Fatalf("get #%d: got %s (%d bytes), want %s", i, got, len(d.Body), w)
		}
	}
	if d, ok, _ := ch.Get(q, true); ok {
		t.Fatalf("one more message than published: %.9s", d.Body)
	}
}

// A priority queue pages like any other: beyond the window each priority
// waits in the store in a lane of its own, so the broker holds about the
// window of a 25 MiB backlog, and the messages still come out highest
// priority first, FIFO within one, read back from the store. Durable
// lanes survive a restart in the same order; transient ones page to the
// page files.
func TestPriorityQueuePages(t *testing.T) {
	opts := broker.Options{QueueWindow: 64, QueueWindowBytes: 1 << 20}
	t.Run("durable, across a restart", func(t *testing.T) {
		r := newRestartable(t, opts)
		c, ch := r.dial()
		if _, err := ch.QueueDeclare("prio-paged", true, false, false, false, rmq.Table{"x-max-priority": int32(10)}); err != nil {
			t.Fatal(err)
		}
		want := priorityBacklog(t, ch, "prio-paged", 400, rmq.Persistent)
		if used := r.b.Server.MemoryUsed(); used > 4<<20 {
			t.Fatalf("the broker holds %d bytes of a 25 MiB priority backlog with a 1 MiB window", used)
		}
		// The first out before the restart: the highest lane's, in order.
		for i, w := range want[:30] {
			d, ok, err := ch.Get("prio-paged", true)
			if err != nil || !ok || string(d.Body[:len(w)]) != w {
				t.Fatalf("get #%d before the restart: ok %v, %v, %.9s; want %s", i, ok, err, d.Body, w)
			}
		}
		want = want[30:]
		c.Close()
		r.restart()
		_, ch = r.dial()
		if used := r.b.Server.MemoryUsed(); used > 4<<20 {
			t.Fatalf("recovery holds %d bytes of a 25 MiB priority backlog with a 1 MiB window", used)
		}
		getInOrder(t, ch, "prio-paged", want)
	})
	t.Run("transient", func(t *testing.T) {
		e := setup(t, opts)
		q := e.queue("prio-paged-t", rmq.Table{"x-max-priority": int32(10)})
		want := priorityBacklog(t, e.ch, q, 400, rmq.Transient)
		if used := e.b.Server.MemoryUsed(); used > 4<<20 {
			t.Fatalf("the broker holds %d bytes of a 25 MiB priority backlog with a 1 MiB window", used)
		}
		getInOrder(t, e.ch, q, want)
	})
}
