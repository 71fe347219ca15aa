package vhost

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

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
	// Props are the message's encoded properties (flags first), read
	// only by a consistent-hash exchange that hashes a property.
	Props []byte
	// Extra are the routing keys of the message's CC and BCC headers,
	// routed with as well as the publish's own key (sender-selected
	// distribution).
	Extra []string
	// DedupWrote reports that the last Route added entries to a durable
	// deduplication cache, which the store's next commit writes: the
	// publish's confirm waits for that commit.
	DedupWrote bool
	// HoldDedup, set by the caller, has Route hold the new ids it adds
	// to durable deduplication caches out of the store (DedupHeld, not
	// DedupWrote): the caller releases them (VHost.ReleaseDedup) once
	// the message is stored, so that no entry is stored without its
	// message.
	HoldDedup bool
	DedupHeld []DedupHold
	// DupHeld are the held entries (of other publishes, not stored yet)
	// the last Route found the message to duplicate, with HoldDedup: an
	// ack of the duplicate waits for them (VHost.AfterDuplicate).
	DupHeld []DedupHold
	// Duplicate is how the last Route's duplicate is to be confirmed,
	// when a deduplication exchange found one and its
	// x-deduplication-confirm (or the message's) names an answer
	// (dedup_confirm.go); DedupConfirmDefault otherwise.
	Duplicate queue.DedupConfirm
	// Delayed are the delayed exchanges that held the message back (its
	// x-delay header, Delay ms, is positive): the caller hands it to
	// each with VHost.Delay. Route reached no destination through them.
	Delayed []*exchange.Exchange
	Delay   int64
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
	s.Delayed = s.Delayed[:0]
	s.decoded = false
	s.DedupWrote, s.Duplicate = false, queue.DedupConfirmDefault
	s.DedupHeld, s.DupHeld = s.DedupHeld[:0], s.DupHeld[:0]
	v.mu.RLock()
	defer v.mu.RUnlock()
	qs, err := v.route(name, key, s)
	if s.DedupWrote {
		v.store.Kick() // a commit to write the new entries, if nothing else calls one
	}
	return qs, err
}

// route is Route. v.mu read-held.
func (v *VHost) route(name, key string, s *Scratch) ([]*queue.Queue, error) {
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
		return nil, v.noExchange(name) // a publisher's miss: see SyncMiss
	}
	if ex.Internal {
		return nil, amqp.Errorf(amqp.AccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", name, v.name)
	}
	v.routeFrom(ex, key, s)
	return s.Queues, nil
}

// routeFrom is Route from exchange ex, whatever its name and internal
// flag (a delayed exchange routes its due messages so). v.mu read-held.
func (v *VHost) routeFrom(ex *exchange.Exchange, key string, s *Scratch) {
	s.visited = append(s.visited[:0], ex.Name)
	s.pending = append(s.pending[:0], ex)
	for len(s.pending) > 0 {
		ex := s.pending[len(s.pending)-1]
		s.pending = s.pending[:len(s.pending)-1]
		if ex.Delayed && v.store != nil {
			// The plugin's route: a positive delay holds the message
			// back and routes it nowhere now, so that the alternate
			// exchange (below) and mandatory see it unroutable, as with
			// rabbitmq-delayed-message-exchange (its README:
			// "Limitations"; issues #7 and #36).
			if d, ok := delayOf(s.headerTable()); ok {
				s.Delayed = append(s.Delayed, ex)
				s.Delay = d
				s.dests = s.dests[:0]
				if ae, ok := ex.AlternateExchange(); ok {
					v.follow(ae, s)
				}
				continue
			}
		}
		switch ex.Kind {
		case exchange.Headers:
			s.dests = ex.Route(key, s.headerTable(), s.dests[:0])
		case exchange.ConsistentHash:
			// One destination, by the publish's own key: the plugin
			// hashes the first of the message's routing keys.
			s.dests = ex.RouteContent(key, s.RawHeaders, s.Props, s.dests[:0])
		case exchange.Dedup:
			// As fanout, unless a duplicate (the plugin routes it nowhere).
			s.dests = s.dests[:0]
			if !v.duplicate(ex, s) {
				s.dests = ex.Route(key, nil, s.dests)
			} else if s.Duplicate = dedupAcked(ex, s.Props); s.Duplicate != queue.DedupConfirmDefault {
				continue // answered as asked, not unroutable: no alternate exchange
			}
		case exchange.FederationUpstream:
			// As fanout, unless the message has made its hops or has been
			// to the link's downstream already.
			s.dests = s.dests[:0]
			if federationForward(ex.Args, s.headerTable()) {
				s.dests = ex.Route(key, nil, s.dests)
			}
		default:
			s.dests = ex.Route(key, nil, s.dests[:0])
			if ex.Kind != exchange.Fanout && ex.Kind != exchange.FederationUpstream {
				for _, k := range s.Extra {
					s.dests = ex.Route(k, nil, s.dests)
				}
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
