package vhost

import (
	"errors"
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// QueueDecl is a queue.declare.
type QueueDecl struct {
	Name                                    string
	Passive, Durable, Exclusive, AutoDelete bool
	Args                                    amqp.Table
	Owner                                   uint64 // declaring connection
	// Reserved allows a name in amq.* (definitions import: RabbitMQ's
	// exports carry server-named queues, and its import declares them).
	Reserved bool
	// Grant, if set, is checked where RabbitMQ checks: configure on the
	// queue (server-named ones by their new name); for a new one with a
	// dead-letter exchange, read on it and write on the exchange.
	Grant *auth.Grant
}

// DeclareQueue declares (or checks, when passive) a queue and returns it
// with its ready message and consumer counts.
func (v *VHost) DeclareQueue(d QueueDecl, defaults queue.Config) (q *queue.Queue, messages, consumers int, err error) {
	if err := checkNameLen("queue", d.Name); err != nil {
		return nil, 0, 0, err
	}
	if strings.HasPrefix(d.Name, "amq.") && !d.Passive && !d.Reserved {
		return nil, 0, 0, amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	d = v.withDefaultType(d)
	if d.Name == "" && !d.Passive {
		if IsQuorum(d.Args) {
			// RabbitMQ 3.10.8 names the type by its module (checked).
			return nil, 0, 0, amqp.Errorf(amqp.PreconditionFailed, "Cannot declare a server-named queue for type rabbit_quorum_queue")
		}
		if IsStream(d.Args) {
			return nil, 0, 0, amqp.Errorf(amqp.PreconditionFailed, "Cannot declare a server-named queue for type rabbit_stream_queue")
		}
		d.Name = GenerateName("amq.gen-")
	}
	if !d.Passive {
		if err := allow(d.Grant, auth.Configure, "queue", d.Name); err != nil {
			return nil, 0, 0, err
		}
	}
	if !d.Passive {
		v.totals.QueuesDeclared.Add(1)
	}
	if d.Passive {
		v.mu.RLock()
		missing := v.queues[d.Name] == nil
		v.mu.RUnlock()
		if missing {
			v.synced()
		}
	}
	if r := v.replicator(); !d.Passive && IsQuorum(d.Args) {
		q, err = v.declareQuorum(d, r, defaults) // r nil: a standalone node's (quorumlocal.go)
	} else if !d.Passive && IsStream(d.Args) {
		q, err = v.declareStream(d, r, defaults) // stream.go
	} else if r != nil && !d.Passive && v.sharedDecl(d) {
		q, err = v.declareShared(d, r, defaults)
	} else {
		q, err = v.declareQueue(d, defaults, false)
	}
	if err != nil {
		return nil, 0, 0, err
	}
	messages, consumers, err = q.Stats()
	if err != nil { // deleted under us (auto-delete): as if it never was
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil, 0, 0, ae // its home node is down
		}
		return nil, 0, 0, v.noQueue(d.Name)
	}
	return q, messages, consumers, nil
}

// declareQueue declares a queue in this node's registry, answered once
// stored (a replicated one, applied from the metadata store's log, is
// not waited for: see bindHere).
func (v *VHost) declareQueue(d QueueDecl, defaults queue.Config, replicated bool) (*queue.Queue, error) {
	v.defMu.Lock()
	v.mu.Lock()
	q, created, err := v.declareQueueLocked(d, defaults)
	v.mu.Unlock()
	if err != nil || !created || !q.Durable() {
		v.defMu.Unlock()
		return q, err
	}
	wait := v.commitDefs(func(b *persist.Batch) { v.putQueueDef(b, q.Config()) })
	v.defMu.Unlock()
	if replicated {
		return q, nil
	}
	if err := wait(); err != nil {
		// Not stored, so not declared: it would be gone after a restart,
		// with the messages confirmed into it.
		_, _ = q.Delete(false, false)
		v.removeQueue(q)
		return nil, err
	}
	return q, nil
}

func (v *VHost) declareQueueLocked(d QueueDecl, defaults queue.Config) (*queue.Queue, bool, error) {
	q := v.queues[d.Name]
	if q != nil {
		// Exclusivity is checked before equivalence (errata §8).
		if c := q.Config(); c.Exclusive && c.Owner != d.Owner {
			return nil, false, v.locked(d.Name)
		}
		q.Touch() // a redeclare counts as use (x-expires)
		if d.Passive {
			return q, false, nil
		}
		return q, false, v.queueEquivalent(q, d)
	}
	if d.Passive || v.closed {
		return nil, false, v.noQueue(d.Name)
	}
	if n := v.maxQueues.Load(); n >= 0 && int64(len(v.queues)) >= n {
		return nil, false, amqp.Errorf(amqp.PreconditionFailed, "cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", d.Name, v.name, n)
	}
	args, err := validateQueueArgs(d.Name, v.name, d.Args)
	if err != nil {
		return nil, false, err
	}
	if err := allowDeadLetter(d); err != nil {
		return nil, false, err
	}
	var applied AppliedPolicy
	if len(v.policies) > 0 || len(v.opPolicies) > 0 {
		args, _, applied = v.policyFor(d.Name, d.Args, v.policies, v.opPolicies) // queueConfig builds the policy from args
	}
	cfg := v.queueConfig(defaults, d, args)
	if cfg.Store != nil {
		cfg.ID = v.nextQueueID.Add(1)
	}
	q = queue.New(cfg)
	v.queues[d.Name] = q
	v.totals.QueuesCreated.Add(1)
	if applied.Policy != "" || applied.OperatorPolicy != "" {
		v.applied[q] = applied
	}
	return q, true, nil
}

// queueConfig builds a queue's configuration from its declaration.
func (v *VHost) queueConfig(defaults queue.Config, d QueueDecl, args queueArgs) queue.Config {
	cfg := defaults
	cfg.Name, cfg.VHost = d.Name, v.name
	cfg.Durable = d.Durable && !d.Exclusive // durable+exclusive is transient (errata §30)
	cfg.Exclusive, cfg.AutoDelete, cfg.Owner = d.Exclusive, d.AutoDelete, d.Owner
	cfg.Args = d.Args
	cfg.ConsumerTimeout = args.consumerTimeout
	cfg.Memory = v.memory
	cfg.Totals = v.totals
	cfg.Logger = v.log
	cfg.OnEmptyOfConsumers = v.forgetQueue
	cfg.Window, cfg.WindowBytes, cfg.Pressure = v.window, v.windowB, v.pressure
	cfg.NoPace = v.noPace
	switch {
	case cfg.Durable && v.store != nil:
		cfg.Store = storeAdapter{v.store}
	case v.spill != nil:
		cfg.Store = spillAdapter{v.spill}
	}
	pol := args.policy
	pol.ConsumerTimeout = args.consumerTimeout
	if args.dlx != nil {
		v.setDeadLetter(&pol, *args.dlx, args.dlrk)
	}
	pol.OnExpire = v.forgetQueue
	cfg.Policy = &pol
	return cfg
}

// forgetQueue removes an auto-deleted queue (called on its goroutine).
func (v *VHost) forgetQueue(q *queue.Queue) {
	v.removeQueue(q)
	go v.dropHome(q) // not on the queue's goroutine: a write through Raft
}

// removeQueue takes a deleted queue out of the registry and the store,
// and returns a wait for the store (ignored where the queue deletes
// itself: its goroutine, holding its lock, must not wait for a write).
func (v *VHost) removeQueue(q *queue.Queue) (wait func() error) {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	v.removeQueueLocked(q, dc)
	v.mu.Unlock()
	return v.commitDefs(func(b *persist.Batch) { *b = *dc })
}

func (v *VHost) removeQueueLocked(q *queue.Queue, dc *persist.Batch) {
	if v.queues[q.Name()] != q {
		return
	}
	delete(v.queues, q.Name())
	delete(v.applied, q)
	v.totals.QueuesDeleted.Add(1)
	if v.storedHere(q) {
		dc.DeleteDef(persist.DefQueue, DefName(v.name, q.Name()))
		for _, id := range q.StoreIDs() {
			dc.DropQueue(id)
		}
	}
	v.removeBindingsTo(exchange.Dest{Name: q.Name()}, dc)
}

// DeleteQueue deletes a queue and returns how many messages it held. A
// missing queue is fine (idempotent).
func (v *VHost) DeleteQueue(owner uint64, name string, ifUnused, ifEmpty bool) (int, error) {
	q, err := v.Queue(owner, name)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, nil
		}
		return 0, err
	}
	n, err := q.Delete(ifUnused, ifEmpty)
	switch {
	case errors.Is(err, queue.ErrInUse):
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' in use", name, v.name)
	case errors.Is(err, queue.ErrNotEmpty):
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' not empty", name, v.name)
	case errors.Is(err, queue.ErrDeleted):
		return 0, nil
	case err != nil: // the home's or the log's refusal, in its words
		return 0, err
	}
	wait := v.removeQueue(q)
	v.dropHome(q)
	return n, wait()
}

// ConnectionClosed deletes the exclusive queues the connection owned.
func (v *VHost) ConnectionClosed(owner uint64) {
	v.mu.RLock()
	var mine []*queue.Queue
	for _, q := range v.queues {
		if c := q.Config(); c.Exclusive && c.Owner == owner {
			mine = append(mine, q)
		}
	}
	v.mu.RUnlock()
	for _, q := range mine {
		_, _ = q.Delete(false, false)
		v.removeQueue(q)
	}
}

// allowDeadLetter makes a new queue's checks for its dead-letter exchange,
// where RabbitMQ makes them: read on the queue, write on the exchange.
func allowDeadLetter(d QueueDecl) error {
	dlx, ok := d.Args["x-dead-letter-exchange"].(string)
	if !ok {
		return nil
	}
	if err := allow(d.Grant, auth.Read, "queue", d.Name); err != nil {
		return err
	}
	return allow(d.Grant, auth.Write, "exchange", dlx)
}

// MaxNameLen is the longest queue or exchange name: AMQP's short string
// (§4.2.5.3), which RabbitMQ's HTTP API enforces for queues too. Names
// reach no further than this over HTTP or a definitions import either,
// so that a name is never more over those than over AMQP (and never
// makes a store key of its own length).
const MaxNameLen = 255

// checkNameLen refuses a name over MaxNameLen, in RabbitMQ's words (its
// HTTP API, for PUT /api/queues/%2F/<256 bytes>: 400, {"error":
// "bad_request","reason":"queue should be less than 255 bytes, actually
// was 256\n"}).
func checkNameLen(kind, name string) error {
	if len(name) > MaxNameLen {
		return amqp.Errorf(amqp.PreconditionFailed, "%s should be less than %d bytes, actually was %d\n", kind, MaxNameLen, len(name))
	}
	return nil
}
