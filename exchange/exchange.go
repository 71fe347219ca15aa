package exchange

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/railmq/railmq/amqp"
)

// Dest is where a binding leads: a queue, or an exchange for an
// exchange-to-exchange binding. Following exchange destinations, and
// detecting cycles among them, is the caller's job.
type Dest struct {
	Name     string
	Exchange bool
}

// Binding is one queue.bind or exchange.bind. Its identity is (Dest, Key,
// Args) with Args compared by value, so binding the same triple twice makes
// one binding (§1.8.3.7 queue.bind is idempotent).
type Binding struct {
	Dest Dest
	Key  string
	Args amqp.Table
}

// Exchange routes messages for one declared exchange. The exported fields
// are its declaration and must not change after New. Bind keeps b.Args, so
// callers must not modify a table after binding with it.
//
// Locking: e.mu serializes writers; readers load the snapshot. Route never
// locks. Each change is published whole: a Route sees a binding change
// entirely or not at all. (RemoveDest on a direct exchange drops its keys
// one at a time, but a direct Route reads a single key, so no Route sees
// part of a change either.)
type Exchange struct {
	Name       string
	Kind       Kind
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       amqp.Table
	// Dedup is a Dedup kind exchange's cache, set before the exchange is
	// published to routing and not changed after.
	Dedup *DedupCache

	hashOn hashOn // consistent hash: what a message is hashed on, from Args

	// Delayed marks an x-delayed-message exchange (vhost/delayed.go):
	// Kind is then its x-delayed-type, the kind it routes as once a
	// message's delay is over. Set before the exchange is shared.
	Delayed bool

	delayed  atomic.Int64 // messages held back (Delayed only); see AddDelayed
	snap     atomic.Pointer[snapshot]
	policyAE atomic.Pointer[string] // an alternate exchange a policy sets (SetPolicyAE)

	mu        sync.Mutex
	bindings  map[string]Binding           // by bindingID; e.mu held
	byDest    map[Dest]map[string]struct{} // binding ids per destination; e.mu held
	byDestKey map[destKey]int              // direct, topic: bindings per (dest, key); e.mu held
	topic     topicTree                    // e.mu held
}

// destKey counts the bindings that differ only in Args: direct and topic
// routing ignore Args, so the snapshot holds the destination once per key
// until the last of them goes.
type destKey struct {
	dest Dest
	key  string
}

// snapshot is the routing state Route reads. It is immutable once stored,
// except that the direct table's buckets are swapped in place (see dtable).
// Only the field for the exchange's kind is used.
type snapshot struct {
	kind    Kind
	n       int        // bindings
	direct  *dtable    // routing key -> destinations; see dtable for what is shared
	fanout  []Dest     // every destination once
	topic   *tnode     // trie root; nil without bindings
	memos   int32      // topic: memo ids handed out (see tnode.memo)
	headers []hbinding // in bind order; RabbitMQ scans them too
	ring    ring       // consistent hash: the buckets, in the plugin's order
}

// New returns an exchange without bindings. kind must be valid (see
// ParseKind): anything else is a caller bug.
func New(name string, kind Kind, durable, autoDelete, internal bool, args amqp.Table) *Exchange {
	if kind < Direct || kind > FederationUpstream {
		panic("exchange.New: invalid kind")
	}
	e := &Exchange{
		Name:       name,
		Kind:       kind,
		Durable:    durable,
		AutoDelete: autoDelete,
		Internal:   internal,
		Args:       args,
		bindings:   make(map[string]Binding),
		byDest:     make(map[Dest]map[string]struct{}),
		byDestKey:  make(map[destKey]int),
	}
	e.hashOn = parseHashOn(args)
	s := &snapshot{kind: kind}
	if kind == Direct {
		s.direct = newDtable(minBuckets)
	}
	e.snap.Store(s)
	return e
}

// Type is the exchange's AMQP type name: "x-delayed-message" for a
// delayed exchange, else its kind's.
func (e *Exchange) Type() string {
	if e.Delayed {
		return DelayedType
	}
	return e.Kind.String()
}

// DelayedType is the type name of a delayed exchange (the
// rabbitmq-delayed-message-exchange plugin's).
const DelayedType = "x-delayed-message"

// AddDelayed adds n (may be negative) to the count of messages the
// exchange holds back; MessagesDelayed reads it (management API, metrics).
func (e *Exchange) AddDelayed(n int64) { e.delayed.Add(n) }

// MessagesDelayed is the number of messages the exchange holds back.
func (e *Exchange) MessagesDelayed() int64 { return e.delayed.Load() }

// AlternateExchange returns the alternate-exchange argument when it is a
// string, else the one a policy sets: the argument wins, as in RabbitMQ.
func (e *Exchange) AlternateExchange() (string, bool) {
	if s, ok := e.Args["alternate-exchange"].(string); ok {
		return s, ok
	}
	if p := e.policyAE.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// SetPolicyAE sets (or, with "", clears) the alternate exchange a policy
// gives the exchange.
func (e *Exchange) SetPolicyAE(name string) {
	if name == "" {
		e.policyAE.Store(nil)
		return
	}
	e.policyAE.Store(&name)
}

// Route appends every destination matching key and headers to out, each at
// most once within this call (entries already in out are not looked at),
// and returns the extended slice. headers is read only by a headers
// exchange. A consistent-hash exchange hashes key here whatever its
// arguments say; RouteContent gives it the message's headers and
// properties. The order of the destinations is unspecified.
//
// Route does not allocate when out has room. The one exception is a topic
// route that meets more nested "#" nodes than a 256-bit memo covers for its
// key (several "#.…#" patterns and keys of dozens of words). Direct and
// topic cost does not grow with the number of bindings; headers routing
// scans every binding, as RabbitMQ's does.
func (e *Exchange) Route(key string, headers amqp.Table, out []Dest) []Dest {
	s := e.snap.Load()
	switch s.kind {
	case Direct:
		out = append(out, s.direct.get(key)...)
	case Fanout, Dedup, FederationUpstream:
		out = append(out, s.fanout...)
	case Topic:
		if s.topic != nil {
			out = s.routeTopic(key, out)
		}
	case Headers:
		start, hits := len(out), 0
		for i := range s.headers {
			if h := &s.headers[i]; h.match(headers) {
				out = append(out, h.dest)
				hits++
			}
		}
		if hits > 1 {
			out = dedupe(out, start)
		}
	case ConsistentHash:
		out = s.ring.route(e.hashOn, key, nil, nil, out)
	}
	return out
}

func (s *snapshot) routeTopic(key string, out []Dest) []Dest {
	m := topicMatcher{key: key, out: out, memos: s.memos}
	m.match(s.topic, firstPos(key), 0)
	if m.leaves > 1 {
		return dedupe(m.out, len(out))
	}
	return m.out
}

// HasBindings reports whether any binding exists; an auto-delete exchange
// goes when this turns false.
func (e *Exchange) HasBindings() bool { return e.snap.Load().n > 0 }

// HasBindingTo reports whether any binding leads to d.
func (e *Exchange) HasBindingTo(d Dest) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.byDest[d]) > 0
}

// Generation is the identity of the exchange's bindings as they stand:
// it changes (compared with ==) each time one is added or removed, so a
// watcher need not copy and compare the bindings to learn that.
func (e *Exchange) Generation() any { return e.snap.Load() }

// Bindings returns a copy of every binding, ordered by destination, key and
// arguments so listings and persistence are deterministic.
func (e *Exchange) Bindings() []Binding {
	e.mu.Lock()
	ids := make([]string, 0, len(e.bindings))
	for id := range e.bindings {
		ids = append(ids, id)
	}
	out := make([]Binding, 0, len(ids))
	slices.SortFunc(ids, func(a, b string) int {
		ba, bb := e.bindings[a], e.bindings[b]
		if c := compareDest(ba.Dest, bb.Dest); c != 0 {
			return c
		}
		if c := strings.Compare(ba.Key, bb.Key); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, id := range ids {
		out = append(out, e.bindings[id])
	}
	e.mu.Unlock()
	return out
}

// Bind adds b and reports whether it is new; binding an existing (Dest, Key,
// Args) again changes nothing.
func (e *Exchange) Bind(b Binding) (added bool) {
	id := bindingID(b)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.bindings[id]; ok {
		return false
	}
	e.bindings[id] = b
	ids := e.byDest[b.Dest]
	if ids == nil {
		ids = make(map[string]struct{})
		e.byDest[b.Dest] = ids
	}
	ids[id] = struct{}{}

	s := *e.snap.Load()
	s.n++
	switch s.kind {
	case Direct, Topic:
		dk := destKey{b.Dest, b.Key}
		e.byDestKey[dk]++
		if e.byDestKey[dk] == 1 {
			e.addKey(&s, b.Dest, b.Key)
		}
	case Fanout, Dedup, FederationUpstream:
		if len(ids) == 1 {
			s.fanout = append(slices.Clip(s.fanout), b.Dest)
		}
	case Headers:
		s.headers = append(slices.Clip(s.headers), compileHeaders(id, b))
	case ConsistentHash:
		s.ring = s.ring.add(b.Dest, b.Key)
	}
	e.snap.Store(&s)
	return true
}

// Unbind removes b and reports whether it existed.
func (e *Exchange) Unbind(b Binding) (removed bool) {
	id := bindingID(b)
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.bindings[id]
	if !ok {
		return false
	}
	s := *e.snap.Load()
	e.forget(&s, id, b)
	switch s.kind {
	case Fanout, Dedup, FederationUpstream:
		if len(e.byDest[b.Dest]) == 0 {
			s.fanout = deleteDest(s.fanout, b.Dest)
		}
	case Headers:
		i := slices.IndexFunc(s.headers, func(h hbinding) bool { return h.id == id })
		s.headers = slices.Delete(slices.Clone(s.headers), i, i+1)
	case ConsistentHash:
		s.ring = s.ring.remove(b.Dest) // even if another binding to it is left, as the plugin does
	}
	if len(e.byDest[b.Dest]) == 0 {
		delete(e.byDest, b.Dest)
	}
	e.snap.Store(&s)
	return true
}

// RemoveDest drops every binding to d, as when queue or exchange d is
// deleted, and returns how many there were. The routing change is
// published once, at the end (per key for direct; see Exchange).
func (e *Exchange) RemoveDest(d Dest) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := e.byDest[d]
	if len(ids) == 0 {
		return 0
	}
	s := *e.snap.Load()
	n := len(ids)
	for id := range ids {
		e.forget(&s, id, e.bindings[id])
	}
	delete(e.byDest, d)
	switch s.kind {
	case Fanout, Dedup, FederationUpstream:
		s.fanout = deleteDest(s.fanout, d)
	case Headers:
		s.headers = slices.DeleteFunc(slices.Clone(s.headers), func(h hbinding) bool { return h.dest == d })
	case ConsistentHash:
		s.ring = s.ring.remove(d)
	}
	e.snap.Store(&s)
	return n
}

// forget removes binding id from the writer's indexes and, for direct and
// topic, from s once no binding with its (dest, key) is left. Fanout and
// headers are left to the caller, which can update them in one pass.
// e.mu held.
func (e *Exchange) forget(s *snapshot, id string, b Binding) {
	delete(e.bindings, id)
	delete(e.byDest[b.Dest], id)
	s.n--
	if s.kind != Direct && s.kind != Topic {
		return
	}
	dk := destKey{b.Dest, b.Key}
	if e.byDestKey[dk]--; e.byDestKey[dk] > 0 {
		return
	}
	delete(e.byDestKey, dk)
	if s.kind == Direct {
		s.direct = s.direct.put(b.Key, deleteDest(s.direct.get(b.Key), b.Dest))
		return
	}
	s.topic = e.topic.remove(s.topic, b.Key, firstPos(b.Key), b.Dest)
	s.memos = e.topic.next
}

// addKey adds d under key to a direct or topic snapshot. e.mu held.
func (e *Exchange) addKey(s *snapshot, d Dest, key string) {
	if s.kind == Direct {
		s.direct = s.direct.put(key, append(slices.Clip(s.direct.get(key)), d))
		return
	}
	s.topic = e.topic.add(s.topic, key, firstPos(key), false, d)
	s.memos = e.topic.next
}

// deleteDest returns a copy of ds without d: the original may be shared
// with snapshots that readers still hold.
func deleteDest(ds []Dest, d Dest) []Dest {
	i := slices.Index(ds, d)
	if i < 0 {
		return ds
	}
	if len(ds) == 1 {
		return nil
	}
	return slices.Delete(slices.Clone(ds), i, i+1)
}
