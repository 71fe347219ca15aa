package replica

import (
	"errors"
	"fmt"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// Classic queues homed on another node (vhost/classic.go): this node's
// handle of one is a queue.Queue whose Replica is a classicProxy, which
// forwards every operation over the cluster link (service "cq-rpc", a
// cluster.Conn) to the home node, where a linkSession carries it out on
// the real queue. A consumer here is a consumer there whose Sink sends
// the deliveries back; it may have as many in flight as its channel's
// prefetch (or, with no-ack or no prefetch, a window that this node's
// writes give back), so a slow client here holds no more than
// RabbitMQ's credit flow would let it. When the link breaks, the home
// requeues what this node's consumers and gets had unacked (flagged
// redelivered) and this node cancels its consumers (basic.cancel, as
// RabbitMQ does when a queue's node goes down) and fails what waited for
// an answer.
//
// The link is a cluster.Conn: its framing, request ids, pipelining and
// fail-all are the cluster's, and so is its outbound buffer, which a
// writer goroutine drains with no lock held: whoever sends a frame (a
// queue delivering to another node's consumer under its exec, a channel
// acking or publishing, a queue dead-letter-publishing under its exec)
// only appends to it and never waits for the socket or the peer. What
// waits there is bounded by what may be in flight: the home's
// deliveries by the consumers' credit (homeCons.Deliver refuses the rest,
// which stay in the queue until credit comes back), answers one per
// request; requests (publishes above all) are as many as this node's
// clients send, and their bytes count in the node's memory figure
// (Options.Memory) while they wait, so that a home that falls behind
// raises the memory alarm, which stops the publishers, rather than
// growing unseen. A peer that takes nothing for linkWriteTimeout breaks
// the link.
//
// The link to a home is dialled on a goroutine of its own (peerLink.run),
// never by the operation that needs it: frames sent while it is being
// dialled wait in the peerLink (counted in the memory figure too) and
// go out in order once it is up, or fail as if the link broke if the
// home cannot be reached.
//
// Frames: requests are sent with Call (the home answers) or, when no
// answer is wanted, as one-way frames (Send); the home's deliveries and
// cancellations are one-way frames the other way. An answer is a status
// (stOK ...) and what the request asks for. Every field is the cluster
// codec's (cluster.Enc, cluster.Dec); the kinds and what follow them:
const (
	lkPublish   byte = iota + 1 // vhost, queue, message record (a request only when confirmed)
	lkConsume                   // cid, vhost, queue, tag, flags, prefetch, priority
	lkCancel                    // cid (one-way)
	lkSettle                    // cid, op, seqs (one-way)
	lkCredit                    // cid, n (one-way)
	lkGet                       // cid, vhost, queue, flags
	lkPurge                     // vhost, queue
	lkDelete                    // vhost, queue, flags
	lkStats                     // vhost, queue
	lkDeliver                   // home to this node, one-way: cid, seq, flags, count, message record
	lkCancelled                 // home to this node, one-way: cid: the queue is gone
)

// Settle ops.
const (
	settleAck byte = iota
	settleRequeue
	settleReturn
	settleDiscard
	settleRetry // a consumer's nack or reject with requeue: held when the queue has x-retry-delay
)

// Answer statuses.
const (
	stOK byte = iota
	stAMQP
	stError
	stRejected
	stExclusive
	stGone
	stInUse
	stNotEmpty
	stDown // never sent: the link broke (or was never made) before the answer came
)

// linkWindow is how many deliveries a consumer without a prefetch (or
// with no-ack) has on their way to this node at once.
const linkWindow = 256

const (
	// maxLinkFrame bounds a frame both ways: a message (at most
	// broker.DefaultMaxMessageSize's 128 MiB body, its properties and
	// the frame's fields) fits.
	maxLinkFrame = 256 << 20
	// linkWriteTimeout is how long the peer may take to take a chunk of
	// what waits before the link breaks.
	linkWriteTimeout = 30 * time.Second
	// linkDialTimeout bounds the dial of a link to a home.
	linkDialTimeout = 2 * time.Second
	// linkAnswerTimeout is how long an operation that waits for its
	// answer (consume, get, purge, delete, stats) waits before it gives
	// up on the link and breaks it.
	linkAnswerTimeout = 30 * time.Second
)

var (
	errHomeDown  = errors.New("the queue's home node cannot be reached")
	errNoAnswer  = errors.New("classic queue's home: no answer in time")
	errLinkFrame = errors.New("classic queue link: a malformed frame")
)

// linkConfig is the configuration of the replica link's connections,
// both ways: handle gets the peer's requests and one-way frames.
func (m *Manager) linkConfig(handle func(*cluster.Conn, cluster.Frame) error) cluster.ConnConfig {
	return cluster.ConnConfig{Handle: handle, MaxFrame: maxLinkFrame, WriteTimeout: linkWriteTimeout, Memory: m.mem,
		Heartbeat: cluster.LinkHeartbeat, DeadAfter: cluster.LinkDeadAfter}
}

// breaker hands a request to break a link to the goroutine that owns it
// (peerLink.run, linkSession.run): a sender that finds the link unable
// to take a frame (its buffer full) may hold a queue's exec, under which
// the link's fail-all (its calls' callbacks, closing the socket) must not
// run.
type breaker chan error

func newBreaker() breaker { return make(breaker, 1) }

// request asks for the link to break; the first request wins.
func (b breaker) request(err error) {
	select {
	case b <- err:
	default:
	}
}

// sendFailed handles a frame the link refused: a link that is down
// already (cluster.ErrClosed) is being taken care of; any other refusal
// leaves the peer out of step, so the link breaks.
func sendFailed(b breaker, err error) {
	if err != nil && !errors.Is(err, cluster.ErrClosed) {
		b.request(err)
	}
}

// --- what the frames carry ---------------------------------------------------

func appendDelivery(b cluster.Enc, d queue.Delivery) cluster.Enc {
	return b.Uvarint(d.Seq).Bool(d.Redelivered).Uvarint(uint64(d.Count)).Bytes(queue.EncodeMessage(d.Msg))
}

func readDelivery(r *cluster.Dec) (queue.Delivery, bool) {
	seq, redelivered, count, rec := r.Uvarint(), r.Bool(), r.Uvarint(), r.Bytes()
	if r.Err() != nil {
		return queue.Delivery{}, false
	}
	m, err := queue.DecodeMessage(rec)
	if err != nil {
		return queue.Delivery{}, false
	}
	m.ID, m.Shared, m.Inline = 0, false, false
	return queue.Delivery{Msg: m, Seq: seq, Redelivered: redelivered, Count: uint32(count)}, true
}

// readSettle reads a settle frame: the link id, the op, the seqs.
func readSettle(r *cluster.Dec) (cid uint64, op byte, seqs []uint64, ok bool) {
	cid, op = r.Uvarint(), r.U8()
	n := r.Count(1) // a seq takes a byte at least
	if r.Err() != nil {
		return 0, 0, nil, false
	}
	seqs = make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		seqs = append(seqs, r.Uvarint())
	}
	return cid, op, seqs, r.End() == nil && op <= settleRetry
}

func appendSeqs(b cluster.Enc, ds []queue.Delivery) cluster.Enc {
	b = b.Uvarint(uint64(len(ds)))
	for _, d := range ds {
		b = b.Uvarint(d.Seq)
	}
	return b
}

// answerError turns an answer's status into the error the queue
// package's callers expect.
func answerError(st byte, r *cluster.Dec) error {
	switch st {
	case stOK:
		return nil
	case stAMQP:
		code, text := r.Uvarint(), r.Str()
		return &amqp.Error{Code: uint16(code), Text: text}
	case stRejected:
		return queue.ErrRejected
	case stExclusive:
		return queue.ErrExclusiveConsumer
	case stGone:
		return queue.ErrDeleted
	case stInUse:
		return queue.ErrInUse
	case stNotEmpty:
		return queue.ErrNotEmpty
	case stDown:
		return errHomeDown
	default:
		return fmt.Errorf("classic queue's home: %s", r.Str())
	}
}
