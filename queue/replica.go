package queue

// Replica carries out the operations of a queue whose state is not this
// Queue's but a replicated log's (a quorum queue, the broker's cluster):
// a Queue made with Config.Replica is a handle that the registry, the
// channels and the metrics use as any other, and whose operations go to
// the Replica. Deliveries reach consumers through their Sink, as from any
// queue (Deliver may be called on any goroutine, never concurrently for
// one consumer), and the consumers' owners Kick the Replica when they
// refused one and have room again.
type Replica interface {
	Publish(m *Message, conf Confirmer) bool
	Consume(c *Consumer) error
	Cancel(c *Consumer)
	Ack(ds []Delivery)
	// Requeue returns deliveries; counted is false for a Return (not
	// flagged redelivered, not counted).
	Requeue(ds []Delivery, counted bool)
	Discard(ds []Delivery)
	Kick(c *Consumer)
	Get(noAck bool) (Delivery, bool, int, error)
	Purge() (int, error)
	// Delete deletes the queue everywhere, with delete's checks.
	Delete(ifUnused, ifEmpty bool) (int, error)
	Stats() (messages, consumers int, err error)
	// CountsDeliveries reports whether redeliveries carry
	// x-delivery-count (a quorum queue's do).
	CountsDeliveries() bool
}

// PolicySetter is a Replica that takes policy changes (a quorum queue:
// its delivery limit, its retry delays).
type PolicySetter interface {
	SetPolicy(p Policy)
}

// Throttled is a Replica whose intake can fall behind its publishers
// (the link to a classic queue's home node, whose outbound buffer grows
// while the home takes frames more slowly than they come). While Behind
// reports true, a publisher into the queue waits (the connection's flow
// control, as for a queue's own intake lag), until CaughtUp: the
// publisher alone is slowed, as TCP slowed it when the link was written
// on its goroutine. Both are called on every publish and must not block.
type Throttled interface {
	Behind() bool
	CaughtUp() bool
}

// ReplicaCounts are the latest counts a Replica publishes for the
// queue's metrics.
type ReplicaCounts struct {
	Ready, Unacked, ReadyBytes, UnackedBytes int64
	Consumers                                int32
	Head                                     int64 // unix nanos of the oldest ready message, 0 if none
	Published, Delivered, Acked, Redelivered int64 // since this node started the queue
	Held                                     int64 // held for a retry delay (Queue.Held)
}

// SetCounts publishes a Replica's counts.
func (q *Queue) SetCounts(c ReplicaCounts) {
	q.readyN.Store(c.Ready)
	q.unackedN.Store(c.Unacked)
	q.readyBytesN.Store(c.ReadyBytes)
	q.unackedBytesN.Store(c.UnackedBytes)
	q.consumerN.Store(c.Consumers)
	q.headAt.Store(c.Head)
	q.nPublish.Store(c.Published)
	q.nDeliverGet.Store(c.Delivered)
	q.nAck.Store(c.Acked)
	q.nRedeliver.Store(c.Redelivered)
	q.heldN.Store(c.Held)
}

// Replicated reports whether the queue is a Replica's handle.
func (q *Queue) Replicated() bool { return q.cfg.Replica != nil }

// Stop marks a Replica's handle stopped (Done closes): the queue was
// deleted, or this node left it.
func (q *Queue) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.stopped)
	}
}

// CancelsOnTimeout reports whether a consumer timeout returns the
// queue's timed-out deliveries and cancels their consumer (RabbitMQ
// 4.3's quorum queues: a Returner) rather than closing the channel.
func (q *Queue) CancelsOnTimeout() bool {
	_, ok := q.cfg.Replica.(Returner)
	return ok
}

// StreamStater is a stream's Replica (x-queue-type stream): what the
// management API and the metrics show of it.
type StreamStater interface {
	StreamStats() StreamStats
}

// StreamStats describe a stream on this node.
type StreamStats struct {
	First, Next     uint64 // offsets: the first kept and the next to be written
	Segments        int
	Bytes           int64 // on disk
	FirstTimestamp  int64 // unix ms of the first record kept, 0 if none
	LastTimestamp   int64 // unix ms of the last record, 0 if none
	Published       int64 // records appended since this node started the stream
	SegmentsDeleted int64 // by retention since start
	Consumers       []StreamConsumer
}

// StreamConsumer is one consumer of a stream on this node.
type StreamConsumer struct {
	Tag      string
	Offset   uint64 // the next offset it reads
	Lag      uint64 // Next - Offset
	Tracking string // its server-side tracking name, or ""
	Unacked  int
	Prefetch int
}
