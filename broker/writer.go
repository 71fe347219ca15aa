package broker

import (
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// maxOutbound caps a connection's unsent bytes; past it, queues stop
// delivering to this connection's consumers until the writer catches up.
const maxOutbound = 4 << 20

// SendMethod queues a method frame (channel.FrameSink).
func (c *conn) SendMethod(ch uint16, m amqp.Method) {
	c.outMu.Lock()
	if !c.outClosed {
		c.out = amqp.AppendMethodFrame(c.out, ch, m)
	}
	c.outMu.Unlock()
	c.signal()
}

// reply queues a method frame from the reader without waking the writer:
// the reader writes it inline (Flush) once it has handled what it read,
// before it reads or parks again. The handshake's and channel.open's
// replies go so, so that opening a connection starts no writer goroutine
// (an idle connection then holds none: signal).
func (c *conn) reply(ch uint16, m amqp.Method) {
	c.outMu.Lock()
	if !c.outClosed {
		c.out = amqp.AppendMethodFrame(c.out, ch, m)
	}
	c.outMu.Unlock()
	c.flushes.Add(c)
}

// SendContent queues a method with its content header and body frames,
// so they go out in one flush, and reports whether the bytes queued and
// being written are now over the cap (channel.FrameSink).
func (c *conn) SendContent(ch uint16, m amqp.Method, props, body []byte) (full bool) {
	full = c.AppendContent(ch, m, props, body)
	c.signal()
	return full
}

// AppendContent is SendContent without waking the writer: a queue has
// the bytes written after its batch (channel.FrameSink, queue.Outlet).
func (c *conn) AppendContent(ch uint16, m amqp.Method, props, body []byte) (full bool) {
	c.outMu.Lock()
	if !c.outClosed {
		c.out = amqp.AppendMethodFrame(c.out, ch, m)
		c.out = amqp.AppendContent(c.out, ch, amqp.ClassBasic, props, body, c.frameMax)
		full = len(c.out)+c.inflight >= maxOutbound
	}
	c.outMu.Unlock()
	if c.lowatRaised.Load() {
		// A delivery (or get-ok, return) under a raised mark: one ack
		// more may come (lowat.go). Counted only then: the raise takes
		// its room from the channels' counts, which hold the others.
		c.lowatRoom.Add(-1)
	}
	return full
}

// Schedule calls fn from the writer before its next write
// (channel.FrameSink).
func (c *conn) Schedule(fn func()) {
	c.outMu.Lock()
	c.hooks = append(c.hooks, fn)
	c.outMu.Unlock()
	c.signal()
}

// NotifyWritable calls fn once the outbound bytes fall under the cap
// (channel.FrameSink). It runs on the writer goroutine.
func (c *conn) NotifyWritable(fn func()) {
	c.outMu.Lock()
	c.waiters = append(c.waiters, fn)
	c.outMu.Unlock()
	c.signal()
}

// signal wakes the writer, and starts one if none runs.
func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if !c.writerOn.Load() && c.writerOn.CompareAndSwap(false, true) {
		go c.writeLoop()
	}
}

// writerIdle is how long a writer goroutine waits with nothing to write
// before it exits (between one and two of these). Most connections are
// idle most of the time: an idle connection then holds one goroutine, its
// reader, and the memory of a connection is about a quarter less (S7:
// 16 KiB instead of 21). The handshake's replies and heartbeats are
// written inline (reply, heartbeatTick), so they start no writer; the
// next signal starts one again.
const writerIdle = 250 * time.Millisecond

// writeLoop writes whatever is queued, one write per batch, until the
// connection's output is closed (it then closes writerEnd and leaves
// writerOn set: no writer starts again) or it was idle for writerIdle.
func (c *conn) writeLoop() {
	idle := time.NewTicker(writerIdle)
	defer idle.Stop()
	rounds := 0
	for {
		select {
		case <-c.wake:
		case <-idle.C:
			if rounds > 0 {
				rounds = 0
				continue
			}
			// Idle: exit. A signal that came after the last wake-up and
			// saw writerOn still set started no writer: its token is in
			// wake, and this writer takes the work back if no other
			// writer has started since.
			c.writerOn.Store(false)
			select {
			case <-c.wake:
				if !c.writerOn.CompareAndSwap(false, true) {
					c.signal() // the token is the new writer's
					return
				}
			default:
				return
			}
		}
		rounds++
		c.wmu.Lock()
		w, ok := c.writeOut(c.tunedHeartbeat())
		c.wmu.Unlock()
		if w && !c.wroteTraffic.Load() {
			c.wroteTraffic.Store(true) // once per tick, not per round
		}
		if !ok {
			close(c.writerEnd)
			return
		}
	}
}

// tunedHeartbeat is the negotiated heartbeat, 0 before tune-ok.
func (c *conn) tunedHeartbeat() time.Duration {
	select {
	case <-c.tuned:
		return c.heartbeat
	default:
		return 0
	}
}

// startHeartbeats arms the heartbeat timer once the heartbeat is tuned
// (handshake): a heartbeat goes out every half interval in which nothing
// else did, as RabbitMQ's heartbeater: clients count two silent intervals
// as a dead peer, so a full interval would leave no margin.
func (c *conn) startHeartbeats() {
	if c.heartbeat > 0 {
		c.outMu.Lock()
		if !c.outClosed {
			c.hbTimer = time.AfterFunc(c.heartbeat/2, c.heartbeatTick)
		}
		c.outMu.Unlock()
	}
}

// heartbeatTick runs on the heartbeat timer: a heartbeat when nothing
// went out since the last tick, written from here if it can be at once
// (no writer goroutine woken; the writer takes it otherwise). The
// heartbeat itself does not count as traffic (writeOut; wroteInline is
// cleared after its flush).
func (c *conn) heartbeatTick() {
	beat := !c.wroteTraffic.Swap(false)
	beat = !c.wroteInline.Swap(false) && beat
	c.outMu.Lock()
	if c.outClosed {
		c.outMu.Unlock()
		return
	}
	c.hbTimer.Reset(c.heartbeat / 2)
	if beat && len(c.out) == 0 {
		c.out = amqp.AppendHeartbeat(c.out)
	}
	c.outMu.Unlock()
	if beat {
		c.Flush()
		c.wroteInline.Store(false)
	}
}

// writeOut is one round of the writer: the scheduled hooks, then what is
// left of an inline flush, then everything queued. It reports whether it
// wrote (a lone heartbeat does not count), and false in ok once the
// writer must exit. c.wmu held.
func (c *conn) writeOut(hb time.Duration) (wrote, ok bool) {
	c.outMu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.outMu.Unlock()
	for _, fn := range hooks {
		fn() // appends to c.out
	}
	if len(c.rest) > 0 {
		wrote = true
		if !c.writeAll(c.rest, hb) {
			return wrote, false
		}
		c.spare = c.restBuf[:0]
		c.rest, c.restBuf = nil, nil
	}
	gen := c.lowatGen.Load()
	c.outMu.Lock()
	buf := c.out
	c.out = c.spare[:0]
	c.spare = nil
	closed := c.outClosed
	c.inflight = len(buf)
	waiters := c.writableLocked()
	c.outMu.Unlock()
	for _, fn := range waiters {
		fn()
	}
	if len(buf) > 0 {
		wrote = wrote || !amqp.IsHeartbeat(buf)
		if !c.writeAll(buf, hb) {
			return wrote, false
		}
		c.readHeldAcks(gen) // see Flush
	}
	c.outMu.Lock()
	c.inflight = 0
	waiters = c.writableLocked() // registered while buf went out
	c.outMu.Unlock()
	for _, fn := range waiters {
		fn()
	}
	if cap(buf) > 1<<20 {
		buf = nil // do not keep a burst's buffer forever
	}
	c.spare = buf[:0]
	return wrote, !closed
}

// writableLocked takes the waiters to call once the outbound bytes are
// under the cap. c.outMu held.
func (c *conn) writableLocked() []func() {
	if len(c.waiters) == 0 || len(c.out)+c.inflight >= maxOutbound {
		return nil
	}
	w := c.waiters
	c.waiters = nil
	return w
}

// writeAll writes p, waiting for the socket up to the write timeout. On
// failure the connection is closed (which also stops the reader).
func (c *conn) writeAll(p []byte, hb time.Duration) bool {
	if err := c.nc.SetWriteDeadline(time.Now().Add(writeTimeout(hb))); err != nil {
		return false
	}
	if _, err := c.io.Write(p); err != nil {
		c.log.Debug("write failed", zap.Error(err))
		c.outMu.Lock()
		c.outClosed = true
		c.out = nil
		c.outMu.Unlock()
		c.nc.Close() // unblocks the reader
		return false
	}
	return true
}

// Wake has the writer write what deliveries appended (queue.Outlet).
func (c *conn) Wake() { c.signal() }

// Flush writes what deliveries appended on the calling goroutine when the
// socket takes it at once, else leaves it to the writer (queue.Outlet).
// Readers call it for the connections their read batch delivered to.
func (c *conn) Flush() {
	if !c.wmu.TryLock() {
		c.signal() // the writer is at it, and will look again
		return
	}
	gen := c.lowatGen.Load()
	c.outMu.Lock()
	if c.outClosed || len(c.rest) > 0 || len(c.hooks) > 0 || len(c.waiters) > 0 || len(c.out) == 0 {
		// Nothing to write, or work that is the writer's.
		wake := c.outClosed || len(c.rest) > 0 || len(c.hooks) > 0 || len(c.waiters) > 0
		c.outMu.Unlock()
		c.wmu.Unlock()
		if wake {
			c.signal()
		}
		return
	}
	buf := c.out
	c.out = c.spare[:0]
	c.spare = nil
	c.inflight = len(buf)
	c.outMu.Unlock()
	n := c.io.TryWrite(buf)
	c.readHeldAcks(gen) // the acks held back are read in this wake-up
	if n < len(buf) {
		// The socket is full (or failed): the writer waits for it.
		c.rest, c.restBuf = buf[n:], buf
		c.outMu.Lock()
		c.inflight = len(c.rest)
		c.outMu.Unlock()
		c.wmu.Unlock()
		c.signal()
		return
	}
	c.outMu.Lock()
	c.inflight = 0
	c.outMu.Unlock()
	if cap(buf) > 1<<20 {
		buf = nil
	}
	c.spare = buf[:0]
	c.wroteInline.Store(true)
	c.wmu.Unlock()
}

// writeTimeout bounds a blocked write: a client that stops reading for
// this long is dropped.
func writeTimeout(hb time.Duration) time.Duration {
	if hb > 0 {
		return 2 * hb
	}
	return 5 * time.Minute
}

// stopWriter flushes what is queued and waits for the writer to exit.
func (c *conn) stopWriter() {
	c.outMu.Lock()
	c.outClosed = true
	if c.hbTimer != nil {
		c.hbTimer.Stop() // a tick running now sees outClosed
	}
	c.outMu.Unlock()
	c.signal()
	select {
	case <-c.writerEnd:
	case <-time.After(closeOkTimeout):
		c.nc.Close()
		<-c.writerEnd
	}
}
