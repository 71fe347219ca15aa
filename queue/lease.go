package queue

import (
	"errors"
	"time"
)

// Retries a worker schedules (amq.railmq.retry, channel/lease.go): a
// consumer returns a delivery to be ready again after a delay it chooses,
// with the retry holds x-retry-delay has (retry.go): counted as a
// redelivery (flagged redelivered, its delivery count up, checked
// against x-delivery-limit first), held neither ready nor unacked until
// due, its due time written into a durable queue's entry so that it is
// still held after a restart, clean or not. A quorum queue holds it in
// its log (DelayReturner), so the hold survives a failover too.

// ErrNoDelayedReturn is RetryAfter's answer on a queue that cannot hold a
// return for a chosen delay (a classic queue homed on another node, a
// stream): the delivery stays with the consumer.
var ErrNoDelayedReturn = errors.New("queue: this queue type cannot hold a return for a delay")

// DelayReturner is a Replica that holds returned deliveries until a due
// time (unix ms) in its own state (a quorum queue: its log).
type DelayReturner interface {
	ReturnAt(ds []Delivery, due int64, conf Confirmer)
}

// RetryAfter returns delivered messages to be ready again once delay has
// passed. It is a consumer's verdict, as basic.reject with requeue: a
// failed delivery. conf (if not nil) learns when the holds are durable
// (a quorum queue: in its log).
func (q *Queue) RetryAfter(ds []Delivery, delay time.Duration, conf Confirmer, fl *Flushes) error {
	delay = min(max(delay, 0), maxHold)
	if r := q.cfg.Replica; r != nil {
		x, ok := r.(DelayReturner)
		if !ok {
			return ErrNoDelayedReturn
		}
		x.ReturnAt(ds, time.Now().Add(delay).UnixMilli(), conf)
		return nil
	}
	q.postInline(op{kind: opRequeue, ds: ds, flags: flagFailed | flagRetry | flagDue, due: Now() + int64(delay), conf: conf}, fl)
	return nil
}

// HoldsReturns reports whether RetryAfter can hold a return on this
// queue.
func (q *Queue) HoldsReturns() bool {
	if r := q.cfg.Replica; r != nil {
		_, ok := r.(DelayReturner)
		return ok
	}
	return true
}
