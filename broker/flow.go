package broker

import (
	"time"

	"go.uber.org/zap"
)

// flowShown is how long a connection shows the "flow" state after it was
// last held back, as RabbitMQ's credit_flow:state/0 (one second).
const flowShown = time.Second

// waitFlow is per-connection flow control: a queue this connection
// published into is behind (queue.Queue.Behind: its store writes or its
// inbox lag), so the reader stops reading until the queue has caught up,
// and TCP backpressure slows this publisher alone, as RabbitMQ's credit
// flow does. Other connections go on. What the queue must catch up on
// does not depend on consumers, so waiting cannot wait for this
// connection's own acks. Called by the reader.
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
		c.flowAt.Store(time.Now().UnixNano())
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
