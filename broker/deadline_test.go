package broker

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSilentLimit: a client is dropped 2¾ intervals after the last byte
// read at the earliest, 3 at the latest (with the deadline's slack of a
// quarter interval): inside RabbitMQ's 2 to 3, and past the 2½ a
// blocked client (pika) may stay silent.
func TestSilentLimit(t *testing.T) {
	for _, tc := range []struct{ hb, want time.Duration }{
		{time.Second, 2750 * time.Millisecond},
		{4 * time.Second, 11 * time.Second},
		{60 * time.Second, 165 * time.Second},
		{580 * time.Second, 1595 * time.Second},
	} {
		if got := silentLimit(tc.hb); got != tc.want {
			t.Errorf("silentLimit(%v) = %v, want %v", tc.hb, got, tc.want)
		}
		if got := silentLimit(tc.hb) + tc.hb/4; got != 3*tc.hb {
			t.Errorf("silentLimit(%v) plus the slack = %v, want 3 intervals", tc.hb, got)
		}
	}
}

// TestReadDeadline pins the reader's choice of read deadline (unix nanos;
// 0 none) before each read from the kernel.
func TestReadDeadline(t *testing.T) {
	const (
		hb    = 4 * time.Second
		limit = int64(11 * time.Second) // silentLimit(hb)
		slack = int64(time.Second)      // hb/4
		s     = int64(time.Second)
	)
	now := int64(1_700_000_000) * s
	for _, tc := range []struct {
		name      string
		now       int64
		heartbeat time.Duration
		closeDL   int64
		current   int64
		set       bool
		wantDL    int64
		wantRearm bool
	}{
		{name: "no heartbeat, no close: none", now: now, set: true, wantDL: 0, wantRearm: false},
		{name: "no heartbeat, no close, after a post: cleared again", now: now, set: false, wantDL: 0, wantRearm: true},
		{name: "no heartbeat, a deadline left from the handshake: cleared", now: now, current: now - s, set: true, wantDL: 0, wantRearm: true},
		{name: "heartbeat, first read: silentLimit plus the slack", now: now, heartbeat: hb,
			wantDL: now + limit + slack, wantRearm: true},
		{name: "heartbeat, read at once again: kept", now: now, heartbeat: hb, current: now + limit + slack, set: true,
			wantDL: now + limit + slack},
		{name: "heartbeat, read within the slack: kept", now: now + slack/2, heartbeat: hb, current: now + limit + slack, set: true,
			wantDL: now + limit + slack},
		{name: "heartbeat, read a slack later: kept, at silentLimit exactly", now: now + slack, heartbeat: hb, current: now + limit + slack, set: true,
			wantDL: now + limit + slack},
		{name: "heartbeat, read past the slack: moved", now: now + slack + 1, heartbeat: hb, current: now + limit + slack, set: true,
			wantDL: now + slack + 1 + limit + slack, wantRearm: true},
		{name: "heartbeat, a deadline further than silentLimit plus the slack: moved in", now: now, heartbeat: hb, current: now + limit + slack + 1, set: true,
			wantDL: now + limit + slack, wantRearm: true},
		{name: "heartbeat, none set: set", now: now, heartbeat: hb, current: 0, set: true,
			wantDL: now + limit + slack, wantRearm: true},
		{name: "heartbeat, after a post: set again though unmoved", now: now, heartbeat: hb, current: now + limit + slack, set: false,
			wantDL: now + limit + slack, wantRearm: true},
		{name: "close deadline only: set", now: now, closeDL: now + 5*s, current: now + 5*s, set: true,
			wantDL: now + 5*s, wantRearm: true},
		{name: "close deadline before the heartbeat's: it wins, set every time", now: now, heartbeat: hb, closeDL: now + 2*s, current: now + 2*s, set: true,
			wantDL: now + 2*s, wantRearm: true},
		{name: "close deadline within the slack: silentLimit, no slack, so never passed", now: now, heartbeat: hb, closeDL: now + limit + slack/2, current: now + limit + slack, set: true,
			wantDL: now + limit, wantRearm: true},
		{name: "close deadline after the heartbeat's: silentLimit, no slack", now: now, heartbeat: hb, closeDL: now + 60*s, set: true,
			wantDL: now + limit, wantRearm: true},
		{name: "close deadline passed: set, in the past", now: now, heartbeat: hb, closeDL: now - s, current: now + limit + slack, set: true,
			wantDL: now - s, wantRearm: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl, rearm := readDeadline(tc.now, tc.heartbeat, tc.closeDL, tc.current, tc.set)
			if dl != tc.wantDL || rearm != tc.wantRearm {
				t.Fatalf("got %d (now%+v), rearm %v\nwant %d (now%+v), rearm %v",
					dl, time.Duration(dl-tc.now), rearm, tc.wantDL, time.Duration(tc.wantDL-tc.now), tc.wantRearm)
			}
		})
	}
}

// TestReadDeadlineOverTime feeds readDeadline's answers back to it over a
// run of reads at random intervals, as the reader does, and checks that
// after each read the deadline in force is between silentLimit and three
// intervals from then, never past a close deadline, and that reads
// closer together than the slack rarely move it.
func TestReadDeadlineOverTime(t *testing.T) {
	const hb = 4 * time.Second
	r := rand.New(rand.NewPCG(1, 2))
	for _, closeIn := range []time.Duration{0, 5 * time.Second, 30 * time.Second} {
		now := int64(1_700_000_000) * int64(time.Second)
		var cd int64
		if closeIn > 0 {
			cd = now + int64(closeIn)
		}
		var cur int64
		set := false
		rearms, reads := 0, 0
		for range 10000 {
			now += r.Int64N(int64(time.Second / 20)) // reads 0 to 50 ms apart
			if cd != 0 && now > cd {
				break
			}
			if r.IntN(100) == 0 {
				set = false // a post moved the deadline
			}
			dl, rearm := readDeadline(now, hb, cd, cur, set)
			reads++
			if rearm {
				rearms++
				cur, set = dl, true
			} else if dl != cur {
				t.Fatalf("not re-armed, yet %d is not the deadline in force %d", dl, cur)
			}
			if lo, hi := now+int64(silentLimit(hb)), now+int64(3*hb); cd == 0 && (cur < lo || cur > hi) {
				t.Fatalf("deadline now%+v, want within [now+%v, now+%v]", time.Duration(cur-now), silentLimit(hb), 3*hb)
			}
			if cd != 0 && cur > cd {
				t.Fatalf("deadline now%+v past the close deadline now%+v", time.Duration(cur-now), time.Duration(cd-now))
			}
		}
		if cd == 0 && rearms > reads/10 {
			t.Errorf("re-armed %d times in %d reads 25 ms apart on average, with a 1 s slack", rearms, reads)
		}
	}
}
