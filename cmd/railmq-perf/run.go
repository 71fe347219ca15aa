package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// drainWait bounds how long consumers may catch up after producers stop:
	// drainWaitCounted with --pmessages, drainWaitTimed after --duration, and
	// drainWaitInterrupt after SIGINT.
	drainWaitCounted   = 30 * time.Second
	drainWaitTimed     = 5 * time.Second
	drainWaitInterrupt = 2 * time.Second
	// drainIdle is how long --drain waits without a delivery before it asks
	// whether the queues are empty, and drainPoll how often it asks then.
	drainIdle = 2 * time.Second
	drainPoll = 500 * time.Millisecond
	// stopWait bounds waiting for goroutines stuck on a broker that does not
	// answer.
	stopWait = 5 * time.Second
	// idleDialers is how many idle connections are opened at once.
	idleDialers = 8
	// maxErrorLines is how many errors are printed; all are counted.
	maxErrorLines = 20
)

// errSetup marks failures before the measurement starts (exit code 1).
var errSetup = errors.New("setup")

// runner owns one run: its connections, goroutines and counters.
type runner struct {
	cfg    *config
	stdout io.Writer

	errMu  sync.Mutex // serialises stderr lines
	stderr io.Writer
	errors atomic.Int64
	dials  atomic.Int64 // connections opened: which --uri the next one takes
	// closing is set once the tool starts closing its connections: amqp091-go
	// may then report the broker's socket close after connection.close-ok as
	// a 501 error, which is not one.
	closing atomic.Bool

	ackEvery  int
	queues    []*queueState
	producers []*producer
	consumers []*consumer
	idle      []*amqp.Connection
	ctrl      *amqp.Connection // declares, passive declares, deletes
	ctrlCh    *amqp.Channel

	// Broker sampling; procMid at the end of --replay's publishing.
	procStart, procMid, procEnd procSample
	// consumeStart is when the consumers started, if not at the start of
	// the run (--replay).
	consumeStart time.Time
	// The tool's own CPU time at the start and end of the measurement.
	selfStart, selfEnd time.Duration
	rssPeak            uint64
}

func newRunner(cfg *config, stdout, stderr io.Writer) *runner {
	return &runner{cfg: cfg, stdout: stdout, stderr: stderr}
}

// note prints an informational line to stderr.
func (r *runner) note(format string, args ...any) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	fmt.Fprintf(r.stderr, "railmq-perf: "+format+"\n", args...)
}

// fail counts a runtime error and prints the first maxErrorLines of them.
func (r *runner) fail(format string, args ...any) {
	n := r.errors.Add(1)
	switch {
	case n <= maxErrorLines:
		r.note("error: "+format, args...)
	case n == maxErrorLines+1:
		r.note("further errors are counted, not printed")
	}
}

// dial opens a connection named name (shown by the broker's management
// tools) with the configured heartbeat.
func (r *runner) dial(name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props["connection_name"] = name
	uris := strings.Split(r.cfg.URI, ",")
	uri := uris[int(r.dials.Add(1)-1)%len(uris)]
	conn, err := amqp.DialConfig(uri, amqp.Config{
		Heartbeat:  r.cfg.Heartbeat,
		Locale:     "en_US",
		Properties: props,
	})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	return conn, nil
}

// watch counts an unexpected close of ch (or of its connection) as an error.
// Closes this tool asks for carry no error and are not counted.
func (r *runner) watch(ch *amqp.Channel, what string) {
	c := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for err := range c {
			if err != nil && !r.closing.Load() {
				r.fail("%s: channel closed: %v", what, err)
			}
		}
	}()
}

func (r *runner) run() int {
	cfg := r.cfg
	if cfg.Producers > 0 && cfg.Size < headerSize {
		r.note("--size %d is smaller than the %d-byte header; bodies are padded to %d bytes", cfg.Size, headerSize, headerSize)
		cfg.Size = headerSize
	}
	if !cfg.AutoAck {
		r.ackEvery = max(cfg.MultiAckEvery, 1)
		if cfg.Prefetch > 0 && r.ackEvery > cfg.Prefetch {
			// With fewer deliveries in flight than a batch, the batch would
			// never fill and the broker would stop delivering.
			r.note("--multi-ack-every %d exceeds --prefetch %d; acking every %d", cfg.MultiAckEvery, cfg.Prefetch, cfg.Prefetch)
			r.ackEvery = cfg.Prefetch
		}
	} else if cfg.MultiAckEvery > 1 {
		r.note("--multi-ack-every is ignored with --autoack")
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)

	if err := r.setup(); err != nil {
		r.note("%v", err)
		r.closeAll()
		return exitError
	}
	measure := r.measure
	if cfg.Replay {
		measure = r.measureReplay
	}
	res := measure(sig)
	r.teardown()
	res.Errors = r.errors.Load()
	code := exitOK
	switch {
	case res.Errors > 0:
		res.Status, code = "error", exitError
	case cfg.Verify && (res.Lost > 0 || res.Duplicated > 0 || (res.LossChecked && cfg.PMessages > 0 && res.Unreceived > 0)):
		res.Status, code = "verify_failed", exitVerify
	}
	if err := res.write(r.stdout, !cfg.JSON); err != nil {
		r.note("write report: %v", err)
		return exitError
	}
	return code
}

// setup declares the topology and opens every connection; publishing has
// not started when it returns.
func (r *runner) setup() error {
	cfg := r.cfg
	var err error
	if r.ctrl, err = r.dial("railmq-perf control"); err != nil {
		return fmt.Errorf("%w: %w", errSetup, err)
	}
	if r.ctrlCh, err = r.ctrl.Channel(); err != nil {
		return fmt.Errorf("%w: control channel: %w", errSetup, err)
	}
	n := cfg.queueCount()
	for i := range n {
		r.queues = append(r.queues, newQueueState(cfg.queueName(i)))
	}
	if err := r.declare(); err != nil {
		return fmt.Errorf("%w: %w", errSetup, err)
	}
	if err := r.openIdle(); err != nil {
		return fmt.Errorf("%w: %w", errSetup, err)
	}
	for i := range cfg.Consumers {
		q := r.queues[i%n]
		open := r.openConsumer
		if cfg.Engine == engineFrames {
			open = r.openFrameConsumer
		}
		c, err := open(i, q, r.ackEvery)
		if err != nil {
			return fmt.Errorf("%w: consumer %d: %w", errSetup, i, err)
		}
		q.consumers++
		if cfg.stream() {
			c.track = newQueueState(q.name)
			c.noLatency = cfg.Replay
		}
		r.consumers = append(r.consumers, c)
	}
	for i := range cfg.Producers {
		key := ""
		if cfg.ExchangeType == "direct" {
			key = r.queues[i%n].name
		}
		open := r.openProducer
		if cfg.Engine == engineFrames {
			open = r.openFrameProducer
		}
		p, err := open(i, key)
		if err != nil {
			return fmt.Errorf("%w: producer %d: %w", errSetup, i, err)
		}
		r.producers = append(r.producers, p)
	}
	if cfg.Consumers > 0 && cfg.Producers > 0 {
		for qi, q := range r.queues {
			if q.consumers == 0 && (cfg.ExchangeType == "fanout" || qi < cfg.Producers) {
				r.note("queue %s has no consumer; its messages pile up and are not verified", q.name)
			}
		}
	}
	if cfg.BrokerPID > 0 {
		if r.procStart, err = readProc(cfg.BrokerPID); err != nil {
			return fmt.Errorf("%w: --broker-pid: %w", errSetup, err)
		}
		r.rssPeak = r.procStart.rssKiB
	}
	return nil
}

// declare declares the exchange, queues and bindings, or with --predeclared
// checks that the queues exist.
func (r *runner) declare() error {
	cfg := r.cfg
	if cfg.Predeclared {
		for _, q := range r.queues {
			if _, err := r.ctrlCh.QueueDeclarePassive(q.name, cfg.Persistent, false, false, false, nil); err != nil {
				return fmt.Errorf("--predeclared: queue %s: %w", q.name, err)
			}
		}
		return nil
	}
	ex := cfg.exchange()
	// The exchange is durable whatever --persistent says, so runs with and
	// without it can share it; it is never deleted.
	if err := r.ctrlCh.ExchangeDeclare(ex, cfg.ExchangeType, true /* durable */, false /* autoDelete */, false /* internal */, false /* noWait */, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", ex, err)
	}
	durable := cfg.Persistent || cfg.stream() // streams must be durable
	for _, q := range r.queues {
		dq, err := r.ctrlCh.QueueDeclare(q.name, durable, false /* autoDelete */, false /* exclusive */, false /* noWait */, cfg.declareArgs())
		if err != nil {
			return fmt.Errorf("declare queue %s (durable=%t): %w", q.name, durable, err)
		}
		if dq.Messages > 0 && cfg.Consumers > 0 && !cfg.Drain {
			r.note("queue %s already holds %d messages; they may count as duplicates or out of order", q.name, dq.Messages)
		}
		key := q.name
		if cfg.ExchangeType == "fanout" {
			key = ""
		}
		if err := r.ctrlCh.QueueBind(q.name, key, ex, false /* noWait */, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s: %w", q.name, ex, err)
		}
	}
	return nil
}

// openIdle opens the idle connections, idleDialers at a time.
func (r *runner) openIdle() error {
	n := r.cfg.IdleConnections
	if n == 0 {
		return nil
	}
	conns := make([]*amqp.Connection, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(idleDialers, n) {
		wg.Go(func() {
			for i := range next {
				conn, err := r.dial(fmt.Sprintf("railmq-perf idle %d", i))
				if err == nil {
					if _, err = conn.Channel(); err != nil {
						_ = conn.Close()
						err = fmt.Errorf("idle connection %d: open channel: %w", i, err)
					}
				}
				conns[i], errs[i] = conn, err
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, c := range conns {
		if errs[i] == nil {
			r.idle = append(r.idle, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("opened %d of %d idle connections: %w", len(r.idle), n, err)
	}
	if !r.cfg.JSON {
		r.note("%d idle connections open", n)
	}
	return nil
}

// measure runs producers and consumers until the run ends and gathers the
// figures.
func (r *runner) measure(sig <-chan os.Signal) *result {
	cfg := r.cfg
	stopConsumers := make(chan struct{})
	for _, c := range r.consumers {
		go c.run(stopConsumers)
	}

	r.selfStart = selfCPU()
	start := time.Now()
	ctx, stopProducers := context.WithCancel(context.Background())
	defer stopProducers()
	var prodWG sync.WaitGroup
	for _, p := range r.producers {
		prodWG.Go(func() { p.run(ctx) })
	}
	var prodDone chan struct{} // nil: no producers, or they are done
	if len(r.producers) > 0 {
		prodDone = make(chan struct{})
		go func() { prodWG.Wait(); close(prodDone) }()
	}
	var timeLimit <-chan time.Time
	if cfg.timed {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		timeLimit = t.C
	}
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()

	var (
		publishEnd    time.Time
		draining      bool
		drainDeadline time.Time
		interrupted   bool
		lastPoll      time.Time
		prev          totals
	)
	waitFor := drainWaitTimed
	if cfg.PMessages > 0 {
		waitFor = drainWaitCounted
	}
loop:
	for {
		select {
		case s := <-sig:
			if interrupted || len(r.producers) == 0 {
				r.note("%v: stopping now", s)
				break loop
			}
			interrupted = true
			waitFor = drainWaitInterrupt
			if draining {
				r.note("%v: draining for at most %v more (again to stop now)", s, waitFor)
				drainDeadline = time.Now().Add(waitFor)
				continue
			}
			r.note("%v: stopping producers (again to stop now)", s)
			stopProducers()
		case <-timeLimit:
			timeLimit = nil
			if len(r.producers) == 0 {
				break loop
			}
			stopProducers()
		case <-prodDone:
			prodDone = nil
			publishEnd = time.Now()
			if len(r.consumers) == 0 {
				break loop
			}
			draining, drainDeadline = true, publishEnd.Add(waitFor)
		case now := <-check.C:
			if draining {
				if r.complete() {
					break loop
				}
				if now.After(drainDeadline) {
					r.note("consumers still missing messages %v after producers stopped; ending the run", waitFor)
					break loop
				}
			}
			if cfg.Drain && now.Sub(lastPoll) >= drainPoll && now.Sub(r.lastDelivery(start)) >= drainIdle {
				lastPoll = now
				if r.queuesEmpty() {
					break loop
				}
			}
		case now := <-progress.C:
			prev = r.progress(now.Sub(start), prev)
		}
	}
	end := time.Now()
	r.selfEnd = selfCPU()
	if publishEnd.IsZero() {
		publishEnd = end
	}
	if cfg.BrokerPID > 0 {
		s, err := readProc(cfg.BrokerPID)
		if err != nil {
			r.fail("--broker-pid: %v", err)
		}
		r.procEnd = s
		r.rssPeak = max(r.rssPeak, s.rssKiB)
	}

	// Stop producers, then consumers; their goroutines end before the
	// counters they own are read.
	stopProducers()
	if !waitTimeout(&prodWG, confirmWait+stopWait) {
		r.fail("producers did not stop within %v", confirmWait+stopWait)
	}
	close(stopConsumers)
	for _, c := range r.consumers {
		select {
		case <-c.done:
		case <-time.After(stopWait):
			r.fail("consumer %d did not stop within %v", c.id, stopWait)
		}
	}
	return r.collect(start, publishEnd, end)
}

// complete reports whether every queue with a consumer has received every
// message published to it (less those nacked or returned).
func (r *runner) complete() bool {
	if r.cfg.stream() {
		return r.streamComplete()
	}
	fanout := r.cfg.ExchangeType == "fanout"
	for qi, q := range r.queues {
		if q.consumers == 0 {
			continue
		}
		var want uint64
		for _, p := range r.producers {
			if !fanout && int(p.id)%len(r.queues) != qi {
				continue
			}
			pub := p.published.Load()
			p.mu.Lock()
			skip := uint64(len(p.skip))
			p.mu.Unlock()
			want += pub - min(skip, pub)
		}
		if uint64(q.unique.Load()) < want {
			return false
		}
	}
	return true
}

// lastDelivery is the latest delivery time of any consumer, or start.
func (r *runner) lastDelivery(start time.Time) time.Time {
	var last int64
	for _, c := range r.consumers {
		last = max(last, c.lastNano.Load())
	}
	if last == 0 {
		return start
	}
	return time.Unix(0, last)
}

// queuesEmpty asks the broker whether every queue is empty (passive
// queue.declare reports ready messages, not unacked ones).
func (r *runner) queuesEmpty() bool {
	for _, q := range r.queues {
		dq, err := r.ctrlCh.QueueDeclarePassive(q.name, r.cfg.Persistent, false, false, false, nil)
		if err != nil {
			r.fail("passive declare %s: %v", q.name, err)
			return true // cannot tell; stop rather than spin
		}
		if dq.Messages > 0 {
			return false
		}
	}
	return true
}

// totals are the running counters shown in the progress line.
type totals struct {
	published, confirmed, consumed uint64
}

// progress prints one line to stderr and returns the counters it used.
func (r *runner) progress(elapsed time.Duration, prev totals) totals {
	var t totals
	outstanding := 0
	for _, p := range r.producers {
		t.published += p.published.Load()
		t.confirmed += p.confirmed.Load() + p.nacked.Load()
		outstanding += p.outstanding()
	}
	for _, c := range r.consumers {
		t.consumed += c.consumed.Load()
	}
	if r.cfg.BrokerPID > 0 {
		if s, err := readProc(r.cfg.BrokerPID); err == nil {
			r.rssPeak = max(r.rssPeak, s.rssKiB)
		}
	}
	r.note("time %5.1fs  published %7d msg/s  confirmed %7d msg/s  consumed %7d msg/s  outstanding %5d  errors %d",
		elapsed.Seconds(), t.published-prev.published, t.confirmed-prev.confirmed, t.consumed-prev.consumed,
		outstanding, r.errors.Load())
	return t
}

// teardown closes connections and, unless told to keep them, deletes the
// queues.
func (r *runner) teardown() {
	cfg := r.cfg
	r.closing.Store(true)
	switch {
	case cfg.Predeclared, cfg.Keep:
	case cfg.Consumers == 0 && cfg.Producers > 0:
		r.note("keeping queues %s-1..%d with the published backlog (publish-only run)", cfg.QueuePrefix, len(r.queues))
	default:
		// Consumers go first so the delete does not cancel them.
		for _, c := range r.consumers {
			r.closeConsumer(c)
		}
		for _, q := range r.queues {
			if _, err := r.ctrlCh.QueueDelete(q.name, false /* ifUnused */, false /* ifEmpty */, false /* noWait */); err != nil {
				r.fail("delete queue %s: %v", q.name, err)
			}
		}
	}
	r.closeAll()
}

// closeAll closes every connection, idle ones a few at a time.
func (r *runner) closeAll() {
	r.closing.Store(true)
	for _, c := range r.consumers {
		r.closeConsumer(c)
	}
	for _, p := range r.producers {
		if p.fc != nil {
			p.closeFrames()
			continue
		}
		r.closeConn(p.conn)
	}
	next := make(chan *amqp.Connection)
	var wg sync.WaitGroup
	for range min(idleDialers, len(r.idle)) {
		wg.Go(func() {
			for c := range next {
				r.closeConn(c)
			}
		})
	}
	for _, c := range r.idle {
		next <- c
	}
	close(next)
	wg.Wait()
	r.closeConn(r.ctrl)
}

// closeConsumer closes a consumer's connection, whichever engine.
func (r *runner) closeConsumer(c *consumer) {
	if c.fr != nil {
		c.closeFrames()
		return
	}
	r.closeConn(c.conn)
}

// closeConn closes c unless it is nil or already closed. A failed close
// handshake is noted, not counted: the run is over.
func (r *runner) closeConn(c *amqp.Connection) {
	if c == nil || c.IsClosed() {
		return
	}
	if err := c.CloseDeadline(time.Now().Add(stopWait)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		r.note("close connection: %v", err)
	}
}

// waitTimeout waits for wg for at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
