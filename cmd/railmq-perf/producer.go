package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmWait bounds the wait for outstanding confirms after the last publish.
const confirmWait = 10 * time.Second

// producer publishes on its own connection and channel.
type producer struct {
	id   uint32
	r    *runner
	conn *amqp.Connection
	ch   *amqp.Channel
	key  string // routing key

	published atomic.Uint64
	confirmed atomic.Uint64
	nacked    atomic.Uint64
	returned  atomic.Uint64

	// window holds one token per unconfirmed publish; nil without --confirm.
	window chan struct{}
	// confirmsDone is closed when the confirm listener ends, which happens
	// when the channel closes.
	confirmsDone chan struct{}
	returnsDone  chan struct{}

	mu   sync.Mutex
	skip map[uint64]struct{} // nacked or returned sequence numbers; mu guards

	// --engine frames; fc is nil with amqp091-go. confirmsDone is closed
	// when the frame reader ends.
	fc            *frameConn
	wake          chan struct{} // one slot: window room, unblocked, reader gone
	blocked       atomic.Bool   // connection.blocked seen, unblocked not yet
	closingFrames atomic.Bool   // this tool sent connection.close
	conf          confirmTracker
}

// openProducer connects producer id and starts its confirm and return
// listeners.
func (r *runner) openProducer(id int, key string) (*producer, error) {
	conn, err := r.dial(fmt.Sprintf("railmq-perf producer %d", id))
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	p := &producer{
		id: uint32(id), r: r, conn: conn, ch: ch, key: key,
		confirmsDone: make(chan struct{}),
		returnsDone:  make(chan struct{}),
		skip:         make(map[uint64]struct{}),
	}
	r.watch(ch, fmt.Sprintf("producer %d", id))
	if r.cfg.Confirm > 0 {
		if err := ch.Confirm(false /* noWait */); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
		p.window = make(chan struct{}, r.cfg.Confirm)
		go p.listenConfirms(ch.NotifyPublish(make(chan amqp.Confirmation, r.cfg.Confirm)))
	} else {
		close(p.confirmsDone)
	}
	go p.listenReturns(ch.NotifyReturn(make(chan amqp.Return, 64)))
	return p, nil
}

// listenConfirms counts confirms and frees window slots. amqp091-go hands
// confirms over one delivery tag at a time, in tag order, even when the
// broker acks several with multiple=true.
func (p *producer) listenConfirms(c <-chan amqp.Confirmation) {
	defer close(p.confirmsDone)
	for conf := range c {
		if conf.Ack {
			p.confirmed.Add(1)
		} else {
			p.nacked.Add(1)
			// Tags start at 1 with confirm.select, and this channel publishes
			// sequence numbers from 0, so tag t carries seq t-1.
			p.mu.Lock()
			p.skip[conf.DeliveryTag-1] = struct{}{}
			p.mu.Unlock()
		}
		select { // a confirm nobody awaits must not wedge the client's reader
		case <-p.window:
		default:
		}
	}
}

// listenReturns counts mandatory publishes the broker could not route.
func (p *producer) listenReturns(c <-chan amqp.Return) {
	defer close(p.returnsDone)
	for ret := range c {
		p.returned.Add(1)
		if h, err := parseHeader(ret.Body); err == nil {
			p.mu.Lock()
			p.skip[h.seq] = struct{}{}
			p.mu.Unlock()
		}
	}
}

// outstanding is the number of publishes awaiting a confirm.
func (p *producer) outstanding() int {
	if p.fc != nil {
		if p.r.cfg.Confirm == 0 {
			return 0
		}
		settled := p.confirmed.Load() + p.nacked.Load() // before published: never above it
		return int(p.published.Load() - settled)
	}
	if p.window == nil {
		return 0
	}
	return len(p.window)
}

// run publishes until ctx ends, --pmessages are out, or the channel fails,
// then waits (bounded) for outstanding confirms.
func (p *producer) run(ctx context.Context) {
	if p.fc != nil {
		p.runFrames(ctx)
		return
	}
	cfg := p.r.cfg
	body := newBody(cfg.Size)
	msg := amqp.Publishing{Body: body}
	if cfg.Persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	lim := newLimiter(cfg.Rate)
	exchange := cfg.exchange()
publish:
	for seq := uint64(0); cfg.PMessages == 0 || seq < cfg.PMessages; seq++ {
		if d := lim.delay(time.Now()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				break publish
			}
		} else if ctx.Err() != nil {
			break
		}
		if p.window != nil {
			select {
			case p.window <- struct{}{}:
			case <-ctx.Done():
				break publish
			case <-p.confirmsDone: // channel closed; the watcher reports it
				break publish
			}
		}
		putHeader(body, header{producer: p.id, seq: seq, sentNano: time.Now().UnixNano()})
		// The client writes the body into its buffer before Publish returns,
		// so body is free for the next message.
		if err := p.ch.Publish(exchange, p.key, true /* mandatory */, false /* immediate */, msg); err != nil {
			if p.window != nil {
				<-p.window
			}
			p.r.fail("producer %d: publish: %v", p.id, err)
			break
		}
		p.published.Add(1)
	}
	p.awaitConfirms()
}

// awaitConfirms waits until every publish is confirmed, the channel closes,
// or confirmWait passes.
func (p *producer) awaitConfirms() {
	if p.window == nil && (p.fc == nil || p.r.cfg.Confirm == 0) {
		return
	}
	deadline := time.Now().Add(confirmWait)
	for p.outstanding() > 0 {
		select {
		case <-p.confirmsDone:
			return
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.r.note("producer %d: %d publishes still unconfirmed after %v", p.id, p.outstanding(), confirmWait)
			return
		}
	}
}

// skipped returns a copy of the nacked and returned sequence numbers.
func (p *producer) skipped() map[uint64]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[uint64]struct{}, len(p.skip))
	for k := range p.skip {
		m[k] = struct{}{}
	}
	return m
}

// limiter paces one producer at a fixed rate without a ticker: each message
// books the next slot, and the producer sleeps only once it is a millisecond
// or more ahead of schedule. Credit for time spent behind schedule is capped
// at limiterBurst, so a stall is not followed by an unbounded burst.
type limiter struct {
	interval time.Duration // 0: unlimited
	next     time.Time
}

const (
	limiterBurst = 100 * time.Millisecond
	limiterSlack = time.Millisecond
)

func newLimiter(rate float64) limiter {
	if rate <= 0 {
		return limiter{}
	}
	return limiter{interval: time.Duration(float64(time.Second) / rate)}
}

// delay books one message at now and returns how long to sleep first.
func (l *limiter) delay(now time.Time) time.Duration {
	if l.interval == 0 {
		return 0
	}
	if l.next.IsZero() {
		l.next = now
	}
	if earliest := now.Add(-limiterBurst); l.next.Before(earliest) {
		l.next = earliest
	}
	d := l.next.Sub(now)
	l.next = l.next.Add(l.interval)
	if d < limiterSlack {
		return 0
	}
	return d
}
