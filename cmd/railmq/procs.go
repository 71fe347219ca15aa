package main

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// setProcs runs the broker with one P (Go's processors) more than the
// CPUs it may use, unless GOMAXPROCS says otherwise (adapt is then false:
// the count is the operator's). A goroutine holds its P through a page
// fault on Badger's mapped files and through a compaction's long loops,
// which Go preempts only every 10 ms; with every P held so, a goroutine
// woken by its timer or its socket (a delayed message due, a delivery)
// waits for one. With a spare P it runs at once and the kernel shares the
// CPUs between the threads. Measured with a million delayed messages
// routed while Badger compacted (two cores, heap target 256 MiB, side by
// side): routing p99 12.3 ms with 2 Ps, 7.4 and 8.2 ms with 3.
func setProcs(log *zap.Logger) (full int, adapt bool) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return runtime.GOMAXPROCS(0), false
	}
	full = runtime.GOMAXPROCS(0) + 1
	runtime.GOMAXPROCS(full)
	log.Debug("GOMAXPROCS", zap.Int("procs", full))
	return full, true
}

// procsAdapter runs the broker with one P while it is nearly idle and
// does no disk work, and with full Ps otherwise.
//
// Why one P while nearly idle: at a few thousand messages a second each
// message is its own wake-up, and a wake-up costs more in thread switches
// than in work. When a thread finds a goroutine to run and another P is
// idle, Go wakes a second thread to look for more work, which finds none
// and sleeps again: a quarter of the Ps started in S5 (5,000 msg/s) came
// within 50 µs of another. With one P there is no idle P to wake a
// thread for.
//
// Why never during disk work: a goroutine in a blocking system call (an
// fsync, a page file's read) keeps its P until Go's monitor takes it
// back, which at low load may take up to 10 ms; with one P, every
// connection would wait that long. An earlier attempt that followed the
// CPU alone gave persistent messages at 1,000 msg/s a p99 of 1.9 ms
// instead of 0.85. So the store (its commits, reads and value-log
// garbage collection) and the page files call diskWork before each round
// of disk work, which goes back to the full count at once.
//
// Otherwise the choice is made every procsSample from the process's CPU
// time: a sample at or above procsBusy of a CPU goes to the full count
// (a burst waits at most one sample on one P); procsQuietSamples samples
// in a row under procsIdle, without disk work, go down to one.
type procsAdapter struct {
	log  *zap.Logger
	one  atomic.Bool // running with one P
	disk atomic.Bool // disk work since the last sample
	mu   sync.Mutex  // serializes the count's changes
	pol  procsPolicy // mu held
	done chan struct{}
	end  chan struct{}
}

func newProcsAdapter(full int, log *zap.Logger) *procsAdapter {
	return &procsAdapter{log: log, pol: procsPolicy{full: full, procs: full},
		done: make(chan struct{}), end: make(chan struct{})}
}

// diskWork is called before each round of disk work (BeforeDiskWork).
func (a *procsAdapter) diskWork() {
	if !a.disk.Load() {
		a.disk.Store(true)
	}
	if !a.one.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.one.Load() {
		a.pol.next(0, true)
		a.set(a.pol.procs, 0)
	}
}

// set changes the count. a.mu held.
func (a *procsAdapter) set(n int, used float64) {
	if n == runtime.GOMAXPROCS(0) {
		return
	}
	runtime.GOMAXPROCS(n)
	a.one.Store(n == 1)
	a.log.Debug("GOMAXPROCS", zap.Int("procs", n), zap.Float64("cpus_used", used))
}

// run samples until stop.
func (a *procsAdapter) run() {
	defer close(a.end)
	t := time.NewTicker(procsSample)
	defer t.Stop()
	cpu, at := cpuTime(), time.Now()
	for {
		select {
		case <-a.done:
			return
		case now := <-t.C:
			c := cpuTime()
			used := float64(c-cpu) / float64(now.Sub(at))
			cpu, at = c, now
			a.mu.Lock()
			a.set(a.pol.next(used, a.disk.Swap(false)), used)
			a.mu.Unlock()
		}
	}
}

func (a *procsAdapter) start() { go a.run() }

func (a *procsAdapter) stop() {
	close(a.done)
	<-a.end
}

const (
	procsSample       = 100 * time.Millisecond
	procsBusy         = 0.5  // of a CPU: back to the full count
	procsIdle         = 0.25 // of a CPU: ...
	procsQuietSamples = 20   // ... this many samples in a row: one P
)

// procsPolicy decides the P count from samples.
type procsPolicy struct {
	full  int // the count when busy
	procs int // the current count
	quiet int // quiet samples in a row
}

// next takes one sample (the CPUs used over the last interval, and
// whether the broker did disk work in it) and returns the P count to run
// with.
func (p *procsPolicy) next(used float64, disk bool) int {
	switch {
	case used >= procsBusy || disk:
		p.quiet = 0
		p.procs = p.full
	case used < procsIdle:
		if p.quiet++; p.quiet >= procsQuietSamples {
			p.procs = 1
		}
	default:
		p.quiet = 0
	}
	return p.procs
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
