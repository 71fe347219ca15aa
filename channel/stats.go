package channel

import "sync/atomic"

// Stats are one channel's own message counts since it opened, what
// RabbitMQ's management API shows as a channel's message_stats and its
// rabbitmq_prometheus exports as rabbitmq_channel_*_total. The reader
// (publishes, gets, acks), the channel's deliveries and its confirms
// count them beside the broker-wide queue.Counts; any goroutine reads
// them (Info).
type Stats struct {
	Publish          atomic.Int64 // basic.publish received
	Confirm          atomic.Int64 // publishes confirmed (basic.ack sent, per message)
	ReturnUnroutable atomic.Int64 // mandatory publishes returned unroutable
	DropUnroutable   atomic.Int64 // publishes routed nowhere and dropped
	Deliver          atomic.Int64 // deliveries to consumers, manual ack
	DeliverNoAck     atomic.Int64 // deliveries to consumers, automatic ack
	Get              atomic.Int64 // basic.get answered, manual ack
	GetNoAck         atomic.Int64 // basic.get answered, automatic ack
	GetEmpty         atomic.Int64 // basic.get answered get-empty
	Redeliver        atomic.Int64 // deliveries (consume or get) flagged redelivered
	Ack              atomic.Int64 // deliveries acked by the client

	// Transactions: whether tx.select was sent, and the publishes and
	// acks held by the open transaction (messages_uncommitted,
	// acks_uncommitted).
	Transactional                    atomic.Bool
	UncommittedMsgs, UncommittedAcks atomic.Int64
}

// StatsSnapshot is a copy of Stats read at one moment.
type StatsSnapshot struct {
	Publish, Confirm, ReturnUnroutable, DropUnroutable int64
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty     int64
	Redeliver, Ack                                     int64
	Transactional                                      bool
	UncommittedMsgs, UncommittedAcks                   int64
}

// Snapshot reads s.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{Publish: s.Publish.Load(), Confirm: s.Confirm.Load(), ReturnUnroutable: s.ReturnUnroutable.Load(),
		DropUnroutable: s.DropUnroutable.Load(), Deliver: s.Deliver.Load(), DeliverNoAck: s.DeliverNoAck.Load(),
		Get: s.Get.Load(), GetNoAck: s.GetNoAck.Load(), GetEmpty: s.GetEmpty.Load(), Redeliver: s.Redeliver.Load(),
		Ack: s.Ack.Load(), Transactional: s.Transactional.Load(),
		UncommittedMsgs: s.UncommittedMsgs.Load(), UncommittedAcks: s.UncommittedAcks.Load()}
}

// countDelivery counts a delivery to a consumer (get false) or to
// basic.get, by ack mode.
func (s *Stats) countDelivery(get, noAck, redelivered bool) {
	switch {
	case get && noAck:
		s.GetNoAck.Add(1)
	case get:
		s.Get.Add(1)
	case noAck:
		s.DeliverNoAck.Add(1)
	default:
		s.Deliver.Add(1)
	}
	if redelivered {
		s.Redeliver.Add(1)
	}
}

// uncommitted counts op into the open transaction, or (nil) empties it.
func (s *Stats) uncommitted(op *txOp) {
	switch {
	case op == nil:
		s.UncommittedMsgs.Store(0)
		s.UncommittedAcks.Store(0)
	case op.msg != nil:
		s.UncommittedMsgs.Add(1)
	default:
		s.UncommittedAcks.Add(1)
	}
}
