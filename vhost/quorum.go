package vhost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// Quorum queues (x-queue-type quorum). In a cluster their definitions,
// and the bindings to them, are cluster-wide: a declare is proposed to
// the metadata store (Replicator) and every node applies it
// (ApplyQuorumQueue), making its own handle of the queue, whose state is
// the queue's Raft group's (Quorum.Start). Deleting one is the Replica's
// to propose; every node then drops its handle. On a standalone node
// (a Quorum but no Replicator) the definition is the vhost's store's, as
// a classic queue's, and the group has one member (cluster.StartLocal):
// the same state machine, so the same behaviour (local.go here).

// Quorum is the broker's cluster, as the registry needs it.
type Quorum interface {
	// NewGroup picks a new queue's group: an id and its members, size
	// of them (0: the default; -1: every node), this node first (it
	// makes the group, and leads it first).
	NewGroup(size int) (id string, voters []string)
	// Start makes this node's handle of a quorum queue, from cfg.
	Start(cfg queue.Config, voters []string, id string) (*queue.Queue, error)
	// Stop stops this node's handle of a deleted quorum queue (or of a
	// classic queue homed elsewhere) and drops its state here.
	Stop(q *queue.Queue)
	// Self is this node's name.
	Self() string
	// Proxy makes this node's handle of a classic queue homed on the
	// node home (classic.go).
	Proxy(cfg queue.Config, home string) *queue.Queue
}

// SetQuorum gives the vhost its cluster's quorum queues.
func (v *VHost) SetQuorum(qm Quorum) {
	v.mu.Lock()
	v.quorum = qm
	v.mu.Unlock()
}

// IsQuorum reports whether a declare's arguments ask for a quorum queue.
func IsQuorum(args amqp.Table) bool {
	s, _ := args["x-queue-type"].(string)
	return s == "quorum"
}

// declareQuorum declares a quorum queue (d is not passive). Nothing is
// held while the definition is proposed: applying it takes the vhost's
// locks on this node too.
func (v *VHost) declareQuorum(d QueueDecl, r Replicator, defaults queue.Config) (*queue.Queue, error) {
	v.mu.RLock()
	q, qm := v.queues[d.Name], v.quorum
	v.mu.RUnlock()
	if q != nil {
		// An existing queue is checked for equivalence first (RabbitMQ
		// 3.10.8: a non-durable redeclare of a quorum queue gets
		// "inequivalent arg 'durable'", not "invalid property").
		return q, v.queueEquivalent(q, d)
	}
	if qm == nil {
		return nil, invalidArg("x-queue-type", d.Name, v.name, "\"unsupported queue type 'quorum'\"")
	}
	if err := v.checkQuorumDecl(d); err != nil {
		return nil, err
	}
	size := 0
	if n, ok := amqp.Int(d.Args["x-quorum-initial-group-size"]); ok {
		size = int(n) // checkQuorumArgs refused 0 and less
	}
	if err := allowDeadLetter(d); err != nil {
		return nil, err
	}
	id, voters := qm.NewGroup(size)
	def := amqp.Table{"durable": true, "auto_delete": false, "arguments": orEmpty(d.Args),
		"voters": strings.Join(voters, ","), "id": id}
	if r == nil {
		return v.declareQuorumLocal(d, encodeDef(def), defaults)
	}
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

func withoutType(args amqp.Table) amqp.Table {
	out := make(amqp.Table, len(args))
	for k, a := range args {
		if k != "x-queue-type" {
			out[k] = a
		}
	}
	return out
}

// ApplyQuorumQueue applies a committed quorum queue definition on this
// node (the broker calls it for each, in log order, on every node): the
// queue made here, with a declare's checks against one that exists (so
// that racing inequivalent declares fail the same everywhere), or
// deleted with its bindings.
func (v *VHost) ApplyQuorumQueue(name string, val []byte, del bool, defaults queue.Config) error {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	_, err := v.applyQuorumLocked(name, val, del, defaults)
	return err
}

// applyQuorumLocked is ApplyQuorumQueue with defMu held; it returns the
// queue made.
func (v *VHost) applyQuorumLocked(name string, val []byte, del bool, defaults queue.Config) (*queue.Queue, error) {
	v.mu.Lock()
	q, qm := v.queues[name], v.quorum
	if del {
		if q != nil && q.Replicated() {
			v.removeQueueLocked(q, &persist.Batch{})
		}
		v.mu.Unlock()
		if q != nil && q.Replicated() && qm != nil {
			qm.Stop(q)
		}
		return nil, nil
	}
	t, err := amqp.DecodeTable(val)
	if err != nil {
		v.mu.Unlock()
		return nil, fmt.Errorf("quorum queue %q: %w", name, err)
	}
	args, _ := t["arguments"].(amqp.Table)
	d := QueueDecl{Name: name, Durable: true, Args: args}
	if q != nil {
		v.mu.Unlock()
		return q, v.queueEquivalent(q, d)
	}
	if _, ok := qm.(StreamStarter); qm == nil || (IsStream(args) && !ok) {
		v.mu.Unlock()
		return nil, fmt.Errorf("quorum queue or stream %q: this node has none", name)
	}
	qa, err := validateQueueArgs(name, v.name, withoutType(args))
	if err != nil {
		v.mu.Unlock()
		return nil, err
	}
	cfg := v.queueConfig(defaults, d, qa)
	cfg.Store = nil
	cfg.NoDedup = true // its replicated state deduplicates (replica/quorum_dedup.go)
	v.mu.Unlock()
	// Started without the lock: the handle's group starts (and may
	// apply its log at once, delivering under its own locks).
	q, err = startReplicated(qm, cfg, strings.Split(str(t["voters"]), ","), str(t["id"]))
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		q.Stop() // the node closes its group
		return nil, nil
	}
	v.queues[name] = q
	v.totals.QueuesCreated.Add(1)
	pols, ops := v.policies, v.opPolicies
	v.mu.Unlock()
	if len(pols) > 0 || len(ops) > 0 {
		// The policies that match it apply from the start (its
		// delivery limit as a Config entry: quorum_limits.go).
		_, pol, applied := v.policyFor(name, args, pols, ops)
		v.mu.Lock()
		if (applied.Policy != "" || applied.OperatorPolicy != "") && v.queues[name] == q {
			v.applied[q] = applied
		}
		v.mu.Unlock()
		_ = q.SetPolicy(pol) // a Replica's: never fails
	}
	return q, nil
}

// replicatedBinding reports whether a binding is cluster-wide: to a
// quorum queue. v.mu held.
func (v *VHost) replicatedBinding(d exchange.Dest) bool {
	if d.Exchange {
		return false
	}
	q := v.queues[d.Name]
	return q != nil && (q.Replicated() || v.homes[q])
}

// ApplyBinding applies a committed binding to a quorum queue on this
// node.
func (v *VHost) ApplyBinding(name, val []byte, del bool) error {
	parts, err := SplitDefName(name)
	if err != nil || len(parts) != 6 {
		return fmt.Errorf("binding definition: corrupt name")
	}
	var args amqp.Table
	key := parts[4]
	if len(val) > 0 {
		// A delete carries no value: a binding named by a hash is
		// found by its name (bindHere unbinds what bears it).
		t, err := amqp.DecodeTable(val)
		if err != nil {
			return fmt.Errorf("binding definition: %w", err)
		}
		args, _ = t["arguments"].(amqp.Table)
		if len(args) == 0 {
			args = nil
		}
		key = bindingKey(parts, t)
	}
	err = v.bindHere(0, parts[3], parts[2] == "x", parts[1], key, args, !del, true /* replicated */)
	var ae *amqp.Error
	if del && errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return nil // its queue or exchange went first (a delete takes its bindings)
	}
	return err
}

// IsBindingTo reports whether a binding definition's name binds to the
// queue name in vhost vh.
func IsBindingTo(defName []byte, vh, queueName string) bool {
	parts, err := SplitDefName(defName)
	return err == nil && len(parts) == 6 && parts[0] == vh && parts[2] == "q" && parts[3] == queueName
}
