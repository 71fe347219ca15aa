package replica

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// Quorum queues on this node: each is a queue.Queue handle whose Replica
// is a quorumQueue, over the queue's Raft group (cluster.Group). Every
// node is in every group (voters, or non-voters beyond the group size),
// so every node applies every entry: a publish becomes an Enqueue entry
// (confirmed once committed), a consume a Checkout, an ack a Settle; a
// delivery is an effect of applying an entry, written out by the node
// whose consumer it names, when that node applies it. A consumer thus
// follows a change of leader without noticing: the node it is on goes on
// applying the log.
//
// quorumQueue.mu guards its consumers, the deliveries they have not
// taken yet and the ids delivered here; it is taken by raft's FSM
// goroutine (applying) and by the channels' goroutines (consume, ack,
// kick, cancel). Channel.Deliver (which takes channel.mu and conn.outMu)
// is called under it; nothing else is, and the channels never call into
// a queue while holding their own locks, so the order is quorumQueue.mu,
// then a channel's.

// defaultGroupSize is RabbitMQ's default_quorum_initial_group_size.
const defaultGroupSize = 3

// catchUpLag is how many committed entries a member may have still to
// apply and write its consumers' deliveries at once; further behind, it
// is catching up, and they wait until it has applied what was committed
// then (quorumQueue.deferred, deferUntil). A member back from a silence
// waits so too, however few entries it missed (cluster.Group.
// CatchUpTarget): entries are rounds of up to 512 commands, and a leader
// that took the member for gone may have done so fewer than catchUpLag
// entries before its commit index.
const catchUpLag = 64

// noAckCredit is how many messages a no-ack consumer has checked out at
// once: settled as they are written, so that the rest wait in the log.
const noAckCredit = 256

// pipelineMin is the smallest prefetch whose consumer gets twice its
// prefetch in credit (see credit).
const pipelineMin = 16

// Start makes this node's handle of a quorum queue, from cfg: its
// Replica a quorumQueue over the queue's group, started here (and
// bootstrapped, if this node proposed it: NewGroup).
func (m *Manager) Start(cfg queue.Config, voters []string, id string) (*queue.Queue, error) {
	qq := &quorumQueue{m: m, prefix: m.node.Name() + "/" + m.incarnation + "/",
		byTag: map[string]*qqConsumer{}, byCons: map[*queue.Consumer]*qqConsumer{}, out: map[uint64]outEntry{}}
	cfg.Replica = qq
	if cfg.Policy != nil {
		qq.lim.setPolicyLimits(cfg.Policy) // quorum_limits.go
	}
	qq.q = queue.New(cfg)
	m.warnQuorumArgs(&cfg)
	m.quorumMu.Lock()
	mine := m.creating[id]
	delete(m.creating, id)
	m.quorumMu.Unlock()
	fc := fifoConfig(cfg.Args)
	qq.expires = fc.Expires
	g, err := m.node.StartGroup(cluster.GroupConfig{ID: id, Label: "'" + cfg.Name + "' in vhost '" + cfg.VHost + "'", Voters: voters, Bootstrap: mine, Fifo: fc,
		DedupKey: qq.setDedup(cfg.Args),                        // quorum_dedup.go
		GroupKey: groupKey(cfg.Args), GroupKeyFor: groupKeyFor, // quorum_groups.go
		OnApply: qq.applied, OnRestore: qq.restored, OnCreate: func(g *cluster.Group) { qq.g = g }})
	if err != nil {
		return nil, err
	}
	// Consumers of this node's earlier lives are gone: their messages
	// return to the queue.
	qq.down = make(chan struct{})
	// On a standalone node every consumer but this life's is gone, also
	// those of an earlier name (a container recreated with another host
	// name).
	downPrefix := m.node.Name() + "/"
	if m.node.Local() {
		downPrefix = ""
	}
	g.Submit(cluster.Down(downPrefix, qq.prefix), func(cluster.Effects, error) { qq.downOnce.Do(func() { close(qq.down) }) })
	qq.syncGroups() // a policy's group header, ahead of the publishes (quorum_groups.go)
	if mine && m.node.Local() {
		// A new queue of one member is declared once it serves (its
		// first election: 50-100 ms), as RabbitMQ answers declare-ok
		// once the queue's Ra cluster has a leader.
		for deadline := time.Now().Add(5 * time.Second); !qq.recovered() && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
	}
	m.quorumMu.Lock()
	m.quorum[qq] = struct{}{}
	m.quorumMu.Unlock()
	return qq.q, nil
}

// stop stops this node's handle of the queue (deleted): its consumers
// here are cancelled and its group's state here removed.
func (qq *quorumQueue) stop() {
	m, q := qq.m, qq.q
	m.quorumMu.Lock()
	delete(m.quorum, qq)
	m.quorumMu.Unlock()
	qq.mu.Lock()
	cons := make([]*qqConsumer, 0, len(qq.byTag))
	for _, qc := range qq.byTag {
		cons = append(cons, qc)
	}
	qq.byTag, qq.byCons = map[string]*qqConsumer{}, map[*queue.Consumer]*qqConsumer{}
	qq.gone = true
	qq.mu.Unlock()
	for _, qc := range cons {
		qc.c.Sink.Cancelled(qc.c)
	}
	if err := qq.g.Remove(); err != nil {
		m.log.Warn("quorum queue state not removed", zap.String("queue", q.Name()), zap.Error(err))
	}
	if mem := q.Config().Memory; mem != nil {
		mem.Add(-qq.memory.Swap(0))
	}
	q.Stop()
}

// fifoConfig reads a quorum queue's arguments.
func fifoConfig(args amqp.Table) cluster.FifoConfig {
	fc := cluster.FifoConfig{DeliveryLimit: cluster.DefaultDeliveryLimit}
	if n, ok := amqp.Int(args["x-delivery-limit"]); ok {
		fc.DeliveryLimit = n
	}
	if n, ok := amqp.Int(args["x-max-length"]); ok {
		fc.MaxLength, fc.MaxLengthOn = n, true
	}
	if n, ok := amqp.Int(args["x-max-length-bytes"]); ok {
		fc.MaxLengthBytes, fc.MaxLengthBytesOn = n, true
	}
	if n, ok := amqp.Int(args["x-message-ttl"]); ok {
		fc.MessageTTL = n
	}
	// reject-publish-dlx is not a quorum queue's: RabbitMQ 3.10.8 takes
	// the argument and drops the head (rabbit_quorum_queue:overflow).
	fc.RejectPublish = args["x-overflow"] == "reject-publish"
	fc.AtLeastOnce = atLeastOnce(args)
	orderConfig(args, &fc) // quorum_order.go
	return fc
}

type quorumQueue struct {
	m      *Manager
	q      *queue.Queue
	g      *cluster.Group
	prefix string // this node's consumer tags: node/incarnation/
	// down is closed once the log applied the Down that returns the
	// messages of this node's earlier consumers (Start).
	down     chan struct{}
	downOnce sync.Once

	mu     sync.Mutex
	byTag  map[string]*qqConsumer
	byCons map[*queue.Consumer]*qqConsumer
	// out: what this node handed out (to a consumer or a get), by id:
	// the tag it is checked out to, and whether its ack was sent. An
	// entry stays until the log shows the message elsewhere (reconcile),
	// so that a snapshot restored meanwhile does not hand it out again.
	out  map[uint64]outEntry
	next uint64
	gone bool
	// cancelled: tags of consumers cancelled here whose Cancel may not be
	// applied yet; what the log still gives them goes back.
	cancelled map[string]bool
	// deferred: this member is catching up (more than catchUpLag
	// committed entries to apply, back from a silence, or restored from a
	// snapshot): its consumers' deliveries wait in their pending lists,
	// and are written, those still checked out to them, once it has
	// applied deferUntil (see applied).
	deferred bool
	// deferUntil: the entry the deferral lasts until at least (the
	// commit index known when it began, or a catch-up target); refresh:
	// raise it to the commit index the next entry brings (a restore from
	// a snapshot may come before any append told this member the
	// leader's commit).
	deferUntil uint64
	refresh    bool

	published, delivered, acked, redelivered atomic.Int64
	downed                                   map[string]bool // leader: nodes whose consumers were downed; ticker's
	orphans                                  map[uint64]bool // reconcile's: seen at the last tick
	// memory: the body bytes this node's copy holds, as counted into the
	// broker's memory figure (the watermark sees quorum queues too).
	memory atomic.Int64
	lim    limits // delivery limit and retry delays (quorum_limits.go)
	// dedup: x-message-deduplication, dedupConfirm its
	// x-deduplication-confirm (quorum_dedup.go); set by Start.
	dedup        bool
	dedupConfirm queue.DedupConfirm
	dlx          dlxWorker // the leader's at-least-once dead letters (quorum_dlx.go)
	// expires is x-expires (ms, 0: none); expiring: the leader's
	// deletion of the queue for it is under way (quorum_order.go).
	expires  int64
	expiring atomic.Bool
}

type outEntry struct {
	tag     string
	settled bool // acked: the Settle is on its way
	late    bool // reconcile saw it settled and still checked out once
}

// qqConsumer is a consumer here: its deliveries from the log (local)
// and the tag the log knows it by.
type qqConsumer struct {
	local
	tag string
}

// fromLog is a delivery of the log as a queue hands it to a channel.
func fromLog(d *cluster.Delivery) queue.Delivery {
	return queue.Delivery{Msg: &queue.Message{Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey,
		Props: d.Msg.Props, Body: d.Msg.Body}, Seq: d.ID, Redelivered: d.Redelivered, Count: d.Count, Acquired: d.Acquired}
}

// newTag makes a tag of this node's life; the final dot keeps one tag
// from being a prefix of another (Down takes prefixes). qq.mu held.
func (qq *quorumQueue) newTag(kind string) string {
	qq.next++
	return qq.prefix + kind + strconv.FormatUint(qq.next, 10) + "."
}

// errNoQuorum is a command the group could not commit in time.
func quorumError(err error) error {
	return amqp.Errorf(amqp.InternalError, "quorum queue unavailable: %v", err)
}

func (qq *quorumQueue) wait(c cluster.Command) (cluster.Effects, error) {
	ch := make(chan struct {
		e   cluster.Effects
		err error
	}, 1)
	qq.g.Submit(c, func(e cluster.Effects, err error) {
		ch <- struct {
			e   cluster.Effects
			err error
		}{e, err}
	})
	r := <-ch
	return r.e, r.err
}

func (qq *quorumQueue) Publish(m *queue.Message, conf queue.Confirmer) bool {
	qq.mu.Lock()
	gone := qq.gone
	qq.mu.Unlock()
	if gone {
		return false
	}
	now := time.Now()
	cm := cluster.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body}
	ts := now.UnixMilli()
	zero := false // a TTL of 0: the queue's, or the message's
	if m.Expires > 0 {
		left := m.Expires - queue.Now()
		cm.TTL = max(left/int64(time.Millisecond), 1)
		zero = left < int64(time.Millisecond)
	}
	if p := qq.lim.pol.Load(); p != nil && p.MessageTTL == 0 {
		zero = true
	}
	if zero {
		// Its TTL is 1 ms from its enqueue time (rabbit_fifo.erl v4.3.5
		// update_expiry_header: RaCmdTs + 1), stamped 1 ms early: a
		// consumer with room when it is applied still takes it, but a
		// basic.get or a checkout applied later in the same millisecond
		// finds it expired, as a TTL of 0 means (RabbitMQ's classic
		// queues; rabbit_fifo would hand it out within that millisecond).
		ts--
	}
	qq.published.Add(1)
	var done func(cluster.Effects, error)
	if conf != nil || qq.dedup {
		done = func(e cluster.Effects, err error) {
			switch {
			case err == nil && e.Duplicate:
				qq.duplicate(m, conf) // quorum_dedup.go
			case conf == nil:
			case err != nil:
				conf.Done(err)
			case !e.Accepted:
				conf.Done(queue.ErrRejected)
			default:
				conf.Done(nil)
			}
		}
	}
	qq.g.Submit(cluster.Enqueue(ts, cm), done)
	return true
}

func (qq *quorumQueue) Consume(c *queue.Consumer) error {
	qq.mu.Lock()
	if qq.gone {
		qq.mu.Unlock()
		return queue.ErrDeleted
	}
	qc := &qqConsumer{local: local{c: c, held: true}, tag: qq.newTag("c")}
	qq.byTag[qc.tag], qq.byCons[c] = qc, qc
	qq.mu.Unlock()
	if err := qq.checkout(qc.tag, credit(c), c.Priority); err != nil {
		qq.mu.Lock()
		delete(qq.byTag, qc.tag)
		delete(qq.byCons, c)
		qq.mu.Unlock()
		// The checkout may have been applied all the same: reconcile
		// finds the consumer nobody here has and takes it down.
		return quorumError(err)
	}
	return nil
}

// checkoutPatience is how long a consume goes on sending its Checkout
// while the group cannot commit it (an election under way).
const checkoutPatience = 10 * time.Second

// checkout commits a consumer's Checkout. A Checkout is idempotent (the
// same tag and credit again change nothing), so one whose fate is unknown
// (the leader lost its leadership while committing it, or never answered)
// is sent again, until checkoutPatience: a new queue's group, or one
// whose leader just went, elects one within a few heartbeats, and the
// consume goes through instead of failing.
func (qq *quorumQueue) checkout(tag string, credit int, priority int32) error {
	deadline := time.Now().Add(checkoutPatience)
	for {
		c := cluster.CheckoutPriority(tag, credit, priority)
		c.Now = time.Now().UnixMilli() // x-expires: a consumer attaching is use
		_, err := qq.wait(c)
		if err == nil || errors.Is(err, cluster.ErrGroupClosed) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// credit is how many messages the queue's log may check out to a
// consumer at once. The channel still writes no more than the consumer's
// prefetch unacked (queue.Sink refuses the rest, which wait in the
// consumer's pending list on its node); a prefetch of pipelineMin or more
// gets as many again, so that the next window is on the consumer's node
// when it acks the last one. Without it, every ack waited for its
// Settle's commit and for the entry checking out the next messages to
// reach the consumer's node (two commits, tens of milliseconds under
// load) before another message was written: two consumers with prefetch
// 300 took 13-16 k msg/s of the 18-21 k the publishers sent; with the
// pipeline they kept up. Small prefetches (a work queue's 1, fair
// dispatch) keep their exact credit, so that no message waits behind a
// busy consumer while another is idle.
func credit(c *queue.Consumer) int {
	switch {
	case c.NoAck:
		return noAckCredit
	case c.Prefetch >= pipelineMin:
		return 2 * c.Prefetch
	}
	return c.Prefetch
}

// prefetchOf is the prefetch of a consumer checked out with credit (credit
// inverted): the most it may have unacked. Credits from 16 to 31 never
// occur, so 32 or more is twice a prefetch.
func prefetchOf(credit int) int {
	if credit >= 2*pipelineMin {
		return credit / 2
	}
	return credit
}

func (qq *quorumQueue) Cancel(c *queue.Consumer) {
	qq.mu.Lock()
	qc := qq.byCons[c]
	if qc != nil {
		delete(qq.byCons, c)
		delete(qq.byTag, qc.tag)
		if qq.cancelled == nil {
			qq.cancelled = map[string]bool{}
		}
		qq.cancelled[qc.tag] = true
	}
	qq.mu.Unlock()
	if qc == nil {
		return
	}
	// What it had not written yet goes back; what it delivered stays
	// checked out to it until acked or requeued (a channel may ack after
	// basic.cancel).
	var back []uint64
	for _, d := range qc.pending {
		back = append(back, d.Seq)
	}
	cc := cluster.Cancel(qc.tag)
	cc.Now = time.Now().UnixMilli() // x-expires: unused from the last consumer's leaving
	_, _ = qq.wait(cc)
	if len(back) > 0 {
		qq.g.Submit(cluster.Release(qc.tag, back...), nil)
	}
	// Applied on the leader; once this node applied it too, nothing more
	// reaches the tag.
	time.AfterFunc(5*time.Second, func() {
		qq.mu.Lock()
		delete(qq.cancelled, qc.tag)
		qq.mu.Unlock()
	})
}

// settle sends the ids by tag as cmd makes them (Settle, Return, Discard).
func (qq *quorumQueue) settle(ds []queue.Delivery, mk func(tag string, ids ...uint64) cluster.Command) {
	qq.mu.Lock()
	byTag := map[string][]uint64{}
	var tags []string // in ds's order: a nack of several basic.gets returns them in delivery order
	ack := mk == nil
	if ack {
		mk = cluster.Settle
	}
	for _, d := range ds {
		if e, ok := qq.out[d.Seq]; ok && !e.settled {
			if byTag[e.tag] == nil {
				tags = append(tags, e.tag)
			}
			byTag[e.tag] = append(byTag[e.tag], d.Seq)
			if ack {
				qq.out[d.Seq] = outEntry{tag: e.tag, settled: true}
			} else {
				delete(qq.out, d.Seq)
			}
		}
	}
	qq.mu.Unlock()
	for _, tag := range tags {
		qq.g.Submit(mk(tag, byTag[tag]...), nil)
	}
}

// CountsDeliveries: a quorum queue's redeliveries carry x-delivery-count.
func (qq *quorumQueue) CountsDeliveries() bool { return true }

func (qq *quorumQueue) Ack(ds []queue.Delivery) {
	qq.acked.Add(int64(len(ds)))
	qq.settle(ds, nil) // nil: an ack (Settle, remembered until applied)
}

func (qq *quorumQueue) Requeue(ds []queue.Delivery, _ bool) {
	qq.settle(ds, cluster.Return)
}

func (qq *quorumQueue) Discard(ds []queue.Delivery) {
	qq.settle(ds, cluster.Discard)
}

func (qq *quorumQueue) Kick(c *queue.Consumer) {
	qq.mu.Lock()
	qc := qq.byCons[c]
	var w written
	if qc != nil {
		// A member catching up writes nothing (applied).
		w = qq.took(qc, qc.kick(qq.q, !qq.deferred))
	}
	qq.mu.Unlock()
	if qc != nil {
		qq.afterDeliver(qc, w)
	}
}

// written is what a consumer's channel took from its pending deliveries:
// how many, and the ids a no-ack consumer took (to settle).
type written struct {
	n      int
	settle []uint64
}

// deliverLocked writes qc's pending deliveries until its channel refuses
// one. qq.mu held.
func (qq *quorumQueue) deliverLocked(qc *qqConsumer) written {
	return qq.took(qc, qc.deliver(qq.q))
}

// took records the deliveries qc's channel took as handed out here, by
// the consumer's tag. qq.mu held.
func (qq *quorumQueue) took(qc *qqConsumer, ds []queue.Delivery) written {
	w := written{n: len(ds)}
	for _, d := range ds {
		qq.delivered.Add(1)
		if d.Redelivered {
			qq.redelivered.Add(1)
		}
		if qc.c.NoAck {
			w.settle = append(w.settle, d.Seq)
			// Written and settled: not written again if this member
			// defers before the Settle is applied (applied), and sent
			// again if it is lost (reconcile).
			qq.out[d.Seq] = outEntry{tag: qc.tag, settled: true}
		} else {
			qq.out[d.Seq] = outEntry{tag: qc.tag}
		}
	}
	return w
}

// afterDeliver has the connection write what deliverLocked appended and
// settles what a no-ack consumer took. qq.mu released.
func (qq *quorumQueue) afterDeliver(qc *qqConsumer, w written) {
	qc.wake(w.n)
	if len(w.settle) > 0 {
		qq.g.Submit(cluster.Settle(qc.tag, w.settle...), nil)
	}
}

func (qq *quorumQueue) Get(noAck bool) (queue.Delivery, bool, int, error) {
	qq.mu.Lock()
	tag := qq.newTag("g")
	qq.mu.Unlock()
	dq := cluster.Dequeue(tag, noAck)
	dq.Now = time.Now().UnixMilli() // what expired at the head goes, and a get is use (x-expires)
	e, err := qq.wait(dq)
	if err != nil {
		return queue.Delivery{}, false, 0, quorumError(err)
	}
	if len(e.Deliveries) == 0 {
		return queue.Delivery{}, false, 0, nil
	}
	d := e.Deliveries[0]
	if !noAck {
		qq.mu.Lock()
		qq.out[d.ID] = outEntry{tag: tag}
		qq.mu.Unlock()
	}
	qq.delivered.Add(1)
	return fromLog(&d), true, e.Remaining, nil
}

func (qq *quorumQueue) Purge() (int, error) {
	e, err := qq.wait(cluster.Purge())
	if err != nil {
		return 0, quorumError(err)
	}
	return e.Purged, nil
}

func (qq *quorumQueue) Stats() (messages, consumers int, err error) {
	qq.g.View(func(f *cluster.Fifo) { messages, consumers = f.Ready(), f.Consumers() })
	return messages, consumers, nil
}

func (qq *quorumQueue) Delete(ifUnused, ifEmpty bool) (int, error) {
	cfg := qq.q.Config()
	if err := refuseDeleteIf(cfg, ifUnused, ifEmpty); err != nil {
		return 0, err
	}
	var n int
	qq.g.View(func(f *cluster.Fifo) { n = f.Len() })
	if err := qq.m.host.DropQueue(cfg.VHost, cfg.Name); err != nil {
		return 0, quorumError(err)
	}
	return n, nil
}

// applied runs on raft's FSM goroutine for each entry this node applies.
func (qq *quorumQueue) applied(c *cluster.Command, e *cluster.Effects, leader bool) {
	var touched []*qqConsumer
	var back map[string][]uint64
	nudge := false
	qq.mu.Lock()
	for i := range e.Deliveries {
		d := &e.Deliveries[i]
		if !strings.HasPrefix(d.Consumer, qq.prefix) {
			nudge = nudge || leader
			continue
		}
		qc := qq.byTag[d.Consumer]
		if qc == nil {
			if qq.cancelled[d.Consumer] { // given after its cancel: back it goes
				if back == nil {
					back = map[string][]uint64{}
				}
				back[d.Consumer] = append(back[d.Consumer], d.ID)
			}
			continue
		}
		qc.pending = append(qc.pending, fromLog(d))
		touched = append(touched, qc)
	}
	if qq.downedHere(c) {
		// This node was taken for gone (a partition); its consumers are
		// still here: they check out again, and what they had out
		// returns to the queue (their acks of it will not count).
		qq.logProgress("quorum queue member taken for gone: its consumers check out again")
		for _, qc := range qq.byTag {
			qc.pending = nil
			qq.g.Submit(cluster.CheckoutPriority(qc.tag, credit(qc.c), qc.c.Priority), nil)
		}
		for id, e := range qq.out {
			if strings.HasPrefix(e.tag, qq.prefix) {
				delete(qq.out, id)
			}
		}
	}
	type settled struct {
		qc *qqConsumer
		w  written
	}
	var after []settled
	applying, commit := qq.g.Progress()
	if t := qq.g.CatchUpTarget(); t > applying && t > qq.deferUntil {
		// Heard from a leader again after a silence (cluster.Group.
		// CatchUpTarget): what it had committed by then may take back
		// what entries before it give this member's consumers.
		if !qq.deferred {
			qq.logProgress("quorum queue member heard from its leader after a silence: deliveries deferred", zap.Uint64("until", t))
		}
		qq.deferred, qq.deferUntil = true, t
	}
	if qq.refresh {
		qq.refresh = false
		qq.deferUntil = max(qq.deferUntil, commit)
	}
	switch lag := commit - min(commit, applying); {
	case lag > catchUpLag:
		// Catching up: an entry this far back may hand a consumer here
		// a message that a later entry (the leader taking this node for
		// gone, say) gave to another since, which acked it. Written
		// now, it would reach the client as a first delivery. So the
		// deliveries wait until this member has applied what was
		// committed when it found itself behind (not merely until it is
		// near the log's end: a Down a few large rounds before the
		// commit index is near it too).
		if !qq.deferred {
			qq.logProgress("quorum queue member catching up: deliveries deferred")
		}
		qq.deferred = true
		qq.deferUntil = max(qq.deferUntil, commit)
		touched = nil
	case qq.deferred && applying < qq.deferUntil:
		touched = nil // still short of where the deferral lasts to
	case qq.deferred:
		// At the target: what is checked out to each consumer now and
		// was not written here is written, with its flag as it is now;
		// what the deferred entries gave them and later ones took back
		// is not.
		qq.deferred = false
		written := 0
		qq.g.View(func(f *cluster.Fifo) {
			for _, qc := range qq.byTag {
				qc.pending = nil
			}
			for _, d := range f.CheckedOut(qq.prefix) {
				if _, done := qq.out[d.ID]; done {
					continue
				}
				if qc := qq.byTag[d.Consumer]; qc != nil {
					qc.pending = append(qc.pending, fromLog(&d))
					written++
				}
			}
		})
		qq.logProgress("quorum queue member near the log's end: deferred deliveries written", zap.Int("messages", written))
		touched = touched[:0]
		for _, qc := range qq.byTag {
			touched = append(touched, qc)
		}
	}
	seen := map[*qqConsumer]bool{}
	for _, qc := range touched {
		if seen[qc] {
			continue
		}
		seen[qc] = true
		after = append(after, settled{qc, qq.deliverLocked(qc)})
	}
	qq.mu.Unlock()
	if nudge && !cluster.IsNudge(c) {
		qq.g.Nudge() // the consumer's node learns of the commit now, not at the next append
	}
	for _, a := range after {
		qq.afterDeliver(a.qc, a.w)
	}
	for tag, ids := range back {
		qq.g.Submit(cluster.Release(tag, ids...), nil)
	}
	qq.deadLetters(e, leader)
	if leader {
		qq.armDue() // held messages (quorum_limits.go)
	}
	qq.publishCounts()
}

// downedHere reports whether c (or a command of its batch) cancelled this
// node's current consumers.
func (qq *quorumQueue) downedHere(c *cluster.Command) bool {
	hit := func(c *cluster.Command) bool {
		p, keep, ok := c.DownPrefix()
		return ok && strings.HasPrefix(qq.prefix, p) && (keep == "" || !strings.HasPrefix(qq.prefix, keep))
	}
	if hit(c) {
		return true
	}
	for i := range c.Cmds {
		if hit(&c.Cmds[i]) {
			return true
		}
	}
	return false
}

// restored: the state came from a snapshot, so entries that gave this
// node's consumers messages may not have been applied here; what is
// checked out to them and was not delivered here is delivered, once this
// member is near the log's end. A leader sends the last snapshot it took,
// often thousands of entries behind its log: what the snapshot shows
// checked out to a consumer here may have been taken back since (the
// leader took this node for gone while it was cut off) and given to
// another, which acked it; written then, it reached the client as a first
// delivery (TestClusterFaults: 188 acked messages delivered again without
// the redelivered flag, after a partition of 11 s). So this member defers
// as while catching up entry by entry, until it has applied what the
// leader had committed when the first entry after the snapshot came, and
// applied writes what is still checked out to each consumer then.
func (qq *quorumQueue) restored() {
	cons := map[string]bool{}
	qq.g.View(func(f *cluster.Fifo) {
		for _, t := range f.ConsumerTags(qq.prefix) {
			cons[t] = true
		}
	})
	qq.mu.Lock()
	// Consumers here that the state does not have were taken down by an
	// entry the snapshot covers (a Down this member never applied, so
	// downedHere never saw it): as there, they check out again, and what
	// they had out went back to the queue.
	var again []*qqConsumer
	for _, qc := range qq.byTag {
		if !cons[qc.tag] {
			qc.pending = nil
			again = append(again, qc)
			for id, e := range qq.out {
				if e.tag == qc.tag {
					delete(qq.out, id)
				}
			}
		}
	}
	qq.deferred, qq.refresh = true, true
	_, commit := qq.g.Progress()
	qq.deferUntil = max(qq.deferUntil, commit)
	qq.logProgress("quorum queue member restored from a snapshot", zap.Int("consumers_again", len(again)))
	qq.mu.Unlock()
	for _, qc := range again {
		qq.g.Submit(cluster.CheckoutPriority(qc.tag, credit(qc.c), qc.c.Priority), nil)
	}
	// An entry after the snapshot: applying it near the log's end ends
	// the deferral (reconcile sends another while none comes).
	qq.g.Submit(cluster.Tick(0), nil)
	qq.publishCounts()
}

// logProgress logs msg (info) with the member's progress in its log:
// restores and catch-ups, rare, and what TestClusterFaults' histories
// need beside the deliveries (RAILMQ_CLUSTER_LOG_LEVEL=info).
func (qq *quorumQueue) logProgress(msg string, fields ...zap.Field) {
	if ce := qq.m.log.Check(zap.InfoLevel, msg); ce != nil {
		applying, commit := qq.g.Progress()
		ce.Write(append(fields, zap.String("queue", qq.q.Name()), zap.Uint64("applying", applying), zap.Uint64("commit", commit))...)
	}
}

func (qq *quorumQueue) publishCounts() {
	var c queue.ReplicaCounts
	var held int64
	qq.g.View(func(f *cluster.Fifo) {
		// What consumers' nodes hold back beyond their prefetch is ready
		// to the client's eye, as in RabbitMQ (credit = prefetch there).
		back := int64(f.Held(prefetchOf))
		c.Ready, c.Unacked, c.Consumers = int64(f.Ready())+back, int64(f.Unacked())-back, int32(f.Consumers())
		held = f.Bytes()
		c.ReadyBytes = f.Bytes()
		c.Held = int64(f.Delayed()) // quorum_limits.go
		if h := f.Head(); h > 0 {
			c.Head = h * int64(time.Millisecond)
		}
	})
	c.Published, c.Delivered, c.Acked, c.Redelivered = qq.published.Load(), qq.delivered.Load(), qq.acked.Load(), qq.redelivered.Load()
	qq.q.SetCounts(c)
	if m := qq.q.Config().Memory; m != nil {
		m.Add(held - qq.memory.Swap(held))
	}
}

// tickQuorum runs once a second: on the leader of each quorum queue, it
// expires messages whose TTL ran out and returns the messages of nodes
// gone for downAfter.
func (m *Manager) tickQuorum() {
	m.quorumMu.Lock()
	qs := make([]*quorumQueue, 0, len(m.quorum))
	for qq := range m.quorum {
		qs = append(qs, qq)
	}
	m.quorumMu.Unlock()
	now := time.Now().UnixMilli()
	for _, qq := range qs {
		qq.reconcile()
		if !qq.g.IsLeader() {
			qq.downed = nil
			qq.dlx.reset()
			continue
		}
		qq.pumpDeadLetters(time.Now())
		if added, removed := qq.g.SyncMembers(); len(added)+len(removed) > 0 {
			m.log.Info("quorum queue members follow the cluster", zap.String("queue", qq.q.Name()),
				zap.Strings("added", added), zap.Strings("removed", removed))
		}
		expired := false
		qq.g.View(func(f *cluster.Fifo) { expired = f.Expired(now) })
		if expired {
			qq.g.Submit(cluster.Tick(now), nil)
		}
		qq.limitsTick(now)
		if qq.expireUnused(now) { // quorum_order.go
			continue
		}
		for _, peer := range qq.g.Unreachable(downAfter) {
			if qq.downed == nil {
				qq.downed = map[string]bool{}
			}
			if !qq.downed[peer] {
				qq.downed[peer] = true
				qq.g.Submit(cluster.Down(peer+"/", ""), nil)
			}
		}
		for peer := range qq.downed {
			if !qq.g.IsUnreachable(peer, downAfter) {
				delete(qq.downed, peer)
			}
		}
	}
}

// downAfter is how long a quorum queue's leader waits for a node it
// cannot reach before it returns the messages that node's consumers had.
const downAfter = 10 * time.Second

// describe adds what RabbitMQ's management API shows of a quorum queue:
// its type, leader (also as node), members and the ones online (as this
// node sees them: itself, the leader it hears from, and, when it leads,
// every member it reaches).
func (qq *quorumQueue) describe(m map[string]any) {
	st := qq.g.Status()
	m["type"] = "quorum"
	leader := st.Leader
	m["leader"], m["node"] = nullIfEmpty(leader), nullIfEmpty(leader)
	members := make([]string, 0, len(st.Members))
	online := []string{}
	down := map[string]bool{}
	if qq.g.IsLeader() {
		for _, p := range qq.g.Unreachable(0) {
			down[p] = true
		}
	}
	for _, mb := range st.Members {
		if !mb.Voter {
			continue
		}
		members = append(members, mb.Name)
		if mb.Name == qq.m.node.Name() || mb.Name == leader || (qq.g.IsLeader() && !down[mb.Name]) {
			online = append(online, mb.Name)
		}
	}
	m["members"], m["online"] = members, online
	m["railmq_raft"] = map[string]any{"term": st.Term, "commit_index": st.Commit, "applied_index": st.Applied}
	// The delivery limit in force: the state machine's, as this member
	// applied it (RabbitMQ 4.1's queue stats: delivery_limit, from the
	// machine config, "unlimited" without one; rabbit_quorum_queue.erl).
	var lim int64
	qq.g.View(func(f *cluster.Fifo) { lim = f.Config().DeliveryLimit })
	if lim < 0 {
		m["delivery_limit"] = "unlimited"
	} else {
		m["delivery_limit"] = lim
	}
	qq.describeDeadLetters(m)
}

// describeMembers adds each member's progress through the log, asked of
// the members themselves: replication lag is the leader's commit index
// less a member's applied index.
func (qq *quorumQueue) describeMembers(m map[string]any) {
	ms := qq.g.Members(300 * time.Millisecond)
	var commit uint64
	for _, mb := range ms {
		commit = max(commit, mb.Commit)
	}
	out := make([]map[string]any, 0, len(ms))
	online := []string{}
	for _, mb := range ms {
		e := map[string]any{"name": mb.Name, "voter": mb.Voter, "online": mb.Online}
		if mb.Online {
			e["applied_index"], e["lag"] = mb.Applied, commit-min(commit, mb.Applied)
			if mb.Voter {
				online = append(online, mb.Name)
			}
		}
		out = append(out, e)
	}
	m["online"] = online
	m["railmq_members"] = out
}

// reconcile (once a second, on every node) takes down what the log holds
// for this node's life that no one here has any more: a consumer whose
// checkout's answer was lost (its consume failed, but the checkout was
// applied) has its messages returned; a message checked out to a tag
// that is no consumer (cancelled, or a get) and that no channel here
// holds, seen so at two ticks running, is returned.
func (qq *quorumQueue) reconcile() {
	var tags []string
	var orph []cluster.Delivery
	var dead []string
	release, resettle := map[string][]uint64{}, map[string][]uint64{}
	qq.mu.Lock()
	if qq.deferred && qq.g.Lag() == 0 {
		// Caught up, but no entry came since the deferral began (a
		// restore on an idle queue): one ends it (applied).
		qq.g.Submit(cluster.Tick(0), nil)
	}
	// What the log no longer has checked out to the tag it was handed
	// to is done with; an ack the log has not taken after two ticks is
	// sent again (its Settle was lost with a leader).
	qq.g.View(func(f *cluster.Fifo) {
		tags, orph = f.ConsumerTags(qq.prefix), f.Orphans(qq.prefix)
		for id, e := range qq.out {
			switch {
			case f.Owner(id) != e.tag:
				delete(qq.out, id)
			case e.settled && e.late:
				resettle[e.tag] = append(resettle[e.tag], id)
			case e.settled:
				qq.out[id] = outEntry{tag: e.tag, settled: true, late: true}
			}
		}
	})
	for _, t := range tags {
		if qq.byTag[t] == nil && !qq.cancelled[t] {
			dead = append(dead, t)
		}
	}
	seen := map[uint64]bool{}
	for _, d := range orph {
		if _, held := qq.out[d.ID]; held || qq.cancelled[d.Consumer] {
			continue
		}
		seen[d.ID] = true
		if qq.orphans[d.ID] {
			release[d.Consumer] = append(release[d.Consumer], d.ID)
		}
	}
	qq.orphans = seen
	qq.mu.Unlock()
	for _, t := range dead {
		qq.g.Submit(cluster.Down(t, ""), nil)
	}
	for t, ids := range resettle {
		qq.g.Submit(cluster.Settle(t, ids...), nil)
	}
	// Returned, counted and flagged: such a message may have been
	// delivered, and acked with an ack that never reached the log.
	for t, ids := range release {
		qq.g.Submit(cluster.Return(t, ids...), nil)
	}
}

// recovered reports whether a standalone node's queue serves what it
// had: its group has applied its log (cluster.Group.Recovered) and the
// messages of its earlier consumers are back (down).
func (qq *quorumQueue) recovered() bool {
	select {
	case <-qq.down:
		return qq.g.Recovered()
	default:
		return false
	}
}
