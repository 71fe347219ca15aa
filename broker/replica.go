package broker

import (
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/replica"
	"github.com/railmq/railmq/vhost"
)

// The cluster's replicated queue kinds (quorum queues, classic queues
// homed on another node) are package replica's: Server.rep, made in New
// when the node is clustered. This is what it asks of the node.

// replicaHost is the node as replica.Manager needs it (replica.Host).
type replicaHost struct{ s *Server }

func (h replicaHost) VHost(name string) *vhost.VHost { return h.s.VHost(name) }

// DropQueue deletes a quorum queue's definition, and the bindings to it,
// from the metadata store (replicate.go's keys).
func (h replicaHost) DropQueue(vh, name string) error {
	ops := []cluster.Op{{Key: metaKey(persist.DefQueue, vhost.DefName(vh, name)), Delete: true}}
	for _, o := range h.s.node.Keys(metaKey(persist.DefBinding, vhost.DefName(vh))) {
		if vhost.IsBindingTo([]byte(o.Key[5:]), vh, name) {
			ops = append(ops, cluster.Op{Key: o.Key, Delete: true})
		}
	}
	return h.s.node.Write(ops)
}

// describeQuorum adds what the management API shows of a replicated
// queue's handle here: a quorum queue's leader, members and Raft
// indexes, a classic queue's home (replica.Describe).
func (s *Server) describeQuorum(q *queue.Queue, m map[string]any) { replica.Describe(q, m) }

// describeMembers adds a quorum queue's members' progress through its
// log (replica.DescribeMembers).
func (s *Server) describeMembers(q *queue.Queue, m map[string]any) { replica.DescribeMembers(q, m) }

// homedElsewhere reports whether q is this node's handle of a classic
// queue homed on another node (whose home reports it in the metrics).
func homedElsewhere(q *queue.Queue) bool { return replica.Home(q) != "" }

// quorumRaft is a quorum queue's group as this node sees it; false for
// other queues (replica.Raft).
func quorumRaft(q *queue.Queue) (replica.RaftStatus, bool) { return replica.Raft(q) }
