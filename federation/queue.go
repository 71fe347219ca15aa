package federation

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	rmq "github.com/rabbitmq/amqp091-go"
)

// Demand says whether a downstream queue wants messages from its
// upstream; the broker implements it.
type Demand interface {
	// Wanted is true while the queue has a consumer able to take a
	// message (not blocked by its prefetch) and no ready messages.
	Wanted() bool
	// Changed signals (one slot, never closed) after Wanted may have
	// changed.
	Changed() <-chan struct{}
}

// QueueSpec is the downstream queue a link federates; its properties
// declare the upstream queue when it is missing, as RabbitMQ does.
type QueueSpec struct {
	Name                string
	Durable, AutoDelete bool
	Args                rmq.Table
}

// DefaultQueueCredit bounds how many messages a queue link has
// consumed upstream and not yet settled: the queue link pulls only what
// the downstream consumers can take soon (RabbitMQ's queue link uses
// prefetch-count; a large credit pulls a backlog that then waits
// downstream).
const DefaultQueueCredit = 10

// QueueLink federates a downstream queue from the upstream queue of the
// same name (or the upstream's queue key): RabbitMQ's
// rabbit_federation_queue_link. It consumes upstream, with consumer
// priority -1 so that the upstream's own consumers go first, only while
// the downstream wants messages.
type QueueLink struct {
	link
	q      QueueSpec
	pub    Publisher
	demand Demand
	credit int
	fwd    atomic.Uint64
}

// NewQueueLink makes the link of queue q from upstream up; it does
// nothing until Start.
func NewQueueLink(up Upstream, q QueueSpec, pub Publisher, demand Demand, opts Options) *QueueLink {
	l := &QueueLink{q: q, pub: pub, demand: demand, credit: min(max(up.PrefetchCount, 1), DefaultQueueCredit)}
	uq := up.Queue
	if uq == "" {
		uq = q.Name
	}
	l.sess = l.session
	l.init(up, opts, Status{Type: "queue", Name: q.Name, UpstreamName: uq, ConsumerTag: up.ConsumerTag})
	return l
}

// Status is a snapshot of the link.
func (l *QueueLink) Status() Status {
	st := l.link.Status()
	st.Forwarded = l.fwd.Load()
	return st
}

func (l *QueueLink) session(ctx context.Context) error {
	conn, _, err := l.dial(ctx, "Federation link (upstream: "+l.up.Name+", queue: "+l.q.Name+")")
	if err != nil {
		return err
	}
	stopWatch := watchClose(ctx, conn)
	defer stopWatch()
	defer conn.Close()
	st := l.link.Status()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclarePassive(st.UpstreamName, l.q.Durable, l.q.AutoDelete, false, false, l.q.Args); err != nil {
		if !isCode(err, rmq.NotFound) {
			return fmt.Errorf("queue %s upstream: %w", st.UpstreamName, err)
		}
		if ch, err = conn.Channel(); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(st.UpstreamName, l.q.Durable, l.q.AutoDelete, false, false, l.q.Args); err != nil {
			return fmt.Errorf("declare queue %s upstream: %w", st.UpstreamName, err)
		}
	}
	if l.up.AckMode != NoAck {
		if err := ch.Qos(l.credit, 0, false); err != nil {
			return fmt.Errorf("basic.qos: %w", err)
		}
	}
	l.setState(Running, "")
	l.log.Info("federation link running")
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	// The downstream queue's name (params_table/2, as exchange links).
	table := rmq.Table{"uri": st.URI, "queue": l.q.Name}
	var dels <-chan rmq.Delivery
	for {
		want := l.demand.Wanted()
		switch {
		case want && dels == nil:
			dels, err = ch.Consume(st.UpstreamName, l.up.ConsumerTag, l.up.AckMode == NoAck, false, false, false,
				rmq.Table{"x-priority": int32(-1)})
			if err != nil {
				return fmt.Errorf("consume %s upstream: %w", st.UpstreamName, err)
			}
		case !want && dels != nil:
			if err := ch.Cancel(l.up.ConsumerTag, false); err != nil {
				return fmt.Errorf("cancel upstream: %w", err)
			}
			// What was delivered before the cancel still comes: forward
			// it (the downstream consumers asked for it a moment ago).
			for d := range dels {
				if err := l.forward(ctx, ch, d, table); err != nil {
					return err
				}
			}
			dels = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-closed:
			if e == nil {
				return errors.New("upstream connection closed")
			}
			return e
		case <-l.demand.Changed():
		case d, ok := <-dels:
			if !ok {
				return errors.New("upstream consumer cancelled")
			}
			if err := l.forward(ctx, ch, d, table); err != nil {
				return err
			}
		}
	}
}

// QueueHeaders is the queue link's update_headers/5 (v3.10.8): on the
// first hop x-original-exchange and x-original-routing-key record where
// the message was published; a header CC becomes x-original-cc; the
// entry of this upstream (same uri and queue) is taken out of
// x-received-from and a new one prepended with its visit-count + 1.
func QueueHeaders(h rmq.Table, table rmq.Table, redelivered bool, exchange, key string) rmq.Table {
	out := copyHeaders(h)
	count := int64(0)
	if been, ok := out["x-received-from"].([]any); ok {
		rest := make([]any, 0, len(been))
		for _, e := range been {
			t, ok := e.(rmq.Table)
			if ok && t["uri"] == table["uri"] && t["queue"] == table["queue"] && t["virtual_host"] == table["virtual_host"] {
				count = visitCount(t["visit-count"])
				continue
			}
			rest = append(rest, e)
		}
		out["x-received-from"] = rest
	} else {
		out["x-original-exchange"], out["x-original-routing-key"] = exchange, key
		delete(out, "x-received-from")
	}
	if cc, ok := out["CC"]; ok {
		delete(out, "CC")
		out["x-original-cc"] = cc
	}
	entry := copyHeaders(table)
	entry["redelivered"], entry["visit-count"] = redelivered, count+1
	return prependTable(out, "x-received-from", entry)
}

func visitCount(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// forward republishes one upstream delivery into the downstream queue
// (the default exchange, the queue's name) and acks it per ack-mode.
func (l *QueueLink) forward(ctx context.Context, ch Channel, d rmq.Delivery, table rmq.Table) error {
	h := QueueHeaders(d.Headers, table, d.Redelivered, d.Exchange, d.RoutingKey)
	return republish(ctx, l.pub, ch, l.up, "", l.q.Name, d.DeliveryTag, publishing(d, h, l.up.TrustUserID), &l.fwd, l.log)
}
