package broker

import (
	"encoding/binary"
	"errors"
	"io"
	"syscall"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// Push-mode reading. A read that finds the socket empty costs a system
// call (EAGAIN) before the reader parks in Go's poller, and each read
// through net.Conn (or RawConn.Read) begins by forgetting the readiness
// the poller saw before it, so it cannot skip that call. At a few
// thousand messages a second on a connection, one frame batch a wake-up,
// that is every other read.
//
// So the reader handles frames inside one RawConn.Read callback for as
// long as it can: the callback reads the socket raw, handles every whole
// frame buffered, and when the last read took less than the buffer
// offered (the socket was empty then) it returns false without another
// read: the poller parks the reader until input arrives. Input that
// arrived after that read and before the park has already marked the
// socket ready (the poller is edge-triggered and its readiness is kept
// within one RawConn.Read), so the reader does not sleep on it.
//
// The callback leaves (returns true) whenever the read loop must act
// outside it: a publish during an alarm or into a queue that is behind
// (those waits block), a request posted to the reader, the connection
// closing, a frame larger than the read buffer, a read error, or a
// buffer to grow. readLoop then goes on in pull mode (ReadFrame) for a
// frame, which handles each of these as it did before push mode. A
// frame's error leaves too, and is handled outside: closing the
// connection for it waits for the client's close-ok, a pull-mode read.
//
// Measured (S5, 5,000 msg/s, 1 KiB, ack each; side by side with the
// build before, 3 rounds): 1.85 system calls a message instead of 2.25,
// broker CPU the same within the noise (27.6 and 27.7 µs): a read that
// finds nothing is one of the cheaper calls, the wake-ups are the cost.
//
// While the reader is inside the callback it holds the socket's read
// lock: net.Conn.Close from another goroutine waits until the callback
// returns, which it does at its next read or park (Close wakes a parked
// reader). Nothing the callback runs waits for a goroutine that closes
// the socket.
type pushState struct {
	on      bool    // the read buffer fills from fd, raw (deadlineReader)
	fd      uintptr // the socket, while on
	drained bool    // the last raw read took less than offered
	again   bool    // the last raw read found nothing (EAGAIN)
	// err is a raw read's error (EOF included), for the next pull-mode
	// read to return after the buffered frames.
	err error
	in  bool // inside the callback: no pull-mode read may run
	// stop ends the read loop (the close handshake is over).
	stop bool
	// woken: the callback was left for an early wake-up (wokenEarly),
	// nothing else to handle: readLoop goes on in push mode.
	woken bool
	// A ReadFrame error with its frame, or a handleFrame error: for
	// pushFrames to handle outside the callback, as onFrame does.
	frame     amqp.Frame
	frameErr  error
	handleErr error
	step      func(fd uintptr) bool // c.pushStep, bound once (newConn)
}

// errReadInPush is a pull-mode read tried inside the push-mode callback,
// where it would wait for the read lock the callback holds: a bug.
var errReadInPush = errors.New("railmq: pull-mode read inside the push-mode callback")

// errWouldBlock is what a raw read in push mode gives the read buffer
// when it has no bytes for it: the buffer keeps its state and returns the
// error once (bufio.Reader does not keep it).
var errWouldBlock = errors.New("railmq: would block")

// pushFrames handles frames in push mode until it must leave. stop means
// the read loop ends with err.
func (c *conn) pushFrames() (stop bool, err error) {
	p := &c.push
	// The read deadline (heartbeats) moves on with what was read: it is
	// armed before parking too, but a connection whose socket always has
	// more (a publisher held back by flow control, faster than the broker)
	// never parks, and the RawConn read would fail at the old deadline.
	if err := c.armDeadline(); err != nil {
		return true, err
	}
	p.drained, p.again, p.stop, p.woken = false, false, false, false
	p.in = true
	err = c.io.rc.Read(p.step)
	p.in, p.on = false, false
	if err != nil && p.err == nil {
		if c.wokenEarly(err) {
			// A post, or the coalesced acks' deadline: back to push
			// mode (readLoop), not through a pull-mode read, whose
			// read finding the socket empty after the input is one
			// system call more each time.
			p.woken = true
		} else {
			p.err = err // a deadline (heartbeats), a closed socket
		}
	}
	switch {
	case p.stop:
		return true, nil
	case p.frameErr != nil:
		f, ferr := p.frame, p.frameErr
		p.frame, p.frameErr = amqp.Frame{}, nil
		return c.onFrame(f, ferr)
	case p.handleErr != nil:
		herr := p.handleErr
		p.handleErr = nil
		return true, c.failFor(herr)
	}
	return false, nil
}

// pushStep is the RawConn read callback of push mode: false parks the
// reader until the socket is readable, true leaves push mode.
func (c *conn) pushStep(fd uintptr) bool {
	c.push.fd = fd
	for {
		for {
			whole, fits := c.frameBuffered()
			if !whole {
				if !fits {
					return true // too large for the buffer: ReadFrame reads it
				}
				break
			}
			f, err := c.fr.ReadFrame() // buffered: no read
			if err != nil {
				// Handled outside: closing the connection for it
				// reads (awaitCloseOk), which the callback cannot.
				c.push.frame, c.push.frameErr = f, err
				return true
			}
			c.coal.note(f)
			done, err := c.dispatch(f)
			if err != nil || done {
				c.push.stop, c.push.handleErr = done, err // handled outside, idem
				return true
			}
			if c.published {
				if c.flowQ != nil && c.flowQ.CaughtUp() {
					c.flowQ = nil
				}
				if c.flowQ != nil || c.srv.alarmed() {
					return true // readLoop waits
				}
				c.published = false
			}
		}
		if c.push.err != nil || c.closing.Load() || c.growReader() {
			return true
		}
		// What the frames delivered goes out before the next read or
		// the park, as in pull mode (deadlineReader).
		c.flushes.Flush()
		if c.push.drained || c.push.again {
			c.push.drained, c.push.again = false, false
			c.coalesceAcks()
			// Before parking: serve posted requests and arm the read
			// deadline (heartbeats, coalesced acks).
			if err := c.armDeadline(); err != nil || c.reqFlag.Load() {
				return true
			}
			return false
		}
		c.push.on = true
		_, _ = c.br.Peek(c.br.Buffered() + 1) // one raw read (rawRead)
		c.push.on = false
	}
}

// frameBuffered reports whether a whole frame is in the read buffer, and
// if not whether one fits in it (the frame's header is buffered and says
// it is larger than the buffer: fits is false).
func (c *conn) frameBuffered() (whole, fits bool) {
	n := c.br.Buffered()
	if n < 7 {
		return false, true
	}
	hdr, _ := c.br.Peek(7)
	size := int64(binary.BigEndian.Uint32(hdr[3:])) + amqp.FrameOverhead
	return int64(n) >= size, size <= int64(c.br.Size())
}

// rawRead is a read in push mode: one read system call on the socket,
// never waiting. Nothing read (EAGAIN, an error, the end of the stream)
// is errWouldBlock to the read buffer; an error is kept in push.err.
func (c *conn) rawRead(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, e := sysRead(c.push.fd, p)
	switch {
	case e == syscall.EAGAIN:
		c.push.again = true
	case e != 0:
		c.push.err = c.io.opError("read", e)
	case n == 0:
		c.push.err = io.EOF
	default:
		c.io.counted(true, n)
		c.flushes.At = queue.Now()
		if n == len(p) {
			c.fullReads++ // more may be waiting: a busy connection
		} else {
			c.push.drained = true
		}
		return n, nil
	}
	return 0, errWouldBlock
}
