package conformance

// How connections end. RabbitMQ answers a client's connection.close with
// close-ok and then keeps reading (and discarding) until the client closes
// its end, so a client that is still writing never gets a RST and a
// client's own reader never sees EOF before it closed the socket itself
// (rabbit_reader's closed state). These tests pin that for every way a
// connection ends, with amqp091-go and with raw sockets.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// cleanCloses opens n connections (conc at a time), each with a channel,
// closes each with conn.Close and returns the errors NotifyClose reported.
// busy adds a consumer and a publisher on every connection, running when
// Close is called.
func cleanCloses(t *testing.T, url string, n, conc int, busy bool) []string {
	t.Helper()
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
		next atomic.Int64
	)
	fail := func(i int, what string, err any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("conn %d: %s: %v", i, what, err))
		mu.Unlock()
	}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				c, err := rmq.Dial(url)
				if err != nil {
					fail(i, "dial", err)
					continue
				}
				closed := c.NotifyClose(make(chan *rmq.Error, 1))
				ch, err := c.Channel()
				if err != nil {
					fail(i, "channel", err)
					c.Close()
					continue
				}
				stop := make(chan struct{})
				var traffic sync.WaitGroup
				if busy {
					q, err := ch.QueueDeclare("", false, true, true, false, nil)
					if err != nil {
						fail(i, "declare", err)
						c.Close()
						continue
					}
					msgs, err := ch.Consume(q.Name, "", false, false, false, false, nil)
					if err != nil {
						fail(i, "consume", err)
						c.Close()
						continue
					}
					pub, err := c.Channel()
					if err != nil {
						fail(i, "channel", err)
						c.Close()
						continue
					}
					var got atomic.Int64
					traffic.Add(2)
					go func() {
						defer traffic.Done()
						for m := range msgs {
							got.Add(1)
							_ = m.Ack(false)
						}
					}()
					go func() {
						defer traffic.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							if pub.Publish("", q.Name, false, false, rmq.Publishing{Body: make([]byte, 512)}) != nil {
								return // closed under us: expected
							}
						}
					}()
					// Close while messages flow both ways.
					for deadline := time.Now().Add(5 * time.Second); got.Load() < 50 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				}
				if err := c.Close(); err != nil {
					fail(i, "close", err)
				}
				close(stop)
				traffic.Wait()
				if e, ok := <-closed; ok && e != nil {
					fail(i, "NotifyClose", e)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// A clean conn.Close must not make NotifyClose report an error. railmq
// used to close the socket the moment it wrote close-ok; amqp091-go's
// reader then saw EOF before Close had finished and reported
// "Exception (501) Reason: EOF" on 959 of 1,000 connections.
func TestCleanCloseNoNotifyError(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	errs := cleanCloses(t, b.URL, 1000, 20, false)
	t.Logf("1000 clean closes: %d reported an error", len(errs))
	if len(errs) > 0 {
		t.Fatalf("%d of 1000 clean closes reported an error; first: %s", len(errs), errs[0])
	}
}

// The same while each connection has a consumer and a publisher at work.
func TestCleanCloseWhileBusyNoNotifyError(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	errs := cleanCloses(t, b.URL, 10, 2, true)
	if len(errs) > 0 {
		t.Fatalf("%d errors in 10 busy clean closes; first: %s", len(errs), errs[0])
	}
}

// rawPublishes is count basic.publish commands (method, header, body) to
// the default exchange with an unroutable key, on channel ch.
func rawPublishes(ch uint16, count int) []byte {
	var out []byte
	for range count {
		out = amqp.AppendMethodFrame(out, ch, &amqp.BasicPublish{RoutingKey: "no-such-queue"})
		out = amqp.AppendContent(out, ch, amqp.ClassBasic, (&amqp.Properties{}).Append(nil), []byte("in flight"), 131072)
	}
	return out
}

// isReset reports a connection reset by the peer (a RST).
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// expectOpen fails if the server closed (or reset) the socket: a read
// within d must time out.
func expectOpen(t *testing.T, r *testutil.Raw, d time.Duration) {
	t.Helper()
	_ = r.NC.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := r.NC.Read(buf) // heartbeats may come; anything else is a bug below
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		t.Fatalf("the server closed the socket before the client did: %v", err)
	}
}

// expectCleanEOF half-closes our end and fails unless the server then
// closes the socket with a FIN (EOF, not a RST) within d, after at most
// heartbeats.
func expectCleanEOF(t *testing.T, r *testutil.Raw, d time.Duration) {
	t.Helper()
	// Our side may be half-closed already (ExpectConnectionClose does it
	// after close-ok) and the server's FIN in: then the connection is
	// done and shutdown says ENOTCONN. A reset still shows in the read.
	if err := r.NC.(*net.TCPConn).CloseWrite(); err != nil && !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("close write: %v", err)
	}
	_ = r.NC.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := r.NC.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if isReset(err) {
			if testutil.ExternalURL() != "" {
				// RabbitMQ's fast_close sets SO_LINGER to 0, so its
				// last close is a RST, but only once the client has
				// closed its own end and has all it needs.
				return
			}
			t.Fatalf("the server reset the connection: %v", err)
		}
		t.Fatalf("no EOF after closing our end: %v", err)
	}
}

// A client with frames still in flight behind its connection.close (as
// amqplib's channel streams have) gets close-ok, can keep writing without
// a RST, and the server closes only after the client did.
func TestClientCloseWithFramesInFlight(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	out := amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "Goodbye"})
	out = append(out, rawPublishes(1, 200)...)
	out = append(out, amqp.AppendHeartbeat(nil)...)
	r.Write(out)
	r.Expect((*amqp.ConnectionCloseOk)(nil))
	// The client's stream goes on for a while after close-ok arrived: no
	// write may fail.
	for i := range 20 {
		if _, err := r.NC.Write(rawPublishes(1, 20)); err != nil {
			t.Fatalf("write %d after close-ok: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	expectOpen(t, r, 300*time.Millisecond) // no FIN, no RST of its own accord
	expectCleanEOF(t, r, 5*time.Second)
}

// A client that answers close-ok and never closes its socket is dropped
// after the closing timeout; Shutdown does not wait for it.
func TestShutdownDoesNotWaitForLingeringClient(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Send(0, &amqp.ConnectionClose{ReplyCode: 200, ReplyText: "Goodbye"})
	r.Expect((*amqp.ConnectionCloseOk)(nil))
	start := time.Now()
	if err := b.Server.Shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second { // the closing timeout is 30 s
		t.Fatalf("shutdown waited %v for a connection that was done", el)
	}
	r.ExpectEOF(5 * time.Second)
}

// After a connection error the server sends connection.close, discards
// everything but close-ok (no reply to frames sent after the error), and
// a client still writing meanwhile gets no RST.
func TestServerCloseDiscardsUntilCloseOk(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	// A heartbeat frame on a channel is a connection error (505); the
	// frames behind it in the same write must be discarded.
	out := testutil.Frame(8, 1, nil)
	out = amqp.AppendMethodFrame(out, 2, &amqp.ChannelOpen{})
	out = append(out, rawPublishes(1, 50)...)
	r.Write(out)
	_, m, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := m.(*amqp.ConnectionClose)
	if !ok || cc.ReplyCode != 505 {
		t.Fatalf("got %#v, want connection.close 505", m)
	}
	for i := range 10 {
		if _, err := r.NC.Write(rawPublishes(1, 10)); err != nil {
			t.Fatalf("write %d while closing: %v", i, err)
		}
		r.Send(3, &amqp.ChannelOpen{})
		time.Sleep(10 * time.Millisecond)
	}
	// Nothing may answer those frames.
	_ = r.NC.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		f, err := r.FR.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			t.Fatalf("the server closed before our close-ok: %v", err)
		}
		if f.Type != amqp.FrameHeartbeat {
			t.Fatalf("frame type %d on channel %d after connection.close", f.Type, f.Channel)
		}
	}
	r.Send(0, &amqp.ConnectionCloseOk{})
	expectCleanEOF(t, r, 5*time.Second)
}

// A refused handshake (here a protocol header the server does not speak,
// followed by more bytes) gets its answer (our protocol header) and a
// FIN, never a RST that would discard that answer.
func TestBadHeaderAnsweredWithoutReset(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	junk := append([]byte("AMQP\x00\x00\x08\x00"), make([]byte, 64<<10)...)
	r.Write(junk)
	hdr := make([]byte, 8)
	_ = r.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(r.NC, hdr); err != nil {
		t.Fatalf("reading the server's protocol header: %v", err)
	}
	if string(hdr) != "AMQP\x00\x00\x09\x01" {
		t.Fatalf("got header %q", hdr)
	}
	expectCleanEOF(t, r, 5*time.Second)
}

// A failed login from a client without authentication_failure_close is
// closed with a FIN; one with the capability gets connection.close 403
// first and then a FIN once it answered.
func TestAuthFailureCloseIsClean(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	for _, caps := range []amqp.Table{nil, {"authentication_failure_close": true}} {
		r := testutil.DialRaw(t, b.Addr)
		r.Write(amqp.ProtocolHeader[:])
		r.Expect((*amqp.ConnectionStart)(nil))
		r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": caps}, Mechanism: "PLAIN", Response: "\x00guest\x00wrong", Locale: "en_US"})
		if caps != nil {
			cc := r.ExpectConnectionClose()
			if cc.ReplyCode != 403 {
				t.Fatalf("got %+v", cc)
			}
		}
		expectCleanEOF(t, r, 10*time.Second)
	}
}

// The broker sends a heartbeat every half interval in which it sent
// nothing else, as RabbitMQ does (measured: every 1.0 s at heartbeat=2):
// clients such as php-amqplib drop a peer after two silent intervals, so
// sending at the full interval leaves them no margin.
func TestHeartbeatCadence(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 2, false)
	// Keep the server from dropping us while we listen.
	done := make(chan struct{})
	defer close(done)
	go func() {
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				_, _ = r.NC.Write(amqp.AppendHeartbeat(nil))
			}
		}
	}()
	var at []time.Time
	_ = r.NC.SetReadDeadline(time.Now().Add(8 * time.Second))
	for len(at) < 5 {
		f, err := r.FR.ReadFrame()
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", len(at), err)
		}
		if f.Type != amqp.FrameHeartbeat {
			t.Fatalf("unexpected frame type %d", f.Type)
		}
		at = append(at, time.Now())
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap > 1500*time.Millisecond {
			t.Fatalf("heartbeat gaps %v: want one every 1 s (half of the 2 s interval)", gaps(at))
		}
	}
}

func gaps(at []time.Time) []time.Duration {
	var g []time.Duration
	for i := 1; i < len(at); i++ {
		g = append(g, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return g
}

// A refused login is told at once (connection.close 403 to a client with
// authentication_failure_close) and its socket closed after RabbitMQ's
// silent close delay, 3 s, as RabbitMQ 3.10.8 does (measured: close frame
// at once, socket closed at 3.0 s). Waiting holds no goroutine: 50
// refused logins in flight leave the broker's goroutines where they were.
func TestFailedLoginsWaitOutTheDelay(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	base := runtime.NumGoroutine()
	start := time.Now()
	var rs []*testutil.Raw
	for range 50 {
		r := testutil.DialRaw(t, b.Addr)
		r.Write(amqp.ProtocolHeader[:])
		r.Expect((*amqp.ConnectionStart)(nil))
		r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": amqp.Table{"authentication_failure_close": true}},
			Mechanism: "PLAIN", Response: "\x00guest\x00guess", Locale: "en_US"})
		if cc := r.ExpectConnectionClose(); cc.ReplyCode != 403 {
			t.Fatalf("got %+v", cc)
		}
		rs = append(rs, r)
	}
	testutil.Eventually(t, 2*time.Second, func() bool { return runtime.NumGoroutine() <= base+5 },
		"goroutines: %d, %d before the logins", runtime.NumGoroutine(), base)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("too slow to check the delay: %v", el)
	}
	for _, r := range rs {
		r.ExpectEOF(6 * time.Second)
	}
	if el := time.Since(start); el < 2500*time.Millisecond {
		t.Fatalf("sockets closed after %v, before the 3 s delay", el)
	}
}
