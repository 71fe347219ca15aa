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
	Enqueued   int64 // unix nanos when published: the age of the oldest message
	// ID is the message's record in the store (0: not stored); Shared
	// says several durable queues reference that record.
	ID     uint64
	Shared bool
}

// Delivery is one queue's copy of a message: its place in the queue and
// its delivery history.
type Delivery struct {
	Msg         *Message
	Seq         uint64 // position in the queue, for FIFO and requeue order
	Redelivered bool
	Count       uint32 // times returned to the queue (x-delivery-count)
	Transient   bool   // a transient message paged out to the store
}

// Confirmer learns when a published message is durable in a queue.
type Confirmer interface {
	Done(err error)
}

// Recovered describes a queue's entries found in the store at start-up.
type Recovered struct {
	Count     int
	MaxSeq    uint64
	Delivered uint64 // entries up to this sequence had been delivered
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

	// ID identifies a durable queue's entries in Store; Store is nil for
	// a queue that is not durable.
	ID    uint64
	Store Store
	// Window is how many ready messages a durable queue keeps in memory;
	// the rest wait in the store and are read ahead of the consumers.
	Window int
	// Recovered is set for a queue restored from the store.
	Recovered *Recovered
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
	conf     Confirmer
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

	// Paging (durable queues): diskCount ready messages wait in the store
	// after memTail, the highest sequence read into memory.
	diskCount int
	memTail   uint64
	delivered uint64 // highest sequence delivered
	savedDlv  uint64 // delivered, as last written
	recDlv    uint64 // entries up to this were delivered before a restart
	w         Writes
	confs     []Confirmer

	// Published for metrics without a round trip.
	readyN    atomic.Int64
	headAt    atomic.Int64
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
	if cfg.Window <= 0 {
		cfg.Window = 4096
	}
	q := &Queue{
		cfg:     cfg,
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		nextSeq: 1,
	}
	if r := cfg.Recovered; r != nil {
		q.diskCount = r.Count
		q.nextSeq = r.MaxSeq + 1
		q.recDlv = r.Delivered
		q.delivered, q.savedDlv = r.Delivered, r.Delivered
		q.refill()
		q.publishCounts()
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

// PublishDurable enqueues a persistent message whose record the caller
// has committed to the store; conf learns when the queue's entry for it is
// durable too. It reports false if the queue is gone.
func (q *Queue) PublishDurable(m *Message, conf Confirmer) bool {
	if !q.post(op{kind: opPublish, msg: m, conf: conf}) {
		return false
	}
	q.cfg.Memory.Add(int64(len(m.Body)))
	return true
}

// Durable reports whether the queue keeps its messages in the store.
func (q *Queue) Durable() bool { return q.cfg.Store != nil }

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
func (q *Queue) Ready() int64 { return q.readyN.Load() }

// HeadEnqueuedAt is when the oldest ready message was published (unix
// nanos), or 0 when none is ready: operators watch its age.
func (q *Queue) HeadEnqueuedAt() int64 { return q.headAt.Load() }
func (q *Queue) Unacked() int64        { return q.unackedN.Load() }
func (q *Queue) Consumers() int32      { return q.consumerN.Load() }

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
			q.commit()
			q.shutdown()
			return
		}
		q.refill()
		q.dispatch()
		q.commit()
		q.publishCounts()
	}
}

// commit hands this round's store changes to the group commit; the
// publishers' confirmers learn when they are durable.
func (q *Queue) commit() {
	if q.cfg.Store == nil {
		return
	}
	if q.delivered > q.savedDlv {
		q.w.add(StoreWrite{Kind: PutDelivered, Queue: q.cfg.ID, Seq: q.delivered})
		q.savedDlv = q.delivered
	}
	if q.w.Len() == 0 {
		for _, c := range q.confs {
			c.Done(nil)
		}
		q.confs = q.confs[:0]
		return
	}
	w := q.w
	q.w = Writes{Ops: make([]StoreWrite, 0, len(w.Ops))}
	var done func(error)
	if len(q.confs) > 0 {
		confs := q.confs
		q.confs = nil
		done = func(err error) {
			for _, c := range confs {
				c.Done(err)
			}
		}
	}
	q.cfg.Store.Commit(&w, done)
}

// stored reports whether d has an entry in this queue's store.
func (q *Queue) stored(d *Delivery) bool { return q.cfg.Store != nil && d.Msg.ID != 0 }

func (q *Queue) deleteEntry(d *Delivery) {
	if q.stored(d) {
		q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared})
	}
}

// refill reads the next messages from the store when the in-memory part
// of a durable queue runs low.
func (q *Queue) refill() {
	if q.diskCount == 0 || q.ready.len() >= q.cfg.Window/2 {
		return
	}
	q.commit() // our own page-outs first (the read is ordered after them anyway)
	ents, err := q.cfg.Store.LoadEntries(q.cfg.ID, q.memTail, q.cfg.Window-q.ready.len())
	if err != nil {
		q.cfg.Logger.Error("reading queue from store", zap.String("queue", q.cfg.Name), zap.Error(err))
		return
	}
	if len(ents) == 0 {
		q.cfg.Logger.Warn("store holds fewer messages than counted", zap.String("queue", q.cfg.Name), zap.Int("missing", q.diskCount))
		q.diskCount = 0
		return
	}
	for _, e := range ents {
		m, err := DecodeMessage(e.Record)
		if err != nil {
			q.cfg.Logger.Error("corrupt message in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", e.Seq))
			q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: e.Seq, Msg: e.Msg, Shared: e.Shared})
		} else {
			m.ID, m.Shared = e.Msg, e.Shared
			q.ready.pushBack(Delivery{Msg: m, Seq: e.Seq, Redelivered: e.Redelivered || e.Seq <= q.recDlv, Count: e.Count, Transient: e.Transient})
			q.account(int64(len(m.Body)))
		}
		q.memTail = e.Seq
		q.diskCount--
	}
	if q.diskCount < 0 {
		q.diskCount = 0
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
	var head int64
	if q.ready.len() > 0 {
		head = q.ready.front().Msg.Enqueued
	}
	if len(q.returned) > 0 && (head == 0 || q.returned[0].Msg.Enqueued < head) {
		head = q.returned[0].Msg.Enqueued
	}
	q.headAt.Store(head)
	q.unackedN.Store(int64(q.unacked))
	q.consumerN.Store(int32(len(q.consumers)))
}

func (q *Queue) readyLen() int { return q.ready.len() + len(q.returned) + q.diskCount }

// noteDelivered records the highest sequence delivered, so that a restart
// flags it and everything before it redelivered.
func (q *Queue) noteDelivered(d *Delivery) {
	if q.stored(d) && d.Seq > q.delivered {
		q.delivered = d.Seq
	}
}

// apply runs one op; it reports true when the queue must stop.
func (q *Queue) apply(o *op) bool {
	switch o.kind {
	case opPublish:
		seq := q.nextSeq
		q.nextSeq++
		m := o.msg
		durable := q.cfg.Store != nil && m.ID != 0
		if durable {
			q.w.add(StoreWrite{Kind: PutEntry, Queue: q.cfg.ID, Seq: seq, Msg: m.ID, Shared: m.Shared})
			if o.conf != nil {
				q.confs = append(q.confs, o.conf)
			}
		}
		if q.cfg.Store != nil && (q.diskCount > 0 || q.ready.len() >= q.cfg.Window) {
			// Beyond the window: the message waits in the store.
			if !durable {
				id := q.cfg.Store.NewMessageID()
				q.w.add(StoreWrite{Kind: PutMessage, Msg: id, Record: EncodeMessage(m)})
				q.w.add(StoreWrite{Kind: PutEntry, Queue: q.cfg.ID, Seq: seq, Msg: id, Transient: true})
			}
			q.diskCount++
			q.cfg.Memory.Add(-int64(len(m.Body))) // counted by Publish, not held
			return false
		}
		q.ready.pushBack(Delivery{Msg: m, Seq: seq})
		q.memTail = seq
		q.held += int64(len(m.Body)) // Memory was counted by Publish
	case opAck, opDiscard:
		q.unacked -= len(o.ds)
		var n int64
		for i := range o.ds {
			n += int64(len(o.ds[i].Msg.Body))
			q.deleteEntry(&o.ds[i])
		}
		q.account(-n)
	case opRequeue:
		q.unacked -= len(o.ds)
		for _, d := range o.ds {
			d.Redelivered = true
			d.Count++
			if q.stored(&d) {
				q.w.add(StoreWrite{Kind: UpdateEntry, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared,
					Transient: d.Transient, Redelivered: true, Count: d.Count})
			}
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
		q.refill()
		d, ok := q.pop()
		if ok && o.flags&flagNoAck == 0 {
			q.unacked++
			q.noteDelivered(&d)
		} else if ok {
			q.account(-int64(len(d.Msg.Body)))
			q.deleteEntry(&d)
		}
		o.reply <- result{d: d, ok: ok, messages: q.readyLen()}
	case opPurge:
		n := q.readyLen()
		q.account(-q.readyBytesNow())
		q.ready.each(q.deleteEntry)
		for i := range q.returned {
			q.deleteEntry(&q.returned[i])
		}
		if q.diskCount > 0 {
			q.w.add(StoreWrite{Kind: DropRange, Queue: q.cfg.ID, Seq: q.memTail + 1})
			q.diskCount = 0
		}
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
	q.diskCount = 0
	q.account(-q.held) // unacked ones too: their acks will find the queue gone
	q.ready.clear()
	q.returned = nil
	q.readyN.Store(0)
	q.headAt.Store(0)
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
		if q.ready.len()+len(q.returned) == 0 {
			q.refill()
		}
		d, ok := q.pop()
		if !ok {
			return
		}
		if !c.Sink.Deliver(c, q, d) {
			c.blocked = true
			q.unpop(d)
			continue
		}
		if c.NoAck {
			q.account(-int64(len(d.Msg.Body)))
			q.deleteEntry(&d)
		} else {
			q.unacked++
			q.noteDelivered(&d)
		}
		if q.ready.len() < q.cfg.Window/2 && q.diskCount > 0 {
			q.refill()
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
