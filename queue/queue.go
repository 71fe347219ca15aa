package queue

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// Message is a published message. It is immutable once routed and shared
// by every queue it reaches (a fanout keeps one body).
type Message struct {
	Exchange   string
	RoutingKey string
	Props      []byte // encoded properties, flags first, exactly as published
	Body       []byte
	Persistent bool // delivery-mode 2
	Priority   uint8
}

// Delivery is one queue's copy of a message: its place in the queue and
// its delivery history.
type Delivery struct {
	Msg         *Message
	Seq         uint64 // position in the queue, for FIFO and requeue order
	Redelivered bool
	Count       uint32 // times returned to the queue (x-delivery-count)
}

// Sink is where a queue hands messages to a consumer: the consumer's
// channel. Deliver runs on the queue's goroutine and must not block; it
// returns false when the consumer has no room (prefetch reached, or its
// connection's outbound buffer full), and the consumer's owner must then
// call Queue.Kick once it has room again.
type Sink interface {
	Deliver(c *Consumer, q *Queue, d Delivery) bool
	// Cancelled tells the owner the queue is gone (consumer_cancel_notify).
	Cancelled(c *Consumer)
}

// Consumer is a subscription to a queue.
type Consumer struct {
	Tag       string
	NoAck     bool
	Exclusive bool
	Priority  int32
	Sink      Sink

	// Owned by the consumer's channel, under the channel's lock.
	Prefetch int  // 0 = unlimited
	Unacked  int  // deliveries not yet acked
	NeedKick bool // refused a delivery: Kick the queue when room frees

	blocked bool // queue goroutine: refused its last delivery, awaiting Kick
}

// Hold makes a new consumer wait for a Kick before its first delivery (so
// that consume-ok goes out first). Call it before Consume.
func (c *Consumer) Hold() { c.blocked = true }

// Config describes a queue.
type Config struct {
	Name       string
	VHost      string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       amqp.Table
	Owner      uint64 // connection id of an exclusive queue's owner
	// ConsumerTimeout is x-consumer-timeout, or 0 for the broker default.
	ConsumerTimeout time.Duration
	// OnEmptyOfConsumers is called (on the queue goroutine, with the
	// queue's lock not held) when an auto-delete queue loses its last
	// consumer; the registry then deletes it.
	OnEmptyOfConsumers func(q *Queue)
	// Memory accumulates the bytes of message bodies held by all queues,
	// for the broker's memory watermark.
	Memory *atomic.Int64
	Logger *zap.Logger
}

// ErrDeleted is returned by operations on a queue that has been deleted.
var ErrDeleted = errors.New("queue deleted")

// ErrExclusiveConsumer is a consume refused because of exclusive use.
var ErrExclusiveConsumer = errors.New("queue in exclusive use")

// ErrInUse is a delete with if-unused on a queue that has consumers.
var ErrInUse = errors.New("queue in use")

// ErrNotEmpty is a delete with if-empty on a queue with messages.
var ErrNotEmpty = errors.New("queue not empty")

type opKind uint8

const (
	opPublish opKind = iota + 1
	opAck
	opRequeue
	opDiscard
	opKick
	opConsume
	opCancel
	opGet
	opPurge
	opDelete
	opStats
)

type op struct {
	kind     opKind
	flags    uint8
	msg      *Message
	ds       []Delivery
	consumer *Consumer
	reply    chan result
}

const (
	flagIfUnused = 1 << iota
	flagIfEmpty
	flagNoAck
)

type result struct {
	d        Delivery
	ok       bool
	n        int
	messages int
	err      error
}

// Queue is a message queue. One goroutine owns its messages, consumers
// and counters; other goroutines reach it through a batched inbox.
type Queue struct {
	cfg Config

	mu      sync.Mutex // guards inbox and closed
	inbox   []op
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	// Owned by the queue goroutine.
	spare       []op
	ready       deque
	returned    seqHeap
	nextSeq     uint64
	consumers   []*Consumer
	rr          int
	unacked     int
	hadConsumer bool
	held        int64 // body bytes held, ready and unacked

	// Published for metrics without a round trip.
	readyN    atomic.Int64
	unackedN  atomic.Int64
	consumerN atomic.Int32
}

// New starts a queue.
func New(cfg Config) *Queue {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Memory == nil {
		cfg.Memory = new(atomic.Int64)
	}
	q := &Queue{
		cfg:     cfg,
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		nextSeq: 1,
	}
	go q.run()
	return q
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Config returns the queue's declared properties.
func (q *Queue) Config() *Config { return &q.cfg }

// post appends an op to the inbox. It reports false if the queue is gone.
func (q *Queue) post(o op) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.inbox = append(q.inbox, o)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// call posts an op and waits for its result.
func (q *Queue) call(o op) result {
	o.reply = make(chan result, 1)
	if !q.post(o) {
		return result{err: ErrDeleted}
	}
	return <-o.reply
}

// Publish enqueues a message. It reports false if the queue is gone.
func (q *Queue) Publish(m *Message) bool {
	if !q.post(op{kind: opPublish, msg: m}) {
		return false
	}
	// Counted now, not when the queue gets to it, so that the memory
	// alarm sees a burst as it arrives.
	q.cfg.Memory.Add(int64(len(m.Body)))
	return true
}

// Ack removes delivered messages for good.
func (q *Queue) Ack(ds []Delivery) { q.post(op{kind: opAck, ds: ds}) }

// Requeue returns delivered messages to their places, flagged redelivered.
func (q *Queue) Requeue(ds []Delivery) { q.post(op{kind: opRequeue, ds: ds}) }

// Discard drops delivered messages (reject or nack without requeue).
func (q *Queue) Discard(ds []Delivery) { q.post(op{kind: opDiscard, ds: ds}) }

// Kick tells the queue that c has room again.
func (q *Queue) Kick(c *Consumer) { q.post(op{kind: opKick, consumer: c}) }

// Consume adds a consumer. It fails with ErrExclusiveConsumer when the
// queue has an exclusive consumer, or c is exclusive and others exist.
func (q *Queue) Consume(c *Consumer) error {
	return q.call(op{kind: opConsume, consumer: c}).err
}

// Cancel removes a consumer; an auto-delete queue that loses its last
// consumer is deleted before Cancel returns.
func (q *Queue) Cancel(c *Consumer) {
	q.call(op{kind: opCancel, consumer: c})
}

// Get takes one message for basic.get. With noAck false the message
// counts as unacked until Ack or Requeue. It also returns how many
// messages remain ready.
func (q *Queue) Get(noAck bool) (d Delivery, ok bool, remaining int, err error) {
	var f uint8
	if noAck {
		f = flagNoAck
	}
	r := q.call(op{kind: opGet, flags: f})
	return r.d, r.ok, r.messages, r.err
}

// Purge drops every ready message and returns how many.
func (q *Queue) Purge() (int, error) {
	r := q.call(op{kind: opPurge})
	return r.n, r.err
}

// Delete stops the queue, cancelling its consumers, and returns how many
// messages it held. ifUnused and ifEmpty refuse when it has consumers or
// messages.
func (q *Queue) Delete(ifUnused, ifEmpty bool) (int, error) {
	var f uint8
	if ifUnused {
		f |= flagIfUnused
	}
	if ifEmpty {
		f |= flagIfEmpty
	}
	r := q.call(op{kind: opDelete, flags: f})
	return r.n, r.err
}

// Stats returns the ready message and consumer counts, ordered after
// every op already posted.
func (q *Queue) Stats() (messages, consumers int, err error) {
	r := q.call(op{kind: opStats})
	return r.messages, r.n, r.err
}

// Ready, Unacked and Consumers are the latest counts, without a round
// trip (for metrics).
func (q *Queue) Ready() int64     { return q.readyN.Load() }
func (q *Queue) Unacked() int64   { return q.unackedN.Load() }
func (q *Queue) Consumers() int32 { return q.consumerN.Load() }

// Done is closed when the queue has stopped.
func (q *Queue) Done() <-chan struct{} { return q.stopped }

func (q *Queue) run() {
	defer close(q.stopped)
	for range q.wake {
		q.mu.Lock()
		ops := q.inbox
		q.inbox = q.spare[:0]
		q.mu.Unlock()
		stop := false
		for i := range ops {
			if !stop {
				stop = q.apply(&ops[i])
			} else if ops[i].reply != nil {
				ops[i].reply <- result{err: ErrDeleted}
			}
			ops[i] = op{}
		}
		q.spare = ops[:0]
		if stop {
			q.shutdown()
			return
		}
		q.dispatch()
		q.publishCounts()
	}
}

// shutdown refuses what arrives after a delete.
func (q *Queue) shutdown() {
	q.mu.Lock()
	q.closed = true
	rest := q.inbox
	q.inbox = nil
	q.mu.Unlock()
	for _, o := range rest {
		if o.reply != nil {
			o.reply <- result{err: ErrDeleted}
		}
	}
}

func (q *Queue) publishCounts() {
	q.readyN.Store(int64(q.readyLen()))
	q.unackedN.Store(int64(q.unacked))
	q.consumerN.Store(int32(len(q.consumers)))
}

func (q *Queue) readyLen() int { return q.ready.len() + len(q.returned) }

// apply runs one op; it reports true when the queue must stop.
func (q *Queue) apply(o *op) bool {
	switch o.kind {
	case opPublish:
		q.ready.pushBack(Delivery{Msg: o.msg, Seq: q.nextSeq})
		q.nextSeq++
		q.held += int64(len(o.msg.Body)) // Memory was counted by Publish
	case opAck, opDiscard:
		q.unacked -= len(o.ds)
		var n int64
		for i := range o.ds {
			n += int64(len(o.ds[i].Msg.Body))
		}
		q.account(-n)
	case opRequeue:
		q.unacked -= len(o.ds)
		for _, d := range o.ds {
			d.Redelivered = true
			d.Count++
			q.returned.push(d)
		}
	case opKick:
		o.consumer.blocked = false
	case opConsume:
		o.reply <- result{err: q.addConsumer(o.consumer)}
	case opCancel:
		removed := q.removeConsumer(o.consumer)
		if removed && len(q.consumers) == 0 && q.cfg.AutoDelete && q.cfg.OnEmptyOfConsumers != nil {
			// Deleted synchronously, before cancel-ok (RabbitMQ does too).
			q.cfg.OnEmptyOfConsumers(q)
			n := q.drop()
			o.reply <- result{n: n}
			return true
		}
		o.reply <- result{}
	case opGet:
		d, ok := q.pop()
		if ok && o.flags&flagNoAck == 0 {
			q.unacked++
		} else if ok {
			q.account(-int64(len(d.Msg.Body)))
		}
		o.reply <- result{d: d, ok: ok, messages: q.readyLen()}
	case opPurge:
		n := q.readyLen()
		q.account(-q.readyBytesNow())
		q.ready.clear()
		q.returned = nil
		o.reply <- result{n: n}
	case opStats:
		o.reply <- result{messages: q.readyLen(), n: len(q.consumers)}
	case opDelete:
		if o.flags&flagIfUnused != 0 && len(q.consumers) > 0 {
			o.reply <- result{err: ErrInUse}
			return false
		}
		if o.flags&flagIfEmpty != 0 && q.readyLen() > 0 {
			o.reply <- result{err: ErrNotEmpty}
			return false
		}
		for _, c := range q.consumers {
			c.Sink.Cancelled(c)
		}
		q.consumers = nil
		n := q.drop()
		o.reply <- result{n: n}
		return true
	}
	return false
}

// drop releases every message the queue holds; it returns the ready count.
func (q *Queue) drop() int {
	n := q.readyLen()
	q.account(-q.held) // unacked ones too: their acks will find the queue gone
	q.ready.clear()
	q.returned = nil
	q.readyN.Store(0)
	q.consumerN.Store(0)
	return n
}

func (q *Queue) readyBytesNow() int64 {
	var n int64
	q.ready.each(func(d *Delivery) { n += int64(len(d.Msg.Body)) })
	for i := range q.returned {
		n += int64(len(q.returned[i].Msg.Body))
	}
	return n
}

func (q *Queue) account(n int64) {
	if n != 0 {
		q.held += n
		q.cfg.Memory.Add(n)
	}
}

func (q *Queue) addConsumer(c *Consumer) error {
	for _, o := range q.consumers {
		if o.Exclusive || c.Exclusive {
			return ErrExclusiveConsumer
		}
	}
	// Keep consumers ordered by priority, highest first, then by arrival.
	i := len(q.consumers)
	for i > 0 && q.consumers[i-1].Priority < c.Priority {
		i--
	}
	q.consumers = append(q.consumers, nil)
	copy(q.consumers[i+1:], q.consumers[i:])
	q.consumers[i] = c
	q.hadConsumer = true
	return nil
}

func (q *Queue) removeConsumer(c *Consumer) bool {
	for i, o := range q.consumers {
		if o == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			if q.rr > i {
				q.rr--
			}
			return true
		}
	}
	return false
}

// pop takes the ready message that is first in queue order: the lowest
// sequence among new and returned messages.
func (q *Queue) pop() (Delivery, bool) {
	hasR := len(q.returned) > 0
	hasN := q.ready.len() > 0
	switch {
	case hasR && (!hasN || q.returned[0].Seq < q.ready.front().Seq):
		return q.returned.pop(), true
	case hasN:
		return q.ready.popFront(), true
	}
	return Delivery{}, false
}

// unpop puts back a message that could not be delivered.
func (q *Queue) unpop(d Delivery) {
	if d.Redelivered {
		q.returned.push(d)
	} else {
		q.ready.pushFront(d)
	}
}

// dispatch hands ready messages to consumers with room: the highest
// priority first, round-robin among consumers of equal priority.
func (q *Queue) dispatch() {
	for q.readyLen() > 0 {
		c := q.nextConsumer()
		if c == nil {
			return
		}
		d, _ := q.pop()
		if !c.Sink.Deliver(c, q, d) {
			c.blocked = true
			q.unpop(d)
			continue
		}
		if c.NoAck {
			q.account(-int64(len(d.Msg.Body)))
		} else {
			q.unacked++
		}
	}
}

// nextConsumer picks the next unblocked consumer: within the highest
// priority that has one, the one after the last served.
func (q *Queue) nextConsumer() *Consumer {
	cs := q.consumers
	for start := 0; start < len(cs); {
		end := start + 1
		for end < len(cs) && cs[end].Priority == cs[start].Priority {
			end++
		}
		n := end - start
		off := 0
		if q.rr >= start && q.rr < end {
			off = q.rr - start
		}
		for i := 0; i < n; i++ {
			idx := start + (off+i)%n
			if !cs[idx].blocked {
				q.rr = start + (idx-start+1)%n
				return cs[idx]
			}
		}
		start = end
	}
	return nil
}
