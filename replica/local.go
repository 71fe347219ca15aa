package replica

import "github.com/railmq/railmq/queue"

// local is a consumer on this node of a replicated queue, as both kinds
// deliver to it: the log (a quorum queue) or the home (a classic queue
// homed elsewhere) gives it deliveries, which wait in pending until its
// channel takes them. The channel refuses one when it has no room (its
// prefetch), and Kicks the queue when it has room again; a new consumer
// is held until its channel's first Kick, so that consume-ok goes out
// before the first delivery.
//
// Its owner's mutex guards it (quorumQueue.mu, classicProxy.mu), and
// deliver, which calls the channel's Sink.Deliver, runs under it; wake
// runs after it is released.
type local struct {
	c       *queue.Consumer
	held    bool // until the channel's first Kick (consume-ok first)
	pending []queue.Delivery
}

// deliver writes pending deliveries to the consumer's channel until it
// refuses one, and returns those written, in order (the caller records
// them as out: they are settled under the consumer's id). Owner's mutex
// held.
func (l *local) deliver(q *queue.Queue) []queue.Delivery {
	i := 0
	for ; i < len(l.pending) && !l.held; i++ {
		if !l.c.Sink.Deliver(l.c, q, l.pending[i]) {
			break
		}
	}
	written := l.pending[:i:i]
	l.pending = l.pending[i:]
	if len(l.pending) == 0 {
		l.pending = nil
	}
	return written
}

// kick is the channel's Kick: the consumer is no longer held, and what
// is pending is written (unless the owner holds its deliveries back:
// write false). Owner's mutex held.
func (l *local) kick(q *queue.Queue, write bool) []queue.Delivery {
	l.held = false
	if !write {
		return nil
	}
	return l.deliver(q)
}

// wake has the consumer's connection write what deliver appended (n
// deliveries). Owner's mutex released.
func (l *local) wake(n int) {
	if n > 0 && l.c.Out != nil {
		l.c.Out.Wake()
	}
}
