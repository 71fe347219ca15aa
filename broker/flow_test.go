package broker

import (
	"math"
	"testing"
	"time"
)

// TestPaceFloorRate: a third of a 4 MiB send buffer every quarter
// heartbeat; no floor without heartbeats.
func TestPaceFloorRate(t *testing.T) {
	for _, tc := range []struct {
		hb   time.Duration
		want float64 // bytes a second
	}{
		{0, 0},
		{3 * time.Second, 4 << 20 / 3 / 0.75},
		{10 * time.Second, 4 << 20 / 3 / 2.5},
		{60 * time.Second, 4 << 20 / 3 / 15.0},
	} {
		if got := paceFloorRate(tc.hb); math.Abs(got-tc.want) > 1 {
			t.Errorf("paceFloorRate(%v) = %.0f, want %.0f", tc.hb, got, tc.want)
		}
	}
}

// TestPaceFloorAllows: a paced reader is let through at the floor's rate
// over time, owes what it read beyond it, holds at most a second's worth,
// and begins afresh after a second unpaced.
func TestPaceFloorAllows(t *testing.T) {
	const rate = 1000.0 // bytes a second
	var p paceFloor
	t0 := time.Unix(1000, 0)
	if p.allows(t0, rate) {
		t.Fatal("a wait just begun is let through")
	}
	if p.allows(t0.Add(time.Millisecond/2), rate) != true {
		t.Fatal("half a byte of credit does not let the reader through")
	}
	// It reads 100 bytes: owed until 100 ms more have passed.
	p.in += 100
	at := t0.Add(time.Millisecond)
	if p.allows(at, rate) {
		t.Fatal("let through while owing 99.5 bytes")
	}
	if p.allows(at.Add(99*time.Millisecond), rate) {
		t.Fatal("let through while owing half a byte")
	}
	if !p.allows(at.Add(101*time.Millisecond), rate) {
		t.Fatal("not let through once the debt is paid")
	}
	// Waiting long builds a second's worth at most.
	at = at.Add(101 * time.Millisecond)
	for i := 1; i <= 20; i++ {
		p.allows(at.Add(time.Duration(i)*100*time.Millisecond), rate)
	}
	at = at.Add(2 * time.Second)
	p.in += 999
	if !p.allows(at, rate) {
		t.Fatal("a second's worth less 999 bytes does not let through")
	}
	p.in += 2
	if p.allows(at, rate) {
		t.Fatal("more than a second's worth let through")
	}
	// Reading far beyond the floor owes a second's worth at most.
	p.in += 1 << 20
	if p.allows(at, rate) {
		t.Fatal("let through while owing")
	}
	if p.allows(at.Add(600*time.Millisecond), rate) {
		t.Fatal("let through while owing 400 bytes")
	}
	at = at.Add(1200 * time.Millisecond)
	if !p.allows(at, rate) {
		t.Fatal("still owing after a second and more")
	}
	// A second without a wait: afresh, nothing owed, nothing saved.
	p.in += 1 << 20
	if p.allows(at.Add(1001*time.Millisecond), rate) {
		t.Fatal("a fresh wait is let through at once")
	}
	if p.credit != 0 {
		t.Fatalf("a fresh wait begins with %v", p.credit)
	}
}
