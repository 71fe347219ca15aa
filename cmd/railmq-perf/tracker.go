package main

import (
	"sort"
	"sync"
	"sync/atomic"
)

// span is the half-open range of sequence numbers [lo, hi).
type span struct{ lo, hi uint64 }

// seqSet records which sequence numbers of one producer arrived on one queue.
// It stores sorted, disjoint, non-adjacent spans, so in-order traffic costs
// one comparison and memory grows with the number of gaps, not messages.
// Arrivals slightly out of order (several consumers on a queue) open a short
// gap that the next deliveries close again.
type seqSet struct {
	spans []span
	n     uint64 // distinct sequence numbers added
}

// add records seq and reports whether it was new (false: a duplicate).
func (s *seqSet) add(seq uint64) bool {
	n := len(s.spans)
	if n > 0 && s.spans[n-1].hi == seq { // the common case: next in order
		s.spans[n-1].hi++
		s.n++
		return true
	}
	// i is the first span starting after seq; spans[i-1] may contain it.
	i := sort.Search(n, func(i int) bool { return s.spans[i].lo > seq })
	if i > 0 && seq < s.spans[i-1].hi {
		return false
	}
	s.n++
	joinPrev := i > 0 && s.spans[i-1].hi == seq
	joinNext := i < n && s.spans[i].lo == seq+1
	switch {
	case joinPrev && joinNext:
		s.spans[i-1].hi = s.spans[i].hi
		s.spans = append(s.spans[:i], s.spans[i+1:]...)
	case joinPrev:
		s.spans[i-1].hi++
	case joinNext:
		s.spans[i].lo--
	default:
		s.spans = append(s.spans, span{})
		copy(s.spans[i+1:], s.spans[i:])
		s.spans[i] = span{seq, seq + 1}
	}
	return true
}

// has reports whether seq was added.
func (s *seqSet) has(seq uint64) bool {
	i := sort.Search(len(s.spans), func(i int) bool { return s.spans[i].lo > seq })
	return i > 0 && seq < s.spans[i-1].hi
}

// count returns the number of distinct sequence numbers added.
func (s *seqSet) count() uint64 { return s.n }

// missing counts the sequence numbers in [0, published) that never arrived,
// leaving out those in skip (nacked or returned, so never expected). gaps are
// the ones below the highest arrival, which a FIFO queue should not leave
// behind; tail the ones above it, which may still be in the queue.
func (s *seqSet) missing(published uint64, skip map[uint64]struct{}) (gaps, tail uint64) {
	return s.missingFrom(0, published, skip)
}

// missingFrom is missing for the sequence numbers in [from, published): a
// stream consumer at an absolute offset expects nothing below the first
// one it received.
func (s *seqSet) missingFrom(from, published uint64, skip map[uint64]struct{}) (gaps, tail uint64) {
	next := from // first sequence number not yet accounted for
	for _, sp := range s.spans {
		if sp.lo >= published {
			break
		}
		if sp.hi <= next {
			continue
		}
		if sp.lo > next {
			gaps += sp.lo - next
		}
		next = sp.hi
	}
	if next < published {
		tail = published - next
	}
	for seq := range skip {
		if seq < from || seq >= published || s.has(seq) {
			continue
		}
		if seq < next {
			gaps--
		} else {
			tail--
		}
	}
	return gaps, tail
}

// orderCheck is one consumer's view of ordering: per producer, the highest
// sequence number it received. AMQP keeps a queue's order on one channel
// (§4.7), so a new message below that mark is out of order. Per consumer,
// because two consumers of one queue interleave legitimately.
type orderCheck struct {
	high map[uint32]uint64
}

// inOrder records a first-time delivery and reports whether it came in order.
func (o *orderCheck) inOrder(producer uint32, seq uint64) bool {
	if o.high == nil {
		o.high = make(map[uint32]uint64)
	}
	h, ok := o.high[producer]
	if ok && seq < h {
		return false
	}
	o.high[producer] = seq
	return true
}

// queueState is shared by the consumers of one queue.
type queueState struct {
	name      string
	consumers int

	unique atomic.Int64 // first-time deliveries, for the completion check

	mu   sync.Mutex         // guards seqs
	seqs map[uint32]*seqSet // by producer id
}

func newQueueState(name string) *queueState {
	return &queueState{name: name, seqs: make(map[uint32]*seqSet)}
}

// observe records a delivery and reports whether it was the first of its
// (producer, seq) pair on this queue.
func (q *queueState) observe(producer uint32, seq uint64) bool {
	q.mu.Lock()
	s := q.seqs[producer]
	if s == nil {
		s = &seqSet{}
		q.seqs[producer] = s
	}
	first := s.add(seq)
	q.mu.Unlock()
	if first {
		q.unique.Add(1)
	}
	return first
}

// low returns the lowest sequence number received from producer, and
// whether any was.
func (q *queueState) low(producer uint32) (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s := q.seqs[producer]; s != nil && len(s.spans) > 0 {
		return s.spans[0].lo, true
	}
	return 0, false
}

// set returns the producer's seqSet, or an empty one. Call it only once the
// consumers have stopped.
func (q *queueState) set(producer uint32) *seqSet {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s := q.seqs[producer]; s != nil {
		return s
	}
	return &seqSet{}
}
