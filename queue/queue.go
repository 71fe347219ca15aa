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
	Expires    int64 // unix nanos from the expiration property, or 0
	// ID is the message's record in the store (0: not stored); Shared
	// says several durable queues reference that record.
	ID     uint64
	Shared bool
	// Inline: the record lives inside this queue's entry (a message only
	// one durable queue holds), written by the queue itself.
	Inline bool
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
// channel. Deliver runs with the queue's exec held and must not block; it
// returns false when the consumer has no room (prefetch reached, or its
// connection's outbound buffer full), and the consumer's owner must then
// call Queue.Kick once it has room again.
type Sink interface {
	Deliver(c *Consumer, q *Queue, d Delivery) bool
	// Cancelled tells the owner the queue is gone (consumer_cancel_notify).
	Cancelled(c *Consumer)
}

// An Outlet is where a consumer's deliveries are written out: its
// connection. With Consumer.Out set, Deliver only appends, and the queue
// has the outlet written once per batch of ops: Wake hands that to the
// outlet's writer; Flush, called later by the goroutine that drained the
// ops inline (see Flushes), writes on the calling goroutine when the
// socket takes the bytes at once, which spares a goroutine hand-off.
type Outlet interface {
	Wake()
	Flush()
}

// Flushes collects the outlets that inline drains appended deliveries
// to, for one goroutine (a connection's reader) to flush when it is done
// with its batch of work. Not safe for concurrent use; nil is allowed and
// wakes each outlet at the end of the drain.
type Flushes struct {
	outs []Outlet
}

func (f *Flushes) add(o Outlet) {
	for _, x := range f.outs {
		if x == o {
			return
		}
	}
	f.outs = append(f.outs, o)
}

// Flush writes out what is pending on each collected outlet.
func (f *Flushes) Flush() {
	if f == nil || len(f.outs) == 0 {
		return
	}
	for i, o := range f.outs {
		o.Flush()
		f.outs[i] = nil
	}
	f.outs = f.outs[:0]
}

// Consumer is a subscription to a queue.
type Consumer struct {
	Tag       string
	NoAck     bool
	Exclusive bool
	Priority  int32
	Sink      Sink
	Out       Outlet // nil: Deliver has its bytes written itself

	// Timeout is basic.consume's x-consumer-timeout, or 0 for the
	// queue's or the broker's; the channel reads it (fixed at consume).
	Timeout time.Duration

	// Owned by the consumer's channel, under the channel's lock.
	Prefetch int  // 0 = unlimited
	Unacked  int  // deliveries not yet acked
	NeedKick bool // refused a delivery: Kick the queue when room frees

	blocked bool // under the queue's exec: refused its last delivery, awaiting Kick
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
	// Policy holds the limits its arguments set (nil: none).
	Policy *Policy
}

// ErrDeleted is returned by operations on a queue that has been deleted.
var ErrDeleted = errors.New("queue deleted")

// ErrExclusiveConsumer is a consume refused because of exclusive use.
var ErrExclusiveConsumer = errors.New("queue in exclusive use")

// ErrInUse is a delete with if-unused on a queue that has consumers.
var ErrInUse = errors.New("queue in use")

// ErrNotEmpty is a delete with if-empty on a queue with messages.
var ErrNotEmpty = errors.New("queue not empty")

// ErrRejected is a publish refused by a full queue (x-overflow
// reject-publish): the publisher is nacked.
var ErrRejected = errors.New("queue full: publish rejected")

// Overflow is what a queue at its length limit does (x-overflow).
type Overflow uint8

// Overflow behaviours.
const (
	DropHead Overflow = iota
	RejectPublish
	RejectPublishDLX
)

// Dead-letter reasons, as RabbitMQ writes them in x-death.
const (
	ReasonRejected      = "rejected"
	ReasonExpired       = "expired"
	ReasonMaxLen        = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
)

// DeadLetterFunc republishes a message that leaves q for reason. done,
// when not nil, must be called once the copies are durable (or could not
// be made), so that the queue's own entry is removed only then.
type DeadLetterFunc func(q *Queue, d Delivery, reason string, done func())

// Policy is what a queue's arguments ask of it.
type Policy struct {
	MessageTTL     time.Duration // x-message-ttl; negative: none
	Expires        time.Duration // x-expires: delete when unused this long; 0: never
	MaxLength      int64         // x-max-length; negative: none
	MaxLengthBytes int64         // x-max-length-bytes; negative: none
	Overflow       Overflow
	DeliveryLimit  int64 // x-delivery-limit; negative: none
	SingleActive   bool  // x-single-active-consumer
	MaxPriority    uint8 // x-max-priority; 0: not a priority queue
	// DeadLetter is set when the queue has x-dead-letter-exchange.
	DeadLetter DeadLetterFunc
	// OnExpire deletes the queue from the registry when x-expires fires.
	OnExpire func(q *Queue)
}

// NoPolicy is a queue without limits.
var NoPolicy = Policy{MessageTTL: -1, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1}

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
	opTick
	opTouch
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

// lane holds the ready messages of one priority: new ones in order, and
// returned ones waiting to go out again ahead of later ones.
type lane struct {
	ready    deque
	returned seqHeap
}

func (l *lane) len() int { return l.ready.len() + len(l.returned) }

// head is the lane's next message, without removing it.
func (l *lane) head() *Delivery {
	hasR, hasN := len(l.returned) > 0, l.ready.len() > 0
	switch {
	case hasR && (!hasN || l.returned[0].Seq < l.ready.front().Seq):
		return &l.returned[0]
	case hasN:
		return l.ready.front()
	}
	return nil
}

func (l *lane) pop() Delivery {
	if len(l.returned) > 0 && (l.ready.len() == 0 || l.returned[0].Seq < l.ready.front().Seq) {
		return l.returned.pop()
	}
	return l.ready.popFront()
}

// Queue is a message queue. Other goroutines reach it through a batched
// inbox of ops. Whoever holds exec applies them: the queue's goroutine,
// or (for the ops of a publisher or consumer that holds no lock) the
// poster itself when the queue is idle, which spares two goroutine
// hand-offs per message.
type Queue struct {
	cfg Config
	pol Policy

	mu      sync.Mutex // guards inbox, landed and closed
	inbox   []op
	landed  []landing // store reads done, for whoever holds exec next
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	// exec is held while ops are applied; it guards everything below.
	exec    sync.Mutex
	dead    bool     // stopped: the goroutine exits
	touched []Outlet // outlets delivered to in this drain

	spare       []op
	lanes       []lane // by priority; one unless x-max-priority
	nextSeq     uint64
	consumers   []*Consumer // by priority, then arrival
	order       []*Consumer // by arrival (single active consumer)
	rr          int
	unacked     int
	hadConsumer bool
	held        int64 // body bytes held in memory, ready and unacked
	readyBytes  int64 // body bytes of ready messages, in memory or not

	// Paging (durable queues): diskCount ready messages wait in the store
	// after memTail, the highest sequence read into memory.
	diskCount int
	memTail   uint64
	delivered uint64 // highest sequence delivered
	savedDlv  uint64 // delivered, as last written
	recDlv    uint64 // entries up to this were delivered before a restart
	w         Writes
	confs     []Confirmer
	// Reads from the store (paging.go): at most one under way.
	loading   bool
	loadGen   uint64 // bumped when the paged part is dropped: reads begun before are void
	stalled   bool   // ops wait in the inbox until the read under way lands
	trimDue   bool   // a length limit is exceeded by messages still in the store
	loadRetry int64  // after a failed read: no new one before this (unix nanos)

	// Expiry: one timer for the earliest head expiry (no timer per
	// message), and x-expires.
	timer    *time.Timer
	timerAt  int64
	lastUsed int64
	// x-expires: one timer, armed for lastUsed+Expires while no consumer
	// is attached (a consumer is use, so nothing can fire then).
	expTimer *time.Timer
	expAt    int64        // what expTimer is armed for; 0 = not armed
	ticks    atomic.Int64 // timer ticks applied (tests)

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
	pol := NoPolicy
	if cfg.Policy != nil {
		pol = *cfg.Policy
	}
	nl := 1
	if pol.MaxPriority > 0 {
		nl = int(pol.MaxPriority) + 1
		cfg.Window = 1 << 30 // priority queues stay in memory
	}
	q := &Queue{
		cfg:      cfg,
		pol:      pol,
		lanes:    make([]lane, nl),
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
		nextSeq:  1,
		lastUsed: time.Now().UnixNano(),
	}
	if r := cfg.Recovered; r != nil {
		q.diskCount = r.Count
		q.nextSeq = r.MaxSeq + 1
		q.recDlv = r.Delivered
		q.delivered, q.savedDlv = r.Delivered, r.Delivered
		q.refill() // lands on the queue's goroutine, which then arms the expiry timer
		q.publishCounts()
	}
	q.armExpires() // before run: then only whoever holds exec arms it
	go q.run()
	return q
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Config returns the queue's declared properties.
func (q *Queue) Config() *Config { return &q.cfg }

// CountsDeliveries reports whether the queue has a delivery limit
// (x-delivery-limit), the one case where a classic queue's redeliveries
// carry x-delivery-count: RabbitMQ adds that header on quorum queues only,
// and clients that take every header for a string (Watermill) refuse it.
// The policy is fixed when the queue is made, so any goroutine may ask.
func (q *Queue) CountsDeliveries() bool { return q.pol.DeliveryLimit >= 0 }

// post appends an op to the inbox for the queue's goroutine. It reports
// false if the queue is gone.
func (q *Queue) post(o op) bool {
	if !q.enqueue(o) {
		return false
	}
	q.signal()
	return true
}

// postInline is post, but when no one is applying ops the caller applies
// the inbox itself; the outlets it delivers to are left in fl. Only for
// callers that hold no lock the queue's callbacks may take (vhost locks,
// a channel's lock, ...).
func (q *Queue) postInline(o op, fl *Flushes) bool {
	if !q.enqueue(o) {
		return false
	}
	if !q.exec.TryLock() {
		q.signal() // the holder may be past its look at the inbox
		return true
	}
	if !q.dead {
		q.drain(fl, true)
	}
	q.exec.Unlock()
	return true
}

func (q *Queue) enqueue(o op) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.inbox = append(q.inbox, o)
	q.mu.Unlock()
	return true
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
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
	return q.PublishConfirm(m, nil, nil)
}

// PublishConfirm enqueues a message; conf (if not nil) learns when the
// queue has taken it: at once, or once its entry is durable when the
// message is persistent and its record was committed by the caller (its
// ID is set), or with ErrRejected when the queue is full. It reports
// false if the queue is gone. The caller may have to flush fl (see
// postInline).
func (q *Queue) PublishConfirm(m *Message, conf Confirmer, fl *Flushes) bool {
	// Counted now, not when the queue gets to it, so that the memory
	// alarm sees a burst as it arrives.
	q.cfg.Memory.Add(int64(len(m.Body)))
	if !q.postInline(op{kind: opPublish, msg: m, conf: conf}, fl) {
		q.cfg.Memory.Add(-int64(len(m.Body)))
		return false
	}
	return true
}

// Durable reports whether the queue keeps its messages in the store.
func (q *Queue) Durable() bool { return q.cfg.Store != nil }

// MayReject reports whether the queue can refuse publishes (x-overflow
// reject-publish), so its publishers need a confirm from it.
func (q *Queue) MayReject() bool {
	return (q.pol.MaxLength >= 0 || q.pol.MaxLengthBytes >= 0) && q.pol.Overflow != DropHead
}

// Ack removes delivered messages for good.
func (q *Queue) Ack(ds []Delivery, fl *Flushes) { q.postInline(op{kind: opAck, ds: ds}, fl) }

// Requeue returns delivered messages to their places, flagged redelivered.
func (q *Queue) Requeue(ds []Delivery, fl *Flushes) {
	q.postInline(op{kind: opRequeue, ds: ds}, fl)
}

// Discard drops delivered messages (reject or nack without requeue); they
// are dead-lettered when the queue has a dead-letter exchange.
func (q *Queue) Discard(ds []Delivery, fl *Flushes) {
	q.postInline(op{kind: opDiscard, ds: ds}, fl)
}

// Kick tells the queue that c has room again.
func (q *Queue) Kick(c *Consumer, fl *Flushes) { q.postInline(op{kind: opKick, consumer: c}, fl) }

// Touch marks the queue used (a redeclare), for x-expires.
func (q *Queue) Touch() { q.post(op{kind: opTouch}) }

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

// Unacked is the count of delivered, unacknowledged messages.
func (q *Queue) Unacked() int64 { return q.unackedN.Load() }

// Consumers is the count of consumers.
func (q *Queue) Consumers() int32 { return q.consumerN.Load() }

// Done is closed when the queue has stopped.
func (q *Queue) Done() <-chan struct{} { return q.stopped }

func (q *Queue) run() {
	for range q.wake {
		q.exec.Lock()
		if !q.dead {
			q.drain(nil, false)
		}
		dead := q.dead
		q.exec.Unlock()
		if dead {
			return
		}
	}
}

// drain applies what the store read and the ops in the inbox, then
// delivers and commits what they changed. exec held; inline says the
// caller is a poster, not the queue's goroutine (see the top of the file).
func (q *Queue) drain(fl *Flushes, inline bool) {
	q.mu.Lock()
	landed := q.landed
	q.landed = nil
	q.mu.Unlock()
	for i := range landed {
		q.land(&landed[i])
	}
	if q.stalled && !q.loading {
		q.refill() // the read failed: try again (not before loadRetry)
	}
	var ops []op
	if !q.stalled {
		q.mu.Lock()
		ops = q.inbox
		q.inbox = q.spare[:0]
		q.mu.Unlock()
	}
	if len(ops) == 0 && len(landed) == 0 {
		q.spare = ops[:0]
		return
	}
	stop := false
apply:
	for i := range ops {
		o := &ops[i]
		switch {
		case stop:
			q.refuse(o)
			continue
		case inline && o.goroutineOnly():
			q.giveBack(ops[i:]) // in order, ahead of what came since
			q.signal()
			break apply
		}
		switch q.apply(o) {
		case stopped:
			stop = true
		case retry:
			q.giveBack(ops[i:]) // o too: applied again once the read lands
			break apply
		}
		if q.stalled && !stop {
			q.giveBack(ops[i+1:])
			break
		}
	}
	clear(ops)
	q.spare = ops[:0]
	if stop {
		q.commit()
		q.shutdown()
		q.dead = true
		close(q.stopped)
		q.signal() // the goroutine exits
		return
	}
	q.refill()
	q.dispatch()
	for i, o := range q.touched {
		if fl != nil {
			fl.add(o)
		} else {
			o.Wake()
		}
		q.touched[i] = nil
	}
	q.touched = q.touched[:0]
	q.armTimer()
	q.commit()
	q.publishCounts()
}

// giveBack returns ops not applied to the front of the inbox (copied:
// the caller reuses its slice).
func (q *Queue) giveBack(ops []op) {
	if len(ops) == 0 {
		return
	}
	q.mu.Lock()
	in := make([]op, 0, len(ops)+len(q.inbox))
	in = append(append(in, ops...), q.inbox...)
	q.inbox = in
	q.mu.Unlock()
}

// refuse answers an op that arrives after the queue stopped: a call gets
// ErrDeleted, a publisher its confirm (the message was routed; RabbitMQ
// confirms it too), and the memory its publish counted is given back.
func (q *Queue) refuse(o *op) {
	if o.reply != nil {
		o.reply <- result{err: ErrDeleted}
	}
	if o.kind == opPublish {
		q.cfg.Memory.Add(-int64(len(o.msg.Body)))
		if o.conf != nil {
			o.conf.Done(nil)
		}
	}
}

// shutdown refuses what arrives after a delete.
func (q *Queue) shutdown() {
	if q.timer != nil {
		q.timer.Stop()
	}
	if q.expTimer != nil {
		q.expTimer.Stop()
	}
	q.mu.Lock()
	q.closed = true
	rest := q.inbox
	q.inbox = nil
	q.mu.Unlock()
	for i := range rest {
		q.refuse(&rest[i])
	}
}

// commit hands this round's store changes to the group commit; the
// publishers' confirmers learn when they are durable.
func (q *Queue) commit() {
	if q.cfg.Store != nil && q.delivered > q.savedDlv {
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

func (q *Queue) publishCounts() {
	q.readyN.Store(int64(q.readyLen()))
	q.unackedN.Store(int64(q.unacked))
	q.consumerN.Store(int32(len(q.consumers)))
	var head int64
	for i := range q.lanes {
		if d := q.lanes[i].head(); d != nil && (head == 0 || d.Msg.Enqueued < head) {
			head = d.Msg.Enqueued
		}
	}
	q.headAt.Store(head)
}

func (q *Queue) memLen() int {
	n := 0
	for i := range q.lanes {
		n += q.lanes[i].len()
	}
	return n
}

func (q *Queue) readyLen() int { return q.memLen() + q.diskCount }

// stored reports whether d has an entry in this queue's store.
func (q *Queue) stored(d *Delivery) bool { return q.cfg.Store != nil && d.Msg.ID != 0 }

func (q *Queue) deleteEntry(d *Delivery) {
	if q.stored(d) {
		q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared, Inline: d.Msg.Inline})
	}
}

// putEntry writes d's entry (with the record, when inline).
func (q *Queue) putEntry(kind WriteKind, d *Delivery) {
	w := StoreWrite{Kind: kind, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared,
		Transient: d.Transient, Redelivered: d.Redelivered, Count: d.Count, Inline: d.Msg.Inline}
	if w.Inline {
		w.Record = EncodeMessage(d.Msg)
	}
	q.w.add(w)
}

// noteDelivered records the highest sequence delivered, so that a restart
// flags it and everything before it redelivered.
func (q *Queue) noteDelivered(d *Delivery) {
	if q.stored(d) && d.Seq > q.delivered {
		q.delivered = d.Seq
	}
}

func (q *Queue) laneOf(m *Message) *lane {
	p := int(m.Priority)
	if p >= len(q.lanes) {
		p = len(q.lanes) - 1
	}
	return &q.lanes[p]
}

// refill begins reading the next messages from the store when the
// in-memory part of a durable queue runs low. The read is queued on the
// store's goroutine behind its writes; exec is not held while it runs
// (see land).
func (q *Queue) refill() {
	l := &q.lanes[0]
	if q.diskCount == 0 || q.loading || l.ready.len() >= q.cfg.Window/2 {
		return
	}
	if q.loadRetry != 0 && time.Now().UnixNano() < q.loadRetry {
		return
	}
	q.commit() // our own page-outs first: the read sees every earlier commit
	q.loading = true
	ld := landing{gen: q.loadGen, seen: q.diskCount, asked: q.cfg.Window - l.ready.len()}
	q.cfg.Store.LoadEntries(q.cfg.ID, q.memTail, ld.asked, func(ents []StoredEntry, err error) {
		ld.ents, ld.err = ents, err
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.landed = append(q.landed, ld)
		q.mu.Unlock()
		q.signal()
	})
}

// landing is a read from the store, done: what refill asked and found.
type landing struct {
	gen   uint64
	seen  int // paged entries the read could see (submitted before it)
	asked int
	ents  []StoredEntry
	err   error
}

// land takes in what a read found, behind what memory holds. exec held.
func (q *Queue) land(ld *landing) {
	if ld.gen != q.loadGen {
		return // the paged part was dropped (purge) since the read began
	}
	q.loading, q.stalled = false, false
	if ld.err != nil {
		q.cfg.Logger.Error("reading queue from store", zap.String("queue", q.cfg.Name), zap.Error(ld.err))
		q.loadRetry = time.Now().Add(time.Second).UnixNano()
		time.AfterFunc(time.Second, q.signal)
		return
	}
	q.loadRetry = 0
	n := 0
	for _, e := range ld.ents {
		if e.Seq <= q.memTail {
			continue // defensive: memTail only moves while nothing is paged
		}
		n++
		m, err := DecodeMessage(e.Record)
		if err != nil {
			q.cfg.Logger.Error("corrupt message in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", e.Seq))
			q.w.add(StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: e.Seq, Msg: e.Msg, Shared: e.Shared, Inline: e.Inline})
		} else {
			m.ID, m.Shared, m.Inline = e.Msg, e.Shared, e.Inline
			d := Delivery{Msg: m, Seq: e.Seq, Redelivered: e.Redelivered || e.Seq <= q.recDlv, Count: e.Count, Transient: e.Transient}
			q.laneOf(m).ready.pushBack(d)
			q.account(int64(len(m.Body)))
			if r := q.cfg.Recovered; r != nil && e.Seq <= r.MaxSeq {
				q.readyBytes += int64(len(m.Body)) // recovered sizes are learnt as they load
			}
		}
		q.memTail = e.Seq
		q.diskCount--
	}
	if want := min(ld.seen, ld.asked); n < want {
		// The store holds fewer of the entries the read could see than
		// were counted; those paged after it are still to come.
		missing := ld.seen - n
		q.cfg.Logger.Warn("store holds fewer messages than counted", zap.String("queue", q.cfg.Name), zap.Int("missing", missing))
		q.diskCount -= missing
	}
	if q.diskCount < 0 {
		q.diskCount = 0
	}
	if q.trimDue {
		q.trimDue = false
		q.trim()
	}
}

// voidReads forgets the read under way: the paged part it reads is gone.
func (q *Queue) voidReads() {
	q.loadGen++
	q.loading, q.stalled, q.trimDue = false, false, false
}

// outcome is what applying an op leads to.
type outcome uint8

const (
	applied outcome = iota
	stopped         // the queue is gone: the ops after it are refused
	retry           // the op needs messages still in the store: applied again once they are read
)

// goroutineOnly reports whether only the queue's goroutine may apply o:
// calls (a caller waits for the reply, often under the registry's locks,
// and auto-delete calls back into the registry) and timer ticks (x-expires
// deletes the queue from the registry).
func (o *op) goroutineOnly() bool { return o.reply != nil || o.kind == opTick }

// apply runs one op.
func (q *Queue) apply(o *op) outcome {
	switch o.kind {
	case opPublish:
		q.publish(o.msg, o.conf)
	case opAck:
		q.unacked -= len(o.ds)
		var n int64
		for i := range o.ds {
			n += int64(len(o.ds[i].Msg.Body))
			q.deleteEntry(&o.ds[i])
		}
		q.account(-n)
	case opDiscard:
		q.unacked -= len(o.ds)
		for _, d := range o.ds {
			q.deadLetter(d, ReasonRejected)
		}
	case opRequeue:
		q.unacked -= len(o.ds)
		for _, d := range o.ds {
			d.Redelivered = true
			d.Count++
			if q.pol.DeliveryLimit >= 0 && int64(d.Count) > q.pol.DeliveryLimit {
				q.deadLetter(d, ReasonDeliveryLimit)
				continue
			}
			if q.stored(&d) {
				q.putEntry(UpdateEntry, &d)
			}
			q.laneOf(d.Msg).returned.push(d)
			q.readyBytes += int64(len(d.Msg.Body))
		}
	case opKick:
		o.consumer.blocked = false
	case opTouch:
		q.lastUsed = time.Now().UnixNano()
	case opTick:
		q.ticks.Add(1)
		now := time.Now().UnixNano()
		q.timerAt = 0
		q.expireHeads(now)
		if e := q.pol.Expires; e > 0 && len(q.consumers) == 0 && now-q.lastUsed >= int64(e) {
			q.cfg.Logger.Info("queue expired (x-expires)", zap.String("queue", q.cfg.Name))
			if q.pol.OnExpire != nil {
				q.pol.OnExpire(q)
			}
			q.drop()
			return stopped
		}
		if q.expAt != 0 && q.expAt <= now {
			q.expAt = 0 // this was the x-expires timer (used since): arm anew
		}
		q.armExpires()
	case opConsume:
		err := q.addConsumer(o.consumer)
		if err == nil {
			q.lastUsed = time.Now().UnixNano()
			q.armExpires() // stops it: a consumer is attached
		}
		o.reply <- result{err: err}
	case opCancel:
		removed := q.removeConsumer(o.consumer)
		q.lastUsed = time.Now().UnixNano()
		q.armExpires() // the last consumer gone: unused from now
		if removed && len(q.consumers) == 0 && q.cfg.AutoDelete && q.cfg.OnEmptyOfConsumers != nil {
			// Deleted synchronously, before cancel-ok (RabbitMQ does too).
			q.cfg.OnEmptyOfConsumers(q)
			n := q.drop()
			o.reply <- result{n: n}
			return stopped
		}
		o.reply <- result{}
	case opGet:
		q.lastUsed = time.Now().UnixNano()
		d, ok := q.pop(q.lastUsed)
		if !ok && q.diskCount > 0 {
			q.stalled = true // pop began the read (refill)
			return retry
		}
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
		for i := range q.lanes {
			l := &q.lanes[i]
			for l.len() > 0 {
				d := l.pop()
				q.account(-int64(len(d.Msg.Body)))
				q.deleteEntry(&d)
			}
		}
		if q.diskCount > 0 {
			q.w.add(StoreWrite{Kind: DropRange, Queue: q.cfg.ID, Seq: q.memTail + 1})
			q.diskCount = 0
			q.voidReads()
		}
		q.readyBytes = 0
		o.reply <- result{n: n}
	case opStats:
		o.reply <- result{messages: q.readyLen(), n: len(q.consumers)}
	case opDelete:
		if o.flags&flagIfUnused != 0 && len(q.consumers) > 0 {
			o.reply <- result{err: ErrInUse}
			return applied
		}
		if o.flags&flagIfEmpty != 0 && q.readyLen() > 0 {
			o.reply <- result{err: ErrNotEmpty}
			return applied
		}
		for _, c := range q.consumers {
			c.Sink.Cancelled(c)
		}
		q.consumers, q.order = nil, nil
		n := q.drop()
		o.reply <- result{n: n}
		return stopped
	}
	return applied
}

// publish takes a message in: refused when full with reject-publish,
// paged to the store beyond a durable queue's window, else ready.
func (q *Queue) publish(m *Message, conf Confirmer) {
	size := int64(len(m.Body))
	if q.pol.MaxLength >= 0 || q.pol.MaxLengthBytes >= 0 {
		full := (q.pol.MaxLength >= 0 && int64(q.readyLen()) >= q.pol.MaxLength) ||
			(q.pol.MaxLengthBytes >= 0 && q.readyBytes+size > q.pol.MaxLengthBytes)
		if full && q.pol.Overflow != DropHead {
			q.cfg.Memory.Add(-size) // counted by Publish, not kept
			if q.pol.Overflow == RejectPublishDLX && q.pol.DeadLetter != nil {
				q.pol.DeadLetter(q, Delivery{Msg: m}, ReasonMaxLen, nil)
			}
			if conf != nil {
				conf.Done(ErrRejected)
			}
			return
		}
	}
	seq := q.nextSeq
	q.nextSeq++
	durable := q.cfg.Store != nil && m.ID != 0
	if durable {
		q.putEntry(PutEntry, &Delivery{Msg: m, Seq: seq})
	}
	if conf != nil {
		q.confs = append(q.confs, conf) // confirmed at commit: at once, or once durable
	}
	if (m.Expires != 0 && m.Expires <= m.Enqueued) || q.pol.MessageTTL == 0 {
		if q.publishNow(Delivery{Msg: m, Seq: seq}, ReasonExpired) {
			return
		}
	}
	if q.pol.Overflow == DropHead && (q.pol.MaxLength == 0 || (q.pol.MaxLengthBytes >= 0 && size > q.pol.MaxLengthBytes)) {
		// It cannot wait in the queue even alone: as RabbitMQ, a
		// consumer with room gets it first, else it is dropped as the head.
		if q.publishNow(Delivery{Msg: m, Seq: seq}, ReasonMaxLen) {
			return
		}
	}
	q.readyBytes += size
	if q.cfg.Store != nil && (q.diskCount > 0 || q.lanes[0].ready.len() >= q.cfg.Window) {
		// Beyond the window: the message waits in the store.
		if !durable {
			id := q.cfg.Store.NewMessageID()
			q.w.add(StoreWrite{Kind: PutEntry, Queue: q.cfg.ID, Seq: seq, Msg: id, Transient: true, Inline: true, Record: EncodeMessage(m)})
		}
		q.diskCount++
		q.cfg.Memory.Add(-size) // counted by Publish, not held
	} else {
		q.laneOf(m).ready.pushBack(Delivery{Msg: m, Seq: seq})
		q.memTail = seq
		q.held += size // Memory was counted by Publish
	}
	q.trim()
}

// trim dead-letters the oldest messages while the queue is over its
// length limit (drop-head). When the oldest are still in the store, the
// queue stalls until they are read: no op sees it over its limit.
func (q *Queue) trim() {
	for (q.pol.MaxLength >= 0 && int64(q.readyLen()) > q.pol.MaxLength) ||
		(q.pol.MaxLengthBytes >= 0 && q.readyBytes > q.pol.MaxLengthBytes && q.readyLen() > 0) {
		d, ok := q.popAny()
		if !ok {
			if q.diskCount > 0 { // popAny began the read
				q.trimDue, q.stalled = true, true
			}
			return
		}
		q.deadLetter(d, ReasonMaxLen)
	}
}

// publishNow takes in a message that cannot wait in the queue (a TTL of
// 0, the queue's or its own; or a length limit it exceeds alone), as
// RabbitMQ's deliver_or_enqueue does: into an empty queue it goes to a
// consumer that has room now, or leaves at once for reason (it would be
// the head). Behind other messages it is queued, and goes when it reaches
// the head. It reports false when the message is to be queued.
func (q *Queue) publishNow(d Delivery, reason string) bool {
	if q.readyLen() > 0 {
		q.dispatch() // ops of this batch may have given consumers room
		if q.readyLen() > 0 {
			return false
		}
	}
	// Nothing is paged, so a later refill reads after it; Memory was
	// counted by Publish.
	q.memTail = d.Seq
	q.held += int64(len(d.Msg.Body))
	for c := q.nextConsumer(); c != nil; c = q.nextConsumer() {
		if q.deliver(c, d) {
			return true
		}
	}
	q.deadLetter(d, reason)
	return true
}

// deadLetter removes d from the queue for reason: republished to the
// dead-letter exchange when there is one, else dropped. A stored entry is
// deleted only once the copies are durable.
func (q *Queue) deadLetter(d Delivery, reason string) {
	q.account(-int64(len(d.Msg.Body)))
	if q.pol.DeadLetter == nil {
		q.deleteEntry(&d)
		return
	}
	if !q.stored(&d) {
		q.pol.DeadLetter(q, d, reason, nil)
		return
	}
	if q.w.Len() > 0 {
		// d's entry may be among this round's writes (a TTL of 0, a
		// length limit): they go to the store first, so that the delete,
		// which done may submit at once, comes after its put.
		q.commit()
	}
	store, del := q.cfg.Store, StoreWrite{Kind: DeleteEntry, Queue: q.cfg.ID, Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared, Inline: d.Msg.Inline}
	q.pol.DeadLetter(q, d, reason, func() {
		store.Commit(&Writes{Ops: []StoreWrite{del}}, nil)
	})
}

// drop releases every message the queue holds; it returns the ready count.
func (q *Queue) drop() int {
	n := q.readyLen()
	q.diskCount = 0
	q.voidReads()
	q.account(-q.held) // unacked ones too: their acks will find the queue gone
	for i := range q.lanes {
		q.lanes[i] = lane{}
	}
	q.readyBytes = 0
	q.readyN.Store(0)
	q.consumerN.Store(0)
	q.headAt.Store(0)
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
	q.order = append(q.order, c)
	q.hadConsumer = true
	return nil
}

func (q *Queue) removeConsumer(c *Consumer) bool {
	for i, o := range q.order {
		if o == c {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
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

// popAny takes the next ready message regardless of expiry: highest
// priority first, then queue order.
func (q *Queue) popAny() (Delivery, bool) {
	for i := len(q.lanes) - 1; i >= 0; i-- {
		if i == 0 && q.lanes[0].len() == 0 && q.diskCount > 0 {
			q.refill()
		}
		if q.lanes[i].len() > 0 {
			d := q.lanes[i].pop()
			q.readyBytes -= int64(len(d.Msg.Body))
			return d, true
		}
	}
	return Delivery{}, false
}

// pop takes the next ready message that has not expired; expired ones met
// on the way are dead-lettered (RabbitMQ expires messages at the head).
// now is the time to expire against, or 0 to read the clock only if a
// message can expire (the clock costs more than the rest of a pop).
func (q *Queue) pop(now int64) (Delivery, bool) {
	for {
		d, ok := q.popAny()
		if !ok {
			return d, false
		}
		exp := q.expiry(&d)
		if exp != 0 && now == 0 {
			now = time.Now().UnixNano()
		}
		if exp != 0 && exp <= now {
			q.deadLetter(d, ReasonExpired)
			continue
		}
		return d, true
	}
}

// expiry is when d expires (unix nanos), or 0: the earlier of its own
// expiration and the queue's message TTL.
func (q *Queue) expiry(d *Delivery) int64 {
	e := d.Msg.Expires
	if ttl := q.pol.MessageTTL; ttl >= 0 {
		if qe := d.Msg.Enqueued + int64(ttl); e == 0 || qe < e {
			e = qe
		}
	}
	return e
}

// expireHeads dead-letters expired messages at the head of each lane.
func (q *Queue) expireHeads(now int64) {
	for i := range q.lanes {
		l := &q.lanes[i]
		for {
			if i == 0 && l.len() == 0 && q.diskCount > 0 {
				q.refill()
			}
			d := l.head()
			if d == nil {
				break
			}
			if exp := q.expiry(d); exp == 0 || exp > now {
				break
			}
			x := l.pop()
			q.readyBytes -= int64(len(x.Msg.Body))
			q.deadLetter(x, ReasonExpired)
		}
	}
}

// armTimer sets the queue's one expiry timer for the earliest head.
func (q *Queue) armTimer() {
	var next int64
	for i := range q.lanes {
		if d := q.lanes[i].head(); d != nil {
			if e := q.expiry(d); e != 0 && (next == 0 || e < next) {
				next = e
			}
		}
	}
	if next == 0 || (q.timerAt != 0 && q.timerAt <= next) {
		return
	}
	q.timerAt = next
	wait := time.Duration(next - time.Now().UnixNano())
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timer = time.AfterFunc(max(wait, 0), func() { q.post(op{kind: opTick}) })
}

// armExpires keeps the queue's one x-expires timer armed for when it will
// have been unused for Expires, and disarmed while a consumer is attached
// (opCancel arms it when the last one leaves). Use in between (a get, a
// declare) only moves lastUsed: the tick finds the queue still in use and
// arms it again, once per period at most.
func (q *Queue) armExpires() {
	if q.pol.Expires <= 0 {
		return
	}
	if len(q.consumers) > 0 {
		if q.expTimer != nil {
			q.expTimer.Stop()
		}
		q.expAt = 0
		return
	}
	at := q.lastUsed + int64(q.pol.Expires)
	if q.expAt != 0 && q.expAt <= at {
		return // armed, and fires no later than needed
	}
	q.expAt = at
	wait := max(time.Duration(at-time.Now().UnixNano())+time.Millisecond, time.Millisecond)
	if q.expTimer == nil {
		q.expTimer = time.AfterFunc(wait, func() { q.post(op{kind: opTick}) })
		return
	}
	q.expTimer.Reset(wait)
}

// unpop puts back a message that could not be delivered.
func (q *Queue) unpop(d Delivery) {
	l := q.laneOf(d.Msg)
	if d.Redelivered {
		l.returned.push(d)
	} else {
		l.ready.pushFront(d)
	}
	q.readyBytes += int64(len(d.Msg.Body))
}

// dispatch hands ready messages to consumers with room: the highest
// priority first, round-robin among consumers of equal priority (or only
// the single active consumer).
func (q *Queue) dispatch() {
	var now int64 // read when a message can expire
	for q.readyLen() > 0 {
		c := q.nextConsumer()
		if c == nil {
			return
		}
		d, ok := q.pop(now)
		if !ok {
			return
		}
		if !q.deliver(c, d) {
			q.unpop(d)
			continue
		}
		if q.lanes[0].ready.len() < q.cfg.Window/2 && q.diskCount > 0 {
			q.refill()
		}
	}
}

// deliver hands d to c; when c has no room it reports false and c waits
// for a Kick.
func (q *Queue) deliver(c *Consumer, d Delivery) bool {
	if !c.Sink.Deliver(c, q, d) {
		c.blocked = true
		return false
	}
	if c.Out != nil {
		q.touch(c.Out)
	}
	if c.NoAck {
		q.account(-int64(len(d.Msg.Body)))
		q.deleteEntry(&d)
	} else {
		q.unacked++
		q.noteDelivered(&d)
	}
	return true
}

func (q *Queue) touch(o Outlet) {
	for _, x := range q.touched {
		if x == o {
			return
		}
	}
	q.touched = append(q.touched, o)
}

// nextConsumer picks the next unblocked consumer: within the highest
// priority that has one, the one after the last served.
func (q *Queue) nextConsumer() *Consumer {
	if q.pol.SingleActive {
		if len(q.order) == 0 || q.order[0].blocked {
			return nil
		}
		return q.order[0]
	}
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
