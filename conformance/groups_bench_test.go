package conformance

import (
	"fmt"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// BenchmarkGroupsDeliver is the delivered rate of a queue with message
// groups beside a plain queue, in the same run: one amqp091-go publisher
// sends b.N 1 KiB messages over 10,000 groups (header JMSXGroupID, the
// i-th message in group i mod 10,000, on both queues) and 8 consumers,
// each on its own connection with prefetch 64, ack every message. The
// rate counts what the consumers receive, from the first publish to the
// last delivery; "durable" is the same with a durable queue and
// persistent messages (the backlog beyond the window waits in the
// store). A checker sees every delivery (both queues, the same
// work): "violations" counts a group delivered out of its order or to a
// consumer while another holds it, and must be 0 on the grouped queue
// (on the plain queue a group's messages are 10,000 apart, so it rarely
// finds one there either: the plain run is the rate to match).
// "quorum" is the same on a quorum queue (x-queue-type quorum) of the
// standalone node: the groups kept by its replicated state machine.
const groupHeaderArg = "x-message-group-header"

func BenchmarkGroupsDeliver(b *testing.B) {
	for _, bc := range []struct {
		name    string
		args    rmq.Table
		durable bool
	}{
		{name: "plain"},
		{name: "groups", args: groupArgs()},
		{name: "durable/plain", durable: true},
		{name: "durable/groups", args: groupArgs(), durable: true},
		{name: "quorum/plain", args: quorumArgs, durable: true},
		{name: "quorum/groups", args: quorumGroupArgs(), durable: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			testutil.InProcess(b)
			br := testutil.Start(b, broker.Options{})
			rate, violations := groupsLoad(b, br.URL, bc.args, bc.durable, b.N)
			b.ReportMetric(rate, "delivered/s")
			b.ReportMetric(float64(violations), "violations")
			if bc.args[groupHeaderArg] != nil && violations > 0 {
				b.Fatalf("%d order violations on the grouped queue", violations)
			}
		})
	}
}

// groupsLoad runs the load of BenchmarkGroupsDeliver against url on a
// fresh queue declared with args; it returns the delivered rate and the
// checker's violations.
func groupsLoad(b *testing.B, url string, args rmq.Table, durable bool, n int) (float64, int) {
	const groups, consumers, prefetch = 10000, 8, 64
	pc, err := rmq.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	pch, err := pc.Channel()
	if err != nil {
		b.Fatal(err)
	}
	var q rmq.Queue
	if args["x-queue-type"] == "quorum" {
		// A quorum queue is named and not auto-delete (RabbitMQ refuses
		// both); deleted when done.
		q, err = pch.QueueDeclare(fmt.Sprintf("bench-qq-%d", time.Now().UnixNano()), true, false, false, false, args)
		if err == nil {
			defer func() { _, _ = pch.QueueDelete(q.Name, false, false, false) }()
		}
	} else {
		q, err = pch.QueueDeclare("", durable, true /* auto-delete */, false, false, args)
	}
	if err != nil {
		b.Fatal(err)
	}
	chk := newGroupChecker()
	var got sync.WaitGroup
	got.Add(n)
	var last time.Time
	var lastMu sync.Mutex
	for i := range consumers {
		c, err := rmq.Dial(url)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Qos(prefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		who := fmt.Sprintf("c%d", i)
		ds, err := ch.Consume(q.Name, who, false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for d := range ds {
				chk.deliver(who, d)
				chk.settle(d, false)
				if d.Ack(false) != nil {
					return
				}
				lastMu.Lock()
				last = time.Now()
				lastMu.Unlock()
				got.Done()
			}
		}()
	}
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	next := make([]int32, groups)
	for i := range n {
		g := i % groups
		p := rmq.Publishing{Headers: rmq.Table{groupHeader: fmt.Sprintf("g%d", g), "n": next[g]}, Body: body}
		if durable {
			p.DeliveryMode = rmq.Persistent
		}
		next[g]++
		if err := pch.Publish("", q.Name, false, false, p); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { got.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("consumers got fewer than %d messages", n)
	}
	b.StopTimer()
	lastMu.Lock()
	el := last.Sub(start)
	lastMu.Unlock()
	chk.mu.Lock()
	defer chk.mu.Unlock()
	return float64(n) / el.Seconds(), len(chk.violations)
}
