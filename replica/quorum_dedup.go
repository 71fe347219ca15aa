package replica

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// Deduplicating quorum queues: x-message-deduplication on a quorum queue
// makes its replicated state refuse a message whose
// x-deduplication-header id is that of a message it holds
// (cluster/fifo_dedup.go). The plugin supports classic queues only (its
// README: "Mirrored and Quorum queues are currently not supported"); here
// the ids are in the queue's Raft state, so a retry after a failover is
// still recognised. A duplicate is answered as on a classic queue: nack,
// or, with x-deduplication-confirm "ack" (the argument, or the
// message's header), ack: the entry that refused it was committed after
// the original's, so the original is committed too.

// setDedup reads the queue's deduplication arguments and returns the id
// function its group deduplicates by (nil: it does not). Start, before
// the group starts.
func (qq *quorumQueue) setDedup(args amqp.Table) func(props []byte) ([]byte, bool) {
	v, ok := args["x-message-deduplication"]
	if !ok || v == false {
		return nil
	}
	qq.dedup = true
	s, _ := args[queue.DedupConfirmHeader].(string)
	qq.dedupConfirm, _ = queue.ParseDedupConfirm(s)
	return dedupKey
}

// dedupKey is the id a deduplicating quorum queue keeps of a message:
// the encoded x-deduplication-header value (queue.DedupID); the state
// copies what it keeps.
func dedupKey(props []byte) ([]byte, bool) {
	var buf [9]byte
	id, ok := queue.DedupID(props, &buf)
	if !ok {
		return nil, false
	}
	return id, true
}

// duplicate answers a publish the queue's state refused as a duplicate
// (conf nil: not in confirm mode) and counts it.
func (qq *quorumQueue) duplicate(m *queue.Message, conf queue.Confirmer) {
	qq.q.CountDeduplicated()
	if conf == nil {
		return
	}
	if qq.dedupConfirm.Resolve(m.Props, queue.DedupConfirmNack) == queue.DedupConfirmAck {
		conf.Done(nil)
		return
	}
	conf.Done(queue.ErrDuplicate)
}
