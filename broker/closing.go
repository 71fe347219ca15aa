package broker

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// closeOkTimeout bounds how long a connection waits for the client's
// connection.close-ok after sending connection.close.
const closeOkTimeout = 3 * time.Second

// How long a connection that is done keeps reading (and discarding) what
// the client still sends before the socket is closed; see linger.
const (
	// closingTimeout bounds the wait for the client to close its end
	// after we answered its connection.close: RabbitMQ's CLOSING_TIMEOUT
	// (rabbit_reader), or the negotiated heartbeat when that is shorter.
	closingTimeout = 30 * time.Second
	// shortLinger is for the other orderly ends: after the client's
	// close-ok to our connection.close, and after a refused handshake, a
	// client that has what it needs closes at once; this only keeps its
	// last frames from turning our close into a RST.
	shortLinger = time.Second
)

// linger reads and discards whatever the client still sends until it
// closes its end (EOF), d passes, or the broker shuts down. It never
// half-closes first. Closing a socket with unread input makes the kernel
// answer with a RST, and a client that is still writing when it sent its
// connection.close (frames buffered behind it) would then lose our
// close-ok; a client told EOF before it closed reports an error. So, as
// RabbitMQ does in its closed state, the broker waits for the client to
// close first.
func (c *conn) linger(d time.Duration) {
	if d <= 0 {
		return
	}
	c.lingering.Store(true)
	defer c.lingering.Store(false)
	deadline := time.Now().Add(d)
	buf := make([]byte, 4<<10)
	for {
		if err := c.nc.SetReadDeadline(deadline); err != nil {
			return
		}
		select {
		case <-c.srv.stop: // after the deadline was set: see endLinger
			return
		default:
		}
		if _, err := c.io.Read(buf); err != nil {
			return // EOF, the deadline, or a reset
		}
	}
}

// endLinger cuts a linger short (Shutdown, after closing srv.stop).
func (c *conn) endLinger() {
	if c.lingering.Load() {
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// clientClosingTimeout is how long to wait for the client to close its
// end after answering its connection.close: the negotiated heartbeat
// when it is shorter than closingTimeout, as RabbitMQ's close_connection.
func (c *conn) clientClosingTimeout() time.Duration {
	if c.heartbeat > 0 && c.heartbeat < closingTimeout {
		return c.heartbeat
	}
	return closingTimeout
}

// errClientClosed is the normal end: the client sent connection.close (or
// answered ours).
var errClientClosed = errors.New("client closed connection")

// whileClosing handles a frame after we sent connection.close: everything
// but close and close-ok is discarded (§4.2.2).
func (c *conn) whileClosing(f amqp.Frame) (done bool) {
	if f.Type != amqp.FrameMethod || f.Channel != 0 {
		return false
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return false
	}
	switch m.(type) {
	case *amqp.ConnectionCloseOk:
		return true
	case *amqp.ConnectionClose:
		c.SendMethod(0, &amqp.ConnectionCloseOk{})
		return true
	}
	return false
}

func (c *conn) handleChannel0(f amqp.Frame) error {
	if f.Type != amqp.FrameMethod {
		return &amqp.Error{Code: amqp.UnexpectedFrame, Text: fmt.Sprintf("UNEXPECTED_FRAME - type %d, %s", f.Type, snippet(f.Payload))}
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	// Every other method, a server's too, is unexpected here: on channel 0
	// RabbitMQ's reader refuses it by the connection's state
	// (rabbit_reader:handle_method0), not as unimplemented.
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		c.closeReason.Store(fmt.Sprintf("client closed connection: %d %s", m.ReplyCode, m.ReplyText))
		c.closing.Store(true) // closed: a later closeWith sends nothing
		c.release()
		c.SendMethod(0, &amqp.ConnectionCloseOk{})
		c.lingerFor = c.clientClosingTimeout()
		return errClientClosed
	case *amqp.ConnectionUpdateSecret:
		// The method is for token-based backends; RabbitMQ's internal
		// user database takes any new secret and keeps the user as it is
		// (rabbit_auth_backend_internal's update_state).
		c.log.Info("secret updated", zap.String("user", c.user), zap.String("reason", m.Reason))
		c.SendMethod(0, &amqp.ConnectionUpdateSecretOk{})
		return nil
	case *amqp.ConnectionBlocked, *amqp.ConnectionUnblocked:
		return nil // a client telling us it is blocked: nothing to do
	}
	e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - unexpected method in connection state running"}
	e.ClassID, e.MethodID = m.Index()
	return e
}

func (c *conn) closeAllChannels() {
	for n := range c.channels {
		c.removeChannel(n)
	}
}

// fail closes the connection for a hard error, or for anything that is
// not an AMQP exception (541 INTERNAL_ERROR, logged as a bug).
func (c *conn) fail(err error) error {
	var e *amqp.Error
	if !errors.As(err, &e) {
		c.log.Error("internal error", zap.Error(err))
		e = &amqp.Error{Code: amqp.InternalError, Text: "INTERNAL_ERROR"}
	}
	c.logConnectionError(e) // connlog.go
	c.closeAllChannels()
	c.closeWith(e, e.Text)
	return c.awaitCloseOk(nil)
}

// closeWith sends connection.close and enters the closing state. It is
// safe from any goroutine.
func (c *conn) closeWith(e *amqp.Error, reason string) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.closeReason.Store(reason)
	c.closeDeadline.Store(time.Now().Add(closeOkTimeout).UnixNano())
	c.SendMethod(0, &amqp.ConnectionClose{ReplyCode: e.Code, ReplyText: amqp.CutReplyText(e.Text), ClassID: e.ClassID, MethodID: e.MethodID})
	// Wake the reader so that it re-arms its read deadline with the close
	// deadline. Setting the close deadline here instead could be undone
	// by a reader that loaded closeDeadline before the store above and
	// sets its (heartbeat, or no) deadline after us: the request flag is
	// checked after the reader sets a deadline and before it blocks.
	c.wakeReader()
}

// awaitCloseOk reads until the client's close-ok (or close) or the close
// deadline, discarding everything else; then returns err.
func (c *conn) awaitCloseOk(err error) error {
	for {
		f, rerr := c.fr.ReadFrame()
		if rerr != nil {
			if errors.Is(rerr, amqp.ErrFrame) {
				continue
			}
			return err
		}
		if c.whileClosing(f) {
			c.lingerFor = shortLinger
			return err
		}
	}
}
