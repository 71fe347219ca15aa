package main

import (
	"os"
	"runtime"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// setProcs chooses how many Ps (Go's processors) the broker runs with,
// unless GOMAXPROCS says: one more than the CPUs it may use while it is
// busy, one while it is nearly idle. It returns a function that stops
// the adaptation.
//
// Why one more than the CPUs: a goroutine holds its P through a page
// fault on Badger's mapped files and through a compaction's long loops,
// which Go preempts only every 10 ms; with every P held so, a goroutine
// woken by its timer or its socket (a delayed message due, a delivery)
// waits for one. With a spare P it runs at once and the kernel shares the
// CPUs between the threads. Measured with a million delayed messages
// routed while Badger compacted (two cores, heap target 256 MiB, side by
// side): routing p99 12.3 ms with 2 Ps, 7.4 and 8.2 ms with 3.
//
// Why one while nearly idle: at a few thousand messages a second each
// message is its own wake-up, and a wake-up costs more in thread switches
// than in work. When a thread finds a goroutine to run and another P is
// idle, Go wakes a second thread to look for more work, which finds none
// and sleeps again: a quarter of the Ps started in S5 (5,000 msg/s) came
// within 50 µs of another. With one P there is no idle P to wake a
// thread for. Measured side by side (S5, 3 runs each): 20.3 µs of broker
// CPU a message with one P, 23.9 with three, p99 latency the same.
//
// The switch follows the process's CPU time, sampled every procsSample:
// with one P, a sample at or above procsBusy of a CPU goes back to the
// full count at once (a burst waits at most one sample on one CPU); with
// the full count, procsIdleSamples samples in a row under procsIdle go
// down to one.
func setProcs(log *zap.Logger) (stop func()) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return func() {}
	}
	full := runtime.GOMAXPROCS(0) + 1
	runtime.GOMAXPROCS(full)
	log.Debug("GOMAXPROCS", zap.Int("procs", full))
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		adaptProcs(full, done, log)
	}()
	return func() {
		close(done)
		<-ended
	}
}

const (
	procsSample      = 100 * time.Millisecond
	procsBusy        = 0.5  // of a CPU: back to the full count
	procsIdle        = 0.25 // of a CPU: ...
	procsIdleSamples = 20   // ... this many samples in a row: one P
)

// procsPolicy decides the P count from CPU samples.
type procsPolicy struct {
	full  int // the busy count
	procs int // the current count
	quiet int // samples in a row under procsIdle
}

// next takes one sample (CPUs used over the last interval) and returns
// the P count to run with.
func (p *procsPolicy) next(used float64) int {
	switch {
	case used >= procsBusy:
		p.quiet = 0
		p.procs = p.full
	case used < procsIdle:
		if p.quiet++; p.quiet >= procsIdleSamples {
			p.procs = 1
		}
	default:
		p.quiet = 0
	}
	return p.procs
}

func adaptProcs(full int, done <-chan struct{}, log *zap.Logger) {
	pol := procsPolicy{full: full, procs: full}
	t := time.NewTicker(procsSample)
	defer t.Stop()
	last, lastAt := cpuTime(), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			cpu := cpuTime()
			used := float64(cpu-last) / float64(now.Sub(lastAt))
			last, lastAt = cpu, now
			if n := pol.next(used); n != runtime.GOMAXPROCS(0) {
				runtime.GOMAXPROCS(n)
				log.Debug("GOMAXPROCS", zap.Int("procs", n), zap.Float64("cpus_used", used))
			}
		}
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
