package queue

import (
	"hash/maphash"

	"github.com/railmq/railmq/amqp"
)

// Queue-level deduplication (argument x-message-deduplication), as the
// rabbitmq-message-deduplication plugin does it
// (rabbit_message_deduplication_queue.ex in
// noxdafox/rabbitmq-message-deduplication): a message whose
// x-deduplication-header value is that of a message in the queue (ready,
// or delivered and not yet acknowledged) is not enqueued. RabbitMQ
// answers a duplicate the backing queue reports (is_duplicate) as it
// answers a rejected publish: a publisher in confirm mode gets basic.nack
// (the plugin's queue_SUITE deduplicate_message_confirm), unless
// x-deduplication-confirm asks for an ack (dedup_confirm.go). The id leaves
// the queue with its message: acknowledged, got or delivered without
// ack, rejected, expired, dropped by a length limit or dead-lettered. A
// purge forgets every id, as the plugin flushes its cache.
//
// The ids are the queue's state (q.dedup, under exec); a durable queue's
// are rebuilt from its stored messages at recovery, so they need no
// writes of their own.

// DedupHeader is the message header whose value is the id.
const DedupHeader = "x-deduplication-header"

// DedupID returns the cache key of m's id (amqp.FieldKey of its
// x-deduplication-header), if it has one. buf is scratch space.
func DedupID(props []byte, buf *[9]byte) ([]byte, bool) {
	h := amqp.PropsHeaders(props)
	if len(h) == 0 {
		return nil, false
	}
	val, ok := amqp.HeaderField(h, DedupHeader)
	if !ok {
		return nil, false
	}
	return amqp.FieldKey(val, buf), true
}

// toggleDedup starts or stops deduplicating as q.pol says. Started by a
// policy, the queue does not know the ids of the messages it already
// holds (the plugin flushes its cache then too). exec held (or New).
func (q *Queue) toggleDedup() {
	on := q.pol.Dedup && !q.cfg.NoDedup && q.cfg.Replica == nil
	switch {
	case on && q.dedup == nil:
		q.dedup, q.dedupSeed = make(map[uint64]int32), maphash.MakeSeed()
	case !on:
		q.dedup = nil
	}
}

// dedupAdmit records m's id and reports true, or reports false when a
// message with its id is in the queue. q.dedup not nil; exec held.
//
// The ids are kept by a 64-bit hash (maphash, seeded per queue), without
// the id itself: no allocation per message. Two ids of a queue's
// messages share a hash with probability n²/2⁶⁵ (about 10⁻¹³ for a
// million messages); the later one would then be refused as a duplicate.
func (q *Queue) dedupAdmit(m *Message) bool {
	h, ok := q.dedupHash(m)
	if !ok {
		return true // no id: never a duplicate
	}
	if q.dedup[h] > 0 {
		return false
	}
	q.dedup[h] = 1
	return true
}

// dedupForget removes the id of m, which leaves the queue. exec held.
func (q *Queue) dedupForget(m *Message) {
	h, ok := q.dedupHash(m)
	if !ok {
		return
	}
	// More than one only for messages recovered with the same id.
	if n := q.dedup[h]; n > 1 {
		q.dedup[h] = n - 1
	} else {
		delete(q.dedup, h)
	}
}

func (q *Queue) dedupHash(m *Message) (uint64, bool) {
	var buf [9]byte
	id, ok := DedupID(m.Props, &buf)
	if !ok {
		return 0, false
	}
	return maphash.Bytes(q.dedupSeed, id), true
}
