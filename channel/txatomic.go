package channel

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Atomic tx.commit (docs/transactions.md). The publishes and basic.acks
// of a transaction that reach this node's queues are applied in three
// steps, so that their store effects (the messages' records and entries
// in every durable queue, the acked messages' deletions) go into one
// atomic store write, fsynced before tx.commit-ok:
//
//  1. plan: the acks' delivery tags are resolved (an unknown tag fails
//     the commit before anything is applied) and the publishes routed;
//     each queue gets a queue.TxPart of its messages and acks.
//  2. prepare: each queue numbers its part's messages and writes their
//     entries and the acks' deletions into the part, and holds every
//     other op until the part is finished (queue/tx.go). Once all are
//     prepared, the parts' writes go to the store as one atomic write.
//  3. finish: once that write is durable the queues apply their parts
//     (the messages become visible, the acked ones go); on failure they
//     drop them and the acked deliveries are requeued, as the channel's
//     close would. Then what has no store write of its own here is
//     applied in order (nacks and rejects, publishes and acks of
//     replicated queues, delayed and reply-to publishes) and
//     tx.commit-ok is sent.
//
// A transaction with nothing to store (no persistent publish, no ack), or
// a channel without a store, commits as before (commit, publish.go).

// txPlan is what a commit found in step 1.
type txPlan struct {
	records queue.Writes // shared message records (a message in several durable queues)
	queues  []*queue.Queue
	parts   []*queue.TxPart
	late    []txLate // applied after the atomic write, in order
	pubs    []txPub  // publishes to report as routed or returned
	acked   int      // basic.acks settled
	kicks   []kickReq
	// held are the new deduplication ids the publishes routed into the
	// atomic write added: stored once it is (dedup_gate.go).
	held []vhost.DedupHold
}

// txLate is an op applied after the atomic write.
type txLate struct {
	op      *txOp // a publish routed by route (reply-to) or routeDelayed
	qs      []*queue.Queue
	delayed []*exchange.Exchange
	delay   int64
	dedup   bool
	held    []vhost.DedupHold // routeDelayed's: its gate's
	b       *batch            // settled deliveries: acks of replicated queues, nacks, rejects
	kind    ackKind
	requeue bool
}

// txPub is a publish planned for the queues' parts.
type txPub struct {
	msg    *queue.Message
	mand   bool
	routed bool
}

// commitTx is tx.commit: atomic when the transaction has store effects
// and the channel a store that writes atomically.
func (c *Channel) commitTx() error {
	st, ok := c.store.(queue.AtomicStore)
	if !ok || !c.txStores() {
		return c.commit()
	}
	return c.commitAtomic(st)
}

// txStores reports whether the transaction holds a persistent publish or
// a basic.ack: something that may have a store effect.
func (c *Channel) txStores() bool {
	for i := range c.txOps {
		op := &c.txOps[i]
		if _, ok := op.ack.(*amqp.BasicAck); ok || (op.msg != nil && op.msg.Persistent) {
			return true
		}
	}
	return false
}

func (c *Channel) commitAtomic(st queue.AtomicStore) error {
	ops, held := c.txOps, c.txHeld
	c.txOps, c.txHeld = nil, 0
	c.stats.uncommitted(nil)
	defer c.cfg.Memory.Add(-held)
	p := &txPlan{}
	for i := range ops {
		op := &ops[i]
		var err error
		if op.ack != nil {
			err = withMethod(c.planAck(p, op.ack), op.ack)
		} else {
			err = c.planPublish(p, op, st)
		}
		if err != nil {
			c.undoTx(p, err)
			return err
		}
	}
	if err := c.writeTx(p, st); err != nil {
		c.undoTx(p, err)
		if st.TooBig(err) {
			n := len(p.records.Ops)
			for _, pt := range p.parts {
				n += len(pt.Writes.Ops)
			}
			count, size := st.TxnLimits()
			return precondition("transaction too large for one atomic store write: %d store changes (at most %d changes and %d bytes)", n, count, size)
		}
		return fmt.Errorf("tx.commit: %w", err)
	}
	var err error
	if len(p.held) > 0 {
		// The messages are stored: their ids now, durable before
		// commit-ok.
		done := make(chan error, 1)
		c.cfg.VHost.ReleaseDedup(p.held, func(err error) { done <- err })
		err = <-done
	}
	c.afterTx(p)
	if err != nil {
		return fmt.Errorf("tx.commit: %w", err)
	}
	return nil
}

// part returns q's part of the plan, added if new.
func (p *txPlan) part(q *queue.Queue) *queue.TxPart {
	for i, x := range p.queues {
		if x == q {
			return p.parts[i]
		}
	}
	p.queues = append(p.queues, q)
	p.parts = append(p.parts, &queue.TxPart{})
	return p.parts[len(p.parts)-1]
}

// planAck resolves an ack, nack or reject of the transaction.
func (c *Channel) planAck(p *txPlan, m amqp.Method) error {
	var tag uint64
	var multiple, requeue bool
	kind := ackAck
	switch a := m.(type) {
	case *amqp.BasicAck:
		tag, multiple = a.DeliveryTag, a.Multiple
	case *amqp.BasicNack:
		tag, multiple, requeue, kind = a.DeliveryTag, a.Multiple, a.Requeue, ackNack
	case *amqp.BasicReject:
		tag, requeue, kind = a.DeliveryTag, a.Requeue, ackReject
	}
	bs, kicks, err := c.takeSettled(tag, multiple)
	if err != nil {
		return err
	}
	p.kicks = append(p.kicks, kicks...)
	for i := range bs {
		b := &bs[i]
		if kind == ackAck && !b.q.Replicated() {
			pt := p.part(b.q)
			pt.Acks = append(pt.Acks, b.ds...)
			p.acked += len(b.ds)
			continue
		}
		p.late = append(p.late, txLate{b: b, kind: kind, requeue: requeue})
	}
	return nil
}

// takeSettled is settle's first half (acks.go): it marks tag (and, with
// multiple, every earlier one) settled and returns them by queue.
func (c *Channel) takeSettled(tag uint64, multiple bool) ([]batch, []kickReq, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.unacked), func(i int) bool { return c.unacked[i].tag >= tag })
	if !(multiple && tag == 0) && (i == len(c.unacked) || c.unacked[i].tag != tag || c.unacked[i].done) {
		return nil, nil, precondition("unknown delivery tag %d", tag)
	}
	first, last := i, i
	if multiple {
		first = 0
		if tag == 0 {
			last = len(c.unacked) - 1
		}
	}
	var bs []batch
	for j := first; j <= last; j++ {
		u := &c.unacked[j]
		if u.done {
			continue
		}
		c.release(u)
		if u.returned { // its queue has it back already (timeout.go)
			continue
		}
		k := slices.IndexFunc(bs, func(b batch) bool { return b.q == u.q })
		if k < 0 {
			bs = append(bs, batch{q: u.q})
			k = len(bs) - 1
		}
		bs[k].ds = append(bs[k].ds, u.d)
	}
	c.compact()
	return bs, c.kicksLocked(), nil
}

// planPublish routes a publish of the transaction into the queues' parts
// (or, for what the atomic write does not cover, into the late ops).
func (c *Channel) planPublish(p *txPlan, op *txOp, st queue.Store) error {
	msg := op.msg
	if msg.Exchange == "" && strings.HasPrefix(msg.RoutingKey, replyToQueue+".") {
		p.late = append(p.late, txLate{op: op})
		return nil
	}
	v, _ := amqp.ScanProperties(msg.Props)
	c.scratch.RawHeaders = v.Headers
	c.scratch.Props = msg.Props
	c.scratch.Extra = op.extra
	c.scratch.HoldDedup = true // new ids are stored after the messages
	qs, err := c.cfg.VHost.Route(msg.Exchange, msg.RoutingKey, &c.scratch)
	if (err != nil || len(qs) == 0 && msg.Exchange == "") && c.cfg.VHost.SyncMiss() {
		qs, err = c.cfg.VHost.Route(msg.Exchange, msg.RoutingKey, &c.scratch)
	}
	c.scratch.HoldDedup = false
	if err != nil {
		return err
	}
	qs = slices.Clone(qs)
	c.scratch.ResetSeen()
	if len(c.scratch.Delayed) > 0 {
		p.late = append(p.late, txLate{op: op, qs: qs, delayed: slices.Clone(c.scratch.Delayed),
			delay: c.scratch.Delay, dedup: c.scratch.DedupWrote, held: slices.Clone(c.scratch.DedupHeld)})
		return nil
	}
	p.held = append(p.held, c.scratch.DedupHeld...)
	if c.cfg.VHost.Tracing() {
		c.tracePublish(msg, qs, op.extra)
	}
	durable := 0
	for _, q := range qs {
		if msg.Persistent && !q.Replicated() && q.Durable() {
			durable++
		}
	}
	switch {
	case durable == 1:
		msg.ID, msg.Inline = st.NewMessageID(), true // the record inside its entry
	case durable > 1:
		msg.ID, msg.Shared = st.NewMessageID(), true
		p.records.PutMessage(msg.ID, queue.EncodeMessage(msg))
	}
	for _, q := range qs {
		if q.Replicated() {
			p.late = append(p.late, txLate{op: op, qs: []*queue.Queue{q}})
			continue
		}
		pt := p.part(q)
		pt.Msgs = append(pt.Msgs, msg)
	}
	p.pubs = append(p.pubs, txPub{msg: msg, mand: op.mand, routed: len(qs) > 0})
	return nil
}

// writeTx has every queue prepare its part, writes the parts' store
// writes in one atomic write, and waits until it is durable and the
// queues are told (they apply their parts, or drop them on failure).
func (c *Channel) writeTx(p *txPlan, st queue.AtomicStore) error {
	if len(p.parts) == 0 {
		return nil
	}
	done := make(chan error, 1)
	var pending atomic.Int32
	pending.Store(int32(len(p.parts)) + 1) // + 1: released once every prepare is posted
	prepared := func(*queue.TxPart) {
		if pending.Add(-1) != 0 {
			return
		}
		// The last prepared (exec held: must not block): every part's
		// writes are in, seen through pending.
		w := &queue.Writes{Ops: slices.Clone(p.records.Ops)}
		for _, pt := range p.parts {
			if !pt.Gone {
				w.Ops = append(w.Ops, pt.Writes.Ops...)
			}
		}
		if w.Len() == 0 {
			c.finishTx(p, nil)
			done <- nil
			return
		}
		st.CommitAtomic(w, func(err error) {
			c.finishTx(p, err)
			done <- err
		})
	}
	for i, pt := range p.parts {
		pt.Prepared = prepared
		if !p.queues[i].PrepareTx(pt, c.cfg.Flushes) {
			pt.Gone = true
			prepared(pt)
		}
	}
	c.cfg.Flushes.Flush() // deliveries the prepares' drains made, before the wait
	prepared(nil)
	return <-done
}

// finishTx tells every queue that took its part the write's outcome.
func (c *Channel) finishTx(p *txPlan, err error) {
	for i, pt := range p.parts {
		if !pt.Gone {
			p.queues[i].FinishTx(pt, err)
		}
	}
}

// undoTx gives back what a failed commit took: the deliveries it settled
// go back to their queues, as the channel's close would return them; the
// deduplication ids its publishes added are never stored.
func (c *Channel) undoTx(p *txPlan, err error) {
	c.cfg.VHost.AbandonDedup(p.held, err)
	for _, l := range p.late {
		c.cfg.VHost.AbandonDedup(l.held, err)
	}
	for i, pt := range p.parts {
		if len(pt.Acks) > 0 {
			p.queues[i].Requeue(pt.Acks, c.cfg.Flushes)
		}
	}
	for _, l := range p.late {
		if l.b != nil {
			l.b.q.Requeue(l.b.ds, c.cfg.Flushes)
		}
	}
	kick(p.kicks, c.cfg.Flushes)
}

// afterTx applies, in order, what the atomic write did not cover, then
// counts the acks and returns the unroutable mandatory publishes.
func (c *Channel) afterTx(p *txPlan) {
	fl := c.cfg.Flushes
	for _, l := range p.late {
		switch {
		case l.b != nil:
			c.settleLate(l)
		case l.delayed != nil:
			c.scratch.Delayed, c.scratch.Delay, c.scratch.DedupWrote = l.delayed, l.delay, l.dedup
			var gate *dedupGate
			if len(l.held) > 0 {
				gate = &dedupGate{c: c, held: l.held}
			}
			_ = c.routeDelayed(l.op.msg, l.op.mand, l.qs, l.op.extra, gate) // never fails
			c.scratch.Delayed, c.scratch.Delay, c.scratch.DedupWrote = nil, 0, false
		case l.qs != nil:
			l.qs[0].PublishConfirm(l.op.msg, nil, fl) // a replicated queue's copy
		default:
			v, _ := amqp.ScanProperties(l.op.msg.Props)
			_ = c.route(l.op.msg, l.op.mand, v.Headers, l.op.extra) // reply-to: no error
		}
	}
	if p.acked > 0 {
		c.counts.Acknowledged.Add(int64(p.acked))
		c.stats.Ack.Add(int64(p.acked))
	}
	kick(p.kicks, fl)
	for _, pub := range p.pubs {
		c.routed(pub.routed, pub.mand, pub.msg)
	}
}

// settleLate is settle's second half for a batch the atomic write did not
// cover.
func (c *Channel) settleLate(l txLate) {
	b, fl := l.b, c.cfg.Flushes
	switch {
	case l.kind == ackAck:
		c.counts.Acknowledged.Add(int64(len(b.ds)))
		c.stats.Ack.Add(int64(len(b.ds)))
		b.q.Ack(b.ds, fl)
	case l.requeue && l.kind == ackNack:
		b.q.RequeueNacked(b.ds, fl)
	case l.requeue:
		b.q.RequeueRejected(b.ds, fl)
	default:
		b.q.Discard(b.ds, fl)
	}
}
