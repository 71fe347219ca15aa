package channel

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// Consumer timeouts on quorum queues, as RabbitMQ 4.3 has them
// (rabbit_fifo.erl v4.3.5 evaluate_consumer_timeout, rabbit_channel.erl
// v4.3.5 handle_queue_actions {released, ..., timeout}): the deliveries
// past their timeout go back to the queue, as returns that did not fail
// (a delivery limit does not count them; x-acquired-count does); then a
// client that takes basic.cancel (consumer_cancel_notify) gets one for
// the consumer, which is cancelled, and its channel stays open; any
// other client's channel is closed, as before (the 406 of 3.x). The
// consumer's other unacked deliveries stay with it until acked,
// requeued, or timed out in turn; the client may still ack the returned
// ones (RabbitMQ's channel keeps their tags), which changes nothing.
// Elsewhere (classic queues, basic.get) a timeout closes the channel, as
// in RabbitMQ 3.8.15 to 4.2, where every queue type had it.

// ReturnTimedOut handles the deliveries past their consumer timeout
// (the broker's sweeper calls it on the connection's reader goroutine,
// after TimedOut). It returns those of quorum queues' consumers; it
// reports true when that is all there is to do (the client takes
// basic.cancel: their consumers are cancelled), false when the channel
// is to be closed.
func (c *Channel) ReturnTimedOut() bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return true
	}
	n := queue.Now()
	var bs []batch
	var cancel []*consumer
	closeIt := false
	for i := range c.unacked {
		u := &c.unacked[i]
		if u.done || u.returned || u.timeout <= 0 || n < u.deadline() {
			continue
		}
		if u.c == nil || !u.q.CancelsOnTimeout() {
			closeIt = true // a get's, or a classic queue's
			continue
		}
		u.returned = true
		bs = addBatch(bs, u)
		if cur := c.consumers[u.c.Tag]; cur != nil && cur.Consumer == u.c && c.cfg.CancelNotify {
			delete(c.consumers, u.c.Tag)
			cancel = append(cancel, cur)
		}
	}
	closeIt = closeIt || (len(bs) > 0 && !c.cfg.CancelNotify)
	c.mu.Unlock()
	for _, b := range bs {
		b.q.Recover(b.ds, c.cfg.Flushes)
	}
	for _, x := range cancel {
		x.q.Cancel(x.Consumer)
		c.send(&amqp.BasicCancel{ConsumerTag: x.Tag, NoWait: true})
	}
	return !closeIt
}

// addBatch adds u's delivery to the batch of its queue.
func addBatch(bs []batch, u *unacked) []batch {
	for i := range bs {
		if bs[i].q == u.q {
			bs[i].ds = append(bs[i].ds, u.d)
			return bs
		}
	}
	return append(bs, batch{q: u.q, ds: []queue.Delivery{u.d}})
}
