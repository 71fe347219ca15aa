package replica

import (
	"sync/atomic"
	"time"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// A quorum queue's delivery limit, its returns as RabbitMQ 4.3 counts
// them, and its delayed retries (cluster/fifo_limits.go has the state
// machine's half).
//
//   - Return (queue.Returner) sends a Modify: failed or not (a reject or
//     a consumer gone fails; a nack, a recover, a consumer timeout do
//     not), with the due time the queue's retry setting gives the
//     return (queue.Retry: the same computation as a classic queue's
//     holds), so that the log holds the message until then.
//   - SetPolicy (queue.PolicySetter) takes the queue's policy: its retry
//     setting, and its delivery limit, which goes into the log as a
//     Config entry when it differs from the log's (RabbitMQ 4.3:
//     policy_changed sends the new machine config to the live queue).
//     The leader checks again every second (limitsTick): a Config lost
//     with a leader is sent again. The policy a queue starts with is its
//     arguments' (Start), then, at once, the policies' (the registry's
//     SetPolicy when any match): no Config is sent for the first, which
//     the log's initial state has already.
//   - The leader submits a Tick when the first held message comes due
//     (a timer armed after each entry it applies, and limitsTick).

// limits is a quorumQueue's policy-given state; its fields are read and
// written from any goroutine.
type limits struct {
	retry atomic.Pointer[queue.Retry]
	// pol: the queue's policy now (its dead-letter exchange among the
	// rest): what the leader dead-letters with (policy).
	pol atomic.Pointer[queue.Policy]
	// want: what the policy gives of the state machine's configuration
	// (cluster.FifoConfig.Policied: the delivery limit, -1 for none, the
	// length limits, overflow, message TTL); nil until a policy is set.
	want  atomic.Pointer[cluster.FifoConfig]
	dueAt atomic.Int64 // unix ms the due timer is armed for (0: none)
}

// setPolicyLimits takes what the queue's policy says of returns.
func (l *limits) setPolicyLimits(p *queue.Policy) {
	pc := *p
	l.pol.Store(&pc)
	r := p.Retry
	l.retry.Store(&r)
	lim := int64(cluster.DefaultDeliveryLimit)
	if p.DeliveryLimitSet {
		lim = p.DeliveryLimit
	}
	w := cluster.FifoConfig{DeliveryLimit: max(lim, -1), RejectPublish: p.Overflow == queue.RejectPublish}
	if p.MaxLength >= 0 {
		w.MaxLength, w.MaxLengthOn = p.MaxLength, true
	}
	if p.MaxLengthBytes >= 0 {
		w.MaxLengthBytes, w.MaxLengthBytesOn = p.MaxLengthBytes, true
	}
	switch {
	case p.MessageTTL == 0:
		w.MessageTTL = 1 // as x-message-ttl 0 (quorum_order.go)
	case p.MessageTTL > 0:
		w.MessageTTL = max(p.MessageTTL.Milliseconds(), 1)
	}
	w = w.Policied()
	l.want.Store(&w)
}

// SetPolicy takes a policy change (queue.PolicySetter).
func (qq *quorumQueue) SetPolicy(p queue.Policy) {
	qq.lim.setPolicyLimits(&p)
	qq.syncLimit()
}

// syncLimit sends a Config entry when the log's configuration is not
// what the policy gives (the delivery limit, the length limits,
// overflow, message TTL: RabbitMQ 4.3 sends a live queue the machine
// config its new policy makes).
func (qq *quorumQueue) syncLimit() {
	qq.syncGroups() // quorum_groups.go
	want := qq.lim.want.Load()
	if want == nil || qq.g == nil {
		return
	}
	var cur cluster.FifoConfig
	qq.g.View(func(f *cluster.Fifo) { cur = f.Config().Policied() })
	if cur != *want {
		qq.g.Submit(cluster.Config(*want), nil)
	}
}

// Return returns deliveries as RabbitMQ 4.3 tells them apart
// (queue.Returner): failed ones count toward the delivery limit; those
// the retry setting holds wait until their due time.
func (qq *quorumQueue) Return(ds []queue.Delivery, failed, verdict bool) {
	r := qq.lim.retry.Load()
	now := time.Now().UnixMilli()
	type key struct {
		tag string
		due int64
	}
	var order []key
	byKey := map[key][]uint64{}
	qq.mu.Lock()
	for _, d := range ds {
		e, ok := qq.out[d.Seq]
		if !ok || e.settled {
			continue
		}
		delete(qq.out, d.Seq)
		k := key{tag: e.tag}
		if r != nil && r.Holds(failed, verdict) {
			n := d.Count // the failed deliveries so far, as the return leaves them
			if failed {
				n++
			}
			k.due = now + max(r.Hold(n).Milliseconds(), 1)
		}
		if _, seen := byKey[k]; !seen {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], d.Seq)
	}
	qq.mu.Unlock()
	for _, k := range order {
		qq.g.Submit(cluster.Modify(k.tag, failed, k.due, byKey[k]...), nil)
	}
}

// armDue has the leader tick when the first held message comes due: a
// timer for the earliest due time, armed anew when an earlier one comes.
// Called after an entry is applied, on the leader.
func (qq *quorumQueue) armDue() {
	var next int64
	qq.g.View(func(f *cluster.Fifo) { next = f.NextDue() })
	if next == 0 {
		return
	}
	if at := qq.lim.dueAt.Load(); at != 0 && at <= next {
		return // armed for it, or earlier
	}
	qq.lim.dueAt.Store(next)
	wait := time.Duration(next-time.Now().UnixMilli()) * time.Millisecond
	time.AfterFunc(max(wait, 0), func() {
		qq.lim.dueAt.CompareAndSwap(next, 0)
		if qq.g.IsLeader() {
			qq.g.Submit(cluster.Tick(max(time.Now().UnixMilli(), next)), nil)
		}
	})
}

// limitsTick (once a second, on the leader) sends the policy's delivery
// limit again if the log does not have it, and ticks for held messages
// come due (a timer armed on another node's leadership is not here).
func (qq *quorumQueue) limitsTick(now int64) {
	qq.syncLimit()
	var next int64
	qq.g.View(func(f *cluster.Fifo) { next = f.NextDue() })
	if next != 0 && next <= now {
		qq.g.Submit(cluster.Tick(now), nil)
	} else if next != 0 {
		qq.armDue()
	}
}

// policy is the queue's policy now: the last one SetPolicy gave, else the
// one it was made with.
func (qq *quorumQueue) policy() *queue.Policy {
	if p := qq.lim.pol.Load(); p != nil {
		return p
	}
	return qq.q.Config().Policy
}
