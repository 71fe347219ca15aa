package broker

import (
	"errors"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/channel"
	"github.com/railmq/railmq/queue"
)

// deadlineReader sets the socket's read deadline before reads from the
// kernel (not per frame): the handshake timeout, then silentLimit, and
// never past the close deadline. A heartbeat deadline is
// re-armed only once it has moved by a slack, which spares a timer update
// per read.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	c := d.c
	if c.push.on {
		return c.rawRead(p)
	}
	if c.push.in {
		return 0, errReadInPush
	}
	if err := c.push.err; err != nil {
		c.push.err = nil // what a read in push mode ended with
		return 0, err
	}
	c.flushes.Flush() // before waiting for input, write what we delivered
	for {
		if err := c.armDeadline(); err != nil {
			return 0, err
		}
		if c.reqFlag.Load() {
			continue // posted after runRequests: serve it before blocking
		}
		n, err := c.io.Read(p)
		if n > 0 {
			c.flushes.At = queue.Now()
		}
		if n == len(p) {
			c.fullReads++ // more may be waiting: a busy connection (readLoop)
		}
		if n == 0 && err != nil && c.wokenEarly(err) {
			continue
		}
		return n, err
	}
}

// wokenEarly reports whether err, from a wait for input, is a post's
// wake-up rather than the read deadline passing.
func (c *conn) wokenEarly(err error) bool {
	if !isTimeout(err) {
		return false
	}
	if c.reqFlag.Load() {
		return true // woken to serve a request, not a real timeout
	}
	if c.coal.until != 0 && time.Now().UnixNano() >= c.coal.until {
		// The coalesced acks' deadline: read what the mark held back.
		c.coal.until = 0
		c.lowerLowat()
		c.rdlSet = false
		return true
	}
	if c.rdl != 0 && time.Now().UnixNano() < c.rdl {
		// A post's wake-up that lost the race with our deadline.
		c.rdlSet = false
		return true
	}
	return false
}

// armDeadline runs what post queued and sets the socket's read deadline
// for a read from the kernel now (see readDeadline). The caller checks
// reqFlag after it, before blocking.
func (c *conn) armDeadline() error {
	if c.runRequests() {
		c.rdlSet = false // post moved the deadline
	}
	cd := c.closeDeadline.Load()
	if u := c.coal.until; u != 0 && (cd == 0 || u < cd) {
		// Coalesced acks are read by then (lowat.go): the earliest
		// deadline, heartbeats' being seconds away.
		if !c.rdlSet || c.rdl != u {
			if err := c.nc.SetReadDeadline(time.Unix(0, u)); err != nil {
				return err
			}
			c.rdl, c.rdlSet = u, true
		}
		return nil
	}
	dl, rearm := readDeadline(time.Now().UnixNano(), c.heartbeat, cd, c.rdl, c.rdlSet)
	if rearm {
		var t time.Time
		if dl != 0 {
			t = time.Unix(0, dl)
		}
		if err := c.nc.SetReadDeadline(t); err != nil {
			return err
		}
		c.rdl, c.rdlSet = dl, true
	}
	return nil
}

// readDeadline decides the read deadline (unix nanos; 0 = none) for a
// read from the kernel at now: with heartbeats on, silentLimit from now
// or up to a slack (a quarter interval) later; never past closeDeadline
// (0 = none). current is the deadline set last, and set says it is still
// in force (false once a post moved it). It returns the deadline to be in
// force and whether the socket's must be set to it (rearm); without
// rearm, dl is current.
//
// A heartbeat deadline is set a slack later than needed, so the reads
// within the slack keep it. Anything else (a close deadline, no deadline
// after one, a deadline a post moved) is set every time.
func readDeadline(now int64, heartbeat time.Duration, closeDeadline, current int64, set bool) (dl int64, rearm bool) {
	if heartbeat > 0 {
		dl = now + int64(silentLimit(heartbeat))
	}
	cd := closeDeadline
	if cd != 0 && (dl == 0 || cd < dl) {
		dl = cd
	}
	slack := int64(heartbeat / 4)
	rearm = !set || cd != 0
	if !rearm {
		if dl == 0 {
			rearm = current != 0
		} else {
			rearm = current == 0 || current < dl || current > dl+slack
		}
	}
	if !rearm {
		return current, false
	}
	if cd == 0 && dl != 0 {
		dl += slack
	}
	return dl, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// post queues fn to run on the reader goroutine and wakes the reader.
func (c *conn) post(fn func()) {
	c.reqMu.Lock()
	c.reqs = append(c.reqs, fn)
	c.reqMu.Unlock()
	c.wakeReader()
}

// wakeReader has the reader run its requests and re-arm its read
// deadline: the flag first, then a deadline in the past, so that a reader
// which checked the flag before it was set is woken by the deadline.
func (c *conn) wakeReader() {
	c.reqFlag.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

// runRequests runs what post queued; it reports whether there was any.
func (c *conn) runRequests() bool {
	if !c.reqFlag.Load() {
		return false
	}
	c.reqMu.Lock()
	reqs := c.reqs
	c.reqs = nil
	c.reqFlag.Store(false)
	c.reqMu.Unlock()
	for _, fn := range reqs {
		fn()
	}
	return true
}

// checkTimeouts closes (through the reader) each channel holding a
// delivery past its consumer timeout, but where the deliveries are a
// quorum queue's and the client takes basic.cancel: their consumers are
// cancelled (channel.ReturnTimedOut). Called by the server's sweeper.
func (c *conn) checkTimeouts() {
	c.snapMu.Lock()
	type hit struct {
		n  uint16
		ch *channel.Channel
		t  time.Duration
	}
	var hits []hit
	for n, ch := range c.snap {
		if t, ok := ch.TimedOut(); ok {
			hits = append(hits, hit{n, ch, t})
		}
	}
	c.snapMu.Unlock()
	for _, h := range hits {
		c.post(func() {
			if c.channels[h.n] != h.ch || c.closing.Load() {
				return
			}
			if h.ch.ReturnTimedOut() {
				// A quorum queue's, for a client that takes basic.cancel:
				// returned, its consumer cancelled (channel/timeout.go).
				c.log.Warn("consumer timeout: consumer cancelled", zap.Uint16("channel", h.n), zap.Duration("timeout", h.t))
				return
			}
			c.log.Warn("consumer timeout: closing channel", zap.Uint16("channel", h.n), zap.Duration("timeout", h.t))
			c.closeChannel(h.n, amqp.Errorf(amqp.PreconditionFailed,
				"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
					"This timeout value can be configured, see consumers doc guide to learn more", h.n, h.t.Milliseconds()))
		})
	}
}

// silentLimit is how long a client may stay silent before it is dropped
// for missed heartbeats, less the deadline's slack (a quarter interval),
// so that the drop comes 2¾ to 3 intervals after the last byte read.
// RabbitMQ checks every interval and drops at the second check in a row
// that saw nothing, 2 to 3 intervals after the last byte: a client it
// keeps (a pika application blocked for 2½ intervals) railmq keeps too.
func silentLimit(hb time.Duration) time.Duration { return 11 * hb / 4 }

// errHeartbeat is a peer that stayed silent past silentLimit.
var errHeartbeat = errors.New("missed heartbeats from client, timeout")
