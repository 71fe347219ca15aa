package queue

// Atomic transactions (tx.commit): a queue's share of a transaction is
// applied in two steps, so that the store effects of every queue the
// transaction touches can go into one atomic store write.
//
//   - PrepareTx (opTxPrepare): the queue gives the part's messages their
//     sequence numbers and puts their entries, and the deletions of the
//     acked deliveries' entries, in TxPart.Writes, changing nothing else.
//     From then until the part is finished, every other op posted to the
//     queue is stashed in arrival order (the queue's in-memory state must
//     not move past sequence numbers it handed out): only other parts'
//     prepares and finishes are applied. Prepares never wait, so two
//     transactions over the same queues cannot wait on each other.
//   - FinishTx (opTxFinish), once the store write is durable (or failed):
//     parts are finished in the order they were prepared; a finished part
//     is applied (its messages enqueued at their numbers, its acks
//     settled; nothing is written again) or, on failure, dropped. When no
//     part is left the stash goes back to the front of the inbox.
//
// A queue that never sees a transaction has q.tx nil: its drain tests
// that one field.

// TxPart is one queue's share of a transaction: the messages published to
// it and its deliveries acked, in order.
type TxPart struct {
	Msgs []*Message
	Acks []Delivery
	// Prepared is called once the queue has put the part's store writes
	// in Writes (exec held, on any goroutine: it must not block).
	Prepared func(*TxPart)
	Writes   Writes

	seqs []uint64
	done bool
	err  error
	// Gone: the queue was deleted before it took the part (Prepared is
	// called with no writes; the part is not to be finished).
	Gone bool
}

// txState is a queue's transactions under way. exec held.
type txState struct {
	parts []*TxPart // prepared, in order, not yet applied
	stash []op      // ops that arrived since the first of them
}

// Op kinds of transactions, apart from the others (exec.go).
const (
	opTxPrepare opKind = 64 + iota
	opTxFinish
)

// PrepareTx posts p's prepare; it reports false (p.Prepared is not
// called) when the queue is gone or not of this node's kind (a Replica).
func (q *Queue) PrepareTx(p *TxPart, fl *Flushes) bool {
	if q.cfg.Replica != nil {
		return false
	}
	return q.postInline(op{kind: opTxPrepare, conf: txRef{p}}, fl)
}

// FinishTx posts the outcome of p's store write: nil applies the part,
// an error drops it. From the store's goroutine: the queue's own applies it.
func (q *Queue) FinishTx(p *TxPart, err error) {
	p.err = err
	q.post(op{kind: opTxFinish, conf: txRef{p}})
}

// applyTx applies a prepare or a finish; true: no transaction is left
// under way, the stash is to be handed back. exec held.
func (q *Queue) applyTx(o *op) bool {
	if o.kind == opTxPrepare {
		q.txPrepare(o.txPart())
		return false
	}
	return q.txFinish(o.txPart())
}

// txRef carries a transaction's part in an op's conf field (op stays as
// small as it was: the inbox copies every op). Its Done is never called.
type txRef struct{ p *TxPart }

func (txRef) Done(error) {}

// txPart is the part of an opTxPrepare or opTxFinish.
func (o *op) txPart() *TxPart { return o.conf.(txRef).p }

// stashTx keeps o for after the transactions under way, unless o is a
// transaction's own op. exec held.
func (q *Queue) stashTx(o *op) bool {
	if q.tx == nil || o.kind >= opTxPrepare {
		return false
	}
	q.tx.stash = append(q.tx.stash, *o)
	return true
}

// txPrepare numbers p's messages and writes their entries and the acked
// deliveries' deletions into p.Writes. exec held.
func (q *Queue) txPrepare(p *TxPart) {
	if q.tx == nil {
		q.tx = &txState{}
	}
	q.tx.parts = append(q.tx.parts, p)
	durable := q.Durable()
	p.seqs = make([]uint64, len(p.Msgs))
	for i, m := range p.Msgs {
		p.seqs[i] = q.nextSeq
		q.nextSeq++
		if durable && m.ID != 0 {
			w := StoreWrite{Kind: PutEntry, Queue: q.storeID(uint8(q.laneIdx(m))), Seq: p.seqs[i], Msg: m.ID,
				Shared: m.Shared, Inline: m.Inline}
			if m.Inline {
				w.Record = EncodeMessage(m)
			}
			p.Writes.add(w)
		}
	}
	for i := range p.Acks {
		if d := &p.Acks[i]; q.stored(d) {
			p.Writes.add(StoreWrite{Kind: DeleteEntry, Queue: q.storeID(d.Lane), Seq: d.Seq, Msg: d.Msg.ID,
				Shared: d.Msg.Shared, Inline: d.Msg.Inline})
		}
	}
	if p.Prepared != nil {
		p.Prepared(p)
	}
}

// txFinish marks p finished and applies the finished parts at the head,
// in order. It reports true when none is left: the caller hands the stash
// back (takeStash). exec held.
func (q *Queue) txFinish(p *TxPart) bool {
	if q.tx == nil {
		return false // not prepared here (cannot happen): nothing to do
	}
	p.done = true
	for len(q.tx.parts) > 0 && q.tx.parts[0].done {
		h := q.tx.parts[0]
		q.tx.parts[0] = nil
		q.tx.parts = q.tx.parts[1:]
		if h.err == nil {
			q.txApply(h)
		}
	}
	return len(q.tx.parts) == 0
}

// takeStash ends the queue's transactions and returns what waited.
// exec held.
func (q *Queue) takeStash() []op {
	s := q.tx.stash
	q.tx = nil
	return s
}

// txApply enqueues p's messages at the sequence numbers txPrepare gave
// them and settles its acks; their store writes are done. exec held.
func (q *Queue) txApply(p *TxPart) {
	next := q.nextSeq
	for i, m := range p.Msgs {
		q.nextSeq = p.seqs[i]
		n0 := len(q.w.Ops)
		q.cfg.Memory.Add(m.MemSize()) // as PublishConfirm counts it
		q.publish(m, nil)
		written := q.Durable() && m.ID != 0
		if q.nextSeq == p.seqs[i] {
			// Refused (reject-publish, a duplicate): its entry, written
			// with the transaction, goes.
			if written {
				q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.storeID(uint8(q.laneIdx(m))), Seq: p.seqs[i], Msg: m.ID,
					Shared: m.Shared, Inline: m.Inline})
			}
			continue
		}
		if written {
			q.dropWrite(n0, PutEntry, p.seqs[i]) // written with the transaction
		}
	}
	q.nextSeq = next
	if len(p.Acks) > 0 {
		q.nAck.Add(int64(len(p.Acks)))
		q.settled(p.Acks)
		var n int64
		for i := range p.Acks {
			n += p.Acks[i].Msg.MemSize()
			if q.dedup != nil {
				q.dedupForget(p.Acks[i].Msg)
			}
		}
		q.account(-n)
	}
}

// dropWrite removes from q.w, from index n0 on, the first write of kind
// at seq (publish wrote an entry the transaction already holds).
func (q *Queue) dropWrite(n0 int, kind WriteKind, seq uint64) {
	ops := q.w.Ops
	for i := n0; i < len(ops); i++ {
		if ops[i].Kind == kind && ops[i].Seq == seq {
			q.w.Ops = append(ops[:i], ops[i+1:]...)
			return
		}
	}
}

// AtomicStore is a Store that writes a Writes in one atomic write, whole
// or not at all across a crash too (a transaction's tx.commit).
type AtomicStore interface {
	Store
	// CommitAtomic is Commit in one atomic write; done's error says
	// nothing of w was written.
	CommitAtomic(w *Writes, done func(error))
	// TxnLimits are the most changes, and bytes, one atomic write takes.
	TxnLimits() (count, size int64)
	// TooBig reports whether err is CommitAtomic's for a w over TxnLimits.
	TooBig(err error) bool
}
