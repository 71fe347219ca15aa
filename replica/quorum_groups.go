package replica

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// Message groups on quorum queues: x-message-group-header on a quorum
// queue gives its replicated state groups (cluster/fifo_groups.go), by
// the group id a classic queue reads (queue.GroupKey: the named header's
// value). The rule is applied by every member in log order, so a group's
// holder and order survive a change of leader and a restart.
//
// Only the queue's argument groups a quorum queue: a policy's
// message-group-header does not. The header must be the same on every
// member from the queue's first entry on (the group ids are read from
// the messages, not written in the log), and a policy changed while a
// member is down would give that member another one when it starts.

// groupKey is the group id function of a queue with args (nil: the
// queue has no groups).
func groupKey(args amqp.Table) func(props []byte) ([]byte, bool) {
	header, _ := args["x-message-group-header"].(string)
	if header == "" {
		return nil
	}
	return func(props []byte) ([]byte, bool) {
		var buf [9]byte
		k, ok := queue.GroupKey(props, header, &buf)
		if !ok {
			return nil, false
		}
		if len(k) == len(buf) && &k[0] == &buf[0] {
			return append([]byte(nil), k...), true // a number's key, in buf
		}
		return k, true
	}
}
