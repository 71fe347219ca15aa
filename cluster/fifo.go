package cluster

import (
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Fifo is a quorum queue's replicated state, as RabbitMQ's rabbit_fifo:
// every change is a command in the queue's Raft log, applied in log order
// on every member, so that all members hold the same messages, the same
// consumers and the same assignment of messages to consumers. Apply is a
// pure function of the state and the command: no clock (the leader stamps
// the time into the commands that need it), no randomness, no I/O. What
// a command makes happen outside the state machine (deliveries to
// consumers, dead-lettering, the answer to a publisher) comes back as
// Effects, which only the leader carries out.
//
// A Fifo is owned by its Raft FSM adapter, which applies commands one at
// a time; it is not safe for concurrent use.
type Fifo struct {
	cfg FifoConfig

	nextID uint64               // ids of enqueued messages, from 1
	msgs   map[uint64]*fifoMsg  // every message held: ready or checked out
	ready  readyQ               // ready messages in delivery order (fifo_ready.go)
	cons   map[string]*fifoCons // consumers by tag
	order  []string             // consumer tags in arrival order, for round robin
	next   int                  // index into order of the consumer served next
	bytes  int64                // body bytes held
	// delayed: ids held for a delayed retry, neither ready nor checked
	// out, until their ReadyAt (fifo_limits.go).
	delayed []uint64
	// index is the Raft log index of the last entry applied (QueueFSM
	// keeps it; 0 for a Fifo used without a log).
	index uint64
	// discards: the dead letters held until their targets confirm
	// (at-least-once, fifo_dlx.go), by id in the order they died;
	// dlxBytes their body bytes (counted in bytes too).
	discards []uint64
	dlxBytes int64
	// The state fifo_consumers.go and fifo_overflow.go keep: the single
	// active consumer, whether reject-publish refuses publishes, when the
	// queue was last used (x-expires).
	active     string
	blocked    bool
	lastActive int64
	// topPrio is the highest consumer priority (when topValid), which
	// nextConsumer stops at: derived, not in snapshots, reset wherever
	// consumers come, go or change priority.
	topPrio  int32
	topValid bool
	// dedup counts the ids of the messages held, when the queue
	// deduplicates (dedupKey set, fifo_dedup.go); nil otherwise.
	dedup    map[string]int32
	dedupKey func(props []byte) ([]byte, bool)
	// restored: a restored image's ready order and group rotation, until
	// setGroupKey files them (fifo_groups.go).
	restored *restoredOrder
	grp      groupSource // where the group key comes from (fifo_groups.go)
}

// FifoConfig is what a quorum queue's arguments set.
type FifoConfig struct {
	// DeliveryLimit is x-delivery-limit: a message returned more often
	// is dead-lettered (RabbitMQ 4's default 20; negative: none).
	DeliveryLimit int64
	// MaxLength and MaxLengthBytes are x-max-length(-bytes), in force
	// when MaxLengthOn, MaxLengthBytesOn (0 is a limit; the state of a
	// railmq before them has a limit above 0 when it has one); RejectPublish
	// is x-overflow reject-publish (else drop-head).
	MaxLength, MaxLengthBytes     int64
	RejectPublish                 bool
	MaxLengthOn, MaxLengthBytesOn bool
	// MessageTTL is x-message-ttl in milliseconds (0: none).
	MessageTTL int64
	// AtLeastOnce is x-dead-letter-strategy at-least-once (with
	// reject-publish and a dead-letter exchange): dead letters stay held
	// until their targets confirm them (fifo_dlx.go).
	AtLeastOnce bool
	// SingleActive is x-single-active-consumer; Expires is x-expires in
	// milliseconds (0: none).
	SingleActive bool
	Expires      int64
}

// DefaultDeliveryLimit is RabbitMQ 4's default x-delivery-limit for
// quorum queues.
const DefaultDeliveryLimit = 20

type fifoMsg struct {
	ID         uint64
	Exchange   string
	RoutingKey string
	Props      []byte
	Body       []byte
	Enqueued   int64  // unix ms, stamped by the leader
	Expires    int64  // unix ms, 0: never
	Deliveries uint32 // times delivered and returned (x-delivery-count)
	Returned   bool   // delivered before: the next delivery is redelivered
	Consumer   string // checked out by, "" when ready
	Acquired   uint32 // times returned, failed or not (RabbitMQ 4.3's acquired_count; fifo_limits.go)
	ReadyAt    int64  // unix ms: held for a delayed retry until then (0: not held; fifo_limits.go)
	Reason     string // dead-lettered for, held until settled (fifo_dlx.go); "" otherwise
	Priority   uint8  // its level (fifo_ready.go)
}

type fifoCons struct {
	Tag      string
	Prefetch int   // 0: unlimited
	Out      int   // checked out, not yet settled
	Priority int32 // x-priority
}

// Command kinds, the first byte of an encoded command.
const (
	cmdEnqueue byte = iota + 1
	cmdCheckout
	cmdCancel
	cmdSettle
	cmdReturn
	cmdDiscard
	cmdPurge
	cmdTick
	cmdEnqueueBatch
	cmdDequeue
	cmdDown
	cmdBatch
	cmdRelease
	cmdModify           // fifo_limits.go
	cmdConfig           // fifo_limits.go
	cmdDeadSettled      // fifo_dlx.go
	cmdCheckoutPriority // a Checkout with a consumer priority
	cmdTouch
	cmdGroupHeader // fifo_groups.go
)

// Command is one change to a Fifo: what the Raft log holds, encoded by
// Encode. Which fields count depends on the kind.
type Command struct {
	Kind     byte
	Now      int64 // unix ms, stamped by the leader: enqueue time, tick time
	Msg      Message
	Msgs     []Message // an enqueue batch: the publishes one group commit gathered
	Consumer string
	Prefetch int // checkout: the consumer's prefetch; dequeue: 1 when no ack is wanted
	IDs      []uint64
	Cmds     []Command   // a batch: the commands one pipeline round gathered
	Keep     string      // down: tags with this prefix stay
	Failed   bool        // modify: a failed delivery (counted toward the delivery limit)
	Due      int64       // modify: unix ms the returned messages are held until (0: not held)
	Limit    int64       // config: the delivery limit
	Priority int32       // checkout: the consumer's x-priority
	Conf     *FifoConfig // config: what a policy sets (fifo_limits.go)
}

// Message is an enqueued message.
type Message struct {
	Exchange, RoutingKey string
	Props, Body          []byte
	TTL                  int64 // the message's expiration property, ms (0: none)
}

// Enqueue, Checkout, Cancel, Settle, Return, Discard, Purge and Tick make
// commands.
func Enqueue(now int64, m Message) Command { return Command{Kind: cmdEnqueue, Now: now, Msg: m} }

// EnqueueBatch makes one log entry of several enqueues: the Raft cost of
// an entry (an append, an fsync on each member, a round trip) is paid
// once for all of them. They are applied in order, as separate enqueues.
func EnqueueBatch(now int64, ms []Message) Command {
	return Command{Kind: cmdEnqueueBatch, Now: now, Msgs: ms}
}
func Checkout(tag string, prefetch int) Command {
	return Command{Kind: cmdCheckout, Consumer: tag, Prefetch: prefetch}
}
func Cancel(tag string) Command { return Command{Kind: cmdCancel, Consumer: tag} }
func Settle(tag string, ids ...uint64) Command {
	return Command{Kind: cmdSettle, Consumer: tag, IDs: ids}
}
func Return(tag string, ids ...uint64) Command {
	return Command{Kind: cmdReturn, Consumer: tag, IDs: ids}
}

// Release puts back messages checked out to tag that its node never
// wrote out (its consumer was cancelled meanwhile): not counted as a
// delivery, their redelivered flag as it was.
func Release(tag string, ids ...uint64) Command {
	return Command{Kind: cmdRelease, Consumer: tag, IDs: ids}
}
func Discard(tag string, ids ...uint64) Command {
	return Command{Kind: cmdDiscard, Consumer: tag, IDs: ids}
}
func Purge() Command { return Command{Kind: cmdPurge} }

// Dequeue takes the head message for basic.get, checked out to tag (or,
// with noAck, removed at once); Effects.Deliveries holds it, if any.
func Dequeue(tag string, noAck bool) Command {
	c := Command{Kind: cmdDequeue, Consumer: tag}
	if noAck {
		c.Prefetch = 1
	}
	return c
}

// Down cancels every consumer whose tag starts with prefix, but those
// whose tag starts with keep (if not empty): a node that restarted (its
// consumers of before are gone) or that is gone, whose checked-out
// messages return to the queue, redelivered.
func Down(prefix, keep string) Command { return Command{Kind: cmdDown, Consumer: prefix, Keep: keep} }

// DownPrefix reports the prefix a Down command cancels, and the one it
// keeps.
func (c *Command) DownPrefix() (prefix, keep string, ok bool) {
	return c.Consumer, c.Keep, c.Kind == cmdDown
}

// Batch makes one log entry of several commands, applied in order;
// Effects.Results holds each one's own effects.
func Batch(cs []Command) Command { return Command{Kind: cmdBatch, Cmds: cs} }
func Tick(now int64) Command     { return Command{Kind: cmdTick, Now: now} }

// Delivery is a message checked out to a consumer.
type Delivery struct {
	Consumer    string
	ID          uint64
	Msg         *Message
	Redelivered bool
	Count       uint32 // failed deliveries so far (x-delivery-count)
	Acquired    uint32 // returns so far, failed or not (x-acquired-count)
}

// DeadLetter is a message that left the queue for a reason (queue's
// Reason* names).
type DeadLetter struct {
	Msg    *Message
	Reason string
	// Held: the message stays in the queue until DeadSettled(ID)
	// (at-least-once, fifo_dlx.go).
	ID   uint64
	Held bool
}

// Effects are what applying a command makes happen outside the state
// machine. Accepted answers an enqueue (false: refused by reject-publish,
// the publisher is nacked); for a batch, Refused lists the positions of
// the refused ones. Purged counts the messages a purge removed.
type Effects struct {
	Deliveries  []Delivery
	DeadLetters []DeadLetter
	Accepted    bool
	Refused     []int
	// Duplicate: the enqueue was refused as a duplicate (fifo_dedup.go).
	Duplicate bool
	Purged    int
	// Got marks a dequeue's effects: Deliveries holds what it took (if
	// anything), Remaining the count of ready messages left.
	Got       bool
	Remaining int
	// Results are a batch's commands' effects, in order; the batch's
	// Deliveries and DeadLetters are theirs together.
	Results []Effects
}

// Dead-letter reasons, as x-death writes them.
const (
	ReasonRejected      = "rejected"
	ReasonExpired       = "expired"
	ReasonMaxLen        = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
)

// ErrBadCommand is an encoded command that does not decode.
var ErrBadCommand = errors.New("cluster: malformed command")

// NewFifo returns an empty quorum queue state.
func NewFifo(cfg FifoConfig) *Fifo {
	return &Fifo{cfg: cfg, nextID: 1, msgs: map[uint64]*fifoMsg{}, cons: map[string]*fifoCons{}}
}

// Len is the number of messages held: ready, checked out, and
// dead-lettered awaiting their targets' confirms (fifo_dlx.go).
func (f *Fifo) Len() int { return len(f.msgs) }

// Ready is the number of ready messages.
func (f *Fifo) Ready() int { return f.ready.len() }

// Bytes is the body bytes held.
func (f *Fifo) Bytes() int64 { return f.bytes }

// Apply applies one command and returns its effects.
func (f *Fifo) Apply(c Command) Effects {
	if c.Kind == cmdBatch {
		var e Effects
		e.Results = make([]Effects, len(c.Cmds))
		for i := range c.Cmds {
			if c.Cmds[i].Kind == cmdBatch {
				continue // not nested
			}
			r := f.Apply(c.Cmds[i])
			e.Deliveries = append(e.Deliveries, r.Deliveries...)
			e.DeadLetters = append(e.DeadLetters, r.DeadLetters...)
			e.Results[i] = r
		}
		return e
	}
	var e Effects
	f.used(&c) // fifo_overflow.go
	switch c.Kind {
	case cmdEnqueue:
		e.Accepted = f.enqueue(c.Now, c.Msg, &e)
	case cmdEnqueueBatch:
		for i, m := range c.Msgs {
			if !f.enqueue(c.Now, m, &e) {
				e.Refused = append(e.Refused, i)
			}
		}
		e.Accepted = len(e.Refused) == 0
	case cmdCheckout:
		f.topValid = false
		if k := f.cons[c.Consumer]; k != nil {
			k.Prefetch, k.Priority = c.Prefetch, c.Priority
		} else {
			f.cons[c.Consumer] = &fifoCons{Tag: c.Consumer, Prefetch: c.Prefetch, Priority: c.Priority}
			f.order = append(f.order, c.Consumer)
		}
	case cmdCancel:
		// As rabbit_fifo: no more deliveries, but what it has checked
		// out stays so until settled or returned (a channel may ack
		// after basic.cancel), or its node goes (Down).
		f.removeConsumer(c.Consumer)
	case cmdDown:
		down := func(t string) bool {
			return strings.HasPrefix(t, c.Consumer) && (c.Keep == "" || !strings.HasPrefix(t, c.Keep))
		}
		var tags []string
		for t := range f.cons {
			if down(t) {
				tags = append(tags, t)
			}
		}
		// A getter's messages are checked out to a tag that is no
		// consumer: return those too.
		for _, m := range f.msgs {
			if m.Consumer != "" && f.cons[m.Consumer] == nil && down(m.Consumer) {
				tags = append(tags, m.Consumer)
			}
		}
		sort.Strings(tags)
		for i, t := range tags {
			if i == 0 || tags[i-1] != t {
				f.cancel(t, &e)
			}
		}
	case cmdDequeue:
		e.Got = true
		f.expire(c.Now, &e)
		m := f.nextReady(c.Consumer, c.Prefetch == 1) // fifo_groups.go
		if m == nil {
			break
		}
		e.Deliveries = append(e.Deliveries, Delivery{Consumer: c.Consumer, ID: m.ID, Msg: m.message(), Redelivered: m.Returned, Count: m.Deliveries, Acquired: m.Acquired})
		if c.Prefetch == 1 {
			f.remove(m)
		} else {
			m.Consumer = c.Consumer
		}
		e.Remaining = f.ready.len()
		f.limit(&e)
		return e // a getter takes what it asked for, no one else gets anything
	case cmdSettle:
		for _, id := range c.IDs {
			if m := f.checkedOut(c.Consumer, id); m != nil {
				f.remove(m)
			}
		}
	case cmdReturn:
		f.returnMsgs(c.Consumer, c.IDs, &e)
	case cmdRelease:
		f.release(c.Consumer, c.IDs)
	case cmdDiscard:
		for _, id := range c.IDs {
			if m := f.checkedOut(c.Consumer, id); m != nil {
				f.deadLetter(m, ReasonRejected, &e)
			}
		}
	case cmdPurge:
		f.ready.each(func(m *fifoMsg) {
			f.remove(m)
			e.Purged++
		})
		f.ready.clear()
		e.Purged += f.purgeDelayed()
		e.Purged += f.purgeDiscards()
	case cmdDeadSettled:
		f.deadSettled(c.IDs)
	case cmdTick:
		f.releaseDelayed(c.Now)
		f.expire(c.Now, &e)
	default:
		f.applyLimits(&c, &e)
	}
	f.activate()
	f.checkout(&e)
	f.limit(&e)
	return e
}

// cancel removes a consumer (or a getter's tag); its checked-out messages
// return, redelivered, in id order.
func (f *Fifo) cancel(tag string, e *Effects) {
	var ids []uint64
	for id, m := range f.msgs {
		if m.Consumer == tag {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	f.returnMsgs(tag, ids, e)
	f.removeConsumer(tag)
}

func (f *Fifo) removeConsumer(tag string) {
	if f.cons[tag] == nil {
		return
	}
	delete(f.cons, tag)
	f.topValid = false
	for i, t := range f.order {
		if t == tag {
			f.order = append(f.order[:i], f.order[i+1:]...)
			if f.next > i {
				f.next--
			}
			break
		}
	}
	if f.next >= len(f.order) {
		f.next = 0
	}
}

// CheckedOut lists the messages checked out to consumers whose tags
// start with prefix, in id order (a member restored from a snapshot
// delivers what the entries it skipped gave its consumers).
func (f *Fifo) CheckedOut(prefix string) []Delivery {
	var out []Delivery
	for _, m := range f.msgs {
		if m.Consumer != "" && strings.HasPrefix(m.Consumer, prefix) && f.cons[m.Consumer] != nil {
			out = append(out, Delivery{Consumer: m.Consumer, ID: m.ID, Msg: m.message(), Redelivered: m.Returned, Count: m.Deliveries, Acquired: m.Acquired})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ConsumerTags lists the consumers whose tags start with prefix.
func (f *Fifo) ConsumerTags(prefix string) []string {
	var out []string
	for _, t := range f.order {
		if strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return out
}

// Orphans lists the messages checked out to tags that start with prefix
// and are no consumer's (a cancelled consumer's, a getter's), by id.
func (f *Fifo) Orphans(prefix string) []Delivery {
	var out []Delivery
	for _, m := range f.msgs {
		if m.Consumer != "" && f.cons[m.Consumer] == nil && strings.HasPrefix(m.Consumer, prefix) {
			out = append(out, Delivery{Consumer: m.Consumer, ID: m.ID})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Owner is the tag message id is checked out to, "" if it is ready or
// gone.
func (f *Fifo) Owner(id uint64) string {
	if m := f.msgs[id]; m != nil {
		return m.Consumer
	}
	return ""
}

// Unacked is the count of messages checked out.
func (f *Fifo) Unacked() int { return len(f.msgs) - f.ready.len() - len(f.delayed) - len(f.discards) }

// Expired reports whether the head ready message's TTL has run out at
// now (unix ms): a Tick would expire it.
func (f *Fifo) Expired(now int64) bool { return f.ready.expired(now) }

// Consumers is the count of consumers.
func (f *Fifo) Consumers() int { return len(f.cons) }

// Held is how many checked-out messages are beyond what their consumers
// may have unacked: for each consumer, those over visible(its credit).
// A consumer's node keeps them unwritten (broker/quorum.go credit), so
// they count as ready, not unacked.
func (f *Fifo) Held(visible func(credit int) int) int {
	n := 0
	for _, c := range f.cons {
		if v := visible(c.Prefetch); c.Prefetch > 0 && c.Out > v {
			n += c.Out - v
		}
	}
	return n
}

// Head is when the oldest ready message was enqueued (unix ms), 0 when
// none is ready.
func (f *Fifo) Head() int64 {
	if m := f.ready.peek(); m != nil {
		return m.Enqueued
	}
	return 0
}

func (f *Fifo) enqueue(now int64, m Message, e *Effects) bool {
	if f.cfg.RejectPublish && f.blocked {
		return false // fifo_overflow.go
	}
	if f.dedup != nil && !f.dedupAdmit(m.Props) {
		e.Duplicate = true
		return false
	}
	fm := &fifoMsg{ID: f.nextID, Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body, Enqueued: now,
		Priority: msgPriority(m.Props)}
	ttl := f.cfg.MessageTTL
	if m.TTL > 0 && (ttl == 0 || m.TTL < ttl) {
		ttl = m.TTL
	}
	if ttl > 0 {
		fm.Expires = now + ttl
	}
	f.nextID++
	f.msgs[fm.ID] = fm
	f.ready.push(fm)
	f.bytes += int64(len(fm.Body))
	if f.cfg.RejectPublish && f.over() {
		f.blocked = true // this one is in; the next ones are refused (fifo_overflow.go)
	}
	return true
}

func (f *Fifo) checkedOut(tag string, id uint64) *fifoMsg {
	m := f.msgs[id]
	if m == nil || m.Consumer != tag || tag == "" {
		return nil
	}
	return m
}

// remove forgets a message that is checked out or already off the ready
// list.
func (f *Fifo) remove(m *fifoMsg) {
	if m.Consumer != "" {
		if k := f.cons[m.Consumer]; k != nil {
			k.Out--
		}
		f.unhold(m) // fifo_groups.go
	}
	delete(f.msgs, m.ID)
	f.bytes -= int64(len(m.Body))
	if f.dedup != nil && m.Reason == "" {
		f.dedupForget(m.Props)
	}
}

// returnMsgs puts checked-out messages back at the head of the ready
// list, in the order given, counting the delivery; one returned more than
// the delivery limit allows is dead-lettered instead.
func (f *Fifo) returnMsgs(tag string, ids []uint64, e *Effects) {
	f.returnAs(tag, ids, true /* failed */, 0, e)
}

// returnAs is returnMsgs for a return that failed or not (RabbitMQ 4.3:
// only a failed one counts toward the delivery limit; both raise the
// acquired count), held until due (unix ms; 0: ready at once).
func (f *Fifo) returnAs(tag string, ids []uint64, failed bool, due int64, e *Effects) {
	var back []*fifoMsg
	for _, id := range ids {
		m := f.checkedOut(tag, id)
		if m == nil {
			continue
		}
		if k := f.cons[tag]; k != nil {
			k.Out--
		}
		f.unhold(m)
		m.Consumer = ""
		if failed {
			m.Deliveries++
		}
		m.Acquired++
		m.Returned = true
		if f.cfg.DeliveryLimit >= 0 && int64(m.Deliveries) > f.cfg.DeliveryLimit {
			f.deadLetter(m, ReasonDeliveryLimit, e)
			continue
		}
		if due > 0 {
			f.delay(m, due)
			continue
		}
		back = append(back, m)
	}
	f.toReturns(back)
}

// toReturns puts ready again messages that were returned: before the
// rest, after the returns still waiting, in id order within one
// command: rabbit_fifo's returns queue, which return_one appends to
// (lqueue:in) and whose callers go by message id (v4.3.5
// deps/rabbit/src/rabbit_fifo.erl return/5, return_all/5). Verified on
// RabbitMQ 3.10.8 with a delivery limit: basic.get m1..m3, nack m1, m3,
// m2, then m1, m3, m2, m4, m5 (TestRequeueOrder).
func (f *Fifo) toReturns(back []*fifoMsg) { f.ready.appendReturned(back) }

// release puts back checked-out messages uncounted, where they were: a
// returned one among the returns, a fresh one among the fresh, by id.
func (f *Fifo) release(tag string, ids []uint64) {
	var ret []*fifoMsg
	for _, id := range ids {
		m := f.checkedOut(tag, id)
		if m == nil {
			continue
		}
		if k := f.cons[tag]; k != nil {
			k.Out--
		}
		f.unhold(m)
		m.Consumer = ""
		if m.Returned {
			ret = append(ret, m)
		} else {
			f.ready.push(m)
		}
	}
	f.ready.pushReturned(ret)
}

// expire dead-letters the ready messages at the heads whose TTL has run
// out at now (as RabbitMQ, expiry happens at the head: of the returns and
// of each priority level, readyQ.takeExpired).
func (f *Fifo) expire(now int64, e *Effects) {
	for _, m := range f.ready.takeExpired(now) {
		f.deadLetter(m, ReasonExpired, e)
	}
}

// checkout hands ready messages to consumers with room: the highest
// priority ones first, round robin among equals (fifo_consumers.go).
func (f *Fifo) checkout(e *Effects) {
	if f.ready.g != nil {
		f.grpCheckout(e) // fifo_groups.go
		return
	}
	for f.ready.len() > 0 && len(f.order) > 0 {
		k := f.nextConsumer()
		if k == nil {
			return
		}
		m := f.ready.pop()
		m.Consumer = k.Tag
		k.Out++
		e.Deliveries = append(e.Deliveries, Delivery{Consumer: k.Tag, ID: m.ID, Msg: m.message(), Redelivered: m.Returned, Count: m.Deliveries, Acquired: m.Acquired})
	}
}

func (m *fifoMsg) message() *Message {
	return &Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body}
}

// --- snapshots --------------------------------------------------------------

// fifoImage is a Fifo as a snapshot holds it.
type fifoImage struct {
	Cfg        FifoConfig
	NextID     uint64
	Msgs       []fifoMsg
	Ready      []uint64
	Cons       []fifoCons
	Order      []string
	Next       int
	Index      uint64
	Active     string
	Blocked    bool
	LastActive int64
	// Discards are the held dead letters' ids (at-least-once), in order.
	Discards []uint64
	// Groups is a grouped queue's rotation, by group key ("": the
	// messages without one; fifo_groups.go).
	Groups []string
	// GroupHeader is a policy's group header in force (fifo_groups.go).
	GroupHeader string
}

// Snapshot writes the whole state to w (Raft's snapshot, from which a
// member that fell behind, or a new one, is restored).
func (f *Fifo) Snapshot(w io.Writer) error {
	img := fifoImage{Cfg: f.cfg, NextID: f.nextID, Ready: f.ready.ids(), Order: f.order, Next: f.next, Index: f.index,
		Active: f.active, Blocked: f.blocked, LastActive: f.lastActive, Discards: f.discards, Groups: f.ringKeys(), GroupHeader: f.grp.header}
	ids := make([]uint64, 0, len(f.msgs))
	for id := range f.msgs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		img.Msgs = append(img.Msgs, *f.msgs[id])
	}
	for _, t := range f.order {
		img.Cons = append(img.Cons, *f.cons[t])
	}
	return gob.NewEncoder(w).Encode(&img)
}

// RestoreFifo reads a state written by Snapshot.
func RestoreFifo(r io.Reader) (*Fifo, error) {
	var img fifoImage
	if err := gob.NewDecoder(r).Decode(&img); err != nil {
		return nil, fmt.Errorf("cluster: restoring a quorum queue: %w", err)
	}
	f := NewFifo(img.Cfg)
	f.nextID, f.order, f.next, f.index = img.NextID, img.Order, img.Next, img.Index
	f.active, f.blocked, f.lastActive = img.Active, img.Blocked, img.LastActive
	f.discards = img.Discards
	f.grp.header = img.GroupHeader
	if img.Groups != nil {
		f.restored = &restoredOrder{ready: img.Ready, groups: img.Groups} // for setGroupKey
	}
	for i := range img.Msgs {
		m := img.Msgs[i]
		m.Priority = msgPriority(m.Props) // an image of before the levels has none
		f.msgs[m.ID] = &m
		f.bytes += int64(len(m.Body))
		if m.ReadyAt != 0 && m.Consumer == "" {
			f.delayed = append(f.delayed, m.ID) // held for a delayed retry (fifo_limits.go)
		}
		if m.Reason != "" {
			f.dlxBytes += int64(len(m.Body))
		}
	}
	f.restoreDelayed()
	// The ready ones as readyQ had them: the returned first, in their
	// order, then
	// the fresh by level (an image of before the levels had one).
	var ret []*fifoMsg
	for _, id := range img.Ready {
		if m := f.msgs[id]; m != nil && m.Returned {
			ret = append(ret, m)
		} else if m != nil {
			f.ready.push(m)
		}
	}
	f.ready.restoreReturned(ret)
	for i := range img.Cons {
		c := img.Cons[i]
		f.cons[c.Tag] = &c
	}
	return f, nil
}

// --- command encoding -------------------------------------------------------

// Encode appends c's encoding to b: the kind, then its fields
// (big-endian, fixed width, strings and bytes with a 4-byte length).
// It is the quorum queue's Raft log format: codec_test.go holds its
// bytes, which must not change.
func (c *Command) Encode(b []byte) []byte {
	e := Enc(b).U8(c.Kind).U64(uint64(c.Now))
	switch c.Kind {
	case cmdEnqueue:
		e = appendMessage(e, &c.Msg)
	case cmdEnqueueBatch:
		e = e.U32(uint32(len(c.Msgs)))
		for i := range c.Msgs {
			e = appendMessage(e, &c.Msgs[i])
		}
	case cmdCheckout:
		if c.Priority != 0 {
			// A priority needs the kind that carries it; without one,
			// a checkout keeps the bytes it always had.
			e[len(e)-9] = cmdCheckoutPriority
			e = e.Str32(c.Consumer).U32(uint32(c.Prefetch)).U32(uint32(c.Priority))
			break
		}
		e = e.Str32(c.Consumer).U32(uint32(c.Prefetch))
	case cmdCancel, cmdSettle, cmdReturn, cmdDiscard, cmdRelease, cmdDeadSettled:
		e = e.Str32(c.Consumer).U32(uint32(len(c.IDs)))
		for _, id := range c.IDs {
			e = e.U64(id)
		}
	case cmdDequeue:
		e = e.Str32(c.Consumer).U8(byte(c.Prefetch))
	case cmdDown:
		e = e.Str32(c.Consumer).Str32(c.Keep)
	case cmdBatch:
		e = e.U32(uint32(len(c.Cmds)))
		for i := range c.Cmds {
			at := len(e)
			e = e.U32(0)
			e = c.Cmds[i].Encode(e)
			binary.BigEndian.PutUint32(e[at:], uint32(len(e)-at-4))
		}
	default:
		e = encodeLimits(c, e)
	}
	return e
}

// DecodeCommand decodes what Encode wrote. Bytes fields share p.
func DecodeCommand(p []byte) (Command, error) {
	var c Command
	d := NewDec(p)
	c.Kind = d.U8()
	c.Now = int64(d.U64())
	if d.Err() != nil {
		return c, ErrBadCommand
	}
	switch c.Kind {
	case cmdEnqueue:
		c.Msg = decodeMessage(&d)
	case cmdEnqueueBatch:
		n := d.Count32(28) // a message takes 28 bytes at least
		for i := 0; i < n && d.Err() == nil; i++ {
			c.Msgs = append(c.Msgs, decodeMessage(&d))
		}
	case cmdCheckout:
		c.Consumer = d.Str32()
		c.Prefetch = int(d.U32())
	case cmdCheckoutPriority:
		c.Kind = cmdCheckout
		c.Consumer = d.Str32()
		c.Prefetch = int(d.U32())
		c.Priority = int32(d.U32())
		if c.Priority == 0 {
			return c, ErrBadCommand // encoded as a plain checkout
		}
	case cmdCancel, cmdSettle, cmdReturn, cmdDiscard, cmdRelease, cmdDeadSettled:
		c.Consumer = d.Str32()
		n := d.Count32(8)
		if d.Err() != nil {
			return c, ErrBadCommand
		}
		c.IDs = make([]uint64, n)
		for i := range c.IDs {
			c.IDs[i] = d.U64()
		}
	case cmdDequeue:
		c.Consumer = d.Str32()
		// The no-ack flag: the encoder writes only 0 or 1, so any other
		// byte is a malformed command, not a flag to mask.
		flag := d.U8()
		if flag > 1 {
			return c, ErrBadCommand
		}
		c.Prefetch = int(flag)
	case cmdDown:
		c.Consumer = d.Str32()
		c.Keep = d.Str32()
	case cmdBatch:
		n := d.Count32(13) // a command takes 13 bytes at least
		for i := 0; i < n && d.Err() == nil; i++ {
			sub := d.Bytes32()
			if d.Err() != nil {
				break
			}
			if len(sub) > 0 && sub[0] == cmdBatch {
				return c, ErrBadCommand // not nested
			}
			sc, err := DecodeCommand(sub)
			if err != nil {
				return c, err
			}
			c.Cmds = append(c.Cmds, sc)
		}
	case cmdPurge, cmdTick, cmdTouch:
	default:
		if !decodeLimits(&c, &d) {
			return c, ErrBadCommand
		}
	}
	if d.End() != nil {
		return c, ErrBadCommand
	}
	return c, nil
}

// appendMessage appends a message as the Raft log has it.
func appendMessage(e Enc, m *Message) Enc {
	return e.Str32(m.Exchange).Str32(m.RoutingKey).Bytes32(m.Props).Bytes32(m.Body).U64(uint64(m.TTL))
}

func decodeMessage(d *Dec) Message {
	var m Message
	m.Exchange = d.Str32()
	m.RoutingKey = d.Str32()
	m.Props = d.Bytes32()
	m.Body = d.Bytes32()
	m.TTL = int64(d.U64())
	return m
}
