package queue

import (
	"encoding/binary"

	"github.com/railmq/railmq/amqp"
)

// How a duplicate is confirmed (x-deduplication-confirm, railmq's own).
//
// The rabbitmq-message-deduplication plugin reports a duplicate to the
// broker (rabbit_backing_queue is_duplicate), and RabbitMQ drops it and
// nacks the publisher (rabbit_amqqueue_process:maybe_deliver_or_enqueue:
// "Drop publish and nack to publisher", v4.1.0; the plugin's queue_SUITE
// deduplicate_message_confirm expects wait_for_confirms false). A
// publisher that retries after a lost confirm thus sees its retry fail
// (noxdafox/rabbitmq-message-deduplication issues #21, #67, #72).
//
// With x-deduplication-confirm "ack" (a queue argument, or the message's
// header of that name, which wins) a duplicate is confirmed with
// basic.ack instead: the message with its id is in the queue already, as
// SQS FIFO and Kafka's idempotent producer answer a retry. The ack is
// sent once everything the queue submitted to the store before the
// duplicate is durable (the original included), so an acked retry never
// stands for a message a crash could still lose. "nack" (or nothing)
// keeps the plugin's answer.

// DedupConfirm is how a deduplicating queue or exchange confirms a
// duplicate.
type DedupConfirm uint8

// DedupConfirm values.
const (
	DedupConfirmDefault DedupConfirm = iota // the plugin's: nack for a queue, ack for an exchange
	DedupConfirmAck
	DedupConfirmNack
)

// DedupConfirmHeader is the argument, and the message header, that set
// DedupConfirm.
const DedupConfirmHeader = "x-deduplication-confirm"

// ParseDedupConfirm reads an x-deduplication-confirm value: "ack" or
// "nack".
func ParseDedupConfirm(s string) (DedupConfirm, bool) {
	switch s {
	case "ack":
		return DedupConfirmAck, true
	case "nack":
		return DedupConfirmNack, true
	}
	return DedupConfirmDefault, false
}

// MessageDedupConfirm is what the message's x-deduplication-confirm
// header asks (DedupConfirmDefault without one, or with a value other
// than "ack" or "nack": the queue's or exchange's setting applies). Read
// only for a duplicate.
func MessageDedupConfirm(props []byte) DedupConfirm {
	h := amqp.PropsHeaders(props)
	if len(h) == 0 {
		return DedupConfirmDefault
	}
	v, ok := amqp.HeaderField(h, DedupConfirmHeader)
	if !ok || len(v) < 5 || v[0] != 'S' {
		return DedupConfirmDefault
	}
	n := binary.BigEndian.Uint32(v[1:5])
	if uint64(n) != uint64(len(v)-5) {
		return DedupConfirmDefault
	}
	c, _ := ParseDedupConfirm(string(v[5:]))
	return c
}

// Resolve is the answer for a duplicate of a message with props: its
// header's, else c's, else def (the plugin's for the kind of object).
func (c DedupConfirm) Resolve(props []byte, def DedupConfirm) DedupConfirm {
	if m := MessageDedupConfirm(props); m != DedupConfirmDefault {
		return m
	}
	if c != DedupConfirmDefault {
		return c
	}
	return def
}

// duplicate drops m, a duplicate, and confirms it as the queue's
// x-deduplication-confirm (or m's header) says. exec held.
func (q *Queue) duplicate(m *Message, conf Confirmer) {
	q.nDedup.Add(1)
	if conf == nil {
		return
	}
	if q.pol.DedupConfirm.Resolve(m.Props, DedupConfirmNack) != DedupConfirmAck {
		conf.Done(ErrDuplicate)
		return
	}
	// Confirmed with the round's other publishes; a durable queue's
	// round commits even without writes of its own, so that the ack
	// follows the original's write (the store commits in order).
	q.confs = append(q.confs, conf)
	if q.cfg.Store != nil && q.Durable() {
		q.dedupSync = true
	}
}

// Deduplicated is the count of duplicates the queue dropped.
func (q *Queue) Deduplicated() int64 { return q.nDedup.Load() }

// CountDeduplicated adds a duplicate dropped by the queue's replica (a
// quorum queue's state machine).
func (q *Queue) CountDeduplicated() { q.nDedup.Add(1) }
