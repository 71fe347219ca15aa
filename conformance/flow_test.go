package conformance

import (
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// flowBroker is a broker whose store takes slowSync per group commit while
// slow is set: persistent messages into durable queues pile up behind it,
// which is what flow control is for.
func flowBroker(t *testing.T, slow *atomic.Bool) (*testutil.Broker, func() map[string]string) {
	t.Helper()
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{AfterStoreSync: func() {
		if slow.Load() {
			time.Sleep(20 * time.Millisecond)
		}
	}})
	return b, stateReader(t, b)
}

// stateReader serves b's management API for the test and returns a reader
// of its connections' states by connection_name (connStates).
func stateReader(t *testing.T, b *testutil.Broker) func() map[string]string {
	t.Helper()
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	return func() map[string]string { return connStates(t, hs.URL) }
}

// publishAndConsumeOnOne publishes n copies of msg into queue on one
// channel of c and consumes and acks them on another channel of c, with
// prefetch 20: the connection's acks must get through while its publisher
// is held back. It fails if a delivery takes over 30 s.
func publishAndConsumeOnOne(t *testing.T, c *rmq.Connection, queue string, durable bool, n int, msg rmq.Publishing) {
	t.Helper()
	pch := openChannel(t, c)
	_, err := pch.QueueDeclare(queue, durable, false, false, false, nil)
	must(t, err)
	cch := openChannel(t, c)
	must(t, cch.Qos(20, 0, false))
	ds, err := cch.Consume(queue, "", false, false, false, false, nil)
	must(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range n {
			if pch.Publish("", queue, false, false, msg) != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	for i := range n {
		select {
		case d := <-ds:
			must(t, d.Ack(false))
		case <-time.After(30 * time.Second):
			c.Close() // the publisher's goroutine returns
			t.Fatalf("stuck after %d of %d deliveries", i, n)
		}
	}
}

func namedConn(t *testing.T, url, name string) *rmq.Connection {
	t.Helper()
	c, err := rmq.DialConfig(url, rmq.Config{Properties: rmq.Table{"connection_name": name}})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// A publisher that feeds a queue faster than its store writes keep up is
// held back (state "flow"), alone: another publisher, into a queue that
// keeps up, is not, and the slow queue's consumer keeps receiving.
func TestFlowControlHoldsBackOnlyTheFastPublisher(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	b, states := flowBroker(t, &slow)
	fast := namedConn(t, b.URL, "fast")
	other := namedConn(t, b.URL, "other")
	cons := namedConn(t, b.URL, "consumer")
	fch := openChannel(t, fast)
	_, err := fch.QueueDeclare("flow-slow", true, false, false, false, nil)
	must(t, err)
	och := openChannel(t, other)
	_, err = och.QueueDeclare("flow-other", false, false, false, false, nil)
	must(t, err)
	must(t, och.Confirm(false))
	cch := openChannel(t, cons)
	must(t, cch.Qos(100, 0, true))
	ds, err := cch.Consume("flow-slow", "", false, false, false, false, nil)
	must(t, err)

	const n = 3000 // x 16 KiB: 47 MiB, persistent, behind a slow store
	body := make([]byte, 16<<10)
	pubDone := make(chan error, 1)
	go func() {
		for range n {
			if err := fch.Publish("", "flow-slow", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body}); err != nil {
				pubDone <- err
				return
			}
		}
		pubDone <- nil
	}()
	var got atomic.Int64
	go func() {
		for d := range ds {
			got.Add(1)
			_ = d.Ack(false)
		}
	}()

	sawFlow := false
	var wg sync.WaitGroup
	wg.Add(1)
	otherErr := make(chan error, 1)
	go func() { // the other publisher: 2000 confirmed publishes, never held
		defer wg.Done()
		for i := range 2000 {
			dc, err := och.PublishWithDeferredConfirm("", "flow-other", false, false, rmq.Publishing{Body: []byte("x")})
			if err != nil {
				otherErr <- err
				return
			}
			if i%100 == 99 && !dc.Wait() {
				otherErr <- err
				return
			}
		}
		otherErr <- nil
	}()
	deadline := time.Now().Add(60 * time.Second)
	otherFinished := false
	for time.Now().Before(deadline) {
		s := states()
		if s["fast"] == "flow" {
			sawFlow = true
		}
		if s["other"] != "running" && !otherFinished {
			t.Errorf("the other publisher, whose queue keeps up, is %q", s["other"])
		}
		if s["consumer"] != "running" {
			t.Errorf("the consumer is %q", s["consumer"])
		}
		select {
		case err := <-otherErr:
			must(t, err)
			otherFinished = true
		default:
		}
		if sawFlow && otherFinished {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawFlow {
		t.Fatal("the fast publisher was never held back by flow control")
	}
	if !otherFinished {
		t.Fatal("the other publisher did not finish")
	}
	wg.Wait()
	slow.Store(false)
	select {
	case err := <-pubDone:
		must(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the fast publisher is stuck after the store caught up")
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return got.Load() == n }, "consumer got all %d (has %d)", n, got.Load())
	testutil.Eventually(t, 5*time.Second, func() bool { return states()["fast"] == "running" }, "fast publisher running again")
}

// A connection that publishes into a queue behind its store and consumes
// from it on the same socket is held back but never stuck: its acks get
// through (flow control waits for the store, not for consumers).
func TestFlowControlPublishAndConsumeOnOneConnection(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	b, states := flowBroker(t, &slow)
	c := namedConn(t, b.URL, "both")
	var sawFlow atomic.Bool
	stop := make(chan struct{})
	var polling sync.WaitGroup
	defer func() { close(stop); polling.Wait() }() // no poll may outlive the test's server
	polling.Add(1)
	go func() {
		defer polling.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if states()["both"] == "flow" {
				sawFlow.Store(true)
			}
		}
	}()
	publishAndConsumeOnOne(t, c, "flow-both", true, 3000, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: make([]byte, 16<<10)})
	if !sawFlow.Load() {
		t.Fatal("the connection was never held back: the test did not exercise flow control")
	}
}
