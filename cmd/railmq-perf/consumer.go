package main

import (
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consumer consumes one queue on its own connection and channel.
type consumer struct {
	id         int
	r          *runner
	q          *queueState
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	ackEvery   int // 0 with --autoack
	done       chan struct{}
	// track records what this consumer received: nil for q's shared
	// state, or on a stream the consumer's own (stream.go).
	track *queueState
	// noLatency is set for --replay, where a message's age says how long
	// it sat in the stream, not how long delivery took.
	noLatency bool

	consumed atomic.Uint64
	lastNano atomic.Int64 // arrival of the latest delivery, Unix nanoseconds

	// Owned by the run goroutine; read by others only after done is closed.
	hist        histogram
	order       orderCheck
	duplicated  uint64
	outOfOrder  uint64
	redelivered uint64
	pending     int    // deliveries not yet acked
	lastTag     uint64 // delivery tag of the latest delivery

	fr *frameConsumer // --engine frames; nil with amqp091-go
}

// openConsumer connects consumer id, sets its prefetch and starts consuming q.
func (r *runner) openConsumer(id int, q *queueState, ackEvery int) (*consumer, error) {
	conn, err := r.dial(fmt.Sprintf("railmq-perf consumer %d", id))
	if err != nil {
		return nil, err
	}
	c := &consumer{id: id, r: r, q: q, conn: conn, ackEvery: ackEvery, done: make(chan struct{})}
	if c.ch, err = conn.Channel(); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	r.watch(c.ch, fmt.Sprintf("consumer %d", id))
	if r.cfg.Prefetch > 0 {
		if err := c.ch.Qos(r.cfg.Prefetch, 0, false /* global */); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("basic.qos: %w", err)
		}
	}
	if r.cfg.Replay {
		return c, nil // basic.consume once the stream is written
	}
	if err := c.consume(); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// consume sends basic.consume for c's queue, with x-stream-offset on a
// stream.
func (c *consumer) consume() error {
	if c.fr != nil {
		return c.consumeFrames()
	}
	d, err := c.ch.Consume(c.q.name, "", c.r.cfg.AutoAck, false /* exclusive */, false /* noLocal */, false /* noWait */, c.r.cfg.consumeArgs())
	if err != nil {
		return fmt.Errorf("basic.consume %s: %w", c.q.name, err)
	}
	c.deliveries = d
	return nil
}

// run handles deliveries until stop is closed or the channel closes.
func (c *consumer) run(stop <-chan struct{}) {
	if c.fr != nil {
		c.runFrames(stop)
		return
	}
	defer close(c.done)
	for {
		select {
		case <-stop:
			c.flushAcks()
			return
		case d, ok := <-c.deliveries:
			if !ok {
				// A closed channel is reported by its watcher; an open one
				// means the broker cancelled the consumer (basic.cancel).
				if !c.ch.IsClosed() {
					c.r.fail("consumer %d: broker cancelled the consumer on %s", c.id, c.q.name)
				}
				return
			}
			c.handle(&d)
		}
	}
}

func (c *consumer) handle(d *amqp.Delivery) {
	c.handleDelivery(time.Now().UnixNano(), d.DeliveryTag, d.Redelivered, d.Body)
}

// handleDelivery checks one delivery (body holds at least its perf header),
// received at now (Unix nanoseconds), and acks it as configured. Both
// engines use it.
func (c *consumer) handleDelivery(now int64, tag uint64, redelivered bool, body []byte) {
	c.consumed.Add(1)
	c.lastNano.Store(now)
	if redelivered {
		c.redelivered++
	}
	if h, err := parseHeader(body); err != nil {
		c.r.fail("consumer %d: delivery %d on %s: %v", c.id, tag, c.q.name, err)
	} else {
		if !redelivered && !c.noLatency { // a redelivery's age says nothing about latency
			c.hist.record(now - h.sentNano)
		}
		switch {
		case c.tracker().observe(h.producer, h.seq):
			if !c.order.inOrder(h.producer, h.seq) {
				c.outOfOrder++
			}
		case !redelivered:
			c.duplicated++
		}
	}
	if c.ackEvery == 0 {
		return
	}
	c.pending++
	c.lastTag = tag
	if c.ackEvery == 1 || c.pending >= c.ackEvery {
		c.ack(tag, c.ackEvery > 1 /* multiple */)
		c.pending = 0
	}
}

// ack acks tag: through amqp091-go, or into the frame engine's ack buffer,
// written after the current read batch.
func (c *consumer) ack(tag uint64, multiple bool) {
	if c.fr != nil {
		c.fr.ackBuf = appendAck(c.fr.ackBuf, tag, multiple)
		return
	}
	if err := c.ch.Ack(tag, multiple); err != nil {
		c.r.fail("consumer %d: basic.ack: %v", c.id, err)
	}
}

// flushAcks acks what a partial --multi-ack-every batch left over.
func (c *consumer) flushAcks() {
	if c.pending > 0 {
		c.ack(c.lastTag, true /* multiple */)
		c.pending = 0
	}
	if c.fr != nil && len(c.fr.ackBuf) > 0 {
		_ = c.writeAcks()
	}
}
