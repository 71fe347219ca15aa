package conformance

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// env is one test's broker, connection and channel.
type env struct {
	t    *testing.T
	b    *testutil.Broker
	conn *rmq.Connection
	ch   *rmq.Channel

	confirmCh *rmq.Channel
}

func setup(t *testing.T, opts broker.Options) *env {
	t.Helper()
	b := testutil.Start(t, opts)
	e := &env{t: t, b: b}
	e.conn = dial(t, b.URL)
	e.ch = e.channel(e.conn)
	return e
}

func (e *env) channel(c *rmq.Connection) *rmq.Channel {
	e.t.Helper()
	ch, err := c.Channel()
	if err != nil {
		e.t.Fatalf("channel: %v", err)
	}
	return ch
}

// queue declares a fresh server-named, auto-delete-free transient queue.
func (e *env) queue(name string, args rmq.Table) string {
	e.t.Helper()
	q, err := e.ch.QueueDeclare(name, false, false, false, false, args)
	if err != nil {
		e.t.Fatalf("queue.declare %q: %v", name, err)
	}
	if name != "" {
		e.t.Cleanup(func() {
			if c, err := rmq.Dial(e.b.URL); err == nil {
				if ch, err := c.Channel(); err == nil {
					_, _ = ch.QueueDelete(name, false, false, false)
				}
				c.Close()
			}
		})
	}
	return q.Name
}

func (e *env) publish(ex, key string, body string) {
	e.t.Helper()
	if err := e.ch.Publish(ex, key, false, false, rmq.Publishing{Body: []byte(body)}); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
}

// publishConfirmed publishes on a confirm-mode channel of its own and
// waits for the broker's ack: the message is then in its queues.
func (e *env) publishConfirmed(ex, key string, p rmq.Publishing) {
	e.t.Helper()
	if e.confirmCh == nil {
		e.confirmCh = e.channel(e.conn)
		if err := e.confirmCh.Confirm(false); err != nil {
			e.t.Fatal(err)
		}
	}
	dc, err := e.confirmCh.PublishWithDeferredConfirm(ex, key, false, false, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if !dc.Wait() {
		e.t.Fatal("publish nacked")
	}
}

// get reads one message with basic.get, failing if there is none.
func (e *env) get(ch *rmq.Channel, q string, autoAck bool) rmq.Delivery {
	e.t.Helper()
	var d rmq.Delivery
	testutil.Eventually(e.t, 5*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(q, autoAck)
		if err != nil {
			e.t.Fatalf("basic.get %s: %v", q, err)
		}
		return ok
	}, "a message on %s", q)
	return d
}

// count returns a queue's ready messages (passive declare).
func (e *env) count(q string) int {
	e.t.Helper()
	ch := e.channel(e.conn)
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("passive declare %s: %v", q, err)
	}
	return st.Messages
}

// waitCount polls until queue q holds n ready messages.
func (e *env) waitCount(q string, n int) {
	e.t.Helper()
	testutil.Eventually(e.t, 5*time.Second, func() bool { return e.count(q) == n }, "%d messages in %s", n, q)
}

// expectClose fails unless err (or the channel's close notification) is
// an AMQP exception with code and text.
func expectErr(t *testing.T, err error, code int, text string) {
	t.Helper()
	var ae *rmq.Error
	if !errors.As(err, &ae) || ae == nil { // nil: NotifyClose's clean close
		t.Fatalf("got %v, want %d %q", err, code, text)
	}
	if ae.Code != code || (text != "" && ae.Reason != text) {
		t.Fatalf("got %d %q\nwant %d %q", ae.Code, ae.Reason, code, text)
	}
}

// consume starts a consumer of q on the test's channel.
func (e *env) consume(q string, noAck bool) <-chan rmq.Delivery {
	e.t.Helper()
	ds, err := e.ch.Consume(q, "", noAck, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// recv waits for one delivery.
func recv(t *testing.T, ds <-chan rmq.Delivery) rmq.Delivery {
	t.Helper()
	select {
	case d, ok := <-ds:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
	}
	return rmq.Delivery{}
}

// closeErr waits for the close notification on closed (from NotifyClose),
// failing the test if none comes within 5 s. A channel closed without an
// error (a clean close) gives nil.
func closeErr(t *testing.T, closed <-chan *rmq.Error, what string) *rmq.Error {
	t.Helper()
	select {
	case e := <-closed:
		return e
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not closed within 5s", what)
	}
	return nil
}

// waitExit waits for a process that was told to stop and returns what
// cmd.Wait returns; one still running after within is killed, and the
// test fails.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done // SIGKILL: it exits now
		t.Fatalf("%s still running %v after it was told to stop", cmd.Path, within)
	}
	return nil
}

// none fails if a delivery arrives within d.
func none(t *testing.T, ds <-chan rmq.Delivery, d time.Duration) {
	t.Helper()
	select {
	case m := <-ds:
		t.Fatalf("unexpected delivery %q", m.Body)
	case <-time.After(d):
	}
}

// frameConsume is a raw basic.consume on channel 1.
func frameConsume(q string, noAck bool) []byte {
	return amqp.AppendMethodFrame(nil, 1, &amqp.BasicConsume{Queue: q, ConsumerTag: "raw", NoAck: noAck})
}

// expectBlocked waits for connection.blocked with reason; context, if not
// nil, adds what the failure message should say.
func expectBlocked(t *testing.T, blocked <-chan rmq.Blocking, reason string, context func() string) {
	t.Helper()
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != reason {
			t.Fatalf("blocking %+v, want connection.blocked %q", b, reason)
		}
	case <-time.After(10 * time.Second):
		msg := "no connection.blocked"
		if context != nil {
			msg += "; " + context()
		}
		t.Fatal(msg)
	}
}

// startBinary runs the real railmq binary bin on the data dir dir (the
// same dir again restarts it there, after a kill -9) on a free port, and
// returns it, its AMQP URL and its log; the test's cleanup kills it.
func startBinary(t *testing.T, bin, dir string) (*exec.Cmd, string, *testutil.SyncBuffer) {
	t.Helper()
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", dir, "--log-level", "warn")
	var logs testutil.SyncBuffer // read while the broker writes it
	cmd.Stderr = &logs
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.WaitListening(t, addr, 30*time.Second)
	return cmd, "amqp://guest:guest@" + addr + "/", &logs
}
