package queue

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Retry with backoff (x-retry-delay and friends, railmq's own): a message
// a consumer rejects or nacks with requeue is held back for a delay before
// it is ready again, instead of going straight back to the consumers.
//
//   - Only a consumer's verdict holds: basic.reject and basic.nack with
//     requeue (RequeueNacked). Requeues on channel or connection close,
//     consumer timeout, basic.recover and cancel are Requeue, not held.
//   - The n-th requeue of a message (Delivery.Count == n, as
//     x-delivery-count counts) waits Delay * Backoff^(n-1), capped at Max
//     (when set), then spread by Jitter: uniform in [d*(1-j), d*(1+j)].
//   - x-delivery-limit is checked first: a requeue past it dead-letters
//     (or drops) the message, it is not held.
//   - A held message is neither ready nor unacked: not delivered, not
//     got, not counted by x-max-length, not in declare-ok's ready count;
//     Held counts them (messages_held in the management API).
//   - Memory: held messages stay in memory (as they were, unacked) up to
//     half the queue's window (messages and bytes, window()); beyond it a
//     durable queue keeps only a stored message's index (heldMsg.paged, a
//     Message without its bytes) and reads the message back from the
//     store when it comes due (fetch, at most maxFetches at once). A
//     non-durable queue keeps all its holds in memory.
//   - When due it goes back to its original place, as any requeue: it is
//     the queue's oldest, so it is next out (not behind the backlog that
//     built up meanwhile). A message whose TTL ran out while held is
//     dead-lettered as expired when it comes due.
//   - Purge and delete drop held messages with the rest.
//   - A durable queue writes the due time into the message's entry
//     (persist's entryHeld flag), so that after a restart, clean or not,
//     the message is still held until then.
//
// The holds are a min-heap by due time; the queue's one expiry timer is
// armed for the earliest of the TTL heads and the first hold (armTimer),
// so a tick releases what is due without scanning the rest.

// Retry is a queue's retry-with-backoff setting (Policy.Retry): railmq's
// x-retry-delay and friends, or RabbitMQ 4.3's x-delayed-retry-type,
// -min and -max (Linear, On), on classic and quorum queues alike. It is
// the one backoff computation of both: a classic queue holds its
// messages here, a quorum queue's node computes the due time of a return
// with it and the queue's log holds the message until then
// (cluster/fifo_limits.go).
type Retry struct {
	Delay   time.Duration // x-retry-delay, x-delayed-retry-min; 0: requeues are not held
	Backoff float64       // x-retry-backoff; 0 means the default, 2
	Max     time.Duration // x-retry-delay-max, x-delayed-retry-max; 0: no cap
	Jitter  float64       // x-retry-jitter, a fraction in [0, 1]
	// Linear is RabbitMQ 4.3's backoff (x-delayed-retry-*): the n-th
	// return waits min(Delay * n, Max) (rabbit_fifo.erl v4.3.5
	// calculate_ready_at), not Delay * Backoff^(n-1).
	Linear bool
	On     RetryOn // which returns are held
}

// RetryOn says which returns a retry delay holds.
type RetryOn uint8

// Which returns are held. A failed delivery, in RabbitMQ 4.3's words, is
// a basic.reject with requeue or a consumer gone with the message (its
// channel closed, its connection lost); a basic.nack with requeue, a
// basic.recover and a consumer timeout return without failing
// (rabbit_channel.erl and rabbit_fifo.erl at v4.3.5).
const (
	RetryVerdicts RetryOn = iota // x-retry-delay: a consumer's reject or nack with requeue
	RetryAll                     // x-delayed-retry-type all: every return
	RetryFailed                  // x-delayed-retry-type failed
	RetryReturned                // x-delayed-retry-type returned
)

// Holds reports whether a return is held: failed as above; verdict, a
// consumer's reject or nack with requeue.
func (r *Retry) Holds(failed, verdict bool) bool {
	if r.Delay <= 0 {
		return false
	}
	switch r.On {
	case RetryAll:
		return true
	case RetryFailed:
		return failed
	case RetryReturned:
		return !failed
	}
	return verdict
}

// DefaultRetryBackoff is x-retry-backoff when not given.
const DefaultRetryBackoff = 2

// maxHold bounds a hold (10 years, the longest x-message-ttl), so that a
// large backoff cannot overflow the due time.
const maxHold = 10 * 365 * 24 * time.Hour

// DelayFor is how long the n-th requeue of a message is held (n >= 1),
// before jitter; r.Delay must be positive.
func (r *Retry) DelayFor(n uint32) time.Duration {
	b := r.Backoff
	if b == 0 {
		b = DefaultRetryBackoff
	}
	f := float64(r.Delay)
	switch {
	case r.Linear:
		f *= float64(max(n, 1)) // RabbitMQ: max(1, delivery_count)
	case n > 1:
		f *= math.Pow(b, float64(n-1))
	}
	if r.Max > 0 && f > float64(r.Max) {
		f = float64(r.Max)
	}
	if f > float64(maxHold) || math.IsNaN(f) {
		f = float64(maxHold)
	}
	return time.Duration(f)
}

// Hold computes the n-th requeue's hold with jitter.
func (r *Retry) Hold(n uint32) time.Duration {
	d := r.DelayFor(n)
	if r.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + r.Jitter*(2*rand.Float64()-1)))
	}
	return max(d, 0)
}

// heldMsg is a message held back until due (unix nanos).
type heldMsg struct {
	due   int64
	d     Delivery
	paged bool // d.Msg is an index only (pagedMsg): read back when due
}

// maxFetches bounds the paged holds being read back at once; the rest
// wait, due, until reads land.
const maxFetches = 64

// holdHeap is a min-heap of held messages by due time.
type holdHeap []heldMsg

func byDue(a, b *heldMsg) bool { return a.due < b.due }

func (h *holdHeap) push(x heldMsg) { *h = heapPush(*h, x, byDue) }

func (h *holdHeap) pop() heldMsg {
	x, s := heapPop(*h, byDue)
	*h = s
	return x
}

// RequeueNacked returns deliveries a consumer nacked with requeue: as
// Requeue, but not a failed delivery (RetryOn), and held back first when
// the queue's retry delay holds it.
func (q *Queue) RequeueNacked(ds []Delivery, fl *Flushes) {
	q.requeueVerdict(ds, false, fl)
}

// RequeueRejected returns deliveries a consumer rejected with requeue: a
// failed delivery, held back first when the queue's retry delay holds
// it.
func (q *Queue) RequeueRejected(ds []Delivery, fl *Flushes) {
	q.requeueVerdict(ds, true, fl)
}

func (q *Queue) requeueVerdict(ds []Delivery, failed bool, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		switch x := r.(type) {
		case Returner:
			x.Return(ds, failed, true)
		case NackRequeuer:
			x.RequeueNacked(ds) // a classic queue homed on another node
		default:
			r.Requeue(ds, true)
		}
		return
	}
	fs := uint8(flagRetry)
	if failed {
		fs |= flagFailed
	}
	q.postInline(op{kind: opRequeue, ds: ds, flags: fs}, fl)
}

// Recover returns deliveries that did not fail (basic.recover, a
// consumer timeout): as Requeue, but held only by a retry delay that
// holds such returns (x-delayed-retry-type all or returned), and not
// counted by a quorum queue's delivery limit (RabbitMQ 4.3).
func (q *Queue) Recover(ds []Delivery, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		if x, ok := r.(Returner); ok {
			x.Return(ds, false, false)
		} else {
			r.Requeue(ds, true)
		}
		return
	}
	q.postInline(op{kind: opRequeue, ds: ds}, fl)
}

// Returner is a Replica that tells returns apart as RabbitMQ 4.3's quorum
// queues do (a quorum queue): failed, a failed delivery (counted toward
// its delivery limit); verdict, a consumer's reject or nack with
// requeue.
type Returner interface {
	Return(ds []Delivery, failed, verdict bool)
}

// NackRequeuer is a Replica that tells a consumer's nack or reject with
// requeue from other requeues (a classic queue homed on another node of
// a cluster, which holds it for its retry delay there).
type NackRequeuer interface {
	RequeueNacked(ds []Delivery)
}

// Held is the count of messages held back for a retry delay, without a
// round trip (for the management API and metrics).
func (q *Queue) Held() int64 { return q.heldN.Load() }

// hold holds d back until due, writing the due time into its entry when
// it is stored. exec held.
func (q *Queue) hold(d Delivery, due int64) {
	if q.stored(&d) {
		q.putEntryHeld(&d, due)
	}
	q.pushHold(d, due)
}

// pushHold adds d (in memory, counted in held) to the holds: in memory
// within half the window, else, for a durable queue's stored message, as
// an index only. exec held.
func (q *Queue) pushHold(d Delivery, due int64) {
	size := d.Msg.MemSize()
	win, winBytes := q.window()
	if q.cfg.Durable && q.stored(&d) && (q.holdsInMem >= win/2 || q.holdBytes+size > winBytes/2) {
		q.account(-size)
		d.Msg = q.pagedMsg(d.Msg)
		q.holds.push(heldMsg{due: due, d: d, paged: true})
	} else {
		q.holdBytes += size
		q.holdsInMem++
		q.holds.push(heldMsg{due: due, d: d})
	}
	q.countHeld()
}

// pagedMsg is what a paged hold keeps of m: what its entry, its lane and
// its expiry need, without its bytes; on a deduplicating queue, a copy of
// the properties of a message with an id (its body and properties share
// one buffer), so that its id leaves the queue with it if it never comes
// back (its record lost). exec held.
func (q *Queue) pagedMsg(m *Message) *Message {
	pm := &Message{Persistent: m.Persistent, Priority: m.Priority, Enqueued: m.Enqueued, Expires: m.Expires,
		ID: m.ID, Shared: m.Shared, Inline: m.Inline}
	if q.grp != nil {
		pm.Props = slices.Clone(m.Props) // its group (groups.go)
	} else if q.dedup != nil {
		var buf [9]byte
		if _, ok := DedupID(m.Props, &buf); ok {
			pm.Props = slices.Clone(m.Props)
		}
	}
	return pm
}

func (q *Queue) countHeld() { q.heldN.Store(int64(len(q.holds) + len(q.fetching))) }

func (q *Queue) fetchesFull() bool {
	return len(q.holds) > 0 && q.holds[0].paged && len(q.fetching) >= maxFetches
}

// releaseHolds makes the held messages due by now ready again at their
// places (or dead-letters those whose TTL ran out meanwhile); a paged one
// is read back first (fetch). exec held.
func (q *Queue) releaseHolds(now int64) {
	for len(q.holds) > 0 && q.holds[0].due <= now && !q.fetchesFull() {
		h := q.holds.pop()
		if h.paged {
			q.fetch(h.d)
			continue
		}
		d := h.d
		q.holdBytes -= d.Msg.MemSize()
		q.holdsInMem--
		q.unhold(d, now)
	}
	q.countHeld()
}

// unhold makes a held message in memory ready again at its place, or
// dead-letters it when its TTL ran out while it was held. exec held.
func (q *Queue) unhold(d Delivery, now int64) {
	if exp := q.expiry(&d); exp != 0 && exp <= now {
		q.deadLetter(d, ReasonExpired)
		if q.grp != nil {
			q.grpUnheld(&d, false)
		}
		return
	}
	if q.grp != nil {
		q.grpUnheld(&d, true)
		return
	}
	q.laneOf(d.Msg).returned.push(d)
	q.readyBytes += int64(len(d.Msg.Body))
}

// fetch reads a paged hold come due back from the store: its entry, at
// its sequence. The read is queued behind the writes submitted before it
// and lands as the paging reads do (landHold). exec held.
func (q *Queue) fetch(d Delivery) {
	q.fetching = append(q.fetching, d)
	ld := landing{hold: true, gen: q.holdGen, seq: d.Seq}
	q.cfg.Store.LoadEntries(q.storeID(d.Lane), d.Seq-1, 1, 0, func(ents []StoredEntry, err error) {
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

// landHold takes in a paged hold read back: ready at its place (or
// dead-lettered if it expired meanwhile), then releases what waited for a
// read. exec held.
func (q *Queue) landHold(ld *landing) {
	if ld.gen != q.holdGen {
		return // purged or deleted since
	}
	i := 0
	for i < len(q.fetching) && q.fetching[i].Seq != ld.seq {
		i++
	}
	if i == len(q.fetching) {
		return
	}
	d := q.fetching[i]
	q.fetching = append(q.fetching[:i], q.fetching[i+1:]...)
	now := Now()
	defer q.releaseHolds(now) // those that waited for a read; counts Held
	if ld.err != nil {
		q.cfg.Logger.Error("reading a held message from store", zap.String("queue", q.cfg.Name), zap.Error(ld.err))
		q.holds.push(heldMsg{due: now + int64(time.Second), d: d, paged: true}) // again in a second
		return
	}
	var rec []byte
	for _, e := range ld.ents {
		if e.Seq == ld.seq {
			rec = e.Record
		}
	}
	if rec == nil {
		q.cfg.Logger.Warn("held message missing from store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", ld.seq))
		if q.dedup != nil {
			q.dedupForget(d.Msg) // it is gone: so is its id
		}
		q.grpHoldGone(&d)
		return
	}
	m, err := DecodeMessage(rec)
	if err != nil {
		q.cfg.Logger.Error("corrupt message in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", ld.seq))
		q.deleteEntry(&d)
		q.grpHoldGone(&d)
		return
	}
	m.ID, m.Shared, m.Inline = d.Msg.ID, d.Msg.Shared, d.Msg.Inline
	d.Msg = m
	q.account(m.MemSize())
	q.unhold(d, now)
}

// dropHolds removes every held message (purge); it returns how many.
// exec held.
func (q *Queue) dropHolds() int {
	n := len(q.holds) + len(q.fetching)
	for i := range q.holds {
		h := &q.holds[i]
		if !h.paged {
			q.account(-h.d.Msg.MemSize())
		}
		q.deleteEntry(&h.d)
		q.grpHoldGone(&h.d)
	}
	for i := range q.fetching {
		q.deleteEntry(&q.fetching[i]) // its read lands void (holdGen)
		q.grpHoldGone(&q.fetching[i])
	}
	q.holds, q.fetching = nil, nil
	q.holdBytes, q.holdsInMem = 0, 0
	q.holdGen++
	q.heldN.Store(0)
	return n
}
