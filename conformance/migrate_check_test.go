package conformance

import (
	"slices"
	"testing"
	"time"
)

// The migration test's history check (migLoad.check) on made-up
// histories: what it lets through and what it reports, each rule of its
// comment in turn.
func TestMigrationHistoryCheck(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type del = migDelivery
	cases := []struct {
		name        string
		outages     []outage
		dels        []del // of one id published on RabbitMQ at 1 s, confirmed
		lost        bool
		unexplained bool
	}{
		{name: "once", dels: []del{{at: at(2), broker: onRabbit}}},
		{name: "never delivered", lost: true},
		{name: "again flagged", dels: []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRabbit, redelivered: true, ackedBefore: true}}},
		{name: "again unflagged, no kill", unexplained: true,
			dels: []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRailmq, ackedBefore: true}}},
		{name: "not acked, through the link flagged upstream",
			dels: []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRailmq, hop: "federation", hopFlagged: true}}},
		{name: "acked, through the link flagged upstream, no kill", unexplained: true,
			dels: []del{{at: at(2), broker: onRailmq, hop: "federation"}, {at: at(3), broker: onRailmq, hop: "federation", hopFlagged: true, ackedBefore: true}}},
		{name: "acked, through the link flagged upstream, after railmq's kill",
			outages: []outage{{broker: onRailmq, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2), broker: onRailmq, hop: "federation"}, {at: at(3), broker: onRailmq, hop: "federation", hopFlagged: true, ackedBefore: true}}},
		{name: "acked, through the link unflagged, after railmq's kill", unexplained: true,
			outages: []outage{{broker: onRailmq, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2), broker: onRailmq, hop: "federation"}, {at: at(3), broker: onRailmq, hop: "federation", ackedBefore: true}}},
		{name: "railmq again unflagged after its own kill", unexplained: true,
			outages: []outage{{broker: onRailmq, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2), broker: onRailmq, hop: "federation"}, {at: at(3), broker: onRailmq, ackedBefore: true}}},
		{name: "RabbitMQ's flagged redelivery, then the copy railmq kept through its kill",
			outages: []outage{{broker: onRailmq, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2.6), broker: onRabbit, redelivered: true}, {at: at(3), broker: onRailmq, hop: "federation", ackedBefore: true}}},
		{name: "the copy railmq kept through its kill, no flagged delivery", unexplained: true,
			outages: []outage{{broker: onRailmq, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2.6), broker: onRabbit}, {at: at(3), broker: onRailmq, hop: "federation", ackedBefore: true}}},
		{name: "unflagged after RabbitMQ's kill",
			outages: []outage{{broker: onRabbit, from: at(2.5), back: at(2.7)}},
			dels:    []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRabbit, ackedBefore: true}}},
		{name: "unflagged, RabbitMQ killed before the publish", unexplained: true,
			outages: []outage{{broker: onRabbit, from: at(0.5), back: at(0.7)}},
			dels:    []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRabbit, ackedBefore: true}}},
		{name: "unflagged, RabbitMQ killed after both", unexplained: true,
			outages: []outage{{broker: onRabbit, from: at(4), back: at(5)}},
			dels:    []del{{at: at(2), broker: onRabbit}, {at: at(3), broker: onRabbit, ackedBefore: true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newMigLoad([2]string{})
			l.t0 = t0
			const id = 7
			l.h.published[id], l.h.confirmed[id] = true, true
			l.pubAt[id], l.pubOn[id] = at(1), onRabbit
			l.outage = tc.outages
			for _, d := range tc.dels {
				l.h.delivered[id]++
				l.dels[id] = append(l.dels[id], d)
			}
			v := l.check()
			if got := slices.Contains(v.lost, id); got != tc.lost {
				t.Errorf("lost = %v, want %v", v.lost, tc.lost)
			}
			if got := slices.Contains(v.unexplained, id); got != tc.unexplained {
				t.Errorf("unexplained = %v, want %v (%s)", v.unexplained, tc.unexplained, v.why)
			}
		})
	}
}

// longestIdle: the longest gap between a consumer's deliveries (and from
// its last to the end), the time a broker was down left out.
func TestMigrationLongestIdle(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l := newMigLoad([2]string{})
	c := newMigClient("c")
	c.times = []time.Time{at(1), at(2), at(9), at(10)}
	if gap, from := l.longestIdle(c, at(12), true); gap != 7*time.Second || !from.Equal(at(2)) {
		t.Errorf("no outage: %v from %v, want 7s from 2s", gap, from.Sub(t0))
	}
	l.outage = []outage{{broker: onRabbit, from: at(3), back: at(8)}}
	if gap, from := l.longestIdle(c, at(12), true); gap != 2*time.Second || !from.Equal(at(2)) && !from.Equal(at(10)) {
		t.Errorf("5 s down within the gap: %v from %v, want 2s", gap, from.Sub(t0))
	}
	if gap, from := l.longestIdle(c, at(20), true); gap != 10*time.Second || !from.Equal(at(10)) {
		t.Errorf("until 20 s: %v from %v, want 10s from 10s", gap, from.Sub(t0))
	}
}
