package vhost

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// recoveryProgressEvery is how many queues recovery rebuilds between two
// progress lines in the log (a variable for tests).
var recoveryProgressEvery = 1000

// Recover restores durable exchanges, queues (with their messages) and
// bindings from the store. It runs before any connection is accepted.
//
// It reads every stored definition first (readDefinitions), then rebuilds
// the registry from them: exchanges, queues (each with the summary of its
// stored entries), bindings; and only then starts the queues, then the
// delayed exchanges' routing. The policies set before it is called
// (SetPolicies, with no queue or exchange to apply them to yet) apply to
// the exchanges and queues it rebuilds from the start.
func (v *VHost) Recover(defaults queue.Config) error {
	if v.store == nil {
		return nil
	}
	keep := map[uint64]bool{}
	startQueues, err := v.RecoverDeferred(defaults, keep)
	if err != nil {
		return err
	}
	orphans, err := v.store.DropOrphans(keep)
	if err != nil {
		return err
	}
	if orphans > 0 {
		v.log.Info("orphaned queues dropped", zap.Int("queues", orphans))
	}
	startQueues()
	return nil
}

// RecoverDeferred is Recover for one vhost of several on a store: it
// rebuilds the registry and adds the store ids its queues keep to keep,
// but neither drops the other entries (the caller does, DropOrphans, once
// every vhost is read) nor starts the queues: startQueues does, once every
// vhost's entries are recovered (no commit may come before).
func (v *VHost) RecoverDeferred(defaults queue.Config, keep map[uint64]bool) (startQueues func(), err error) {
	if v.store == nil {
		return func() {}, nil
	}
	start := time.Now()
	v.delays.mu.Lock()
	v.delays.recovering = true // no routing before the queues start
	v.delays.mu.Unlock()
	defs, err := v.readDefinitions()
	if err != nil {
		return nil, err
	}
	// The vhost's policies (SetPolicies before recovery) are in force on
	// what is rebuilt before anything routes: the exchanges' here (an
	// alternate exchange, a deduplication window, sized before its ids
	// are restored into it), the queues' below. So a delayed message due
	// at once is routed (startQueues starts the delayers, last) under
	// them, as are the queues' first expiries and dead-letterings.
	pols, ops := v.policies, v.opPolicies
	dedupDrop := &persist.Batch{}
	if err := v.recoverExchanges(defs.exchanges, pols, dedupDrop); err != nil {
		return nil, err
	}
	if err := v.delays.recover(); err != nil {
		return nil, err
	}
	recall := v.dedupOwners() // their ids come back from the stored messages too
	// Queues are rebuilt here but started only once the whole registry is
	// back (bindings too): a queue starts expiring and dead-lettering at
	// once, and its messages must find every exchange, queue and binding
	// they route to; and no commit may reach the store while the queues'
	// entries (and the shared messages' reference counts) are recovered.
	// The policies are in force from a queue's start, as for a queue
	// declared now: one deduplicated by a policy rebuilds its ids from
	// its stored messages.
	type pendingQueue struct {
		name    string
		cfg     queue.Config
		applied AppliedPolicy
	}
	pending := make([]pendingQueue, 0, len(defs.queues))
	nm := 0
	var maxID uint64
	for i, d := range defs.queues {
		qa, _ := validateQueueArgs(d.name, v.name, d.args)
		var applied AppliedPolicy
		if len(pols) > 0 || len(ops) > 0 {
			qa, _, applied = v.policyFor(d.name, d.args, pols, ops)
		}
		cfg := v.queueConfig(defaults, QueueDecl{Name: d.name, Durable: true, AutoDelete: d.autoDelete, Args: d.args}, qa)
		cfg.ID = d.id
		rec, sum, err := v.recoverQueueEntries(d.id, d.name, cfg, keep, recall)
		if err != nil {
			return nil, err
		}
		cfg.Recovered = rec
		pending = append(pending, pendingQueue{d.name, cfg, applied})
		maxID = max(maxID, d.id)
		nm += sum.Count
		if ce := v.log.Check(zap.DebugLevel, "queue recovered"); ce != nil {
			ce.Write(zap.String("queue", d.name), zap.Int("messages", sum.Count), zap.Int("transient_dropped", sum.Dropped))
		}
		if v.progress != nil {
			v.progress(i+1, len(defs.queues), nm)
		}
		if n := i + 1; n%recoveryProgressEvery == 0 && n < len(defs.queues) {
			v.log.Info("recovering queues", zap.Int("queues_so_far", n), zap.Int("queues", len(defs.queues)),
				zap.Int("messages_so_far", nm), zap.Float64("messages_per_second", perSecond(nm, start)),
				zap.Duration("took_so_far", time.Since(start)))
		}
	}
	for {
		n := v.nextQueueID.Load()
		if n >= maxID || v.nextQueueID.CompareAndSwap(n, maxID) {
			break
		}
	}
	nb := v.recoverBindings(defs.bindings)
	v.log.Info("definitions and messages recovered", zap.Int("exchanges", len(defs.exchanges)), zap.Int("queues", len(defs.queues)),
		zap.Int("bindings", nb), zap.Int("messages", nm), zap.Float64("messages_per_second", perSecond(nm, start)),
		zap.Duration("took", time.Since(start)))
	// The queues start when startQueues is called. Their first expiries
	// and dead-letterings wait for the registry's lock, so they see every
	// queue.
	return func() {
		v.mu.Lock()
		for _, p := range pending {
			q := queue.New(p.cfg)
			v.queues[p.name] = q
			if p.applied.Policy != "" || p.applied.OperatorPolicy != "" {
				v.applied[q] = p.applied
			}
		}
		v.mu.Unlock()
		if v.replicator() != nil {
			// A cluster node's data from its standalone life: the
			// queues join the metadata store (AdoptLocalQuorum).
			v.defMu.Lock()
			v.adopt = defs.quorum
			v.defMu.Unlock()
		} else {
			for _, d := range defs.quorum {
				v.startQuorum(d.name, d.val, defaults)
			}
		}
		if dedupDrop.Len() > 0 {
			// Deduplication log segments left without entries: deleted
			// once the queues' recovery is over, as any commit.
			v.store.Commit(dedupDrop, nil)
		}
		v.delays.start() // the delayed messages due route to the queues just started
	}, nil
}

// recoverExchanges rebuilds the durable exchanges under the vhost's
// policies; a deduplicating exchange's cache segments left without
// entries are added to dedupDrop.
func (v *VHost) recoverExchanges(xs []exchangeDef, pols []*PolicyDef, dedupDrop *persist.Batch) error {
	for _, x := range xs {
		ex := exchange.New(x.name, x.kind, true, x.autoDelete, x.internal, x.args)
		if x.kind == exchange.Dedup {
			v.attachDedup(ex, true)
		}
		v.exchangePolicy(ex, pols)
		if x.kind == exchange.Dedup {
			if err := v.recoverDedup(ex, dedupDrop); err != nil {
				return fmt.Errorf("exchange %q: %w", x.name, err)
			}
		}
		if x.delayed {
			ex.Delayed = true
			v.delays.add(ex)
		}
		v.exchanges[x.name] = ex
	}
	return nil
}

// recoverQueueEntries recovers a durable queue's entries from the store,
// lane by lane, and marks their store ids in keep.
func (v *VHost) recoverQueueEntries(id uint64, name string, cfg queue.Config, keep map[uint64]bool,
	recall map[string]*exchange.DedupCache) (rec *queue.Recovered, sum persist.QueueSummary, err error) {
	// A priority queue's lanes page under ids of their own.
	rec = &queue.Recovered{}
	lanes := 1
	if cfg.Policy != nil && cfg.Policy.MaxPriority > 0 {
		lanes = int(cfg.Policy.MaxPriority) + 1
		rec.Lanes = make([]int, lanes)
	}
	for l := 0; l < lanes; l++ {
		sid := queue.LaneStoreID(id, l)
		s, err := v.store.RecoverQueue(sid)
		if err != nil {
			return nil, sum, fmt.Errorf("queue %q: %w", name, err)
		}
		keep[sid] = true
		if cfg.Policy != nil && cfg.Policy.Dedup {
			if err := v.recoverDedupIDs(sid, rec); err != nil {
				return nil, sum, fmt.Errorf("queue %q: %w", name, err)
			}
		}
		if len(recall) > 0 {
			if err := v.recallDedup(sid, recall); err != nil {
				return nil, sum, fmt.Errorf("queue %q: %w", name, err)
			}
		}
		if l == 0 {
			rec.Delivered = s.Delivered
		}
		if rec.Lanes != nil {
			rec.Lanes[l] = s.Count
		}
		rec.Count += s.Count
		rec.MaxSeq = max(rec.MaxSeq, s.MaxSeq)
		sum.Count += s.Count
		sum.Dropped += s.Dropped
	}
	return rec, sum, nil
}

// recoverBindings adds the stored bindings to their source exchanges and
// returns how many it added.
func (v *VHost) recoverBindings(bs []bindingDef) int {
	// In RabbitMQ's order (the plugin re-adds a consistent-hash exchange's
	// bindings sorted as #binding records: by key, then destination,
	// exchanges before queues), so a recovered ring has RabbitMQ's bucket
	// order. Other kinds do not depend on the order.
	slices.SortStableFunc(bs, func(a, b bindingDef) int {
		return cmp.Or(strings.Compare(a.source, b.source), strings.Compare(a.binding.Key, b.binding.Key),
			cmpBool(!a.binding.Dest.Exchange, !b.binding.Dest.Exchange), strings.Compare(a.binding.Dest.Name, b.binding.Dest.Name))
	})
	nb := 0
	for _, b := range bs {
		src := v.exchanges[b.source]
		if src == nil {
			continue
		}
		src.Bind(b.binding)
		nb++
	}
	return nb
}

func perSecond(n int, since time.Time) float64 {
	return float64(n) / max(time.Since(since).Seconds(), 1e-9)
}

// definitions are a vhost's stored definitions, decoded.
type definitions struct {
	exchanges []exchangeDef
	queues    []queueDef
	quorum    []quorumDef
	bindings  []bindingDef
}

// quorumDef is a standalone node's quorum queue: its stored definition.
type quorumDef struct {
	name string
	val  []byte
}

type exchangeDef struct {
	name                          string
	kind                          exchange.Kind
	delayed, autoDelete, internal bool
	args                          amqp.Table
}

type queueDef struct {
	name       string
	id         uint64
	autoDelete bool
	args       amqp.Table
}

type bindingDef struct {
	source  string
	binding exchange.Binding
}

// readDefinitions reads the vhost's stored definitions, every kind in one
// scan of the store, before anything is rebuilt from them (a binding names
// exchanges and queues, which must all be known when it is rebuilt).
func (v *VHost) readDefinitions() (definitions, error) {
	var defs definitions
	err := v.store.Definitions(func(kind byte, name, val []byte) error {
		return defs.add(v.name, kind, name, val)
	})
	if err != nil {
		return definitions{}, err
	}
	return defs, nil
}

// add decodes one stored definition of kind (the encodings of
// putExchangeDef, putQueueDef and putBindingDef); those of other vhosts
// are skipped.
func (d *definitions) add(vh string, kind byte, name, val []byte) error {
	parts, err := SplitDefName(name)
	if err != nil {
		return err
	}
	switch kind {
	case persist.DefExchange:
		if len(parts) != 2 || parts[0] != vh {
			return nil
		}
		t, err := amqp.DecodeTable(val)
		if err != nil {
			return fmt.Errorf("exchange %q: %w", parts[1], err)
		}
		k, _ := exchange.ParseKind(str(t["type"]))
		delayed := str(t["type"]) == exchange.DelayedType
		if delayed {
			k, _ = delayedKind(defArgs(t))
		}
		if k == 0 {
			return fmt.Errorf("exchange %q: unknown type %v", parts[1], t["type"])
		}
		d.exchanges = append(d.exchanges, exchangeDef{name: parts[1], kind: k, delayed: delayed,
			autoDelete: t["auto_delete"] == true, internal: t["internal"] == true, args: defArgs(t)})
	case persist.DefQueue:
		if len(parts) != 2 || parts[0] != vh {
			return nil
		}
		t, err := amqp.DecodeTable(val)
		if err != nil {
			return fmt.Errorf("queue %q: %w", parts[1], err)
		}
		if IsQuorum(defArgs(t)) || IsStream(defArgs(t)) { // a standalone node's quorum queue or stream (quorumlocal.go)
			d.quorum = append(d.quorum, quorumDef{name: parts[1], val: append([]byte(nil), val...)})
			return nil
		}
		id, _ := t["id"].(int64)
		d.queues = append(d.queues, queueDef{name: parts[1], id: uint64(id), autoDelete: t["auto_delete"] == true, args: defArgs(t)})
	case persist.DefBinding:
		if len(parts) != 6 || parts[0] != vh {
			return nil
		}
		t, _ := amqp.DecodeTable(val)
		d.bindings = append(d.bindings, bindingDef{source: parts[1], binding: exchange.Binding{
			Dest: exchange.Dest{Name: parts[3], Exchange: parts[2] == "x"}, Key: bindingKey(parts, t), Args: defArgs(t)}})
	}
	return nil
}

// defArgs are a definition's arguments; none is nil.
func defArgs(t amqp.Table) amqp.Table {
	args, _ := t["arguments"].(amqp.Table)
	if len(args) == 0 {
		return nil
	}
	return args
}

func str(v any) string { s, _ := v.(string); return s }

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
