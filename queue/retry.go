package queue

import (
	"math"
	"math/rand/v2"
	"time"
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
//     got, not counted by x-max-length, not in declare-ok's or purge's
//     ready count; Held counts them (messages_held in the management API).
//     It stays in memory (it was, unacked) and counts against the memory
//     alarm and the paging window.
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

// Retry is a queue's retry-with-backoff setting (Policy.Retry).
type Retry struct {
	Delay   time.Duration // x-retry-delay; 0: requeues are not held
	Backoff float64       // x-retry-backoff; 0 means the default, 2
	Max     time.Duration // x-retry-delay-max; 0: no cap
	Jitter  float64       // x-retry-jitter, a fraction in [0, 1]
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
	if n > 1 {
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

// hold computes the n-th requeue's hold with jitter.
func (r *Retry) hold(n uint32) time.Duration {
	d := r.DelayFor(n)
	if r.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + r.Jitter*(2*rand.Float64()-1)))
	}
	return max(d, 0)
}

// heldMsg is a message held back until due (unix nanos).
type heldMsg struct {
	due int64
	d   Delivery
}

// holdHeap is a min-heap of held messages by due time.
type holdHeap []heldMsg

func (h *holdHeap) push(x heldMsg) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].due <= s[i].due {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *holdHeap) pop() heldMsg {
	s := *h
	x := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = heldMsg{}
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].due < s[m].due {
			m = l
		}
		if r < len(s) && s[r].due < s[m].due {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return x
}

// RequeueNacked returns deliveries a consumer rejected or nacked with
// requeue: as Requeue, but held back first when the queue has a retry
// delay (x-retry-delay).
func (q *Queue) RequeueNacked(ds []Delivery, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		if n, ok := r.(NackRequeuer); ok {
			n.RequeueNacked(ds) // a classic queue homed on another node
		} else {
			r.Requeue(ds, true) // quorum queues take no retry delay
		}
		return
	}
	q.postInline(op{kind: opRequeue, ds: ds, flags: flagRetry}, fl)
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
	q.holds.push(heldMsg{due: due, d: d})
	q.heldN.Store(int64(len(q.holds)))
}

// releaseHolds makes the held messages due by now ready again at their
// places (or dead-letters those whose TTL ran out meanwhile). exec held.
func (q *Queue) releaseHolds(now int64) {
	for len(q.holds) > 0 && q.holds[0].due <= now {
		d := q.holds.pop().d
		if exp := q.expiry(&d); exp != 0 && exp <= now {
			q.deadLetter(d, ReasonExpired)
			continue
		}
		q.laneOf(d.Msg).returned.push(d)
		q.readyBytes += int64(len(d.Msg.Body))
	}
	q.heldN.Store(int64(len(q.holds)))
}

// dropHolds removes every held message (purge); it returns how many.
// exec held.
func (q *Queue) dropHolds() int {
	n := len(q.holds)
	for i := range q.holds {
		d := &q.holds[i].d
		q.account(-d.Msg.MemSize())
		q.deleteEntry(d)
	}
	q.holds = nil
	q.heldN.Store(0)
	return n
}
