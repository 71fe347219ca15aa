package queue

import (
	"time"

	"go.uber.org/zap"
)

// commit hands this round's store changes to the group commit; the
// publishers' confirmers learn when they are durable.
func (q *Queue) commit() {
	if q.Durable() && q.delivered > q.savedDlv {
		q.w.add(StoreWrite{Kind: PutDelivered, Queue: q.cfg.ID, Seq: q.delivered})
		q.savedDlv = q.delivered
	}
	if q.w.Len() == 0 {
		for _, c := range q.confs {
			c.Done(nil)
		}
		q.confs = q.confs[:0]
		return
	}
	w := q.w
	q.w = Writes{Ops: make([]StoreWrite, 0, len(w.Ops))}
	// Counted until written, for flow control (Behind).
	var n int64
	for i := range w.Ops {
		n += int64(len(w.Ops[i].Record)) + 64
	}
	q.pendingW.Add(n)
	pending, confs := &q.pendingW, q.confs
	if len(confs) > 0 {
		q.confs = nil
	}
	q.cfg.Store.Commit(&w, func(err error) {
		pending.Add(-n)
		for _, c := range confs {
			c.Done(err)
		}
	})
}

// stored reports whether d has an entry in this queue's store.
// A queue that is not durable has entries for its paged transient copies
// only.
func (q *Queue) stored(d *Delivery) bool {
	return q.cfg.Store != nil && d.Msg.ID != 0 && (q.cfg.Durable || d.Transient)
}

func (q *Queue) deleteEntry(d *Delivery) {
	if q.stored(d) {
		q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared, Inline: d.Msg.Inline})
	}
}

// putEntry writes d's entry (with the record, when inline).
func (q *Queue) putEntry(kind WriteKind, d *Delivery) {
	w := StoreWrite{Kind: kind, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared,
		Transient: d.Transient, Redelivered: d.Redelivered, Count: d.Count, Inline: d.Msg.Inline}
	if w.Inline {
		w.Record = EncodeMessage(d.Msg)
	}
	q.w.add(w)
}

// noteDelivered records the highest sequence delivered, so that a restart
// flags it and everything before it redelivered.
func (q *Queue) noteDelivered(d *Delivery) {
	if q.stored(d) && d.Seq > q.delivered {
		q.delivered = d.Seq
	}
}

// Under memory pressure (Config.Pressure: RabbitMQ's paging ratio of the
// memory watermark crossed), queues keep a small window, so that paging,
// not the memory alarm, takes the strain.
const (
	pressureWindow      = 64
	pressureWindowBytes = 1 << 20
)

// window is how many ready messages, and bytes of bodies, the queue keeps
// in memory now.
func (q *Queue) window() (int, int64) {
	if p := q.cfg.Pressure; p != nil && p.Load() {
		return min(q.cfg.Window, pressureWindow), min(q.cfg.WindowBytes, pressureWindowBytes)
	}
	return q.cfg.Window, q.cfg.WindowBytes
}

// refill begins reading the next messages from the store when the
// in-memory part of a durable queue runs low. The read is queued on the
// store's goroutine behind its writes; exec is not held while it runs
// (see land).
func (q *Queue) refill() {
	l := &q.lanes[0]
	// Ready bodies in memory against the byte window: unacked ones cannot
	// be paged, and must not keep consumers with room waiting.
	ready := q.held - q.unackedBytes
	win, winBytes := q.window()
	if q.diskCount == 0 || q.loading || l.ready.len() >= win/2 || ready >= winBytes/2 {
		return
	}
	if q.loadRetry != 0 && time.Now().UnixNano() < q.loadRetry {
		return
	}
	q.commit() // our own page-outs first: the read sees every earlier commit
	q.loading = true
	ld := landing{gen: q.loadGen, seen: q.diskCount, asked: win - l.ready.len(), bytes: winBytes - ready}
	q.cfg.Store.LoadEntries(q.cfg.ID, q.memTail, ld.asked, ld.bytes, func(ents []StoredEntry, err error) {
		ld.ents, ld.err = ents, err
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.landed = append(q.landed, ld)
		q.mu.Unlock()
		q.signal()
	})
}

// landing is a read from the store, done: what refill asked and found.
type landing struct {
	gen   uint64
	seen  int // paged entries the read could see (submitted before it)
	asked int
	bytes int64 // the records' bytes asked at most (at least one record is read)
	ents  []StoredEntry
	err   error
}

// land takes in what a read found, behind what memory holds. exec held.
func (q *Queue) land(ld *landing) {
	if ld.gen != q.loadGen {
		return // the paged part was dropped (purge) since the read began
	}
	q.loading, q.stalled = false, false
	if ld.err != nil {
		q.cfg.Logger.Error("reading queue from store", zap.String("queue", q.cfg.Name), zap.Error(ld.err))
		q.loadRetry = time.Now().Add(time.Second).UnixNano()
		time.AfterFunc(time.Second, q.signal)
		return
	}
	q.loadRetry = 0
	n := 0
	var read int64
	for _, e := range ld.ents {
		read += int64(len(e.Record))
		if e.Seq <= q.memTail {
			continue // defensive: memTail only moves while nothing is paged
		}
		n++
		m, err := DecodeMessage(e.Record)
		if err != nil {
			q.cfg.Logger.Error("corrupt message in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", e.Seq))
			q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: e.Seq, Msg: e.Msg, Shared: e.Shared, Inline: e.Inline})
		} else {
			m.ID, m.Shared, m.Inline = e.Msg, e.Shared, e.Inline
			d := Delivery{Msg: m, Seq: e.Seq, Redelivered: e.Redelivered || e.Seq <= q.recDlv, Count: e.Count, Transient: e.Transient}
			q.laneOf(m).ready.pushBack(d)
			q.account(int64(len(m.Body)))
			if r := q.cfg.Recovered; r != nil && e.Seq <= r.MaxSeq {
				q.readyBytes += int64(len(m.Body)) // recovered sizes are learnt as they load
			}
		}
		q.memTail = e.Seq
		q.diskCount--
	}
	if want := min(ld.seen, ld.asked); n < want && read < ld.bytes {
		// The store holds fewer of the entries the read could see than
		// were counted; those paged after it are still to come.
		missing := ld.seen - n
		q.cfg.Logger.Warn("store holds fewer messages than counted", zap.String("queue", q.cfg.Name), zap.Int("missing", missing))
		q.diskCount -= missing
	}
	if q.diskCount < 0 {
		q.diskCount = 0
	}
	if q.trimDue {
		q.trimDue = false
		q.trim()
	}
}

// voidReads forgets the read under way: the paged part it reads is gone.
func (q *Queue) voidReads() {
	q.loadGen++
	q.loading, q.stalled, q.trimDue = false, false, false
}
