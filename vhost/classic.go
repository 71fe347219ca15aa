package vhost

import (
	"fmt"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// Classic queues in a cluster (RabbitMQ 4's model): a classic queue lives
// on one node, its home, where its messages are; its definition is in
// the metadata store, so every node knows it. A declare is proposed there
// (home: the declaring node) and applied on every node in log order
// (ApplyQueue): the home makes the queue, the others a handle whose
// Replica forwards to the home (Quorum.Proxy), so that a client on any
// node publishes to it, consumes from it and manages it. Bindings to it
// are cluster-wide too. When the home deletes the queue (a client's
// delete, auto-delete, x-expires), it proposes the definition's deletion
// and every node drops its handle.
//
// Exclusive queues stay on their connection's node, out of the store:
// only that connection may use them.

// shared reports whether a declare makes a cluster-wide classic queue.
func (v *VHost) sharedDecl(d QueueDecl) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.repl != nil && v.quorum != nil && !d.Exclusive && !IsQuorum(d.Args)
}

// declareShared declares a new cluster-wide classic queue, homed here,
// through the metadata store; one that exists is declared as any other.
func (v *VHost) declareShared(d QueueDecl, r Replicator, defaults queue.Config) (*queue.Queue, error) {
	v.mu.RLock()
	q, qm := v.queues[d.Name], v.quorum
	v.mu.RUnlock()
	if q == nil && v.synced() {
		v.mu.RLock()
		q = v.queues[d.Name]
		v.mu.RUnlock()
	}
	if q != nil {
		return v.declareQueue(d, defaults, false)
	}
	// A declare's checks, made here: applying the definition has no
	// grant to check against.
	if n := v.maxQueues.Load(); n >= 0 {
		v.mu.RLock()
		full := int64(len(v.queues)) >= n
		v.mu.RUnlock()
		if full {
			return nil, amqp.Errorf(amqp.PreconditionFailed, "cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", d.Name, v.name, n)
		}
	}
	if _, err := validateQueueArgs(d.Name, v.name, d.Args); err != nil {
		return nil, err
	}
	if err := allowDeadLetter(d); err != nil {
		return nil, err
	}
	def := amqp.Table{"type": "classic", "node": qm.Self(), "durable": d.Durable, "auto_delete": d.AutoDelete,
		"arguments": orEmpty(d.Args)}
	if err := r.Replicate(persist.DefQueue, DefName(v.name, d.Name), encodeDef(def), false); err != nil {
		return nil, err
	}
	v.mu.RLock()
	q = v.queues[d.Name]
	v.mu.RUnlock()
	if q == nil { // deleted already, by someone quicker
		return nil, v.noQueue(d.Name)
	}
	return q, nil
}

// ApplyQueue applies a committed queue definition on this node, in log
// order: a quorum queue's, or a cluster-wide classic queue's (made here
// if this node is its home, else a handle of it), or the deletion of
// either.
func (v *VHost) ApplyQueue(name string, val []byte, del bool) error {
	if del {
		v.mu.RLock()
		q := v.queues[name]
		home := q != nil && v.homes[q]
		v.mu.RUnlock()
		if home {
			v.mu.Lock()
			delete(v.homes, q) // deleted by the log: not proposed again
			v.mu.Unlock()
			_, _ = q.Delete(false, false)
			v.removeQueue(q)
			return nil
		}
		return v.ApplyQuorumQueue(name, nil, true, queue.Config{})
	}
	t, err := amqp.DecodeTable(val)
	if err != nil {
		return fmt.Errorf("queue %q: %w", name, err)
	}
	if str(t["type"]) != "classic" {
		return v.ApplyQuorumQueue(name, val, false, queue.Config{})
	}
	args, _ := t["arguments"].(amqp.Table)
	if len(args) == 0 {
		args = nil
	}
	durable, _ := t["durable"].(bool)
	autoDelete, _ := t["auto_delete"].(bool)
	d := QueueDecl{Name: name, Durable: durable, AutoDelete: autoDelete, Args: args, Reserved: true}
	v.mu.RLock()
	qm := v.quorum
	q := v.queues[name]
	v.mu.RUnlock()
	if q != nil {
		if qm != nil && str(t["node"]) == qm.Self() && !q.Replicated() {
			v.mu.Lock() // recovered from this node's store at start
			if v.queues[name] == q {
				v.homes[q] = true
			}
			v.mu.Unlock()
		}
		return v.queueEquivalent(q, d)
	}
	if qm == nil {
		return fmt.Errorf("classic queue %q: this node has no cluster", name)
	}
	if home := str(t["node"]); home != qm.Self() {
		qa, err := validateQueueArgs(name, v.name, args)
		if err != nil {
			return err
		}
		v.defMu.Lock()
		defer v.defMu.Unlock()
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.queues[name] != nil || v.closed {
			return nil
		}
		cfg := v.queueConfig(queue.Config{}, d, qa)
		cfg.Store = nil
		cfg.NoDedup = true // the queue's home deduplicates
		v.queues[name] = qm.Proxy(cfg, home)
		v.totals.QueuesCreated.Add(1)
		return nil
	}
	q, err = v.declareQueue(d, queue.Config{}, true /* replicated */)
	if err != nil {
		return err
	}
	v.mu.Lock()
	if v.queues[name] == q {
		v.homes[q] = true
	}
	v.mu.Unlock()
	return nil
}

// dropHome, after a queue homed here left the registry, proposes the
// deletion of its definition, so that every node drops its handle.
func (v *VHost) dropHome(q *queue.Queue) {
	v.mu.Lock()
	home, r := v.homes[q], v.repl
	delete(v.homes, q)
	v.mu.Unlock()
	if home && r != nil {
		if err := r.Replicate(persist.DefQueue, DefName(v.name, q.Name()), nil, true); err != nil {
			v.log.Warn("a deleted classic queue's definition stays in the cluster")
		}
	}
}

// Home reports whether q is a cluster-wide classic queue homed here.
func (v *VHost) Home(q *queue.Queue) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.homes[q]
}
