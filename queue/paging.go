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
	sync := q.dedupSync // a duplicate's ack waits for what was submitted before it
	q.dedupSync = false
	if q.w.Len() == 0 && !sync {
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
	if q.dedup != nil {
		q.dedupForget(d.Msg)
	}
	if q.stored(d) {
		q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.storeID(d.Lane), Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared, Inline: d.Msg.Inline})
	}
}

// putEntry writes d's entry (with the record, when inline).
func (q *Queue) putEntry(kind WriteKind, d *Delivery) {
	w := StoreWrite{Kind: kind, Queue: q.storeID(d.Lane), Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared,
		Transient: d.Transient, Redelivered: d.Redelivered, Count: d.Count, Inline: d.Msg.Inline}
	if w.Inline {
		w.Record = EncodeMessage(d.Msg)
	}
	q.w.add(w)
}

// putEntryHeld rewrites d's entry with the time its hold comes due.
func (q *Queue) putEntryHeld(d *Delivery, due int64) {
	q.putEntry(UpdateEntry, d)
	q.w.Ops[len(q.w.Ops)-1].Until = due
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

// laneWindow is how many ready messages one lane keeps in memory: a
// priority queue shares the window among its priorities (RabbitMQ's has a
// backing queue per priority, each paging on its own), so that its memory
// is bounded by the window whatever the priorities.
func (q *Queue) laneWindow(win int) int {
	if n := len(q.lanes); n > 1 {
		return max(win/n, 16)
	}
	return win
}

// refill begins reading the next messages of a lane from the store when
// its in-memory part runs low: the highest priority first, and a lane
// with nothing left in memory whatever the byte window holds (the read
// brings at least one message), so that it never waits on lower ones. The
// read is queued on the store's goroutine behind its writes; exec is not
// held while it runs (see land).
func (q *Queue) refill() {
	if q.diskCount == 0 || q.loading {
		return
	}
	// Ready bodies in memory against the byte window: unacked ones cannot
	// be paged, and must not keep consumers with room waiting.
	ready := q.held - q.unackedBytes
	win, winBytes := q.window()
	lw := q.laneWindow(win)
	li := -1
	for i := len(q.lanes) - 1; i >= 0; i-- {
		l := &q.lanes[i]
		n, inMem := l.len(), l.ready.len()
		if q.grp != nil {
			n, inMem = q.grpInMem()
		}
		if l.disk > 0 && (n == 0 || (inMem < lw/2 && ready < winBytes/2)) {
			li = i
			break
		}
	}
	if li < 0 {
		return
	}
	if q.loadRetry != 0 && Now() < q.loadRetry {
		return
	}
	l := &q.lanes[li]
	q.commit() // our own page-outs first: the read sees every earlier commit
	q.loading = true
	ld := landing{gen: q.loadGen, lane: uint8(li), seen: l.disk, asked: max(lw-l.ready.len(), 1), bytes: max(winBytes-ready, 1)}
	if q.grp != nil {
		ld.bytes = winBytes // a grouped queue's recovered backlog: filed by group, paged again past the window
	}
	q.cfg.Store.LoadEntries(q.storeID(ld.lane), l.memTail, ld.asked, ld.bytes, func(ents []StoredEntry, err error) {
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
	lane  uint8
	seen  int // paged entries of the lane the read could see (submitted before it)
	asked int
	bytes int64 // the records' bytes asked at most (at least one record is read)
	ents  []StoredEntry
	err   error
	// hold: a paged hold come due, read back (retry.go): the entry at
	// seq; gen is then the queue's holdGen.
	hold bool
	seq  uint64
	// grp: a paged group head read back (groups.go); gen is then the
	// groups' gen.
	grp *group
}

// land takes in what a read found, behind what memory holds. exec held.
func (q *Queue) land(ld *landing) {
	if ld.hold {
		q.landHold(ld)
		return
	}
	if ld.grp != nil {
		q.grpLand(ld)
		return
	}
	if ld.gen != q.loadGen {
		return // the paged part was dropped (purge) since the read began
	}
	q.loading, q.stalled = false, false
	if ld.err != nil {
		q.cfg.Logger.Error("reading queue from store", zap.String("queue", q.cfg.Name), zap.Error(ld.err))
		q.loadRetry = Now() + int64(time.Second)
		time.AfterFunc(time.Second, q.signal)
		return
	}
	q.loadRetry = 0
	l := &q.lanes[ld.lane]
	n := 0
	var now int64 // read when an entry was held for a retry delay
	var read int64
	for _, e := range ld.ents {
		read += int64(len(e.Record))
		if e.Seq <= l.memTail {
			continue // defensive: memTail only moves while nothing is paged
		}
		n++
		m, err := DecodeMessage(e.Record)
		if err != nil {
			q.cfg.Logger.Error("corrupt message in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", e.Seq))
			q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.storeID(ld.lane), Seq: e.Seq, Msg: e.Msg, Shared: e.Shared, Inline: e.Inline})
		} else {
			m.ID, m.Shared, m.Inline = e.Msg, e.Shared, e.Inline
			// Into its priority's lane (entries stored before lanes paged
			// apart are all under lane 0), its entry where it was read.
			d := Delivery{Msg: m, Seq: e.Seq, Redelivered: e.Redelivered || e.Seq <= q.recDlv, Count: e.Count, Transient: e.Transient, Lane: ld.lane}
			q.account(m.MemSize())
			if e.Until != 0 && now == 0 {
				now = Now()
			}
			if e.Until > now {
				// Held for a retry delay before a restart: held for the
				// rest of it (its size counts as ready once it is due).
				q.pushHold(d, e.Until)
			} else {
				if q.grp != nil {
					q.grpLanded(d)
				} else {
					q.laneOf(m).ready.pushBack(d)
				}
				if r := q.cfg.Recovered; r != nil && e.Seq <= r.MaxSeq {
					q.readyBytes += int64(len(m.Body)) // recovered sizes are learnt as they load
				}
			}
		}
		l.memTail = e.Seq
		l.disk--
		q.diskCount--
	}
	if want := min(ld.seen, ld.asked); n < want && read < ld.bytes {
		// The store holds fewer of the entries the read could see than
		// were counted; those paged after it are still to come.
		missing := ld.seen - n
		q.cfg.Logger.Warn("store holds fewer messages than counted", zap.String("queue", q.cfg.Name), zap.Int("missing", missing))
		q.diskCount -= missing
		l.disk -= missing
	}
	if l.disk < 0 {
		q.diskCount -= l.disk
		l.disk = 0
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
