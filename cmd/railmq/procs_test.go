package main

import "testing"

func TestProcsPolicy(t *testing.T) {
	p := procsPolicy{full: 3, procs: 3}
	step := func(used float64, want int) {
		t.Helper()
		if got := p.next(used); got != want {
			t.Fatalf("sample %.2f: %d Ps, want %d", used, got, want)
		}
	}
	// Quiet samples lower the count only after procsIdleSamples in a row;
	// a sample between the thresholds starts the count again.
	for i := 0; i < procsIdleSamples-1; i++ {
		step(0.1, 3)
	}
	step(0.3, 3)
	for i := 0; i < procsIdleSamples-1; i++ {
		step(0.1, 3)
	}
	step(0.1, 1)
	// With one P, a sample between the thresholds keeps one; a busy
	// one goes back to the full count at once.
	step(0.3, 1)
	step(0.1, 1)
	step(procsBusy, 3)
	// And a busy sample in the middle of a quiet run starts it again.
	for i := 0; i < procsIdleSamples-1; i++ {
		step(0.1, 3)
	}
	step(0.9, 3)
	step(0.1, 3)
}
