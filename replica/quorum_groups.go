package replica

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// Message groups on quorum queues: x-message-group-header on a quorum
// queue gives its replicated state groups (cluster/fifo_groups.go), by
// the group id a classic queue reads (queue.GroupKey: the named header's
// value). The rule is applied by every member in log order, so a group's
// holder and order survive a change of leader and a restart.
//
// A policy's message-group-header groups a quorum queue without the
// argument through its log: the node that sees the policy differ from
// what the log has set (a policy change, the leader's tick) appends a
// cluster.GroupHeader entry, which every member applies at the same
// place in the log (the header is in the state and its snapshots), so
// all members group, regroup or ungroup the same messages alike.

// groupKey is the group id function of a queue with args (nil: the
// queue has no groups).
func groupKey(args amqp.Table) func(props []byte) ([]byte, bool) {
	header, _ := args["x-message-group-header"].(string)
	if header == "" {
		return nil
	}
	return groupKeyFor(header)
}

// groupKeyFor is the group id function of header.
func groupKeyFor(header string) func(props []byte) ([]byte, bool) {
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

// syncGroups appends a GroupHeader entry when the policy's group header
// is not what the log has set (a queue with the argument: never).
func (qq *quorumQueue) syncGroups() {
	if qq.g == nil {
		return
	}
	if h, _ := qq.q.Config().Args["x-message-group-header"].(string); h != "" {
		return
	}
	want := ""
	if p := qq.policy(); p != nil {
		want = p.GroupHeader
	}
	var cur string
	qq.g.View(func(f *cluster.Fifo) { cur = f.PolicyGroupHeader() })
	if cur != want {
		qq.g.Submit(cluster.GroupHeader(want), nil)
	}
}
