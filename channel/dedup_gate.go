package channel

import (
	"slices"
	"sync/atomic"

	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// dedupGate holds the entries a publish added to durable deduplication
// caches (vhost.Scratch.HoldDedup) until the message is stored: it is
// the Confirmer its store writes and queue takes report to, and once
// all are done it releases the entries (vhost.VHost.ReleaseDedup) and
// confirms the publish when the commit that writes them is durable. So
// a stored entry always has its message stored before it (a crash
// between the two leaves the message, whose id recovery puts back in
// the cache, vhost.recallDedup), and the confirm still waits for both.
// A publish that failed (nacked) never stores its entries.
type dedupGate struct {
	c       *Channel
	held    []vhost.DedupHold
	inner   queue.Confirmer // the publish's own confirm; nil outside confirm mode
	pending atomic.Int32
	err     atomic.Pointer[error]
}

// newDedupGate takes the entries the last Route held.
func (c *Channel) newDedupGate() *dedupGate {
	return &dedupGate{c: c, held: slices.Clone(c.scratch.DedupHeld)}
}

// start numbers the publish (its confirm waits for the gate) and has
// the gate wait for n writes or takes: FanOut's newConf.
func (g *dedupGate) start(n int) queue.Confirmer {
	g.inner = g.c.newConfirm(1)
	g.pending.Store(int32(n))
	return g
}

// now releases the entries of a publish that waits for nothing.
func (g *dedupGate) now() {
	g.inner = g.c.newConfirm(1)
	g.finish()
}

// Done is called as each write or take is done.
func (g *dedupGate) Done(err error) {
	if err != nil {
		g.err.CompareAndSwap(nil, &err)
	}
	if g.pending.Add(-1) == 0 {
		g.finish()
	}
}

func (g *dedupGate) finish() {
	if e := g.err.Load(); e != nil {
		g.c.cfg.VHost.AbandonDedup(g.held, *e)
		if g.inner != nil {
			g.inner.Done(*e)
		}
		return
	}
	var done func(error)
	if g.inner != nil {
		done = g.inner.Done
	}
	g.c.cfg.VHost.ReleaseDedup(g.held, done)
}
