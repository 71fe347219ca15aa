package vhost

import (
	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// A standalone node's quorum queues: their definitions are the vhost's
// store's, under the classic queues' kind (the arguments name the type),
// with the group's id and member; recovery starts them (startQuorum),
// a delete drops them with their bindings (DropQuorumLocal).

// declareQuorumLocal stores a new quorum queue's definition, then makes
// the queue (d is checked; val is the definition). defMu is held from the
// check to the start, so that two declares of one name make one group.
func (v *VHost) declareQuorumLocal(d QueueDecl, val []byte, defaults queue.Config) (*queue.Queue, error) {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	v.mu.RLock()
	q := v.queues[d.Name]
	v.mu.RUnlock()
	if q != nil {
		return q, v.queueEquivalent(q, d)
	}
	key := DefName(v.name, d.Name)
	if err := v.commitDefs(func(b *persist.Batch) { b.PutDef(persist.DefQueue, key, val) })(); err != nil {
		return nil, err
	}
	q, err := v.applyQuorumLocked(d.Name, val, false, defaults)
	if err == nil && q == nil {
		err = amqp.Errorf(amqp.InternalError, "vhost '%s' is closing", v.name)
	}
	if err != nil {
		// Not started, so not declared: nor after a restart.
		if derr := v.commitDefs(func(b *persist.Batch) { b.DeleteDef(persist.DefQueue, key) })(); derr != nil {
			v.log.Error("quorum queue definition left after a failed declare", zap.String("queue", d.Name), zap.Error(derr))
		}
		return nil, err
	}
	return q, nil
}

// DropQuorumLocal deletes a standalone node's quorum queue: its
// definition and the bindings to it from the store (answered once
// stored), its handle and its group's state.
func (v *VHost) DropQuorumLocal(name string) error {
	v.defMu.Lock()
	v.mu.Lock()
	q, qm := v.queues[name], v.quorum
	if q == nil || !q.Replicated() {
		v.mu.Unlock()
		v.defMu.Unlock()
		return nil
	}
	dc := &persist.Batch{}
	v.removeQueueLocked(q, dc)
	v.mu.Unlock()
	wait := v.commitDefs(func(b *persist.Batch) { *b = *dc })
	v.defMu.Unlock()
	err := wait()
	if qm != nil {
		qm.Stop(q)
	}
	return err
}

// startQuorum starts a recovered quorum queue (its stored definition).
func (v *VHost) startQuorum(name string, val []byte, defaults queue.Config) {
	if err := v.ApplyQuorumQueue(name, val, false, defaults); err != nil {
		v.log.Error("quorum queue not started", zap.String("queue", name), zap.Error(err))
	}
}

// AdoptLocalQuorum moves the quorum queues of this node's standalone life
// (found in its store at recovery) into the cluster's metadata store,
// with the bindings to them, as the queues of one member on node self;
// every node then applies them (ApplyQuorumQueue), this one resuming
// their groups (cluster's adoptLocal). They leave this node's store once
// the metadata store has them. It reports how many are still to adopt
// (an error: the metadata store refused or is unreachable; call again).
func (v *VHost) AdoptLocalQuorum(self string) (int, error) {
	v.defMu.Lock()
	todo := v.adopt
	v.defMu.Unlock()
	r := v.replicator()
	if len(todo) == 0 || r == nil {
		return 0, nil
	}
	var binds []struct{ name, val []byte }
	err := v.store.Definitions(func(kind byte, name, val []byte) error {
		if kind != persist.DefBinding {
			return nil
		}
		for _, d := range todo {
			if IsBindingTo(name, v.name, d.name) {
				binds = append(binds, struct{ name, val []byte }{append([]byte(nil), name...), append([]byte(nil), val...)})
			}
		}
		return nil
	})
	if err != nil {
		return len(todo), err
	}
	for i, d := range todo {
		t, err := amqp.DecodeTable(d.val)
		if err != nil {
			return len(todo) - i, err
		}
		t["voters"] = self
		key := DefName(v.name, d.name)
		if err := r.Replicate(persist.DefQueue, key, encodeDef(t), false); err != nil {
			return len(todo) - i, err
		}
		b := &persist.Batch{}
		b.DeleteDef(persist.DefQueue, key)
		for _, bd := range binds {
			if !IsBindingTo(bd.name, v.name, d.name) {
				continue
			}
			if err := r.Replicate(persist.DefBinding, bd.name, bd.val, false); err != nil {
				v.log.Warn("binding to an adopted quorum queue not replicated", zap.String("queue", d.name), zap.Error(err))
				continue
			}
			b.DeleteDef(persist.DefBinding, bd.name)
		}
		if err := v.store.CommitSync(b); err != nil {
			return len(todo) - i, err
		}
		v.defMu.Lock()
		v.adopt = v.adopt[1:]
		v.defMu.Unlock()
		v.log.Info("quorum queue adopted by the cluster", zap.String("queue", d.name))
	}
	return 0, nil
}
