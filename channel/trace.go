package channel

import (
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Firehose tracing (vhost/trace.go): with tracing off for the vhost, a
// publish and a delivery each pay one atomic load (VHost.Tracing).

func (c *Channel) traceSource() vhost.TraceSource {
	return vhost.TraceSource{Conn: c.cfg.ConnName, Channel: c.cfg.Number, User: c.cfg.User}
}

// tracePublish routes the trace copy of msg, routed to qs.
func (c *Channel) tracePublish(msg *queue.Message, qs []*queue.Queue, extra []string) {
	c.cfg.VHost.TracePublish(msg, qs, extra, c.traceSource(), c.cfg.Flushes)
}

// traceDeliver queues the trace copy of a delivery from q (c.mu may be
// held: TraceDeliver posts nothing).
func (c *Channel) traceDeliver(q *queue.Queue, d queue.Delivery) {
	c.cfg.VHost.TraceDeliver(d.Msg, q.Name(), d.Redelivered, c.traceSource())
}
