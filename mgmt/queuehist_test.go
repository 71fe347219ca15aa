package mgmt

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// feed samples a queue at times base+i*interval for each depth/count
// function value and returns the last sample, as sample() keeps it.
func feed(prev *queueSample, from, to int, interval time.Duration, base int64, f func(i int) histPoint) *queueSample {
	for i := from; i < to; i++ {
		hp := f(i)
		hp.at = base + int64(i)*int64(interval)
		ns := &queueSample{at: hp.at, publish: hp.publish, deliverGet: hp.deliverGet, ack: hp.ack, redeliv: hp.redelivers}
		ns.ring = recordHistory(prev, hp, histStep(interval))
		prev = ns
	}
	return prev
}

func pointsOf(ns *queueSample, interval time.Duration, age, incr time.Duration) []histPoint {
	if ns.ring == nil {
		return nil
	}
	cur := histPoint{at: ns.at, publish: ns.publish, deliverGet: ns.deliverGet, ack: ns.ack, redelivers: ns.redeliv}
	return ns.ring.points(cur, histStep(interval), ns.at, age, incr)
}

// TestQueueHistBounded: a queue's ring keeps one slot per two samples,
// at most histSlots of them (10 minutes at the default 5 s interval),
// newest first, with the depths as they were and the cumulative counts
// rebuilt exactly; and it costs at most 1536 bytes (its allocation's size
// class), whatever the traffic.
func TestQueueHistBounded(t *testing.T) {
	const iv = 5 * time.Second
	base := int64(1_000_000) * int64(time.Second) // a multiple of the 10 s step
	ns := feed(nil, 0, 500, iv, base, func(i int) histPoint {
		return histPoint{ready: int64(i), unacked: 1, publish: int64(i * i), deliverGet: int64(3 * i), ack: int64(2 * i), redelivers: int64(i / 7), age: 15}
	})
	got := pointsOf(ns, iv, historySpan, 0)
	if len(got) != histSlots {
		t.Fatalf("%d samples after 500, want the ring's %d", len(got), histSlots)
	}
	// Slots hold the last sample of each 10 s step: 499, 497, ...
	for k, p := range got {
		i := 499 - 2*k
		want := histPoint{at: min(base+int64(i+1)*int64(iv), ns.at), ready: int64(i), unacked: 1, publish: int64(i * i), deliverGet: int64(3 * i), ack: int64(2 * i), redelivers: int64(i / 7), age: 15}
		if p != want {
			t.Fatalf("sample %d = %+v, want %+v", k, p, want)
		}
	}
	if span := got[0].at - got[len(got)-1].at; span < int64(historySpan)-int64(4*iv) {
		t.Errorf("the ring spans %v, want about %v", time.Duration(span), historySpan)
	}
	if got := pointsOf(ns, iv, time.Minute, 0); len(got) != 7 {
		t.Errorf("the last minute: %d samples, want 7", len(got))
	}
	if got := pointsOf(ns, iv, historySpan, 30*time.Second); len(got) != 20 || got[1].ready != 491 {
		t.Errorf("every 30 s: %d samples, second %d; want 20, 491", len(got), got[1].ready)
	}
	if sz := unsafe.Sizeof(queueHist{}); sz > 1536 {
		t.Errorf("a queue's ring is %d bytes, want at most 1536", sz)
	}
}

// TestQueueHistIdle: an idle empty queue has no ring; one appears at its
// first message, starting from the zero sample before it; it goes once a
// whole ring of samples has been zero.
func TestQueueHistIdle(t *testing.T) {
	const iv = time.Second
	base := int64(1_000_000) * int64(time.Second)
	zero := func(int) histPoint { return histPoint{} }
	ns := feed(nil, 0, 300, iv, base, zero)
	if ns.ring != nil {
		t.Fatal("an idle empty queue has a ring")
	}
	ns = feed(ns, 300, 302, iv, base, func(int) histPoint { return histPoint{ready: 4, publish: 4} })
	got := pointsOf(ns, iv, historySpan, 0)
	if len(got) != 2 || got[0].ready != 4 || got[0].publish != 4 || got[1].ready != 0 || got[1].publish != 0 {
		t.Fatalf("after the first messages: %+v, want [4 ready 4 published, 0 0]", got)
	}
	ns = feed(ns, 302, 302+2*histSlots, iv, base, func(int) histPoint { return histPoint{publish: 4, deliverGet: 4} }) // consumed: empty again
	if ns.ring == nil {
		t.Fatal("the ring went while it still held the messages' samples")
	}
	ns = feed(ns, 302+2*histSlots, 302+2*histSlots+4, iv, base, func(int) histPoint { return histPoint{publish: 4, deliverGet: 4} })
	if ns.ring != nil {
		t.Fatalf("the ring stays after %d steps of nothing", histSlots)
	}
}

// TestQueueHistGapsAndLimits: steps the sampler missed have no sample
// (and their counts fall in the next one); depths beyond uint32 and
// redeliveries beyond uint16 a step saturate rather than wrap.
func TestQueueHistGapsAndLimits(t *testing.T) {
	const iv = time.Second
	base := int64(1_000_000) * int64(time.Second)
	ns := feed(nil, 0, 10, iv, base, func(i int) histPoint { return histPoint{ready: 1, publish: int64(i)} })
	ns = feed(ns, 30, 32, iv, base, func(i int) histPoint {
		return histPoint{ready: math.MaxUint32 + 5, publish: int64(i), redelivers: 1 << 20}
	})
	got := pointsOf(ns, iv, historySpan, 0)
	if len(got) != 6 {
		t.Fatalf("%d samples, want 6 (5 steps, a gap, 1 step)", len(got))
	}
	if got[0].ready != math.MaxUint32 || got[0].publish != 31 || got[1].publish != 9 || got[1].ready != 1 || got[5].publish != 1 || got[0].redelivers != 1<<20 || got[1].redelivers != 1<<20-math.MaxUint16 {
		t.Errorf("samples %+v", got)
	}
	if got[0].at-got[1].at < 10*int64(iv) {
		t.Errorf("the gap is not shown: %d then %d", got[0].at, got[1].at)
	}
}
