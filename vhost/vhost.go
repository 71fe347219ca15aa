package vhost

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// VHost is a virtual host.
type VHost struct {
	name   string
	log    *zap.Logger
	memory *atomic.Int64

	// defMu serializes changes to definitions, so that the store sees them
	// in the registry's order; it is held across their store commit, but
	// never while waiting on a queue goroutine.
	defMu sync.Mutex
	// adopt: quorum queues of this node's standalone life, found in its
	// store at recovery in a cluster (AdoptLocalQuorum); guarded by defMu.
	adopt []quorumDef
	// mu guards exchanges and queues, briefly. Never held while waiting on
	// a queue goroutine (queues call back into the registry) or on I/O,
	// but by recovery at start-up (LOCKS.md).
	mu        sync.RWMutex
	exchanges map[string]*exchange.Exchange
	queues    map[string]*queue.Queue
	// Policies (policies.go), and what they give each queue.
	policies, opPolicies []*PolicyDef
	applied              map[*queue.Queue]AppliedPolicy

	store       *persist.Store                  // nil: nothing is durable
	spill       *persist.Spill                  // nil: non-durable queues stay in memory
	pressure    *atomic.Bool                    // see PageUnderPressure
	noPace      bool                            // see PacePublishers
	totals      *queue.Totals                   // see CountInto
	progress    func(done, total, messages int) // see ReportRecovery
	repl        Replicator                      // see ReplicateTo; guarded by mu
	quorum      Quorum                          // see SetQuorum; guarded by mu
	homes       map[*queue.Queue]bool           // cluster-wide classic queues homed here (classic.go); guarded by mu
	closed      bool                            // Close ran: no queue is made any more (the cluster may still apply definitions); guarded by mu
	nextQueueID *atomic.Uint64                  // shared by the broker's vhosts (ShareQueueIDs): ids key the store
	maxQueues   atomic.Int64                    // the max-queues limit; negative: none
	defaultType atomic.Pointer[string]          // default queue type (defaulttype.go); nil or "": none
	window      int
	windowB     int64
	delays      *delayer // delayed exchanges' messages (delayed.go)
	// Firehose tracing (trace.go).
	tracing   atomic.Bool
	traceNode atomic.Pointer[string]
	trace     tracer
}

// New creates a vhost with the default and amq.* exchanges. memory is the
// broker-wide count of message bytes held by queues; store (may be nil)
// keeps durable definitions and messages; window and windowBytes are how
// many messages, and bytes of bodies, a durable queue keeps in memory (0:
// the queue package's defaults).
func New(name string, memory *atomic.Int64, log *zap.Logger, store *persist.Store, window int, windowBytes int64) *VHost {
	if log == nil {
		log = zap.NewNop()
	}
	v := &VHost{
		name:      name,
		log:       log.With(zap.String("vhost", name)),
		memory:    memory,
		exchanges: make(map[string]*exchange.Exchange),
		queues:    make(map[string]*queue.Queue),
		homes:     map[*queue.Queue]bool{},
		applied:   make(map[*queue.Queue]AppliedPolicy),
		store:     store,
		window:    window,
		windowB:   windowBytes,

		nextQueueID: new(atomic.Uint64),
		totals:      new(queue.Totals),
	}
	v.maxQueues.Store(-1)
	v.delays = newDelayer(v)
	for _, x := range []struct {
		name string
		kind exchange.Kind
	}{
		{"amq.direct", exchange.Direct}, {"amq.fanout", exchange.Fanout}, {"amq.topic", exchange.Topic},
		{"amq.headers", exchange.Headers}, {"amq.match", exchange.Headers},
		{"amq.rabbitmq.trace", exchange.Topic},
		{LeaseExchange, exchange.Direct}, {RetryExchange, exchange.Direct}, // lease.go
	} {
		v.exchanges[x.name] = exchange.New(x.name, x.kind, true, false, x.name == "amq.rabbitmq.trace", nil)
	}
	return v
}

// SetMaxQueues sets the vhost's max-queues limit (negative: none), as
// RabbitMQ's vhost limit: declaring a new queue beyond it is refused.
func (v *VHost) SetMaxQueues(n int64) { v.maxQueues.Store(n) }

// ShareQueueIDs makes the vhost number its queues from ids, which every
// vhost on one store must share (a queue's id keys its entries). Before
// Recover.
func (v *VHost) ShareQueueIDs(ids *atomic.Uint64) { v.nextQueueID = ids }

// Destroy deletes everything in the vhost, in the store too (the vhost
// is deleted): its queues stop and their messages go. The vhost's
// connections must be closed first.
func (v *VHost) Destroy() error {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	qs := make([]*queue.Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	for _, q := range qs {
		v.removeQueueLocked(q, dc)
	}
	for _, ex := range v.exchanges {
		if !strings.HasPrefix(ex.Name, "amq.") {
			v.removeExchangeLocked(ex, dc)
		}
	}
	qm := v.quorum
	v.mu.Unlock()
	v.delays.close()
	v.closeTrace() // trace.go
	for _, q := range qs {
		if q.Replicated() {
			// Every node drops its own handle: the vhost's deletion is
			// applied on each, with its quorum queues' definitions.
			if qm != nil {
				qm.Stop(q)
			}
			continue
		}
		_, _ = q.Delete(false, false)
	}
	if v.store == nil || dc.Len() == 0 {
		return nil
	}
	return v.store.CommitSync(dc)
}

// PageTransientTo makes the non-durable queues declared from now on page
// their messages beyond the window to s (persist.Spill), as durable ones
// page to the store. Call it before the vhost is used.
func (v *VHost) PageTransientTo(s *persist.Spill) { v.spill = s }

// PageUnderPressure makes the queues declared from now on keep a small
// window while p is true (the broker's paging ratio of the memory
// watermark is crossed). Call it before the vhost is used.
func (v *VHost) PageUnderPressure(p *atomic.Bool) { v.pressure = p }

// PacePublishers sets whether the queues declared from now on slow their
// publishers to their consumers' pace while the consumers drain a paged
// backlog (queue.Queue.Behind; on unless turned off). Call it before the
// vhost is used.
func (v *VHost) PacePublishers(on bool) { v.noPace = !on }

// CountInto makes the vhost and the queues declared from now on count
// into t, the broker's metrics. Call it before the vhost is used.
func (v *VHost) CountInto(t *queue.Totals) { v.totals = t }

// ReportRecovery has recovery call f after each queue it rebuilds: the
// queues done, of how many, and the messages found so far. Call it
// before Recover.
func (v *VHost) ReportRecovery(f func(done, total, messages int)) { v.progress = f }

// Name is the vhost's name.
func (v *VHost) Name() string { return v.name }

func (v *VHost) noExchange(name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no exchange '%s' in vhost '%s'", name, v.name)
}

// synced, in a cluster, waits until this node has applied every
// definition committed before now (a barrier through the metadata
// store), and reports whether it did: a miss is looked up again, so that
// what a client declared on one node is there when it goes on on
// another, as in RabbitMQ, whose declares are synchronous cluster-wide.
// Misses only: a lookup that finds pays nothing.
func (v *VHost) synced() bool {
	s, ok := v.replicator().(interface{ Sync() error })
	return ok && s.Sync() == nil
}

// SyncMiss is synced for a publisher whose exchange was not found (the
// channel calls it, holding no lock, before it closes the channel).
func (v *VHost) SyncMiss() bool { return v.synced() }

func (v *VHost) noQueue(name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, v.name)
}

func (v *VHost) locked(name string) *amqp.Error {
	return amqp.Errorf(amqp.ResourceLocked, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. "+
		"It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", name, v.name)
}

// Queue looks up a queue for consume, get, purge and the like: 404 if it
// is missing, 405 if another connection owns it.
func (v *VHost) Queue(owner uint64, name string) (*queue.Queue, error) {
	v.mu.RLock()
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil && v.synced() {
		v.mu.RLock()
		q = v.queues[name]
		v.mu.RUnlock()
	}
	if q == nil {
		return nil, v.noQueue(name)
	}
	if c := q.Config(); c.Exclusive && c.Owner != owner {
		return nil, v.locked(name)
	}
	return q, nil
}

// Exchanges returns a snapshot of the exchanges, the default one not
// among them (the management API, definitions).
func (v *VHost) Exchanges() []*exchange.Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	xs := make([]*exchange.Exchange, 0, len(v.exchanges))
	for _, x := range v.exchanges {
		xs = append(xs, x)
	}
	return xs
}

// Exchange returns an exchange by name, or nil.
func (v *VHost) Exchange(name string) *exchange.Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.exchanges[name]
}

// ExchangeKind is the type of the exchange name, or false if there is
// none. A delayed exchange's is 0, whatever it routes as: its type is
// x-delayed-message (RabbitMQ checks topic permissions on exchanges of
// type topic only).
func (v *VHost) ExchangeKind(name string) (exchange.Kind, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if x := v.exchanges[name]; x != nil {
		if x.Delayed {
			return 0, true
		}
		return x.Kind, true
	}
	return 0, false
}

// allow checks op on a resource against g; a nil grant allows everything
// (the registry's own callers, tests).
func allow(g *auth.Grant, op auth.Op, kind, name string) error {
	if g == nil {
		return nil
	}
	return g.Check(op, kind, name)
}

// Queues returns a snapshot of the queues (metrics, tests).
func (v *VHost) Queues() []*queue.Queue {
	v.mu.RLock()
	defer v.mu.RUnlock()
	qs := make([]*queue.Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	return qs
}

// Close stops every queue (broker shutdown).
func (v *VHost) Close() {
	v.delays.close() // first: it routes to the queues
	v.closeTrace()   // trace.go
	v.mu.Lock()
	qs := make([]*queue.Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	v.queues = map[string]*queue.Queue{}
	v.closed = true
	v.mu.Unlock()
	for _, q := range qs {
		if q.Replicated() {
			q.Stop() // the queue lives on in the cluster; the node closes its group
			continue
		}
		_, _ = q.Delete(false, false)
	}
}

// GenerateName returns prefix + base64url of 16 random bytes, as RabbitMQ
// names server-named queues (amq.gen-) and consumer tags (amq.ctag-).
func GenerateName(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}
