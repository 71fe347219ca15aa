package replica

import (
	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
)

// What a quorum queue's arguments ask of its consumers and of its life,
// beyond the limits: x-single-active-consumer (the state machine picks
// the active consumer, cluster/fifo_consumers.go), x-expires (the state
// machine keeps the last use, cluster/fifo_overflow.go; the leader deletes
// the queue once it has run out, as rabbit_fifo's tick has
// rabbit_quorum_queue spawn_deleter do) and x-message-ttl 0.

// orderConfig reads the arguments fifoConfig leaves.
func orderConfig(args amqp.Table, fc *cluster.FifoConfig) {
	if b, ok := args["x-single-active-consumer"].(bool); ok {
		fc.SingleActive = b
	}
	if n, ok := amqp.Int(args["x-expires"]); ok && n > 0 {
		fc.Expires = n
	}
	if n, ok := amqp.Int(args["x-message-ttl"]); ok && n == 0 {
		// RabbitMQ 4 expires a message of TTL 0 that was not delivered
		// within the millisecond it was enqueued in (rabbit_fifo.erl
		// update_expiry_header at v4.3.5: RaCmdTs + 1).
		fc.MessageTTL = 1
	}
}

// expireUnused (the leader's tick) deletes the queue once x-expires has
// run out: no consumer and no get for the period. A queue whose log has
// no use stamped yet (just made, or by a railmq without x-expires for
// quorum queues) is stamped now: its period starts then. It reports whether the
// queue is being deleted.
func (qq *quorumQueue) expireUnused(now int64) bool {
	if qq.expires <= 0 {
		return false
	}
	var unused, stamped bool
	qq.g.View(func(f *cluster.Fifo) {
		unused, stamped = f.Unused(now), f.LastActive() > 0
	})
	if !stamped {
		qq.g.Submit(cluster.Touch(now), nil)
		return false
	}
	if !unused || !qq.expiring.CompareAndSwap(false, true) {
		return unused
	}
	cfg := qq.q.Config()
	qq.m.log.Info("quorum queue expired (x-expires)", zap.String("vhost", cfg.VHost), zap.String("queue", cfg.Name))
	if err := qq.m.host.DropQueue(cfg.VHost, cfg.Name); err != nil {
		qq.m.log.Warn("expired quorum queue not deleted", zap.String("queue", cfg.Name), zap.Error(err))
		qq.expiring.Store(false) // the next tick tries again
	}
	return true
}
