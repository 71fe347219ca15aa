package broker

import (
	"time"

	"go.uber.org/zap"
)

// flowShown is how long a connection shows the "flow" state after it was
// last held back, as RabbitMQ's credit_flow:state/0 (one second).
const flowShown = time.Second

// paceStall is how long a publisher waits for the consumers' pace while
// they take no message, before it goes on (waitFlow).
const paceStall = 100 * time.Millisecond

// waitFlow is per-connection flow control: a queue this connection
// published into is behind (queue.Queue.Behind: its store writes or its
// inbox lag, or its consumers drain a paged backlog more slowly than it
// grows), so the reader stops reading until the queue has caught up, and
// TCP backpressure slows this publisher alone, as RabbitMQ's credit flow
// does. Other connections go on. The intake does not depend on consumers,
// and a wait for their pace gives up when they stop taking messages, so
// waiting cannot wait for this connection's own acks. Called by the
// reader.
func (c *conn) waitFlow() {
	q := c.flowQ
	c.flowQ = nil
	if q.CaughtUp() {
		return
	}
	// What this reader delivered to consumers goes out before it waits.
	c.flushes.Flush()
	start := time.Now()
	c.flowAt.Store(start.UnixNano())
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	// A wait for the consumers' pace (queue.Queue.Behind) ends when
	// they take nothing for paceStall: they may wait for this very
	// connection's acks, which it does not read while it waits.
	dlv, moved := q.Delivered(), start
	for d := 50 * time.Microsecond; !q.CaughtUp(); d = min(2*d, 5*time.Millisecond) {
		t.Reset(d)
		select {
		case <-t.C:
		case <-c.srv.stop:
			return
		}
		c.runRequests()
		if c.closing.Load() {
			return
		}
		now := time.Now()
		if n := q.Delivered(); n != dlv {
			dlv, moved = n, now
		} else if now.Sub(moved) >= paceStall && q.Pacing() {
			q.PaceReset()
			moved = now
		}
		c.flowAt.Store(now.UnixNano())
	}
	if w := time.Since(start); w > time.Second {
		c.log.Debug("publisher held back by flow control", zap.String("queue", q.Name()), zap.Duration("for", w))
	}
}

// inFlow reports whether the connection was held back by flow control in
// the last flowShown.
func (c *conn) inFlow(now time.Time) bool {
	at := c.flowAt.Load()
	return at != 0 && now.UnixNano()-at < int64(flowShown)
}
