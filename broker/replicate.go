package broker

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/vhost"
)

// Definitions a cluster replicates through its metadata store (issue
// [12], in progress): vhosts (with their limits), users, permissions,
// topic permissions, policies and operator policies, so far.
// A write goes through Raft (commitDefs) and every node, the writer too,
// applies it when it is committed (applyReplicated): to its store, so a
// restart finds it, and to its registry, so its connections see it. The
// other definitions (exchanges, queues, bindings) are still each node's
// own.

func replicatedKind(kind byte) bool {
	return kind == defUser || kind == defPerm || kind == defTopicPerm || kind == defVHost || kind == defPolicy || kind == defOpPolicy || kind == defParam
}

// metaKey is a definition's key in the metadata store.
func metaKey(kind byte, name []byte) string { return "def:" + string(kind) + string(name) }

// commitDefs commits a batch of definitions: in a cluster, the
// replicated ones through the metadata store (they are applied here, as
// everywhere, before it returns), the rest locally; else all locally.
// local runs after a local commit only: in a cluster the registry learns
// of replicated changes from applyReplicated, in log order.
func (s *Server) commitDefs(b *persist.Batch, local func()) error {
	if s.node == nil {
		if err := s.store.CommitSync(b); err != nil {
			return err
		}
		if local != nil {
			local()
		}
		return nil
	}
	var ops []cluster.Op
	rest := &persist.Batch{}
	if other := b.Defs(func(kind byte, name, val []byte, del bool) {
		if !replicatedKind(kind) {
			if del {
				rest.DeleteDef(kind, name)
			} else {
				rest.PutDef(kind, name, val)
			}
			return
		}
		ops = append(ops, cluster.Op{Key: metaKey(kind, name), Val: val, Delete: del})
	}); other {
		return fmt.Errorf("broker: a definitions batch with other writes cannot be replicated")
	}
	if rest.Len() > 0 {
		if err := s.store.CommitSync(rest); err != nil {
			return err
		}
	}
	if len(ops) == 0 {
		if local != nil {
			local()
		}
		return nil
	}
	return s.node.Write(ops)
}

// applyReplicated applies committed metadata changes on this node (raft's
// FSM goroutine calls it, in log order). An exchange declare that its
// checks refuse (inequivalent to one committed before it) is refused the
// same on every node, and the refusal is the writer's answer.
func (s *Server) applyReplicated(ops []cluster.Op) error {
	b := &persist.Batch{}
	var refused error
	for _, o := range ops {
		if len(o.Key) < 5 || o.Key[:4] != "def:" {
			continue
		}
		kind, name := o.Key[4], []byte(o.Key[5:])
		if kind == persist.DefExchange || kind == persist.DefQueue || kind == persist.DefBinding {
			// The vhost keeps these (a quorum queue and its bindings
			// only in the metadata store).
			if err := s.applyVHostDef(kind, name, o.Val, o.Delete); err != nil && refused == nil {
				refused = err
			}
			continue
		}
		if o.Delete {
			b.DeleteDef(kind, name)
		} else {
			b.PutDef(kind, name, o.Val)
		}
		if err := s.applyDef(kind, name, o.Val, o.Delete); err != nil {
			s.log.Error("replicated definition not applied", zap.String("key", o.Key), zap.Error(err))
		}
	}
	if b.Len() > 0 {
		if err := s.store.CommitSync(b); err != nil {
			s.log.Error("replicated definitions not stored", zap.Error(err))
		}
	}
	return refused
}

func (s *Server) applyVHostDef(kind byte, name, val []byte, del bool) error {
	parts, err := vhost.SplitDefName(name)
	if err != nil || len(parts) < 2 {
		return nil
	}
	st := s.vhostByName(parts[0])
	if st == nil {
		return nil // its vhost is gone
	}
	switch kind {
	case persist.DefExchange:
		err = st.v.ApplyExchange(parts[1], val, del)
	case persist.DefQueue:
		err = st.v.ApplyQueue(parts[1], val, del)
	default:
		err = st.v.ApplyBinding(name, val, del)
	}
	var e *amqp.Error
	if errors.As(err, &e) {
		return &cluster.ApplyError{Code: int(e.Code), Text: e.Text}
	}
	if err != nil {
		s.log.Error("replicated exchange not applied", zap.String("vhost", parts[0]), zap.String("exchange", parts[1]), zap.Error(err))
	}
	return nil
}

// replicator is the vhosts' way into the metadata store (vhost.Replicator).
type replicator struct{ s *Server }

// Sync is a barrier: it returns once this node has applied everything
// committed before it (an empty write through the leader).
func (r replicator) Sync() error { return r.s.node.Write(nil) }

func (r replicator) Replicate(kind byte, name, val []byte, del bool) error {
	err := r.s.node.Write([]cluster.Op{{Key: metaKey(kind, name), Val: val, Delete: del}})
	var ae *cluster.ApplyError
	if errors.As(err, &ae) {
		return &amqp.Error{Code: uint16(ae.Code), Text: ae.Text}
	}
	if err != nil {
		// No leader answered in time, or the node is shutting down:
		// said, not a bare INTERNAL_ERROR.
		return amqp.Errorf(amqp.InternalError, "the cluster's metadata store did not take the change: %v", err)
	}
	return nil
}

// applyDef applies one replicated definition to the registry.
func (s *Server) applyDef(kind byte, name, val []byte, del bool) error {
	parts, err := vhost.SplitDefName(name)
	if err != nil {
		return err
	}
	switch {
	case kind == defVHost && len(parts) == 1:
		if del {
			_, err := s.deleteVHostLocal(parts[0])
			return err
		}
		var r VHostRecord
		if err := json.Unmarshal(val, &r); err != nil {
			return err
		}
		_, err := s.putVHostLocal(parts[0], r)
		return err
	case (kind == defPolicy || kind == defOpPolicy) && len(parts) == 2:
		st := s.vhostByName(parts[0])
		if st == nil {
			return nil // its vhost is gone, and its policies with it
		}
		var p *vhost.PolicyDef
		if !del {
			var r policyRec
			if err := json.Unmarshal(val, &r); err != nil {
				return err
			}
			var err error
			if p, err = vhost.NewPolicyDef(parts[1], r.Pattern, r.ApplyTo, r.Priority, r.Definition, kind == defOpPolicy); err != nil {
				return err
			}
		}
		_, err := s.putPolicyLocal(st, kind == defOpPolicy, parts[1], p)
		return err
	case kind == defParam:
		s.applyParameterDef(parts, val, del)
	case kind == defUser && len(parts) == 1:
		if del {
			s.reg.DeleteUser(parts[0])
			s.closeConnsWhere(func(c *conn) bool { return c.user == parts[0] },
				amqp.Errorf(amqp.ConnectionForced, "user '%s' is deleted", parts[0]), "user deleted")
			return nil
		}
		var r userRec
		if err := json.Unmarshal(val, &r); err != nil {
			return err
		}
		h, err := auth.DecodeHash(r.Algo, r.Hash)
		if err != nil {
			return err
		}
		s.reg.PutUser(&auth.User{Name: parts[0], Hash: h, Algo: r.Algo, Tags: r.Tags, Limits: r.Limits})
	case kind == defPerm && len(parts) == 2:
		if del {
			s.reg.ClearPermission(parts[0], parts[1])
			return nil
		}
		var r permRec
		if err := json.Unmarshal(val, &r); err != nil {
			return err
		}
		p, err := auth.NewPermission(r.Configure, r.Write, r.Read)
		if err != nil {
			return err
		}
		s.reg.SetPermission(parts[0], parts[1], p)
	case kind == defTopicPerm && len(parts) == 3:
		if del {
			s.reg.ClearTopicPermission(parts[0], parts[1], parts[2])
			return nil
		}
		var r topicRec
		if err := json.Unmarshal(val, &r); err != nil {
			return err
		}
		tp, err := auth.NewTopicPermission(parts[2], r.Write, r.Read, parts[1], parts[0])
		if err != nil {
			return err
		}
		s.reg.SetTopicPermission(parts[0], parts[1], tp)
	}
	return nil
}
