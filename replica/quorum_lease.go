package replica

import (
	"sync/atomic"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// ReturnAt returns deliveries a worker scheduled for a retry
// (amq.railmq.retry, queue.DelayReturner): as a failed return (counted
// toward the delivery limit, x-delivery-count up), held in the queue's
// log until due (unix ms), whatever the queue's retry setting. The hold
// is the log's, as x-retry-delay's is (cluster/fifo_limits.go): it
// survives a restart and a failover. conf (if not nil) learns when the
// log has committed every return.
func (qq *quorumQueue) ReturnAt(ds []queue.Delivery, due int64, conf queue.Confirmer) {
	due = max(due, 1)
	var order []string
	byTag := map[string][]uint64{}
	qq.mu.Lock()
	for _, d := range ds {
		e, ok := qq.out[d.Seq]
		if !ok || e.settled {
			continue
		}
		delete(qq.out, d.Seq)
		if _, seen := byTag[e.tag]; !seen {
			order = append(order, e.tag)
		}
		byTag[e.tag] = append(byTag[e.tag], d.Seq)
	}
	qq.mu.Unlock()
	if len(order) == 0 {
		if conf != nil {
			conf.Done(nil) // nothing of it was still checked out here
		}
		return
	}
	var done func(cluster.Effects, error)
	if conf != nil {
		var left atomic.Int32
		var failed atomic.Value
		left.Store(int32(len(order)))
		done = func(_ cluster.Effects, err error) {
			if err != nil {
				failed.Store(err)
			}
			if left.Add(-1) == 0 {
				err, _ := failed.Load().(error)
				conf.Done(err)
			}
		}
	}
	for _, tag := range order {
		qq.g.Submit(cluster.Modify(tag, true /* failed */, due, byTag[tag]...), done)
	}
}
