// Package vhost is the registry of one virtual host: its exchanges, queues
// and bindings, and the rules for declaring, binding and deleting them
// (with RabbitMQ's reply codes and texts). It imports exchange, queue and
// amqp; channels call it, never the reverse.
package vhost

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
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
	// mu guards exchanges and queues, briefly. Never held while waiting on
	// a queue goroutine (queues call back into the registry) or on I/O.
	mu        sync.RWMutex
	exchanges map[string]*exchange.Exchange
	queues    map[string]*queue.Queue

	store       *persist.Store // nil: nothing is durable
	nextQueueID atomic.Uint64
	window      int
}

// New creates a vhost with the default and amq.* exchanges. memory is the
// broker-wide count of message bytes held by queues; store (may be nil)
// keeps durable definitions and messages; window is how many messages a
// durable queue keeps in memory.
func New(name string, memory *atomic.Int64, log *zap.Logger, store *persist.Store, window int) *VHost {
	if log == nil {
		log = zap.NewNop()
	}
	v := &VHost{
		name:      name,
		log:       log.With(zap.String("vhost", name)),
		memory:    memory,
		exchanges: make(map[string]*exchange.Exchange),
		queues:    make(map[string]*queue.Queue),
		store:     store,
		window:    window,
	}
	for _, x := range []struct {
		name string
		kind exchange.Kind
	}{
		{"amq.direct", exchange.Direct}, {"amq.fanout", exchange.Fanout}, {"amq.topic", exchange.Topic},
		{"amq.headers", exchange.Headers}, {"amq.match", exchange.Headers},
		{"amq.rabbitmq.trace", exchange.Topic},
	} {
		v.exchanges[x.name] = exchange.New(x.name, x.kind, true, false, x.name == "amq.rabbitmq.trace", nil)
	}
	return v
}

// Name is the vhost's name.
func (v *VHost) Name() string { return v.name }

func (v *VHost) noExchange(name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no exchange '%s' in vhost '%s'", name, v.name)
}

func (v *VHost) noQueue(name string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, v.name)
}

func (v *VHost) locked(name string) *amqp.Error {
	return amqp.Errorf(amqp.ResourceLocked, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. "+
		"It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", name, v.name)
}

// --- exchanges -----------------------------------------------------------

// ExchangeDecl is an exchange.declare.
type ExchangeDecl struct {
	Name, Type                             string
	Passive, Durable, AutoDelete, Internal bool
	Args                                   amqp.Table
}

// DeclareExchange declares (or checks, when passive) an exchange.
func (v *VHost) DeclareExchange(d ExchangeDecl) error {
	if d.Name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	v.defMu.Lock()
	defer v.defMu.Unlock()
	v.mu.Lock()
	ex, err := v.declareExchangeLocked(d)
	v.mu.Unlock()
	if err != nil || ex == nil || !ex.Durable {
		return err
	}
	return v.commitDefs(func(b *persist.Batch) { v.putExchangeDef(b, ex) })
}

// declareExchangeLocked returns the exchange it created, if any. v.mu held.
func (v *VHost) declareExchangeLocked(d ExchangeDecl) (*exchange.Exchange, error) {
	ex := v.exchanges[d.Name]
	if d.Passive {
		if ex == nil {
			return nil, v.noExchange(d.Name)
		}
		return nil, nil
	}
	kind, ok := exchange.ParseKind(d.Type)
	if !ok {
		return nil, amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", d.Type)
	}
	if strings.HasPrefix(d.Name, "amq.") && ex == nil {
		return nil, amqp.Errorf(amqp.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	if ex != nil {
		return nil, v.exchangeEquivalent(ex, kind, d)
	}
	if ae, ok := d.Args["alternate-exchange"]; ok {
		if _, isStr := ae.(string); !isStr {
			return nil, invalidType("alternate-exchange", "exchange", d.Name, v.name, ae)
		}
	}
	ex = exchange.New(d.Name, kind, d.Durable, d.AutoDelete, d.Internal, d.Args)
	v.exchanges[d.Name] = ex
	return ex, nil
}

func (v *VHost) exchangeEquivalent(ex *exchange.Exchange, kind exchange.Kind, d ExchangeDecl) error {
	ineq := func(arg string, got, cur any) error {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for exchange '%s' in vhost '%s': received %s but current is %s",
			arg, d.Name, v.name, showArg(got), showArg(cur))
	}
	switch {
	case ex.Kind != kind:
		return ineq("type", kind.String(), ex.Kind.String())
	case ex.Durable != d.Durable:
		return ineq("durable", d.Durable, ex.Durable)
	case ex.AutoDelete != d.AutoDelete:
		return ineq("auto_delete", d.AutoDelete, ex.AutoDelete)
	case ex.Internal != d.Internal:
		return ineq("internal", d.Internal, ex.Internal)
	}
	if err := argsEquivalent(d.Args, ex.Args, []string{"alternate-exchange"}, func(k string, got, cur any) error {
		return ineq(k, got, cur)
	}); err != nil {
		return err
	}
	return nil
}

// DeleteExchange deletes an exchange; a missing one is fine (idempotent).
func (v *VHost) DeleteExchange(name string, ifUnused bool) error {
	if name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	if strings.HasPrefix(name, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.name)
	}
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	ex := v.exchanges[name]
	if ex == nil {
		v.mu.Unlock()
		return nil
	}
	if ifUnused && ex.HasBindings() {
		v.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
	}
	v.removeExchangeLocked(ex, dc)
	v.mu.Unlock()
	return v.commitDefs(func(b *persist.Batch) { *b = *dc })
}

// removeExchangeLocked drops ex and every binding from and to it, noting
// the definitions to delete in dc. v.mu held.
func (v *VHost) removeExchangeLocked(ex *exchange.Exchange, dc *persist.Batch) {
	delete(v.exchanges, ex.Name)
	if ex.Durable {
		dc.DeleteDef(persist.DefExchange, defName(v.name, ex.Name))
		for _, b := range ex.Bindings() {
			dc.DeleteDef(persist.DefBinding, bindingName(v.name, ex.Name, b))
		}
	}
	v.removeBindingsTo(exchange.Dest{Name: ex.Name, Exchange: true}, dc)
}

// removeBindingsTo drops every binding to d. v.mu held.
func (v *VHost) removeBindingsTo(d exchange.Dest, dc *persist.Batch) {
	for _, other := range v.exchanges {
		if !other.HasBindingTo(d) {
			continue
		}
		if other.Durable {
			for _, b := range other.Bindings() {
				if b.Dest == d {
					dc.DeleteDef(persist.DefBinding, bindingName(v.name, other.Name, b))
				}
			}
		}
		if other.RemoveDest(d) > 0 {
			v.autoDeleteLocked(other, dc)
		}
	}
}

// autoDeleteLocked deletes an auto-delete exchange left without bindings.
func (v *VHost) autoDeleteLocked(ex *exchange.Exchange, dc *persist.Batch) {
	if ex.AutoDelete && !ex.HasBindings() && v.exchanges[ex.Name] == ex {
		v.removeExchangeLocked(ex, dc)
	}
}

// Bind binds a queue (or, with toExchange, an exchange) to source.
func (v *VHost) Bind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table) error {
	return v.bind(owner, dest, toExchange, source, key, args, true)
}

// Unbind removes a binding; a binding that does not exist is fine.
func (v *VHost) Unbind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table) error {
	return v.bind(owner, dest, toExchange, source, key, args, false)
}

func (v *VHost) bind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add bool) error {
	if source == "" || (toExchange && dest == "") {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	err := v.bindLocked(owner, dest, toExchange, source, key, args, add, dc)
	v.mu.Unlock()
	if err != nil {
		return err
	}
	return v.commitDefs(func(b *persist.Batch) { *b = *dc })
}

func (v *VHost) bindLocked(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add bool, dc *persist.Batch) error {
	if toExchange {
		if v.exchanges[dest] == nil {
			return v.noExchange(dest)
		}
	} else {
		q := v.queues[dest]
		if q == nil {
			return v.noQueue(dest)
		}
		if c := q.Config(); c.Exclusive && c.Owner != owner {
			return v.locked(dest)
		}
	}
	src := v.exchanges[source]
	if src == nil {
		return v.noExchange(source)
	}
	if add && strings.HasPrefix(source, "amq.rabbitmq.") {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on exchange '%s'", source)
	}
	b := exchange.Binding{Dest: exchange.Dest{Name: dest, Exchange: toExchange}, Key: key, Args: args}
	if add {
		if err := exchange.ValidateBinding(src.Kind, args); err != nil {
			return amqp.Errorf(amqp.PreconditionFailed, "%s", strings.TrimPrefix(err.Error(), "exchange: "))
		}
		if src.Bind(b) && v.durableBinding(src, b.Dest) {
			v.putBindingDef(dc, source, b)
		}
		return nil
	}
	if src.Unbind(b) {
		if src.Durable {
			dc.DeleteDef(persist.DefBinding, bindingName(v.name, source, b))
		}
		v.autoDeleteLocked(src, dc)
	}
	return nil
}

// --- queues --------------------------------------------------------------

// QueueDecl is a queue.declare.
type QueueDecl struct {
	Name                                    string
	Passive, Durable, Exclusive, AutoDelete bool
	Args                                    amqp.Table
	Owner                                   uint64 // declaring connection
}

// DeclareQueue declares (or checks, when passive) a queue and returns it
// with its ready message and consumer counts.
func (v *VHost) DeclareQueue(d QueueDecl, defaults queue.Config) (q *queue.Queue, messages, consumers int, err error) {
	if strings.HasPrefix(d.Name, "amq.") && !d.Passive {
		return nil, 0, 0, amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	if d.Name == "" && !d.Passive {
		d.Name = GenerateName("amq.gen-")
	}
	q, err = v.declareQueue(d, defaults)
	if err != nil {
		return nil, 0, 0, err
	}
	messages, consumers, err = q.Stats()
	if err != nil { // deleted under us (auto-delete): as if it never was
		return nil, 0, 0, v.noQueue(d.Name)
	}
	return q, messages, consumers, nil
}

func (v *VHost) declareQueue(d QueueDecl, defaults queue.Config) (*queue.Queue, error) {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	v.mu.Lock()
	q, created, err := v.declareQueueLocked(d, defaults)
	v.mu.Unlock()
	if err != nil || !created || !q.Durable() {
		return q, err
	}
	return q, v.commitDefs(func(b *persist.Batch) { v.putQueueDef(b, q.Config()) })
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
	if d.Passive {
		return nil, false, v.noQueue(d.Name)
	}
	args, err := validateQueueArgs(d.Name, v.name, d.Args)
	if err != nil {
		return nil, false, err
	}
	cfg := v.queueConfig(defaults, d, args)
	if cfg.Durable && v.store != nil {
		cfg.ID = v.nextQueueID.Add(1)
		cfg.Store = storeAdapter{v.store}
	}
	q = queue.New(cfg)
	v.queues[d.Name] = q
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
	cfg.Logger = v.log
	cfg.OnEmptyOfConsumers = v.forgetQueue
	cfg.Window = v.window
	if cfg.Durable && v.store != nil {
		cfg.Store = storeAdapter{v.store}
	}
	pol := args.policy
	if args.dlx != nil {
		pol.DeadLetter = v.deadLetterFunc(*args.dlx, args.dlrk)
	}
	pol.OnExpire = v.forgetQueue
	cfg.Policy = &pol
	return cfg
}

func (v *VHost) queueEquivalent(q *queue.Queue, d QueueDecl) error {
	c := q.Config()
	ineq := func(arg string, got, cur any) error {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for queue '%s' in vhost '%s': received %s but current is %s",
			arg, d.Name, v.name, showArg(got), showArg(cur))
	}
	durable := d.Durable && !d.Exclusive
	switch {
	case c.Durable != durable:
		return ineq("durable", durable, c.Durable)
	case c.AutoDelete != d.AutoDelete:
		return ineq("auto_delete", d.AutoDelete, c.AutoDelete)
	case c.Exclusive != d.Exclusive:
		return v.locked(d.Name)
	}
	if t, ok := d.Args["x-queue-type"]; ok && !isClassic(t) {
		return ineq("x-queue-type", t, "classic")
	}
	return argsEquivalent(d.Args, c.Args, equivalenceArgs, ineq)
}

func isClassic(t any) bool {
	s, ok := t.(string)
	return ok && s == "classic"
}

// forgetQueue removes an auto-deleted queue (called on its goroutine).
func (v *VHost) forgetQueue(q *queue.Queue) { v.removeQueue(q) }

// removeQueue takes a deleted queue out of the registry and the store.
func (v *VHost) removeQueue(q *queue.Queue) {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	v.removeQueueLocked(q, dc)
	v.mu.Unlock()
	_ = v.commitDefs(func(b *persist.Batch) { *b = *dc })
}

func (v *VHost) removeQueueLocked(q *queue.Queue, dc *persist.Batch) {
	if v.queues[q.Name()] != q {
		return
	}
	delete(v.queues, q.Name())
	if q.Durable() {
		dc.DeleteDef(persist.DefQueue, defName(v.name, q.Name()))
		dc.DropQueue(q.Config().ID)
	}
	v.removeBindingsTo(exchange.Dest{Name: q.Name()}, dc)
}

// Queue looks up a queue for consume, get, purge and the like: 404 if it
// is missing, 405 if another connection owns it.
func (v *VHost) Queue(owner uint64, name string) (*queue.Queue, error) {
	v.mu.RLock()
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil {
		return nil, v.noQueue(name)
	}
	if c := q.Config(); c.Exclusive && c.Owner != owner {
		return nil, v.locked(name)
	}
	return q, nil
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
	}
	v.removeQueue(q)
	return n, nil
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

// Close stops every queue (broker shutdown).
func (v *VHost) Close() {
	v.mu.Lock()
	qs := make([]*queue.Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	v.queues = map[string]*queue.Queue{}
	v.mu.Unlock()
	for _, q := range qs {
		_, _ = q.Delete(false, false)
	}
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

// --- routing -------------------------------------------------------------

// Scratch is per-channel routing state, reused across publishes so that
// routing allocates nothing.
type Scratch struct {
	Queues  []*queue.Queue
	dests   []exchange.Dest
	pending []*exchange.Exchange
	visited []string
	seen    map[*queue.Queue]struct{}
	// RawHeaders is the message's headers table (body only), decoded on
	// demand for headers exchanges.
	RawHeaders []byte
	headers    amqp.Table
	decoded    bool
	// Extra are the routing keys of the message's CC and BCC headers,
	// routed with as well as the publish's own key (sender-selected
	// distribution).
	Extra []string
}

func (s *Scratch) headerTable() amqp.Table {
	if !s.decoded {
		s.decoded = true
		s.headers = nil
		if len(s.RawHeaders) > 0 {
			s.headers, _ = amqp.DecodeTable(s.RawHeaders) // validated when the header frame was read
		}
	}
	return s.headers
}

// Route finds the queues a message published to exchange name with key
// reaches, following exchange-to-exchange bindings and alternate
// exchanges, each queue once. The result is s.Queues.
func (v *VHost) Route(name, key string, s *Scratch) ([]*queue.Queue, error) {
	s.Queues = s.Queues[:0]
	s.decoded = false
	v.mu.RLock()
	defer v.mu.RUnlock()
	if name == "" {
		if q := v.queues[key]; q != nil {
			s.Queues = append(s.Queues, q)
		}
		for _, k := range s.Extra {
			if q := v.queues[k]; q != nil {
				s.addQueue(q)
			}
		}
		return s.Queues, nil
	}
	ex := v.exchanges[name]
	if ex == nil {
		return nil, v.noExchange(name)
	}
	if ex.Internal {
		return nil, amqp.Errorf(amqp.AccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", name, v.name)
	}
	s.visited = append(s.visited[:0], name)
	s.pending = append(s.pending[:0], ex)
	for len(s.pending) > 0 {
		ex := s.pending[len(s.pending)-1]
		s.pending = s.pending[:len(s.pending)-1]
		var hdr amqp.Table
		if ex.Kind == exchange.Headers {
			hdr = s.headerTable()
		}
		s.dests = ex.Route(key, hdr, s.dests[:0])
		if ex.Kind != exchange.Headers && ex.Kind != exchange.Fanout {
			for _, k := range s.Extra {
				s.dests = ex.Route(k, hdr, s.dests)
			}
		}
		if len(s.dests) == 0 {
			if ae, ok := ex.AlternateExchange(); ok {
				v.follow(ae, s)
			}
			continue
		}
		for _, d := range s.dests {
			if d.Exchange {
				v.follow(d.Name, s)
				continue
			}
			if q := v.queues[d.Name]; q != nil {
				s.addQueue(q)
			}
		}
	}
	return s.Queues, nil
}

// follow queues exchange name for routing unless already visited (loops
// in exchange-to-exchange bindings end here). v.mu read-held.
func (v *VHost) follow(name string, s *Scratch) {
	for _, n := range s.visited {
		if n == name {
			return
		}
	}
	if ex := v.exchanges[name]; ex != nil {
		s.visited = append(s.visited, name)
		s.pending = append(s.pending, ex)
	}
}

func (s *Scratch) addQueue(q *queue.Queue) {
	if len(s.Queues) < 16 {
		for _, x := range s.Queues {
			if x == q {
				return
			}
		}
		s.Queues = append(s.Queues, q)
		return
	}
	if s.seen == nil {
		s.seen = make(map[*queue.Queue]struct{})
	}
	if len(s.seen) == 0 {
		for _, x := range s.Queues {
			s.seen[x] = struct{}{}
		}
	}
	if _, ok := s.seen[q]; ok {
		return
	}
	s.seen[q] = struct{}{}
	s.Queues = append(s.Queues, q)
}

// ResetSeen must be called after a Route that used the large-fanout set.
func (s *Scratch) ResetSeen() {
	if len(s.seen) > 0 {
		clear(s.seen)
	}
}

// GenerateName returns prefix + base64url of 16 random bytes, as RabbitMQ
// names server-named queues (amq.gen-) and consumer tags (amq.ctag-).
func GenerateName(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// --- arguments -----------------------------------------------------------

// equivalenceArgs are the queue arguments a redeclare must match
// (RabbitMQ's rabbit_amqqueue equivalence list).
var equivalenceArgs = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
	"x-single-active-consumer", "x-delivery-limit", "x-consumer-timeout",
}

func argsEquivalent(got, cur amqp.Table, keys []string, ineq func(k string, got, cur any) error) error {
	for _, k := range keys {
		g, gok := got[k]
		c, cok := cur[k]
		if !gok && !cok {
			continue
		}
		if gok != cok || !sameValue(g, c) {
			// RabbitMQ spells out the type when one side is missing.
			var gv, cv any = none{}, none{}
			if gok {
				gv = typedValue{g}
			}
			if cok {
				cv = typedValue{c}
			}
			if gok && cok {
				gv, cv = g, c
			}
			return ineq(k, gv, cv)
		}
	}
	return nil
}

type none struct{}

// typedValue renders as "the value 'V' of type 'T'".
type typedValue struct{ v any }

func sameValue(a, b any) bool {
	ai, aok := amqp.Int(a)
	bi, bok := amqp.Int(b)
	if aok && bok {
		return ai == bi
	}
	return fmt.Sprint(a) == fmt.Sprint(b) && fmt.Sprintf("%T", a) == fmt.Sprintf("%T", b)
}

// showArg renders a value in RabbitMQ's inequivalent-arg texts.
func showArg(v any) string {
	switch v := v.(type) {
	case none:
		return "none"
	case typedValue:
		return fmt.Sprintf("the value '%v' of type '%s'", v.v, amqp.TypeName(v.v))
	case string:
		return "'" + v + "'"
	case bool:
		return fmt.Sprintf("'%v'", v)
	default:
		return fmt.Sprintf("'%v'", v)
	}
}

// typeError is the detail for an argument of the wrong type.
func typeError(want string, v any) string {
	return fmt.Sprintf("\"expected %s, got %s\"", want, amqp.TypeName(v))
}

// unacceptable is RabbitMQ's detail for a string or bool argument of
// another type.
func unacceptable(v any) string { return "{unacceptable_type," + amqp.TypeName(v) + "}" }

// invalidType refuses an exchange name argument (x-dead-letter-exchange,
// alternate-exchange) that is not a string: the channel checks those
// first, in its own words (rabbit_channel, rabbit_misc:r_arg).
func invalidType(arg, kind, name, vh string, v any) error {
	return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg '%s' in %s '%s' in vhost '%s'", amqp.TypeName(v), arg, kind, name, vh)
}

// maxExpiry is the largest x-message-ttl and x-expires, 10 years in ms
// (rabbit_misc:check_expiry).
const maxExpiry = 315_360_000_000

// queueArgOrder is the order RabbitMQ checks a classic queue's arguments
// in (rabbit_amqqueue:declare_args), so that of several bad ones the same
// is reported; x-delivery-limit and x-consumer-timeout, which RabbitMQ
// 3.10 does not take on classic queues, come last.
var queueArgOrder = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
	"x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer",
	"x-delivery-limit", "x-consumer-timeout",
}

type queueArgs struct {
	consumerTimeout time.Duration
	policy          queue.Policy
	dlx             *string
	dlrk            *string
}

// validateQueueArgs checks the arguments RabbitMQ checks, with its texts;
// unknown x- arguments are accepted.
func validateQueueArgs(q, vh string, args amqp.Table) (queueArgs, error) {
	out := queueArgs{policy: queue.NoPolicy}
	bad := func(k string, detail string) error {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s': %s", k, q, vh, detail)
	}
	if v, ok := args["x-dead-letter-exchange"]; ok {
		if _, ok := v.(string); !ok {
			return out, invalidType("x-dead-letter-exchange", "queue", q, vh, v)
		}
	}
	if v, ok := args["x-queue-type"]; ok && !isClassic(v) {
		if t, ok := v.(string); ok {
			// RabbitMQ's answer for a type it does not have. railmq has
			// classic queues only so far (quorum queues come with the
			// cluster).
			return out, amqp.Errorf(amqp.PreconditionFailed, "invalid arg 'x-queue-type' for queue '%s' in vhost '%s': \"unsupported queue type '%s'\"", q, vh, t)
		}
		return out, amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'x-queue-type' for queue '%s' in vhost '%s': received %s but current is 'classic'",
			q, vh, showArg(v))
	}
	for _, k := range queueArgOrder {
		v, ok := args[k]
		if !ok {
			continue
		}
		switch k {
		case "x-expires", "x-message-ttl":
			n, ok := amqp.Int(v)
			switch {
			case !ok:
				return out, bad(k, typeError("integer", v))
			case n == 0 && k == "x-expires":
				return out, bad(k, "{value_zero,0}")
			case n < 0:
				return out, bad(k, fmt.Sprintf("{value_negative,%d}", n))
			case n > maxExpiry:
				return out, bad(k, fmt.Sprintf("{value_too_large,%d}", n))
			}
		case "x-max-length", "x-max-length-bytes", "x-delivery-limit":
			n, ok := amqp.Int(v)
			if !ok {
				return out, bad(k, typeError("integer", v))
			}
			if n < 0 {
				return out, bad(k, fmt.Sprintf("{value_negative,%d}", n))
			}
		case "x-consumer-timeout":
			n, ok := amqp.Int(v)
			if !ok {
				return out, bad(k, typeError("integer", v))
			}
			if n < 0 {
				return out, bad(k, fmt.Sprintf("{value_negative,%d}", n))
			}
			out.consumerTimeout = time.Duration(n) * time.Millisecond
		case "x-max-priority":
			n, ok := amqp.Int(v)
			if !ok {
				return out, bad(k, typeError("integer", v))
			}
			if n < 0 {
				return out, bad(k, fmt.Sprintf("{value_negative,%d}", n))
			}
			if n > 255 {
				return out, bad(k, fmt.Sprintf("{max_value_exceeded,%d}", n))
			}
		case "x-queue-version":
			n, ok := amqp.Int(v)
			switch {
			case !ok:
				return out, bad(k, typeError("integer", v))
			case n < 0:
				return out, bad(k, fmt.Sprintf("{value_negative,%d}", n))
			case n != 1 && n != 2:
				return out, bad(k, fmt.Sprintf("\"unsupported queue version '%d'\"", n))
			}
		case "x-dead-letter-routing-key":
			if _, ok := v.(string); !ok {
				return out, bad(k, unacceptable(v))
			}
			if _, ok := args["x-dead-letter-exchange"]; !ok {
				return out, bad(k, "routing_key_but_no_dlx_defined")
			}
		case "x-overflow":
			s, ok := v.(string)
			if !ok {
				return out, bad(k, unacceptable(v))
			}
			if s != "drop-head" && s != "reject-publish" && s != "reject-publish-dlx" {
				return out, bad(k, "invalid_overflow")
			}
		case "x-queue-mode":
			s, ok := v.(string)
			if !ok {
				return out, bad(k, unacceptable(v))
			}
			if s != "default" && s != "lazy" {
				return out, bad(k, fmt.Sprintf("\"unsupported queue mode '%s'\"", s))
			}
		case "x-single-active-consumer":
			if _, ok := v.(bool); !ok {
				return out, bad(k, unacceptable(v))
			}
		}
	}
	p := &out.policy
	ms := func(k string) (int64, bool) { n, ok := amqp.Int(args[k]); return n, ok }
	if n, ok := ms("x-message-ttl"); ok {
		p.MessageTTL = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-expires"); ok {
		p.Expires = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-max-length"); ok {
		p.MaxLength = n
	}
	if n, ok := ms("x-max-length-bytes"); ok {
		p.MaxLengthBytes = n
	}
	if n, ok := ms("x-delivery-limit"); ok {
		p.DeliveryLimit = n
	}
	if n, ok := ms("x-max-priority"); ok {
		p.MaxPriority = uint8(n)
	}
	switch args["x-overflow"] {
	case "reject-publish":
		p.Overflow = queue.RejectPublish
	case "reject-publish-dlx":
		p.Overflow = queue.RejectPublishDLX
	}
	p.SingleActive = args["x-single-active-consumer"] == true
	if s, ok := args["x-dead-letter-exchange"].(string); ok {
		out.dlx = &s
	}
	if s, ok := args["x-dead-letter-routing-key"].(string); ok {
		out.dlrk = &s
	}
	return out, nil
}
