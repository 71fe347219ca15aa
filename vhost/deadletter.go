package vhost

import (
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// deadLetterFunc republishes messages leaving a queue to its dead-letter
// exchange, with the x-death header RabbitMQ writes.
func (v *VHost) deadLetterFunc(dlx string, dlrk *string) queue.DeadLetterFunc {
	return func(src *queue.Queue, d queue.Delivery, reason string, done func()) {
		finish := func() {
			if done != nil {
				done()
			}
		}
		c, err := v.deadLetterCopy(src, d, reason, dlx, dlrk)
		if err != nil || (len(c.targets) == 0 && len(c.sc.Delayed) == 0) {
			finish()
			return
		}
		nm, targets, sc := c.msg, c.targets, &c.sc
		// A delayed exchange on the way holds the copy back (delayed.go):
		// its store write is waited for too.
		nd := 0
		for _, x := range sc.Delayed {
			if v.DelayWaits(x, nm) {
				nd++
			}
		}
		held := *nm
		var cf *dlConfirm
		// The copies are durable before the source lets its entry go.
		_, waited := FanOut(v.Store(), nm, targets, false /* rejects */, func(n int) queue.Confirmer {
			cf = &dlConfirm{done: finish}
			cf.pending.Store(int32(n + nd))
			return cf
		}, nil)
		if nd > 0 && !waited {
			cf = &dlConfirm{done: finish}
			cf.pending.Store(int32(nd))
			waited = true
		}
		for _, x := range sc.Delayed {
			var conf queue.Confirmer
			if cf != nil {
				conf = cf
			}
			v.Delay(x, &held, sc.Extra, sc.Delay, conf)
		}
		if !waited {
			finish()
		}
	}
}

// dlCopy is a dead-lettered message's copy, as it goes to the
// dead-letter exchange, and where it goes.
type dlCopy struct {
	msg *queue.Message
	// targets are the queues it routes to, those it would come back to in
	// a cycle without a rejection dropped; sc.Delayed the delayed
	// exchanges that hold it back.
	targets []*queue.Queue
	sc      Scratch
}

// deadLetterCopy makes the copy of d's message that goes to dlx, with the
// x-death header RabbitMQ writes, and routes it. It fails when the copy
// goes nowhere at all: properties that do not decode (logged), or no
// exchange dlx (the Route's error).
func (v *VHost) deadLetterCopy(src *queue.Queue, d queue.Delivery, reason, dlx string, dlrk *string) (*dlCopy, error) {
	m := d.Msg
	props, err := amqp.DecodeProperties(m.Props)
	if err != nil {
		v.log.Error("dead-lettering: undecodable properties", zap.String("queue", src.Name()), zap.Error(err))
		return nil, err
	}
	// The CC keys the message was published with route its
	// dead-lettered copy too and are listed in x-death, unless the
	// queue names a dead-letter routing key: then CC goes
	// (rabbit_dead_letter:make_msg).
	cc := ccKeys(props.Headers)
	deaths := addDeath(&props, src.Name(), reason, m.Exchange, append([]string{m.RoutingKey}, cc...))
	key := m.RoutingKey
	c := &dlCopy{sc: Scratch{Props: m.Props}} // for a hash-property: the ids and timestamp are kept
	if dlrk != nil {
		key = *dlrk
		delete(props.Headers, "CC")
	} else {
		c.sc.Extra = cc
	}
	if props.Headers != nil {
		c.sc.RawHeaders = amqp.AppendTable(nil, props.Headers)[4:]
	}
	qs, err := v.Route(dlx, key, &c.sc)
	if err != nil { // a missing dead-letter exchange
		return nil, err
	}
	// Cycles: a message that would come back to a queue it died in is
	// dropped there, unless a rejection is part of the cycle.
	for _, q := range qs {
		if inDeaths(deaths, q.Name()) && !anyRejected(deaths) {
			continue
		}
		c.targets = append(c.targets, q)
	}
	c.msg = &queue.Message{Exchange: dlx, RoutingKey: key, Props: props.Append(nil), Body: m.Body,
		Persistent: m.Persistent, Priority: m.Priority, Enqueued: queue.Now()}
	return c, nil
}

// dlConfirm calls done once every durable copy of a dead-lettered message
// (and its shared record) is in the store.
type dlConfirm struct {
	pending atomic.Int32
	done    func()
}

func (c *dlConfirm) Done(error) {
	if c.pending.Add(-1) == 0 {
		c.done()
	}
}

// addDeath updates the x-death header (and x-first-death-*, x-last-death-*)
// as RabbitMQ does: the entry for the same queue and reason has its count
// incremented and moves to the front; otherwise a new entry goes first. A
// per-message expiration is moved to original-expiration. It returns the
// new x-death array.
func addDeath(p *amqp.Properties, queueName, reason, exchange string, routingKeys []string) []any {
	h := amqp.Table{}
	for k, v := range p.Headers {
		h[k] = v
	}
	deaths, _ := h["x-death"].([]any)
	var entry amqp.Table
	rest := make([]any, 0, len(deaths)+1)
	for _, x := range deaths {
		t, ok := x.(amqp.Table)
		if ok && entry == nil && t["queue"] == queueName && t["reason"] == reason {
			entry = amqp.Table{}
			for k, v := range t {
				entry[k] = v
			}
			n, _ := entry["count"].(int64)
			entry["count"] = n + 1
			continue
		}
		rest = append(rest, x)
	}
	if entry == nil {
		entry = amqp.Table{
			"count":        int64(1),
			"reason":       reason,
			"queue":        queueName,
			"time":         time.Now().UTC().Truncate(time.Second),
			"exchange":     exchange,
			"routing-keys": keysArray(routingKeys),
		}
		if p.Flags&amqp.FlagExpiration != 0 {
			entry["original-expiration"] = p.Expiration
		}
	}
	if p.Flags&amqp.FlagExpiration != 0 {
		p.Flags &^= amqp.FlagExpiration
		p.Expiration = ""
	}
	deaths = append([]any{entry}, rest...)
	ordered := make([]any, len(deaths))
	for i, x := range deaths {
		ordered[i] = x
		if t, ok := x.(amqp.Table); ok {
			ordered[i] = deathEntry(t)
		}
	}
	h["x-death"] = ordered
	if _, ok := h["x-first-death-queue"]; !ok {
		h["x-first-death-queue"] = queueName
		h["x-first-death-reason"] = reason
		h["x-first-death-exchange"] = exchange
	}
	h["x-last-death-queue"] = queueName
	h["x-last-death-reason"] = reason
	h["x-last-death-exchange"] = exchange
	p.Headers = h
	p.Flags |= amqp.FlagHeaders
	return deaths
}

// deathFields is the order of an x-death entry's fields as RabbitMQ
// writes them (rabbit_dead_letter:make_msg).
var deathFields = []string{"count", "reason", "queue", "time", "exchange", "routing-keys", "original-expiration"}

// deathEntry lays out an x-death entry in RabbitMQ's field order; fields
// it does not know follow, sorted.
func deathEntry(t amqp.Table) amqp.OrderedTable {
	out := make(amqp.OrderedTable, 0, len(t))
	for _, k := range deathFields {
		if v, ok := t[k]; ok {
			out = append(out, amqp.Field{Name: k, Value: v})
		}
	}
	var other []string
	for k := range t {
		if !slices.Contains(deathFields, k) {
			other = append(other, k)
		}
	}
	slices.Sort(other)
	for _, k := range other {
		out = append(out, amqp.Field{Name: k, Value: t[k]})
	}
	return out
}

// ccKeys are the longstr elements of a CC header (RabbitMQ's
// header_routes; BCC was removed at publish).
func ccKeys(h amqp.Table) []string {
	a, _ := h["CC"].([]any)
	var keys []string
	for _, x := range a {
		if k, ok := x.(string); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func keysArray(keys []string) []any {
	a := make([]any, len(keys))
	for i, k := range keys {
		a[i] = k
	}
	return a
}

func inDeaths(deaths []any, q string) bool {
	for _, x := range deaths {
		if t, ok := x.(amqp.Table); ok && t["queue"] == q {
			return true
		}
	}
	return false
}

func anyRejected(deaths []any) bool {
	for _, x := range deaths {
		if t, ok := x.(amqp.Table); ok && t["reason"] == queue.ReasonRejected {
			return true
		}
	}
	return false
}
