package queue

import "sync/atomic"

// Totals are the broker's message counts since it started, for its
// metrics (rabbitmq_global_messages_* in RabbitMQ's Prometheus names):
// channels and queues add to them with atomic adds as they go, and the
// metrics read them when scraped. One Totals is shared by every channel
// and queue of a broker.
//
// What channels count, per message, is sharded (Shard): a channel adds to
// the shard of its connection, so that publishers and consumers on other
// connections (other cores) do not fight over one cache line per message.
// Sum adds the shards up.
type Totals struct {
	shards [countShards]Counts

	// DeadLettered counts messages that left a queue for a reason
	// (DeadLetterReasons order), [0] with no dead-letter exchange to take
	// them (dropped: RabbitMQ's strategy "disabled"), [1] republished to
	// one (strategy "at_most_once").
	DeadLettered [4][2]atomic.Int64

	// Queue churn: queue.declare calls (not passive), queues created and
	// deleted.
	QueuesDeclared, QueuesCreated, QueuesDeleted atomic.Int64

	// Leases and retries workers asked for (amq.railmq.lease, .retry):
	// deadlines moved, retries scheduled, and such publishes refused.
	LeasesExtended, RetriesScheduled, LeasesRefused atomic.Int64
}

const countShards = 16

// Counts are one shard of what channels count.
type Counts struct {
	Received, ReceivedConfirm                   atomic.Int64 // publishes; those on a channel in confirm mode
	Routed, UnroutableDropped, UnroutableReturn atomic.Int64 // publishes that reached a queue; that did not
	Confirmed                                   atomic.Int64 // basic.ack sent to publishers, per message
	// Deliveries, by [NoAck]: to consumers, and to basic.get.
	DeliveredConsume, DeliveredGet [2]atomic.Int64
	GetEmpty, Redelivered          atomic.Int64
	Acknowledged                   atomic.Int64 // deliveries acked by consumers
	Publishers                     atomic.Int64 // channels open that have published
	// Sizes counts published bodies by size, in SizeBuckets (the last
	// counts the larger ones), and SizeSum adds their bytes: the
	// rabbitmq_message_size_bytes histogram.
	Sizes   [len(SizeBuckets) + 1]atomic.Int64
	SizeSum atomic.Int64
	_       [40]byte // to 256 bytes: shards share no cache line but at their ends
}

// Shard is the counts a channel of connection id adds to.
func (t *Totals) Shard(id uint64) *Counts { return &t.shards[id%countShards] }

// Sums are the Counts of every shard added up.
type Sums struct {
	Received, ReceivedConfirm, Routed, UnroutableDropped, UnroutableReturn, Confirmed int64
	DeliveredConsume, DeliveredGet                                                    [2]int64
	GetEmpty, Redelivered, Acknowledged, Publishers                                   int64
	Sizes                                                                             [len(SizeBuckets) + 1]int64
	SizeSum                                                                           int64
}

// Sum adds up the shards. Each figure only grows (but Publishers), so a
// sum taken while channels count is never less than an earlier one.
func (t *Totals) Sum() (s Sums) {
	for i := range t.shards {
		c := &t.shards[i]
		s.Received += c.Received.Load()
		s.ReceivedConfirm += c.ReceivedConfirm.Load()
		s.Routed += c.Routed.Load()
		s.UnroutableDropped += c.UnroutableDropped.Load()
		s.UnroutableReturn += c.UnroutableReturn.Load()
		s.Confirmed += c.Confirmed.Load()
		for j := range 2 {
			s.DeliveredConsume[j] += c.DeliveredConsume[j].Load()
			s.DeliveredGet[j] += c.DeliveredGet[j].Load()
		}
		s.GetEmpty += c.GetEmpty.Load()
		s.Redelivered += c.Redelivered.Load()
		s.Acknowledged += c.Acknowledged.Load()
		s.Publishers += c.Publishers.Load()
		for j := range c.Sizes {
			s.Sizes[j] += c.Sizes[j].Load()
		}
		s.SizeSum += c.SizeSum.Load()
	}
	return s
}

// DeadLetterReasons are the reasons Totals.DeadLettered counts, in order.
var DeadLetterReasons = [4]string{ReasonExpired, ReasonMaxLen, ReasonRejected, ReasonDeliveryLimit}

// SizeBuckets are the upper bounds of RabbitMQ's message size histogram
// (rabbit_msg_size_metrics), in bytes.
var SizeBuckets = [...]int64{100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000}

// CountSize adds one published body of n bytes to the size histogram.
func (c *Counts) CountSize(n int) {
	i := 0
	for i < len(SizeBuckets) && int64(n) > SizeBuckets[i] {
		i++
	}
	c.Sizes[i].Add(1)
	c.SizeSum.Add(int64(n))
}

func (t *Totals) countDeadLetter(reason string, republished bool) {
	for i, r := range DeadLetterReasons {
		if r == reason {
			t.DeadLettered[i][b2i(republished)].Add(1)
			return
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
