package mgmt

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// DLQ redrive and peek (railmq's own routes; RabbitMQ has neither).
//
// POST /api/queues/{vh}/{q}/redrive moves the messages of a dead-letter
// queue back to where they died: each is published to its
// x-first-death-exchange with the routing keys of its first x-death entry
// (or to the target_exchange and target_routing_key given), with its
// properties and x-death history as they are, confirmed into the target
// before it is removed from the source (a broker killed mid-way has moved
// some: the rest are still in the source, at least once). Messages
// without a route stay, in order. Body (all optional): {"max": N,
// "rate": messages per second, "target_exchange": "x",
// "target_routing_key": "k"}; answer: {"moved", "unroutable", "remaining"}.
//
// POST /api/queues/{vh}/{q}/peek {"count": N} shows the first messages,
// as get does, and leaves them as they were: not redelivered, their
// delivery count unchanged.

// deathOrigin reads where a dead-lettered message came from: the
// x-first-death-exchange and the first x-death entry's routing keys.
func deathOrigin(props []byte) (exchange string, keys []string, ok bool) {
	p, err := amqp.DecodeProperties(props)
	if err != nil || p.Headers == nil {
		return "", nil, false
	}
	ex, isStr := p.Headers["x-first-death-exchange"].(string)
	if !isStr {
		return "", nil, false
	}
	if deaths, _ := p.Headers["x-death"].([]any); len(deaths) > 0 {
		// The oldest death is the last entry (RabbitMQ prepends).
		if first, ok := deaths[len(deaths)-1].(amqp.Table); ok {
			if rks, ok := first["routing-keys"].([]any); ok {
				for _, k := range rks {
					if s, ok := k.(string); ok {
						keys = append(keys, s)
					}
				}
			}
		}
	}
	if len(keys) == 0 {
		return "", nil, false
	}
	return ex, keys, true
}

// readableQueue is the path's queue, the request's body and the API
// user's grant, once the user may read the queue.
func (a *API) readableQueue(w http.ResponseWriter, r *http.Request) (*broker.VHostInfo, *queue.Queue, map[string]any, *auth.Grant, bool) {
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return nil, nil, nil, nil, false
	}
	body, ok := readBody(w, r)
	if !ok {
		return nil, nil, nil, nil, false
	}
	g := a.srv.Access().Grant(st.Name(), apiUser(r).Name)
	if err := g.Check(auth.Read, "queue", q.Name()); err != nil {
		amqpToHTTP(w, err)
		return nil, nil, nil, nil, false
	}
	if exclusiveRefused(w, st, q, true /* code, as get */) {
		return nil, nil, nil, nil, false
	}
	return st, q, body, g, true
}

// topicsAllowed checks each routing key a redrive publishes with (the
// first and the CC ones) against the topic permissions, as a publish.
func topicsAllowed(st *broker.VHostInfo, g *auth.Grant, ex string, keys []string) error {
	for _, k := range keys {
		if err := topicAllowed(st, g, auth.Write, ex, k); err != nil {
			return err
		}
	}
	return nil
}

// maxUnmoved bounds the messages a redrive holds unacked because they have
// no route (they go back when it ends): past it the redrive stops, rather
// than hold a whole dead-letter queue in memory.
const maxUnmoved = 10000

func (a *API) apiRedrive(w http.ResponseWriter, r *http.Request) {
	st, q, body, g, ok := a.readableQueue(w, r)
	if !ok {
		return
	}
	max, hasMax := intArg(body["max"])
	rate, _ := body["rate"].(float64)
	tx, hasTX := str(body, "target_exchange")
	tk, _ := str(body, "target_routing_key")
	if hasTX && routesTo(st, tx, tk, q) {
		// Each message would come back to be moved again, for ever.
		badRequest(w, fmt.Sprintf("target exchange '%s' with routing key '%s' routes to the source queue '%s' in vhost '%s'", tx, tk, q.Name(), st.Name()))
		return
	}
	ctx := r.Context()
	moved, unroutable := 0, 0
	var kept []queue.Delivery
	defer func() { q.Return(kept) }() // the unmoved go back, as they were
	var gap time.Duration
	if rate > 0 {
		gap = time.Duration(float64(time.Second) / rate)
	}
	var pause *time.Timer
	for (!hasMax || moved+unroutable < max) && len(kept) < maxUnmoved && ctx.Err() == nil {
		d, got, _, err := q.Take()
		if err != nil || !got {
			break
		}
		ex, keys, known := deathOrigin(d.Msg.Props)
		if hasTX {
			ex, keys, known = tx, []string{tk}, true
		}
		if !known || g.Check(auth.Write, "exchange", ex) != nil || topicsAllowed(st, g, ex, keys) != nil || !a.redriveOne(st, q, d, ex, keys) {
			unroutable++
			kept = append(kept, d)
			continue
		}
		moved++
		if gap > 0 {
			// A client that leaves ends the redrive: what could not be
			// moved goes back now, not after the pause.
			if pause == nil {
				pause = time.NewTimer(gap)
			} else {
				pause.Reset(gap)
			}
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
			}
		}
	}
	a.log.Info("redrive", zap.String("vhost", st.Name()), zap.String("queue", q.Name()), zap.Int("moved", moved), zap.Int("unroutable", unroutable))
	writeJSON(w, map[string]any{"moved": moved, "unroutable": unroutable, "remaining": q.Ready() + int64(len(kept))})
}

// routesTo reports whether exchange ex routes key to q (by its bindings,
// without headers).
func routesTo(st *broker.VHostInfo, ex, key string, q *queue.Queue) bool {
	qs, err := st.Route(ex, key, &vhost.Scratch{})
	return err == nil && slices.Contains(qs, q)
}

// redriveOne publishes d's message to exchange ex with keys, and once it
// is confirmed there acks it in the source q; it reports whether it did.
// A message whose route leads back to q is not moved (it would come back
// to be moved again).
func (a *API) redriveOne(st *broker.VHostInfo, q *queue.Queue, d queue.Delivery, ex string, keys []string) bool {
	m := *d.Msg // the same properties and body, published anew
	m.Exchange, m.RoutingKey = ex, keys[0]
	m.ID, m.Shared, m.Inline = 0, false, false
	m.Enqueued = queue.Now()
	sc := vhost.Scratch{Props: m.Props, Extra: keys[1:]}
	if pv, err := amqp.ScanProperties(m.Props); err == nil {
		sc.RawHeaders = pv.Headers
	}
	qs, err := st.Route(ex, keys[0], &sc)
	if err != nil || len(qs) == 0 || slices.Contains(qs, q) {
		return false
	}
	conf := &waitConf{n: 1, done: make(chan struct{})}
	routed, waited := vhost.FanOut(st.Store(), &m, qs, false, func(n int) queue.Confirmer {
		conf.n = n
		return conf
	}, nil)
	if waited {
		<-conf.done // the store's commit: bounded, and it decides whether the source may let go
	}
	if !routed || (waited && conf.err != nil) {
		return false
	}
	q.Ack([]queue.Delivery{d}, nil) // confirmed into the target: now it leaves the source
	return true
}

func (a *API) apiPeek(w http.ResponseWriter, r *http.Request) {
	_, q, body, _, ok := a.readableQueue(w, r)
	if !ok {
		return
	}
	count, ok := intArg(body["count"])
	if !ok {
		count = 1
	}
	count = min(count, maxUnmoved) // held unacked while shown
	var ds []queue.Delivery
	out := []map[string]any{}
	for len(ds) < count {
		d, got, remaining, err := q.Take()
		if err != nil || !got {
			break
		}
		ds = append(ds, d)
		out = append(out, messageJSON(d, remaining, "auto", -1))
	}
	q.Return(ds)
	writeJSON(w, out)
}
