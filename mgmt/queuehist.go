package mgmt

import (
	"math"
	"time"
)

// Every queue's history: its depths (ready, unacknowledged), the age of
// its oldest message and its message counts (publish, deliver_get, ack,
// redeliver) over the last historySpan, kept from the queue's first
// sample whether or not anybody asks, so that a queue's page shows its
// history at the first look. RabbitMQ keeps the same for every queue.
//
// The memory is bounded for brokers with 100,000 queues: a queue's
// history is a fixed ring of histSlots compact slots (uint32 depths and
// per-slot count deltas, 24 bytes a slot, 1.5 KB a queue), one slot
// per histStep, two samples (10 s at the default 5 s interval). The ring
// is allocated at a queue's first sample that is not all zero (a message
// in it, or its counts moving) and dropped again once a whole span of
// samples has been zero: an idle empty queue costs a nil pointer in its
// last sample. A deleted queue's sample, its ring with it, is dropped at
// the next sample (sample builds the map afresh).
//
// The ring answers RabbitMQ's lengths_age/msg_rates_age queries as the
// totals' history does (addSamples): depths as they were, and cumulative
// counts, rebuilt from the queue's current counts and the deltas.
const histSlots = 60

// histStep is the time a ring slot covers: the last sample in the step
// is kept.
func histStep(interval time.Duration) int64 { return 2 * int64(interval) }

// histSlot is one step of a queue's history. Depths saturate at
// math.MaxUint32; a delta is the counts' growth since the previous slot's
// sample, saturating at math.MaxUint32 (publish, deliver_get, ack) or
// math.MaxUint16 (redeliver: 6,553 a second over a 10 s step). The age
// of the oldest message is in seconds, saturating at about 18 hours. So
// a slot is 24 bytes and the ring fits a 1536-byte allocation.
type histSlot struct {
	ready, unacked uint32
	delta          [3]uint32 // publish, deliver_get, ack
	redeliver, age uint16
}

func (s *histSlot) zero() bool {
	return s.ready == 0 && s.unacked == 0 && s.delta == [3]uint32{} && s.redeliver == 0
}

// queueHist is a queue's ring. Slot i holds step last-k where
// i == (last-k) % histSlots, when bit i of valid is set. Guarded by
// queueStats.mu, like the sample that points at it.
type queueHist struct {
	last  int64  // the newest slot's step (unix nanos / histStep)
	valid uint64 // which slots hold a sample
	quiet int32  // steps in a row whose slots were all zero
	slots [histSlots]histSlot
}

func sat32(v int64) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}

func sat16(v int64) uint16 {
	return uint16(min(max(v, 0), math.MaxUint16))
}

// queueSlot is a sample's slot for counts cum given the previous sample's
// counts prev (nil for a queue's first sample).
func queueSlot(hp histPoint, prev *queueSample) histSlot {
	s := histSlot{ready: sat32(hp.ready), unacked: sat32(hp.unacked), age: sat16(int64(hp.age))}
	if prev != nil {
		s.delta = [3]uint32{sat32(hp.publish - prev.publish), sat32(hp.deliverGet - prev.deliverGet), sat32(hp.ack - prev.ack)}
		s.redeliver = sat16(hp.redelivers - prev.redeliv)
	}
	return s
}

// recordHistory adds the sample hp of a queue whose previous sample is
// prev (nil for its first) and returns the ring to keep in the new
// sample: prev's, a new one when the queue has something to show, or nil
// when it has had nothing for a whole span. Precondition: queueStats.mu
// held.
func recordHistory(prev *queueSample, hp histPoint, step int64) *queueHist {
	s := queueSlot(hp, prev)
	var h *queueHist
	if prev != nil {
		h = prev.ring
	}
	if h == nil {
		if s.zero() {
			return nil
		}
		h = &queueHist{}
		if prev != nil {
			// The sample before was all zero: the ring starts from it,
			// so a plot rises from zero.
			h.put(prev.at/step, histSlot{})
		}
	}
	h.put(hp.at/step, s)
	if h.quiet >= histSlots { // every slot is zero
		return nil
	}
	return h
}

// put writes slot s at step n: a later sample in the same step replaces
// the depths and adds its deltas; a new step clears the slots of the
// steps skipped since the last (the sampler was late) and starts its own.
// A step older than the last (the clock went back) is folded into the
// last.
func (h *queueHist) put(n int64, s histSlot) {
	if h.valid != 0 && n <= h.last {
		i := h.last % histSlots
		for k := range s.delta {
			s.delta[k] = sat32(int64(s.delta[k]) + int64(h.slots[i].delta[k]))
		}
		s.redeliver = sat16(int64(s.redeliver) + int64(h.slots[i].redeliver))
		h.slots[i] = s
		if !s.zero() {
			h.quiet = 0
		}
		return
	}
	if h.valid != 0 {
		for k := h.last + 1; k < n && k <= h.last+histSlots; k++ {
			h.valid &^= 1 << (k % histSlots)
		}
	}
	h.last = n
	h.valid |= 1 << (n % histSlots)
	h.slots[n%histSlots] = s
	if s.zero() {
		h.quiet++
	} else {
		h.quiet = 0
	}
}

// points returns the ring's samples within age of now, at least incr
// apart, newest first, given the counts of the newest sample (cur, taken
// at cur.at): counts are rebuilt backwards from them with the deltas. A
// slot's timestamp is its step's end, or cur.at for the newest.
func (h *queueHist) points(cur histPoint, step, now int64, age, incr time.Duration) []histPoint {
	var out []histPoint
	c := cur
	lastAt := int64(0)
	for k := int64(0); k < histSlots; k++ {
		n := h.last - k
		if n < 0 {
			break
		}
		i := n % histSlots
		if h.valid&(1<<i) == 0 {
			continue
		}
		s := &h.slots[i]
		at := min((n+1)*step, cur.at)
		if now-at > int64(age) {
			break
		}
		p := histPoint{at: at, ready: int64(s.ready), unacked: int64(s.unacked), age: float64(s.age),
			publish: c.publish, deliverGet: c.deliverGet, ack: c.ack, redelivers: c.redelivers}
		// The counts before this slot's sample.
		c.publish -= int64(s.delta[0])
		c.deliverGet -= int64(s.delta[1])
		c.ack -= int64(s.delta[2])
		c.redelivers -= int64(s.redeliver)
		if lastAt != 0 && lastAt-at < int64(incr)-int64(incr)/10 {
			continue
		}
		out = append(out, p)
		lastAt = at
	}
	return out
}
