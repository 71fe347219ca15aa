package vhost

import (
	"sync/atomic"

	"github.com/railmq/railmq/queue"
)

// heldConf stands for the confirms of a message that its routing held
// new deduplication entries for (Scratch.HoldDedup), when the broker
// routes it itself (a delayed message coming due): once the queues have
// stored (or taken) it, the entries are released, and once the commit
// that writes them is durable, the owner's confirmer gets its n answers.
// So a delayed message's record, deleted when its owner's confirmer is
// done, outlives a crash until the ids are stored: routed again after
// a restart, it is not dropped as a duplicate of nothing.
type heldConf struct {
	v       *VHost
	hs      []DedupHold
	inner   queue.Confirmer // nil: nobody waits
	n       int32
	pending atomic.Int32
	err     atomic.Pointer[error]
}

// holdConf wraps newConf (FanOut's) for a message whose routing held
// sc's new entries; release must be called when FanOut did not wait.
func (v *VHost) holdConf(sc *Scratch, newConf func(int) queue.Confirmer) (wrapped func(int) queue.Confirmer, release func()) {
	h := &heldConf{v: v, hs: append([]DedupHold(nil), sc.DedupHeld...)}
	wrapped = func(n int) queue.Confirmer {
		h.inner, h.n = newConf(n), int32(n)
		h.pending.Store(int32(n))
		return h
	}
	return wrapped, func() { v.ReleaseDedup(h.hs, nil) }
}

func (h *heldConf) Done(err error) {
	if err != nil {
		h.err.CompareAndSwap(nil, &err)
	}
	if h.pending.Add(-1) > 0 {
		return
	}
	if e := h.err.Load(); e != nil {
		h.v.AbandonDedup(h.hs, *e)
		h.answer(*e)
		return
	}
	if h.inner == nil {
		h.v.ReleaseDedup(h.hs, nil)
		return
	}
	h.v.ReleaseDedup(h.hs, h.answer)
}

// answer gives the owner's confirmer its n answers.
func (h *heldConf) answer(err error) {
	if h.inner == nil {
		return
	}
	if e := h.err.Load(); e != nil {
		err = *e
	}
	for range h.n {
		h.inner.Done(err)
	}
}
