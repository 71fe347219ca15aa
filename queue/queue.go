package queue

import (
	"errors"
	"hash/maphash"
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

// msgOverhead is what a message held in a queue costs beyond its bytes:
// the Message, its Delivery in a lane, and the allocations' rounding
// (TestMessageOverhead measures it).
const msgOverhead = 176

// MemSize is what holding m in a queue's memory costs, as the memory alarm
// and the byte window count it: body, properties, exchange and routing
// key, and msgOverhead. (A fanout's queues share one body, and each
// counts it: the count errs high.)
func (m *Message) MemSize() int64 {
	return int64(len(m.Body)+len(m.Props)+len(m.Exchange)+len(m.RoutingKey)) + msgOverhead
}

// Delivery is one queue's copy of a message: its place in the queue and
// its delivery history.
type Delivery struct {
	Msg         *Message
	Seq         uint64 // position in the queue, for FIFO and requeue order
	Redelivered bool
	Count       uint32 // times returned to the queue (x-delivery-count); a quorum queue's: failed deliveries
	Transient   bool   // a transient message paged out to the store
	Lane        uint8  // the lane whose store id its entry is under (LaneStoreID)
	Reader      uint16 // a stream's: which of its consumers it went to (in the padding: free)
	Acquired    uint32 // a quorum queue's: times returned, failed or not (x-acquired-count)
}

// Confirmer learns when a published message is durable in a queue.
type Confirmer interface {
	Done(err error)
}

// Recovered describes a queue's entries found in the store at start-up.
type Recovered struct {
	Count     int
	Lanes     []int // a priority queue's entries per lane (LaneStoreID); nil: all in lane 0
	MaxSeq    uint64
	Delivered uint64 // entries up to this sequence had been delivered
	// DedupIDs are the ids (DedupID) of a deduplicating queue's stored
	// messages.
	DedupIDs []string
}

// Sink is where a queue hands messages to a consumer: the consumer's
// channel. Deliver runs with the queue's exec held, on any holder's
// goroutine (exec.go), and must not block; it
// returns false when the consumer has no room (prefetch reached, or its
// connection's outbound buffer full), and the consumer's owner must then
// call Queue.Kick once it has room again.
type Sink interface {
	Deliver(c *Consumer, q *Queue, d Delivery) bool
	// Cancelled tells the owner the queue is gone (consumer_cancel_notify);
	// it runs on the queue's goroutine, exec held.
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

// Consumer is a subscription to a queue.
type Consumer struct {
	Tag       string
	NoAck     bool
	Exclusive bool
	Priority  int32
	Sink      Sink
	Out       Outlet // nil: Deliver has its bytes written itself

	// Args are basic.consume's arguments (a stream reads x-stream-offset
	// and its filters from them).
	Args amqp.Table

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
	// OnEmptyOfConsumers is called on the queue's goroutine, with exec
	// held (exec.go), when an auto-delete queue loses its last consumer;
	// the registry then deletes it, before cancel-ok.
	OnEmptyOfConsumers func(q *Queue)
	// Memory accumulates the bytes of message bodies held by all queues,
	// for the broker's memory watermark.
	Memory *atomic.Int64
	// Totals counts what the queue dead-letters, for the broker's
	// metrics (nil: counted for nobody).
	Totals *Totals
	Logger *zap.Logger

	// ID identifies a durable queue's entries in Store; Store is nil for
	// a queue that is not durable.
	ID    uint64
	Store Store
	// Window is how many ready messages a queue with a Store keeps in
	// memory, and WindowBytes how many bytes of ready bodies at most; the
	// rest wait in the store and are read ahead of the consumers (a
	// durable queue's in the broker's store, a non-durable one's in page
	// files).
	Window      int
	WindowBytes int64
	// Pressure, when set and true, shrinks the window (see window).
	Pressure *atomic.Bool
	// NoPace turns off pacing (Behind): a publisher is not slowed to the
	// consumers' pace while they drain a paged backlog.
	NoPace bool
	// Recovered is set for a queue restored from the store.
	Recovered *Recovered
	// NoDedup: the queue ignores Policy.Dedup (a quorum queue, or a
	// proxy of a queue whose home deduplicates).
	NoDedup bool
	// Policy holds the limits its arguments set (nil: none).
	Policy *Policy
	// Replica, when set, holds the queue's state instead (replica.go).
	Replica Replica
}

// DefaultWindowBytes bounds the bodies a queue keeps in memory when
// Config.WindowBytes is not set.
const DefaultWindowBytes = 16 << 20

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

// ErrDuplicate is a publish refused by a deduplicating queue: a message
// with its id is in the queue (dedup.go).
var ErrDuplicate = errors.New("duplicate message: publish rejected")

// Overflow is what a queue at its length limit does (x-overflow).
type Overflow uint8

// Overflow behaviours.
const (
	DropHead Overflow = iota
	RejectPublish
	RejectPublishDLX
)

// Policy is what a queue's arguments ask of it.
type Policy struct {
	MessageTTL     time.Duration // x-message-ttl; negative: none
	Expires        time.Duration // x-expires: delete when unused this long; 0: never
	MaxLength      int64         // x-max-length; negative: none
	MaxLengthBytes int64         // x-max-length-bytes; negative: none
	Overflow       Overflow
	DeliveryLimit  int64 // x-delivery-limit; negative: none
	// DeliveryLimitSet: an argument or policy set DeliveryLimit (a
	// quorum queue without one has RabbitMQ 4's default, 20).
	DeliveryLimitSet bool
	SingleActive     bool  // x-single-active-consumer
	MaxPriority      uint8 // x-max-priority; 0: not a priority queue
	// Retry holds back what consumers nack or reject with requeue
	// (x-retry-delay and friends, retry.go); Retry.Delay 0: not held.
	Retry Retry
	// ConsumerTimeout is x-consumer-timeout or a policy's
	// consumer-timeout (0: the broker's); channels read it per delivery
	// (Queue.ConsumerTimeout), so a policy reaches consumers at once.
	ConsumerTimeout time.Duration
	// DeadLetter is set when the queue has x-dead-letter-exchange.
	DeadLetter DeadLetterFunc
	// DeadLetterSettled is DeadLetter reporting what the targets did
	// (a quorum queue's at-least-once dead-lettering); set with it.
	DeadLetterSettled DeadLetterSettledFunc
	// OnExpire deletes the queue from the registry when x-expires fires.
	OnExpire func(q *Queue)
	// Dedup: x-message-deduplication (an argument or a policy's); a
	// message whose id is in the queue is refused (dedup.go).
	Dedup bool
	// DedupConfirm is x-deduplication-confirm: how a duplicate is
	// confirmed (dedup_confirm.go).
	DedupConfirm DedupConfirm
	// A stream's retention beside MaxLengthBytes: x-max-age (0: none)
	// and its segment size (x-stream-max-segment-size-bytes; 0: the
	// default).
	MaxAge          time.Duration
	MaxSegmentBytes int64
	// GroupHeader is x-message-group-header or a policy's
	// message-group-header: the header carrying a message's group id
	// (groups.go); "": the queue has no groups. Fixed when the queue is
	// made.
	GroupHeader string
}

// NoPolicy is a queue without limits.
var NoPolicy = Policy{MessageTTL: -1, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1}

// Queue is a message queue. Other goroutines reach it through a batched
// inbox of ops; whoever holds exec applies them: the queue's goroutine,
// or a poster of an asynchronous op when the queue is idle (exec.go says
// who may hold it and what runs under it).
type Queue struct {
	cfg Config
	pol Policy

	mu      sync.Mutex // guards inbox, landed and closed
	inbox   []op
	landed  []landing // store reads done, for whoever holds exec next
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	// Flow (Behind): ops waiting in the inbox (written under mu), and
	// bytes of writes handed to the Store and not yet done.
	inboxN   atomic.Int32
	pendingW atomic.Int64
	// pace is the ready count when pacing began (see Behind), -1 while
	// the queue does not pace. paceStall is the Delivered count at which
	// a publisher gave the pace up (PaceReset), -1 if none: pacing stops
	// until the consumers take a message again, and begins afresh then.
	// Both are set by the holder of exec (publishCounts); PaceReset sets
	// paceStall.
	pace, paceStall atomic.Int64

	// exec is held while ops are applied; it guards everything below.
	exec    sync.Mutex
	dead    bool     // stopped: the goroutine exits
	touched []Outlet // outlets delivered to in this drain
	drainAt int64    // this drain's time for deliveries (DeliveredAt); 0: not read yet

	spare        []op
	tx           *txState         // transactions under way (tx.go); nil: none
	dedup        map[uint64]int32 // id hashes of the messages in the queue (x-message-deduplication); nil: off
	dedupSeed    maphash.Seed
	dedupSync    bool        // a duplicate's ack waits for the store's next commit (dedup_confirm.go)
	mayReject    atomic.Bool // see MayReject
	lanes        []lane      // by priority; one unless x-max-priority
	nextSeq      uint64
	consumers    []*Consumer // by priority, then arrival
	order        []*Consumer // by arrival (single active consumer)
	rr           int
	unacked      int
	unackedBytes int64 // MemSize of the unacked deliveries (part of held)
	unackedBody  int64 // body bytes of the unacked deliveries
	hadConsumer  bool
	held         int64 // MemSize of the messages held in memory, ready and unacked
	readyBytes   int64 // body bytes of ready messages, in memory or not

	// Paging: diskCount ready messages wait in the store, the sum of the
	// lanes' disk counts.
	diskCount int
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

	// A message TTL changed by a policy applies to the messages enqueued
	// after the change (ttlFor): the TTL at the start, then each change.
	ttl0      time.Duration
	ttlEpochs []ttlEpoch

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
	// Messages held back for a retry delay (retry.go), by due time; a
	// durable queue keeps only the index of those beyond its window
	// (paged), and reads them back when due (fetching).
	holds      holdHeap
	holdBytes  int64 // MemSize of the held messages in memory
	holdsInMem int
	fetching   []Delivery   // paged holds come due, being read back
	holdGen    uint64       // bumped when the holds are dropped: reads begun before are void
	heldN      atomic.Int64 // len(holds)+len(fetching), for any goroutine

	// Message counters for the management API's message_stats (sampled
	// into rates by the broker): taken in, delivered or got, acked,
	// redelivered. Written by the holder of exec, read by anyone.
	nPublish, nDeliverGet, nAck, nRedeliver atomic.Int64
	// nDedup counts the duplicates dropped (dedup_confirm.go).
	nDedup          atomic.Int64
	consumerTimeout atomic.Int64 // Policy.ConsumerTimeout, for any goroutine
	// Consumer utilisation: since when every consumer has been full with
	// messages waiting (0: not so), and the nanoseconds spent so.
	limitedSince, limitedTotal atomic.Int64

	// Published for metrics without a round trip.
	readyBytesN, unackedBytesN atomic.Int64 // body bytes
	readyN                     atomic.Int64
	headAt                     atomic.Int64
	unackedN                   atomic.Int64
	consumerN                  atomic.Int32

	// grp is a grouped queue's state (groups.go; nil: not grouped),
	// under exec. Last, so that the fields above keep their places.
	grp *groups
}

// New starts a queue.
func New(cfg Config) *Queue {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Memory == nil {
		cfg.Memory = new(atomic.Int64)
	}
	if cfg.Totals == nil {
		cfg.Totals = new(Totals)
	}
	if cfg.Window <= 0 {
		cfg.Window = 4096
	}
	if cfg.WindowBytes <= 0 {
		cfg.WindowBytes = DefaultWindowBytes
	}
	pol := NoPolicy
	if cfg.Policy != nil {
		pol = *cfg.Policy
	}
	nl := 1
	if pol.MaxPriority > 0 && pol.GroupHeader == "" {
		nl = int(pol.MaxPriority) + 1
	}
	q := &Queue{
		cfg:      cfg,
		pol:      pol,
		lanes:    make([]lane, nl),
		wake:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
		nextSeq:  1,
		lastUsed: Now(),
	}
	q.pace.Store(-1)
	q.paceStall.Store(-1)
	if pol.GroupHeader != "" && cfg.Replica == nil {
		q.grp = newGroups(pol.GroupHeader)
	}
	q.toggleDedup()
	q.noteMayReject()
	if r := cfg.Recovered; r != nil && q.dedup != nil {
		for _, id := range r.DedupIDs {
			q.dedup[maphash.String(q.dedupSeed, id)]++
		}
	}
	if r := cfg.Recovered; r != nil {
		q.lanes[0].disk = r.Count
		if len(r.Lanes) > 0 {
			for i := range q.lanes {
				q.lanes[i].disk = 0
				if i < len(r.Lanes) {
					q.lanes[i].disk = r.Lanes[i]
				}
			}
		}
		for i := range q.lanes {
			q.diskCount += q.lanes[i].disk
		}
		q.nextSeq = r.MaxSeq + 1
		q.recDlv = r.Delivered
		q.delivered, q.savedDlv = r.Delivered, r.Delivered
		q.refill() // lands with the next holder of exec, who then arms the expiry timer
		q.publishCounts()
	}
	ct := pol.ConsumerTimeout
	if ct == 0 {
		ct = cfg.ConsumerTimeout
	}
	q.consumerTimeout.Store(int64(ct))
	if cfg.Replica != nil {
		return q // no goroutine, no state: the Replica has it
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
func (q *Queue) CountsDeliveries() bool {
	return q.pol.DeliveryLimit >= 0 || (q.cfg.Replica != nil && q.cfg.Replica.CountsDeliveries())
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
	if r := q.cfg.Replica; r != nil {
		return r.Publish(m, conf)
	}
	// Counted now, not when the queue gets to it, so that the memory
	// alarm sees a burst as it arrives.
	q.cfg.Memory.Add(m.MemSize())
	if !q.postInline(op{kind: opPublish, msg: m, conf: conf}, fl) {
		q.cfg.Memory.Add(-m.MemSize())
		return false
	}
	return true
}

// Flow limits: a queue with more than FlowBytes of writes waiting for its
// Store, or more than FlowOps ops waiting in its inbox, is behind; it has
// caught up again below half of both.
const (
	FlowBytes = 1 << 20
	FlowOps   = 4096
)

// Behind reports whether the queue takes messages in more slowly than they
// arrive, or than its consumers take them out. A publisher into it is
// slowed down until it has CaughtUp, as RabbitMQ's credit flow slows a
// publisher whose queue process lags.
//
//   - Intake: its store writes (page-outs, persistent messages) or its
//     inbox fall behind.
//   - Pace: its consumers drain a backlog beyond the memory window (the
//     queue pages) and the backlog has grown by more than a window
//     (PaceSlack) since they began. The publisher then goes at the
//     consumers' pace, so that the backlog, and the age of what they
//     receive, stop growing while they work on it, and the publisher
//     does not take the CPU they need. A queue without consumers, or
//     whose backlog fits its window, absorbs a burst as before. A
//     publisher's wait for the pace gives up (PaceReset) when the
//     consumers stop taking messages (stuck, or waiting for the acks of
//     the very connection that waits), so that it never waits for its
//     own acks.
func (q *Queue) Behind() bool {
	if r := q.cfg.Replica; r != nil {
		t, ok := r.(Throttled)
		return ok && t.Behind()
	}
	return q.pendingW.Load() > FlowBytes || q.inboxN.Load() > FlowOps || q.paceBehind(q.paceSlack())
}

// paceSlack is how far a backlog being drained may grow before its
// publishers are paced: the window, in messages.
func (q *Queue) paceSlack() int64 { return int64(max(q.cfg.Window, 256)) }

// paceBehind reports whether the queue paces and its ready count is more
// than slack above where pacing began. What waits in the inbox counts as
// ready too: on a busy machine the queue may take the publishes in long
// after they were made (up to FlowOps of them), and the ready count alone
// would let the backlog overshoot by as much.
func (q *Queue) paceBehind(slack int64) bool {
	b := q.pace.Load()
	return b >= 0 && q.readyN.Load()+int64(q.inboxN.Load()) > b+slack && q.paceStall.Load() < 0
}

// Pacing reports whether a wait for the queue is (also) a wait for its
// consumers' pace, which PaceReset can end.
func (q *Queue) Pacing() bool { return q.paceBehind(q.paceSlack() / 2) }

// PaceReset ends a wait for the consumers' pace: the queue does not pace
// until its consumers take a message again, and then paces from where it
// began, so what the pause let in is drained before the publisher goes
// on. Called by a publisher whose wait saw no
// delivery for a while: consumers that take nothing (stuck, or waiting
// for acks the publisher's connection does not read while it waits) set
// no pace.
func (q *Queue) PaceReset() { q.paceStall.Store(q.nDeliverGet.Load()) }

// Delivered is the count of messages delivered or got since the queue
// started (redeliveries too): what a publisher waiting for the pace
// watches to tell that the consumers still take messages.
func (q *Queue) Delivered() int64 { return q.nDeliverGet.Load() }

// CaughtUp reports whether a queue that was Behind has caught up, or is
// gone.
func (q *Queue) CaughtUp() bool {
	if r := q.cfg.Replica; r != nil {
		t, ok := r.(Throttled)
		return !ok || t.CaughtUp()
	}
	if q.pendingW.Load() <= FlowBytes/2 && q.inboxN.Load() <= FlowOps/2 && !q.paceBehind(q.paceSlack()/2) {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// Durable reports whether the queue keeps its messages in the store.
func (q *Queue) Durable() bool { return q.cfg.Durable && q.cfg.Store != nil }

// MayReject reports whether the queue can refuse publishes (x-overflow
// reject-publish, or deduplication), so its publishers need a confirm
// from it. Publishers call it: it reads what the holder of exec last
// stored (mayReject), never q.pol, which a policy changes under exec.
func (q *Queue) MayReject() bool {
	if q.cfg.Replica != nil {
		return true // a quorum queue confirms once its log has the message
	}
	return q.mayReject.Load()
}

// noteMayReject records what MayReject answers under q.pol. exec held
// (or New).
func (q *Queue) noteMayReject() {
	q.mayReject.Store((q.pol.MaxLength >= 0 || q.pol.MaxLengthBytes >= 0) && q.pol.Overflow != DropHead || q.dedup != nil)
}

// Ack removes delivered messages for good.
func (q *Queue) Ack(ds []Delivery, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		r.Ack(ds)
		return
	}
	q.postInline(op{kind: opAck, ds: ds}, fl)
}

// Requeue returns delivered messages to their places, flagged
// redelivered: those of a consumer gone (its channel closed, cancelled),
// a failed delivery (RetryOn).
func (q *Queue) Requeue(ds []Delivery, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		if x, ok := r.(Returner); ok {
			x.Return(ds, true, false)
		} else {
			r.Requeue(ds, true)
		}
		return
	}
	q.postInline(op{kind: opRequeue, ds: ds, flags: flagFailed}, fl)
}

// Return puts got messages back as they were: not flagged redelivered,
// their delivery count unchanged (a peek, or a redrive that could not
// move them).
func (q *Queue) Return(ds []Delivery) {
	if r := q.cfg.Replica; r != nil {
		r.Requeue(ds, false)
		return
	}
	q.postInline(op{kind: opRequeue, ds: ds, flags: flagUncounted}, nil)
}

// Discard drops delivered messages (reject or nack without requeue); they
// are dead-lettered when the queue has a dead-letter exchange.
func (q *Queue) Discard(ds []Delivery, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		r.Discard(ds)
		return
	}
	q.postInline(op{kind: opDiscard, ds: ds}, fl)
}

// Kick tells the queue that c has room again.
func (q *Queue) Kick(c *Consumer, fl *Flushes) {
	if r := q.cfg.Replica; r != nil {
		r.Kick(c)
		return
	}
	q.postInline(op{kind: opKick, consumer: c}, fl)
}

// Touch marks the queue used (a redeclare), for x-expires.
func (q *Queue) Touch() {
	if q.cfg.Replica == nil {
		q.post(op{kind: opTouch})
	}
}

// Consume adds a consumer. It fails with ErrExclusiveConsumer when the
// queue has an exclusive consumer, or c is exclusive and others exist.
func (q *Queue) Consume(c *Consumer) error {
	if r := q.cfg.Replica; r != nil {
		return r.Consume(c)
	}
	return q.call(op{kind: opConsume, consumer: c}).err
}

// Cancel removes a consumer; an auto-delete queue that loses its last
// consumer is deleted before Cancel returns.
func (q *Queue) Cancel(c *Consumer) {
	if r := q.cfg.Replica; r != nil {
		r.Cancel(c)
		return
	}
	q.call(op{kind: opCancel, consumer: c})
}

// Get takes one message for basic.get. With noAck false the message
// counts as unacked until Ack or Requeue. It also returns how many
// messages remain ready.
func (q *Queue) Get(noAck bool) (d Delivery, ok bool, remaining int, err error) {
	if r := q.cfg.Replica; r != nil {
		return r.Get(noAck)
	}
	var f uint8
	if noAck {
		f = flagNoAck
	}
	r := q.call(op{kind: opGet, flags: f})
	return r.d, r.ok, r.messages, r.err
}

// Take takes one message to be looked at (a peek) or moved (a redrive):
// unacked until Ack or Return, as Get's, but not delivered: it is not
// counted as a get, and the store's delivered mark does not move, so
// that a restart does not flag it redelivered.
func (q *Queue) Take() (d Delivery, ok bool, remaining int, err error) {
	if r := q.cfg.Replica; r != nil {
		return r.Get(false)
	}
	r := q.call(op{kind: opGet, flags: flagLook})
	return r.d, r.ok, r.messages, r.err
}

// Purge drops every ready message and returns how many.
func (q *Queue) Purge() (int, error) {
	if r := q.cfg.Replica; r != nil {
		return r.Purge()
	}
	r := q.call(op{kind: opPurge})
	return r.n, r.err
}

// Delete stops the queue, cancelling its consumers, and returns how many
// messages it held. ifUnused and ifEmpty refuse when it has consumers or
// messages.
func (q *Queue) Delete(ifUnused, ifEmpty bool) (int, error) {
	if r := q.cfg.Replica; r != nil {
		return r.Delete(ifUnused, ifEmpty)
	}
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
	if r := q.cfg.Replica; r != nil {
		return r.Stats()
	}
	r := q.call(op{kind: opStats})
	return r.messages, r.n, r.err
}

// Ready, Unacked and Consumers are the latest counts, without a round
// trip (for metrics).
func (q *Queue) Ready() int64 { return q.readyN.Load() }

// HeadEnqueuedAt is when the oldest ready message was published (unix
// nanos), or 0 when none is ready: operators watch its age.
func (q *Queue) HeadEnqueuedAt() int64 { return q.headAt.Load() }

// SetPolicy replaces the queue's policy (an operator's policy changed),
// applied at once to what the queue holds: a lower length limit trims the
// backlog now (dead-lettering what it drops), a dead-letter exchange set
// later takes the messages that die from now on, a TTL reaches the queued
// messages too (railmq computes expiry from the TTL in force), x-expires
// is re-armed. The priorities and single active consumer are fixed when
// the queue is made and stay. It reports ErrDeleted if the queue is gone.
func (q *Queue) SetPolicy(p Policy) error {
	if r := q.cfg.Replica; r != nil {
		ct := p.ConsumerTimeout
		if ct == 0 {
			ct = q.cfg.ConsumerTimeout
		}
		q.consumerTimeout.Store(int64(ct))
		if s, ok := r.(PolicySetter); ok {
			s.SetPolicy(p)
		}
		return nil
	}
	return q.call(op{kind: opPolicy, pol: &p}).err
}

// Bytes are the body bytes of the ready and the unacked messages.
func (q *Queue) Bytes() (ready, unacked int64) { return q.readyBytesN.Load(), q.unackedBytesN.Load() }

// ConsumerTimeout is the queue's consumer timeout (0: the broker's), as
// its arguments and policies set it now.
func (q *Queue) ConsumerTimeout() time.Duration { return time.Duration(q.consumerTimeout.Load()) }

// LimitedNanos is how long (ns, since the queue started) messages waited
// while every consumer was full: what consumer_utilisation subtracts.
func (q *Queue) LimitedNanos() int64 {
	n := q.limitedTotal.Load()
	if since := q.limitedSince.Load(); since != 0 {
		n += Now() - since
	}
	return n
}

// Counters are the queue's message counts since it started: messages
// taken in, delivered to consumers or got, acked, and redelivered.
func (q *Queue) Counters() (publish, deliverGet, ack, redeliver int64) {
	return q.nPublish.Load(), q.nDeliverGet.Load(), q.nAck.Load(), q.nRedeliver.Load()
}

// Unacked is the count of delivered, unacknowledged messages.
func (q *Queue) Unacked() int64 { return q.unackedN.Load() }

// Consumers is the count of consumers.
func (q *Queue) Consumers() int32 { return q.consumerN.Load() }

// Done is closed when the queue has stopped.
func (q *Queue) Done() <-chan struct{} { return q.stopped }

func (q *Queue) publishCounts() {
	if q.readyLen() == 0 || len(q.consumers) == 0 {
		if since := q.limitedSince.Load(); since != 0 { // nothing waits, or no one to take it
			q.limitedTotal.Add(Now() - since)
			q.limitedSince.Store(0)
		}
	}
	setCount(&q.readyN, int64(q.readyLen()))
	// Pacing (Behind): while consumers drain a backlog beyond the window of
	// a queue that pages (a Store), counted as it is published, not as it
	// is paged (the spill may lag far behind a fast publisher on a busy
	// machine). Window is never 0 (New).
	beyond := q.diskCount > 0 || (q.cfg.Store != nil && q.readyLen() > q.cfg.Window)
	if beyond && len(q.consumers) > 0 && !q.cfg.NoPace && q.cfg.Replica == nil {
		if q.pace.Load() < 0 {
			q.pace.Store(int64(q.readyLen()))
			q.paceStall.Store(-1)
		} else if s := q.paceStall.Load(); s >= 0 && s != q.nDeliverGet.Load() {
			// The consumers go on: the pace holds again from where it
			// began, not from the backlog the stall let build up, which
			// would ratchet the backlog (and the age of what they get)
			// up by a stall's worth each time they are slow to run.
			q.paceStall.Store(-1)
		}
	} else if q.pace.Load() >= 0 {
		q.pace.Store(-1)
		q.paceStall.Store(-1)
	}
	setCount(&q.unackedN, int64(q.unacked))
	setCount(&q.readyBytesN, q.readyBytes)
	setCount(&q.unackedBytesN, q.unackedBody)
	if n := int32(len(q.consumers)); q.consumerN.Load() != n {
		q.consumerN.Store(n)
	}
	var head int64
	for i := range q.lanes {
		if d := q.lanes[i].head(); d != nil && (head == 0 || d.Msg.Enqueued < head) {
			head = d.Msg.Enqueued
		}
	}
	setCount(&q.headAt, head)
}

// setCount stores v in a unless a holds it already. publishCounts runs
// after every drain, and from one to the next the figures mostly stay the
// same (an empty queue, a full prefetch); a load costs next to nothing,
// while a store is a locked exchange on amd64 (six of them were 4% of the
// broker's CPU with 16-byte messages).
func setCount(a *atomic.Int64, v int64) {
	if a.Load() != v {
		a.Store(v)
	}
}
