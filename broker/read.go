package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/channel"
)

// readLoop reads and dispatches frames until the connection ends.
func (c *conn) readLoop() error {
	for {
		c.maybeGrowReader()
		// As RabbitMQ, a connection is blocked by a publish during an
		// alarm: one that published before it and now only acks and
		// consumes keeps being read, so that a backlog can drain.
		if c.published {
			c.published = false
			if c.srv.alarmed() {
				c.flushes.At = 0 // a wait: what follows is stamped afresh
				if err := c.blockWhileAlarm(); err != nil {
					return err
				}
			}
			if c.flowQ != nil {
				c.flushes.At = 0
				c.waitFlow()
			}
		}
		if c.io.rc != nil && !c.closing.Load() {
			stop, err := c.pushFrames()
			if stop {
				return err
			}
			if c.published || c.growReader() || c.push.woken {
				c.push.woken = false
				continue // the checks above first
			}
		}
		f, err := c.fr.ReadFrame()
		if stop, err := c.onFrame(f, err); stop {
			return err
		}
	}
}

// onFrame handles what one ReadFrame returned: a frame, or the error
// that ends the connection. stop means the read loop ends with err.
func (c *conn) onFrame(f amqp.Frame, err error) (stop bool, _ error) {
	if err != nil {
		if c.closing.Load() {
			return true, nil // no close-ok in time (or EOF): just close
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.log.Warn("missed heartbeats from client, closing", zap.Duration("heartbeat", c.heartbeat))
			return true, errHeartbeat
		}
		if errors.Is(err, amqp.ErrFrame) {
			return true, c.fail(frameError(err, f))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
			if c.closeReason.Load() == nil {
				c.closeReason.Store("client unexpectedly closed TCP connection")
			}
			return true, nil
		}
		return true, err
	}
	done, err := c.dispatch(f)
	if err != nil {
		return true, c.failFor(err)
	}
	return done, nil
}

// dispatch handles a frame read whole. After we sent connection.close
// only close and close-ok count: done means the close handshake is over.
// Otherwise the frame goes to handleFrame, whose error ends the
// connection (failFor).
func (c *conn) dispatch(f amqp.Frame) (done bool, err error) {
	c.floor.in += int64(len(f.Payload)) + amqp.FrameOverhead
	if c.closing.Load() {
		if c.whileClosing(f) {
			c.lingerFor = shortLinger
			return true, nil
		}
		return false, nil
	}
	return false, c.handleFrame(f)
}

// failFor is what the read loop ends with for a handleFrame error: the
// client's own close is the normal end, anything else closes the
// connection for it (fail, which reads until the client's close-ok).
func (c *conn) failFor(err error) error {
	if errors.Is(err, errClientClosed) {
		return nil
	}
	return c.fail(err)
}

// maybeGrowReader swaps in a large read buffer once 64 reads found more
// waiting than the small one holds: the connection carries traffic.
// (Waiting for the small buffer to be empty between frames, as before,
// never happened with 1 KiB messages: 2 KiB reads, two messages a system
// call, and as many writes of their deliveries.) What the small buffer
// holds is read first.
func (c *conn) maybeGrowReader() {
	if !c.growReader() {
		return
	}
	var r io.Reader = deadlineReader{c}
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		r = &prefixReader{pre: bytes.Clone(b), r: r}
	}
	c.br = bufio.NewReaderSize(r, 64<<10)
	max := c.fr.Max
	c.fr = amqp.NewFrameReader(c.br)
	c.fr.Max = max
}

// growReader reports whether maybeGrowReader would grow the read buffer.
func (c *conn) growReader() bool {
	return c.fullReads >= 64 && c.br.Size() < 64<<10
}

// prefixReader reads pre, then r.
type prefixReader struct {
	pre []byte
	r   io.Reader
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.pre) == 0 {
		return p.r.Read(b)
	}
	n := copy(b, p.pre)
	p.pre = p.pre[n:]
	return n, nil
}

func frameError(err error, f amqp.Frame) *amqp.Error {
	var tl *amqp.FrameTooLargeError
	var be *amqp.BadFrameEndError
	switch {
	case errors.As(err, &tl):
		return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - " + tl.Error()}
	case errors.As(err, &be):
		expl := fmt.Sprintf("type %d, %s: ", be.Type, snippet(f.Payload))
		return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - " + expl + amqp.ErlPair(len(expl), "invalid_frame_end_marker", strconv.Itoa(int(be.End)))}
	}
	return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - " + err.Error()}
}

// snippet is a frame's payload as RabbitMQ's frame error texts show it
// (rabbit_reader:payload_snippet, printed with ~p): all of it up to 16
// octets, else the first 16.
func snippet(p []byte) string {
	if len(p) <= 16 {
		return "all octets = " + amqp.ErlBinary(p)
	}
	return "first 16 octets = " + amqp.ErlBinary(p[:16])
}

// unknownFrame is RabbitMQ's close for a frame it cannot take as any
// frame (rabbit_reader: unknown_frame).
func unknownFrame(f amqp.Frame) error {
	return &amqp.Error{Code: amqp.FrameError, Text: fmt.Sprintf("FRAME_ERROR - type %d, %s: unknown_frame", f.Type, snippet(f.Payload))}
}

// clientMethod reports whether a client may send m: the spec's server
// chassis, less basic.cancel-ok (RabbitMQ sends basic.cancel with nowait
// and refuses a cancel-ok as it refuses the methods only servers send).
func clientMethod(m amqp.Method) bool {
	if _, ok := m.(*amqp.BasicCancelOk); ok {
		return false
	}
	return m.ServerHandles()
}

// handleFrame dispatches one frame of the running connection.
func (c *conn) handleFrame(f amqp.Frame) error {
	switch f.Type {
	case amqp.FrameHeartbeat:
		if len(f.Payload) != 0 {
			// RabbitMQ knows only the empty heartbeat frame.
			return unknownFrame(f)
		}
		if f.Channel != 0 {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: fmt.Sprintf("UNEXPECTED_FRAME - type 8, %s", snippet(f.Payload))}
		}
		return nil
	case amqp.FrameMethod, amqp.FrameHeader, amqp.FrameBody:
	default:
		return unknownFrame(f)
	}
	if f.Channel == 0 {
		return c.handleChannel0(f)
	}
	if len(c.closingChans) > 0 {
		if _, ok := c.closingChans[f.Channel]; ok {
			return c.whileChannelClosing(f)
		}
	}
	ch := c.channel(f.Channel)
	if f.Type != amqp.FrameMethod {
		if ch == nil {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected method frame, got non method frame instead"}
		}
		err := ch.HandleContent(f)
		c.published = true
		if q := ch.TakeFlow(); q != nil {
			c.flowQ = q
		}
		return c.channelResult(f.Channel, err)
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	if !clientMethod(m) {
		return unimplemented(m)
	}
	if ch == nil {
		if _, ok := m.(*amqp.ChannelOpen); ok {
			return c.openChannel(f.Channel)
		}
		e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - expected 'channel.open'"}
		e.ClassID, e.MethodID = m.Index()
		return e
	}
	switch m := m.(type) {
	case *amqp.ChannelOpen:
		e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - second 'channel.open' seen"}
		e.ClassID, e.MethodID = m.Index()
		return e
	case *amqp.ChannelClose:
		ch.Flush()
		c.removeChannel(f.Channel)
		c.SendMethod(f.Channel, &amqp.ChannelCloseOk{})
		return nil
	case *amqp.ChannelCloseOk:
		// A close-ok for a close we never sent: ignore, as RabbitMQ does
		// for a channel in the open state.
		return nil
	}
	err = ch.HandleMethod(m)
	switch m.(type) {
	case *amqp.BasicPublish, *amqp.BasicAck, *amqp.BasicNack, *amqp.BasicReject:
	default:
		// Any other method may have waited (a declare in a cluster, a
		// commit): what the rest of the read batch publishes or delivers
		// is timed afresh, not with the read (queue.Flushes.At).
		c.flushes.At = 0
	}
	return c.channelResult(f.Channel, err)
}

// channel is channel n, or nil. The last one looked up is remembered: a
// connection mostly works one channel, three frames to a publish.
func (c *conn) channel(n uint16) *channel.Channel {
	if c.lastCh != nil && c.lastN == n {
		return c.lastCh
	}
	ch := c.channels[n]
	c.lastN, c.lastCh = n, ch
	return ch
}

// removeChannel closes a channel and forgets it.
func (c *conn) removeChannel(n uint16) {
	ch := c.channels[n]
	if ch == nil {
		return
	}
	delete(c.channels, n)
	if c.lastN == n {
		c.lastCh = nil
	}
	c.nchan.Add(-1)
	c.srv.chClosed.Add(1)
	c.snapMu.Lock()
	delete(c.snap, n)
	c.snapMu.Unlock()
	ch.Close()
}

// channelResult turns a channel's soft error into channel.close; hard
// errors go up to close the connection.
func (c *conn) channelResult(n uint16, err error) error {
	if err == nil {
		return nil
	}
	var e *amqp.Error
	if errors.As(err, &e) && !e.Hard() {
		c.closeChannel(n, e)
		return nil
	}
	return err
}

// closeChannel closes channel n with a soft error: its deliveries are
// requeued now; the number is free again once the client's close-ok comes.
func (c *conn) closeChannel(n uint16, e *amqp.Error) {
	if ch := c.channels[n]; ch != nil {
		ch.Flush() // confirms already earned go out before the close
	}
	c.removeChannel(n)
	c.closingChans[n] = struct{}{}
	c.logChannelError(n, e) // connlog.go
	c.SendMethod(n, &amqp.ChannelClose{ReplyCode: e.Code, ReplyText: amqp.CutReplyText(e.Text), ClassID: e.ClassID, MethodID: e.MethodID})
}

// whileChannelClosing handles a frame on a channel we sent channel.close
// on: all but close-ok and close are dropped.
func (c *conn) whileChannelClosing(f amqp.Frame) error {
	if f.Type != amqp.FrameMethod {
		return nil
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	switch m.(type) {
	case *amqp.ChannelCloseOk:
		delete(c.closingChans, f.Channel)
	case *amqp.ChannelClose:
		// Both sides closed at once: answer, and still expect the
		// close-ok for ours (§4.2.4.1).
		c.SendMethod(f.Channel, &amqp.ChannelCloseOk{})
	case *amqp.ChannelOpen:
		// A client that took our close for done (no close-ok) reopens.
		delete(c.closingChans, f.Channel)
		return c.openChannel(f.Channel)
	}
	return nil
}

func (c *conn) openChannel(n uint16) error {
	if n > c.channelMax {
		return amqp.Errorf(amqp.NotAllowed, "channel number %d is higher than the negotiated channel_max (%d)", n, c.channelMax)
	}
	if len(c.channels) >= int(c.channelMax) {
		return amqp.Errorf(amqp.NotAllowed, "number of channels opened (%d) has reached the negotiated channel_max (%d)", len(c.channels), c.channelMax)
	}
	if err := c.channelLimit(); err != nil {
		return err
	}
	ch := channel.New(channel.Config{
		Number:          n,
		Sink:            c,
		VHost:           c.vh,
		ConnID:          c.id,
		User:            c.user,
		ConnName:        connectionName(c.nc),
		Grant:           c.grant,
		Impersonator:    c.authUser != nil && c.authUser.HasTag("impersonator"),
		MaxMessageSize:  c.srv.opts.MaxMessageSize,
		ConsumerTimeout: c.srv.opts.ConsumerTimeout,
		CancelNotify:    c.clientCapability("consumer_cancel_notify"),
		Replies:         &c.srv.replies,
		Logger:          c.log.base,
		Flushes:         &c.flushes,
		Memory:          &c.srv.memory,
		Totals:          &c.srv.totals,
	})
	c.channels[n] = ch
	c.nchan.Add(1)
	c.srv.chOpened.Add(1)
	c.snapMu.Lock()
	c.snap[n] = ch
	c.snapMu.Unlock()
	c.reply(n, &amqp.ChannelOpenOk{})
	return nil
}

// unimplemented answers a method only a server may send, as RabbitMQ does.
func unimplemented(m amqp.Method) error {
	e := &amqp.Error{Code: amqp.CommandInvalid, Text: "COMMAND_INVALID - unimplemented method"}
	e.ClassID, e.MethodID = m.Index()
	return e
}

// decodeError maps a method decoding failure to RabbitMQ's close: a
// frame too short for its class and method ids is an unknown frame to
// RabbitMQ (rabbit_command_assembler:analyze_frame); arguments that do not
// decode are "cannot decode" and all their octets, with ~w
// (rabbit_misc:frame_error), the reply text then cut at 255 octets.
func decodeError(err error, payload []byte) error {
	if len(payload) < 4 {
		return unknownFrame(amqp.Frame{Type: amqp.FrameMethod, Payload: payload})
	}
	var um *amqp.UnknownMethodError
	if errors.As(err, &um) {
		return &amqp.Error{Code: amqp.CommandInvalid, Text: fmt.Sprintf("COMMAND_INVALID - unknown method %d/%d", um.ClassID, um.MethodID),
			ClassID: um.ClassID, MethodID: um.MethodID}
	}
	return &amqp.Error{Code: amqp.FrameError, Text: amqp.CutReplyText("FRAME_ERROR - cannot decode " + amqp.ErlBytes(payload[4:])),
		ClassID: uint16(payload[0])<<8 | uint16(payload[1]), MethodID: uint16(payload[2])<<8 | uint16(payload[3])}
}
