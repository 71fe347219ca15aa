package queue

import (
	"time"
)

// expiry is when d expires (unix nanos), or 0: the earlier of its own
// expiration and the queue's message TTL.
func (q *Queue) expiry(d *Delivery) int64 {
	e := d.Msg.Expires
	if ttl := q.ttlFor(d.Seq); ttl >= 0 {
		if qe := d.Msg.Enqueued + int64(ttl); e == 0 || qe < e {
			e = qe
		}
	}
	return e
}

// expireHeads dead-letters expired messages at the head of each lane.
func (q *Queue) expireHeads(now int64) {
	for i := range q.lanes {
		l := &q.lanes[i]
		for {
			if l.len() == 0 && l.disk > 0 {
				q.refill()
			}
			d := l.head()
			if d == nil {
				break
			}
			if exp := q.expiry(d); exp == 0 || exp > now {
				break
			}
			x := l.pop()
			q.readyBytes -= int64(len(x.Msg.Body))
			q.deadLetter(x, ReasonExpired)
		}
	}
}

// armTimer sets the queue's one expiry timer for the earliest head, or
// the earliest hold coming due (retry.go).
func (q *Queue) armTimer() {
	var next int64
	for i := range q.lanes {
		if d := q.lanes[i].head(); d != nil {
			if e := q.expiry(d); e != 0 && (next == 0 || e < next) {
				next = e
			}
		}
	}
	if len(q.holds) > 0 && (next == 0 || q.holds[0].due < next) && !q.fetchesFull() {
		next = q.holds[0].due // the first hold that comes due (else the reads' landings go on)
	}
	if next == 0 || (q.timerAt != 0 && q.timerAt <= next) {
		return
	}
	q.timerAt = next
	wait := time.Duration(next - Now())
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timer = time.AfterFunc(max(wait, 0), func() { q.post(op{kind: opTick}) })
}

// armExpires keeps the queue's one x-expires timer armed for when it will
// have been unused for Expires, and disarmed while a consumer is attached
// (opCancel arms it when the last one leaves). Use in between (a get, a
// declare) only moves lastUsed: the tick finds the queue still in use and
// arms it again, once per period at most.
// ttlFor is the message TTL for the message at seq: the one in force
// when it was enqueued, as RabbitMQ 3.10 stamps each message with its
// expiry (a policy's new TTL reaches the messages published after it).
func (q *Queue) ttlFor(seq uint64) time.Duration {
	for i := len(q.ttlEpochs) - 1; i >= 0; i-- {
		if seq >= q.ttlEpochs[i].from {
			return q.ttlEpochs[i].ttl
		}
	}
	if len(q.ttlEpochs) > 0 {
		return q.ttl0
	}
	return q.pol.MessageTTL
}

// ttlEpoch: messages from sequence from on take ttl.
type ttlEpoch struct {
	from uint64
	ttl  time.Duration
}

// setPolicy applies a new policy (SetPolicy). exec held.
func (q *Queue) setPolicy(p Policy) {
	if p.MessageTTL != q.pol.MessageTTL {
		if len(q.ttlEpochs) == 0 {
			q.ttl0 = q.pol.MessageTTL
		}
		q.ttlEpochs = append(q.ttlEpochs, ttlEpoch{from: q.nextSeq, ttl: p.MessageTTL})
	}
	p.MaxPriority, p.SingleActive = q.pol.MaxPriority, q.pol.SingleActive
	p.GroupHeader = q.grpEnable(p.GroupHeader)
	if p.OnExpire == nil {
		p.OnExpire = q.pol.OnExpire
	}
	q.pol = p
	q.toggleDedup()
	q.noteMayReject()
	q.consumerTimeout.Store(int64(p.ConsumerTimeout))
	q.trim()
	q.expireHeads(Now())
	q.timerAt = 0 // re-armed for the new TTL by the drain
	q.expAt = 0
	if q.expTimer != nil {
		q.expTimer.Stop()
	}
	q.armExpires()
}

func (q *Queue) armExpires() {
	if q.pol.Expires <= 0 {
		return
	}
	if len(q.consumers) > 0 {
		if q.expTimer != nil {
			q.expTimer.Stop()
		}
		q.expAt = 0
		return
	}
	at := q.lastUsed + int64(q.pol.Expires)
	if q.expAt != 0 && q.expAt <= at {
		return // armed, and fires no later than needed
	}
	q.expAt = at
	wait := max(time.Duration(at-Now())+time.Millisecond, time.Millisecond)
	if q.expTimer == nil {
		q.expTimer = time.AfterFunc(wait, func() { q.post(op{kind: opTick}) })
		return
	}
	q.expTimer.Reset(wait)
}
