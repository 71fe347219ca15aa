package broker

import (
	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
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
	if h.s.node == nil { // standalone: the vhost's store has it
		if st := h.s.vhostByName(vh); st != nil {
			return st.v.DropQuorumLocal(name)
		}
		return nil
	}
	ops := []cluster.Op{{Key: metaKey(persist.DefQueue, vhost.DefName(vh, name)), Delete: true}}
	for _, o := range h.s.node.Keys(metaKey(persist.DefBinding, vhost.DefName(vh))) {
		if vhost.IsBindingTo([]byte(o.Key[5:]), vh, name) {
			ops = append(ops, cluster.Op{Key: o.Key, Delete: true})
		}
	}
	return h.s.node.Write(ops)
}

// closeLocal closes a standalone node's quorum queues (their groups), if
// it has them.
func (s *Server) closeLocal() {
	if s.local == nil {
		return
	}
	s.rep.Close()
	if err := s.local.Close(); err != nil {
		s.log.Error("closing the quorum queues", zap.Error(err))
	}
}
