package main

import (
	"runtime"
	"testing"

	"go.uber.org/zap"
)

func TestProcsPolicy(t *testing.T) {
	p := procsPolicy{full: 3, procs: 3}
	step := func(used float64, disk bool, want int) {
		t.Helper()
		if got := p.next(used, disk); got != want {
			t.Fatalf("sample %.2f (disk work %v): %d Ps, want %d", used, disk, got, want)
		}
	}
	quiet := func(n, want int) {
		t.Helper()
		for i := 0; i < n; i++ {
			step(0.1, false, want)
		}
	}
	// Quiet samples lower the count only after procsQuietSamples in a
	// row; a sample between the thresholds starts the count again, and
	// so does one with disk work, however little CPU it used.
	quiet(procsQuietSamples-1, 3)
	step(0.3, false, 3)
	quiet(procsQuietSamples-1, 3)
	step(0.01, true, 3)
	quiet(procsQuietSamples-1, 3)
	step(0.1, false, 1)
	// With one P, a sample between the thresholds keeps one; a busy one
	// goes back to the full count at once, as does disk work.
	step(0.3, false, 1)
	step(0.1, false, 1)
	step(procsBusy, false, 3)
	quiet(procsQuietSamples-1, 3)
	step(0.1, false, 1)
	step(0.01, true, 3)
	// And a busy sample in the middle of a quiet run starts it again.
	quiet(procsQuietSamples-1, 3)
	step(0.9, false, 3)
	step(0.1, false, 3)
}

// Disk work while running with one P goes back to the full count at once,
// not at the next sample: a blocking fsync must not hold the only P.
func TestProcsDiskWorkRestoresAtOnce(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	a := newProcsAdapter(3, zap.NewNop())
	a.mu.Lock()
	a.pol.procs = 1
	a.set(1, 0)
	a.mu.Unlock()
	if runtime.GOMAXPROCS(0) != 1 || !a.one.Load() {
		t.Fatalf("GOMAXPROCS %d, one %v", runtime.GOMAXPROCS(0), a.one.Load())
	}
	a.diskWork()
	if n := runtime.GOMAXPROCS(0); n != 3 || a.one.Load() {
		t.Fatalf("after disk work: GOMAXPROCS %d, one %v", n, a.one.Load())
	}
	// The next sample sees the disk work too: no quiet run counted.
	if !a.disk.Load() {
		t.Fatal("disk work not noted for the sampler")
	}
}
