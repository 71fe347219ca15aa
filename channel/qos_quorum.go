package channel

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// globalQosRefused refuses a consumer on a quorum queue while the
// channel has a global prefetch limit, as RabbitMQ 3.10.8 to 4.2 do
// (rabbit_quorum_queue:consume when the channel's limiter is active):
// 540, which closes the connection. RabbitMQ 3.10.8 answered "NOT_IMPLEMENTED
// - queue 'probe-qq' in vhost '/' does not support global qos" after
// basic.qos(10, global) and not after basic.qos(0, global), nor after a
// basic.qos without global following the global one (see unlimitGlobal).
//
// A stream refuses it too, after its own refusals of a consumer with no
// prefetch or no acks (rabbit_stream_queue.erl v3.10.8 consume: the
// limiter clause comes third; rabbit_channel words the error as for a
// quorum queue).
func (c *Channel) globalQosRefused(q *queue.Queue, qc *queue.Consumer, name string) error {
	args := q.Config().Args
	if vhost.IsStream(args) && (qc.Prefetch == 0 || qc.NoAck) {
		return nil
	}
	if !vhost.IsQuorum(args) && !vhost.IsStream(args) {
		return nil
	}
	c.mu.Lock()
	limited := c.globalPrefetch > 0
	c.mu.Unlock()
	if limited {
		return amqp.Errorf(amqp.NotImplemented, "queue '%s' in vhost '%s' does not support global qos", name, c.cfg.VHost.Name())
	}
	return nil
}

// unlimitGlobal lifts the channel's global prefetch limit: RabbitMQ's
// basic.qos with global=false does (rabbit_channel: rabbit_limiter:
// unlimit_prefetch, 3.10.8 to 4.2). RabbitMQ 3.10.8, asked with
// basic.qos(1, global) then basic.qos(3), delivered 3 messages to a
// consumer; in the other order, 1.
func (c *Channel) unlimitGlobal() {
	c.mu.Lock()
	was := c.globalPrefetch
	c.globalPrefetch = 0
	var kicks []kickReq
	if was > 0 {
		kicks = c.kicksLocked()
	}
	c.mu.Unlock()
	kick(kicks, c.cfg.Flushes)
}
