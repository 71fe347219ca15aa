package conformance

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// paceWindow is the queue window of the pacing tests: a backlog beyond it
// pages, and pacing lets it grow by another window before it holds the
// publisher (queue.Queue.Behind).
const paceWindow = 256

func paceBroker(t *testing.T, opts broker.Options) (*testutil.Broker, func() map[string]string) {
	t.Helper()
	testutil.InProcess(t)
	opts.QueueWindow = paceWindow
	b := testutil.Start(t, opts)
	return b, stateReader(t, b)
}

// paceRun publishes n messages as fast as it can into a non-durable queue
// whose consumer acks each after a short pause, much more slowly than the
// publisher sends, and returns the largest ready count seen while it ran
// and whether the publisher was seen in the "flow" state.
func paceRun(t *testing.T, b *testutil.Broker, states func() map[string]string, n int) (maxReady int, sawFlow bool) {
	t.Helper()
	// No heartbeats on the publisher's connection, so no pacing floor
	// (broker.paceFloorRate): with amqp091-go's 10 s the floor reads
	// about 900 of these publishes a second, as fast as the consumer
	// below acks on a loaded machine, and the backlog grew past 3,000
	// by the floor alone. The floor has its own test (heartbeats below).
	pub := namedConn(t, b.URL+"?heartbeat=0", "pub")
	cons := namedConn(t, b.URL, "cons")
	watch := openChannel(t, namedConn(t, b.URL, "watch"))
	pch := openChannel(t, pub)
	_, err := pch.QueueDeclare("paced", false, false, false, false, nil)
	must(t, err)
	cch := openChannel(t, cons)
	must(t, cch.Qos(50, 0, false))
	ds, err := cch.Consume("paced", "", false, false, false, false, nil)
	must(t, err)
	var got atomic.Int64
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for d := range ds {
			time.Sleep(100 * time.Microsecond)
			_ = d.Ack(false)
			if got.Add(1) == int64(n) {
				return
			}
		}
	}()
	published := make(chan error, 1)
	body := make([]byte, 512)
	go func() {
		for range n {
			if err := pch.Publish("", "paced", false, false, rmq.Publishing{Body: body}); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	var pubErr error
	pubDone := false
	deadline := time.After(120 * time.Second)
	for got.Load() < int64(n) {
		select {
		case <-consumed:
		case pubErr = <-published:
			must(t, pubErr)
			pubDone = true
		case <-deadline:
			t.Fatalf("consumer got %d of %d", got.Load(), n)
		case <-time.After(10 * time.Millisecond):
		}
		if q, err := watch.QueueDeclarePassive("paced", false, false, false, false, nil); err == nil {
			maxReady = max(maxReady, q.Messages)
		}
		if !pubDone && states()["pub"] == "flow" {
			sawFlow = true
		}
	}
	if !pubDone {
		must(t, <-published)
	}
	return maxReady, sawFlow
}

// A publisher that outruns the consumers of a queue draining a backlog
// beyond its window is held to their pace (state "flow"): the backlog,
// and with it the age of what the consumers get, stops growing about a
// window beyond the window, instead of growing with everything published.
func TestPacingHoldsPublisherToItsConsumers(t *testing.T) {
	b, states := paceBroker(t, broker.Options{Heartbeat: -1}) // see paceRun
	const n = 4000
	maxReady, sawFlow := paceRun(t, b, states, n)
	t.Logf("largest backlog %d of %d published", maxReady, n)
	if !sawFlow {
		t.Error("the publisher was never held back")
	}
	// The window, the window it may grow by, and what one wait lets
	// through before the reader stops (a read buffer of publishes).
	if limit := 4 * paceWindow; maxReady > limit {
		t.Errorf("backlog reached %d, more than %d: the publisher was not held to the consumers' pace", maxReady, limit)
	}
}

// --pace-publishers=false: the same run lets the backlog grow with what
// the publisher sends, as without pacing (the test above measures what
// pacing does, not the machine).
func TestPacingOff(t *testing.T) {
	b, states := paceBroker(t, broker.Options{NoPublisherPacing: true, Heartbeat: -1})
	const n = 4000
	maxReady, _ := paceRun(t, b, states, n)
	t.Logf("largest backlog %d of %d published", maxReady, n)
	if maxReady <= 4*paceWindow {
		t.Errorf("backlog reached only %d without pacing: the run does not outrun its consumer", maxReady)
	}
}

// A queue without consumers absorbs a backlog beyond its window at the
// publisher's speed: nothing drains it, so there is no pace to keep, and
// the publisher is never held for it.
func TestPacingNotWithoutConsumers(t *testing.T) {
	b, states := paceBroker(t, broker.Options{})
	c := namedConn(t, b.URL, "absorb")
	ch := openChannel(t, c)
	_, err := ch.QueueDeclare("absorbing", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	const n = 20000
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("", "absorbing", false, false, rmq.Publishing{Body: []byte("x")})
		must(t, err)
		if i%1000 == 999 {
			if !dc.Wait() {
				t.Fatal("nacked")
			}
			if s := states()["absorb"]; s != "running" {
				t.Fatalf("publisher into a queue without consumers is %q after %d", s, i+1)
			}
		}
	}
	q, err := ch.QueueDeclarePassive("absorbing", false, false, false, false, nil)
	must(t, err)
	if q.Messages != n {
		t.Fatalf("queue holds %d, want %d", q.Messages, n)
	}
}

// A consumer that takes its prefetch and never acks sets no pace: the
// publisher's wait gives up when nothing is delivered, and the backlog
// grows as without consumers.
func TestPacingStuckConsumerDoesNotHoldPublisher(t *testing.T) {
	b, _ := paceBroker(t, broker.Options{})
	cons := openChannel(t, namedConn(t, b.URL, "stuck"))
	_, err := cons.QueueDeclare("stuck", false, false, false, false, nil)
	must(t, err)
	must(t, cons.Qos(10, 0, false))
	_, err = cons.Consume("stuck", "", false, false, false, false, nil)
	must(t, err)
	ch := openChannel(t, namedConn(t, b.URL, "pub"))
	must(t, ch.Confirm(false))
	const n = 20000
	done := make(chan error, 1)
	go func() {
		var dc *rmq.DeferredConfirmation
		for range n {
			var err error
			if dc, err = ch.PublishWithDeferredConfirm("", "stuck", false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
				done <- err
				return
			}
		}
		dc.Wait()
		done <- nil
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the publisher is held by a consumer that takes nothing")
	}
	q, err := ch.QueueDeclarePassive("stuck", false, false, false, false, nil)
	must(t, err)
	if q.Messages != n-10 {
		t.Fatalf("queue holds %d ready, want %d", q.Messages, n-10)
	}
}

// A connection that publishes into a paged queue and consumes from it on
// the same socket is paced but never stuck: while it waits it reads no
// acks, so its consumer takes nothing, and the wait gives up.
func TestPacingPublishAndConsumeOnOneConnection(t *testing.T) {
	b, _ := paceBroker(t, broker.Options{})
	publishAndConsumeOnOne(t, namedConn(t, b.URL, "both"), "both", false, 20000, rmq.Publishing{Body: []byte("x")})
}

// A publisher held to its consumers' pace for several heartbeat intervals
// on end is not dropped for missed heartbeats, by either side: its socket
// always has more to read, so the broker's reader never waits for input,
// and the read deadline must still move on with what it reads; and the
// client's own heartbeater, which waits behind a publish blocked on a full
// send buffer and meanwhile does not move the client's read deadline (1.5
// heartbeats), must not wait that long: pacing reads at least a third of a
// send buffer every quarter heartbeat (broker.paceFloorRate). Without that
// floor a consumer at 1-2 k msg/s blocked the publisher's writes for over
// 2 s at a time, and 2 to 3 runs in 8 ended in amqp091-go dropping the
// connection with an i/o timeout.
func TestPacingKeepsHeartbeats(t *testing.T) {
	b, states := paceBroker(t, broker.Options{})
	// 3 s: the broker drops a client silent for 8.25 to 9 s (silentLimit);
	// amqp091-go's heartbeater ticks every 1.5 s and sends one whenever
	// nothing was written for half a second, and drops a connection it
	// read nothing from for 4.5 s.
	pub, err := rmq.DialConfig(b.URL, rmq.Config{Heartbeat: 3 * time.Second, Properties: rmq.Table{"connection_name": "pub"}})
	must(t, err)
	defer pub.Close()
	closed := pub.NotifyClose(make(chan *rmq.Error, 1))
	pch := openChannel(t, pub)
	_, err = pch.QueueDeclare("paced-hb", false, false, false, false, nil)
	must(t, err)
	cch := openChannel(t, namedConn(t, b.URL, "cons"))
	must(t, cch.Qos(50, 0, false))
	ds, err := cch.Consume("paced-hb", "", false, false, false, false, nil)
	must(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case d := <-ds:
				time.Sleep(100 * time.Microsecond)
				_ = d.Ack(false)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	pubErr := make(chan error, 1)
	go func() {
		body := make([]byte, 512)
		end := time.Now().Add(10 * time.Second) // dropped after 9 s if not read
		for time.Now().Before(end) {
			if err := pch.Publish("", "paced-hb", false, false, rmq.Publishing{Body: body}); err != nil {
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	sawFlow := false
	for {
		select {
		case err := <-pubErr:
			must(t, err)
			if !sawFlow {
				t.Error("the publisher was never held back")
			}
			select {
			case e := <-closed:
				t.Fatalf("publisher's connection closed: %v", e)
			default:
			}
			return
		case e := <-closed:
			t.Fatalf("publisher's connection closed while paced: %v", e)
		case <-time.After(50 * time.Millisecond):
			if states()["pub"] == "flow" {
				sawFlow = true
			}
		}
	}
}
