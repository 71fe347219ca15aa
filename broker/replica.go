package broker

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
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

// adoptLocal moves the quorum queues of this node's standalone life into
// the cluster (vhost.AdoptLocalQuorum), trying again every second while
// the metadata store has no leader, until done or Shutdown.
func (s *Server) adoptLocal() {
	for {
		left := 0
		for _, st := range s.allVHosts() {
			n, err := st.v.AdoptLocalQuorum(s.nodeName())
			if err != nil {
				s.log.Warn("quorum queues of the standalone life not adopted yet", zap.String("vhost", st.v.Name()), zap.Int("queues", n), zap.Error(err))
			}
			left += n
		}
		if left == 0 {
			return
		}
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// ErrNoSuchNode is a membership change for a node the cluster lacks.
var ErrNoSuchNode = errors.New("no such node")

// knownNode reports whether the cluster (or, standalone, this node) has
// a node of that name.
func (s *Server) knownNode(name string) bool {
	if s.node == nil {
		return name == s.nodeName()
	}
	_, ok := s.node.Addrs()[name]
	return ok
}

// QuorumGrow adds node as a member of the quorum queues this node leads
// that match (replica.Manager.Grow).
func (s *Server) QuorumGrow(node, vhostPattern, queuePattern, strategy string) ([]replica.MemberResult, error) {
	if s.rep == nil || !s.knownNode(node) {
		return nil, ErrNoSuchNode
	}
	return s.rep.Grow(node, vhostPattern, queuePattern, strategy)
}

// QuorumShrink removes node from the quorum queues this node leads.
func (s *Server) QuorumShrink(node string) ([]replica.MemberResult, error) {
	if s.rep == nil || !s.knownNode(node) {
		return nil, ErrNoSuchNode
	}
	return s.rep.Shrink(node), nil
}
