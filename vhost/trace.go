package vhost

// Firehose tracing, as RabbitMQ's rabbit_trace: while tracing is on for
// the vhost, every message published in it is copied to the exchange
// amq.rabbitmq.trace with routing key "publish.<exchange>", and every
// delivery (basic.deliver and basic.get-ok) with "deliver.<queue>". The
// copy has the original body and, as its only property, a headers table:
// exchange_name, routing_keys, properties (the original's, by RabbitMQ's
// names), node, then for a publish vhost, connection, channel, user and
// routed_queues, for a delivery redelivered, vhost, connection, channel
// and user. Messages published to amq.rabbitmq.trace itself are never
// traced (nor, so, deliveries of the copies). Copies are transient and
// sent at most once: nothing waits for them.
//
// Off, the cost is one atomic load per publish and per delivery
// (Tracing). A publish's copy is routed on the publisher's goroutine
// before the message itself, so it reaches a trace queue before any copy
// of the message's delivery. Deliveries are made with a queue's exec and
// a channel's lock held (channel.Deliver), where nothing may be posted to
// a queue: their copies are queued here and routed by the tracer's
// goroutine (started when tracing is first turned on; stopped by Close
// and Destroy).
//
// As RabbitMQ's (application env trace_vhosts), the setting lives in
// memory only: a restarted node traces nothing until it is turned on
// again.

import (
	"sync"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// TraceExchange is the firehose's exchange, in every vhost.
const TraceExchange = "amq.rabbitmq.trace"

// maxTracePending bounds the delivery copies waiting for the tracer: past
// it, copies are dropped (at most once, as RabbitMQ's).
const maxTracePending = 1 << 16

// maxTracePendingBytes bounds the bodies those copies hold (a copy keeps
// its message's body after the delivery is acked): past it, likewise
// dropped.
const maxTracePendingBytes = 64 << 20

// TraceSource is who published or received a traced message.
type TraceSource struct {
	Conn    string // RabbitMQ's connection name, "peer -> local"
	Channel uint16
	User    string
}

// tracer routes the delivery copies. mu guards pending, bytes, running and
// closed; it is a leaf lock (taken under a channel's mu by Deliver).
type tracer struct {
	mu      sync.Mutex
	pending []traceDelivery
	bytes   int64 // the bodies of pending
	running bool
	closed  bool
	wake    chan struct{} // one slot
	stop    chan struct{}
	done    chan struct{}
	fl      queue.Flushes // the tracer goroutine's
	sc      Scratch       // the tracer goroutine's
}

type traceDelivery struct {
	msg         *queue.Message
	queue       string
	redelivered bool
	src         TraceSource
}

// Tracing reports whether tracing is on: one atomic load (false for a
// nil VHost: a channel without one, in tests).
func (v *VHost) Tracing() bool { return v != nil && v.tracing.Load() }

// SetTracing turns tracing on or off; node is the node's name, for the
// copies' node header. It logs RabbitMQ's lines and reports whether the
// setting changed.
func (v *VHost) SetTracing(on bool, node string) bool {
	t := &v.trace
	t.mu.Lock()
	if on && t.closed {
		t.mu.Unlock()
		return false
	}
	v.traceNode.Store(&node)
	was := v.tracing.Swap(on)
	if on && !t.running {
		t.running = true
		t.wake, t.stop, t.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go v.traceLoop()
	}
	t.mu.Unlock()
	switch {
	case was == on && on:
		v.log.Info("Tracing is already enabled for vhost '" + v.name + "'")
	case was == on:
		v.log.Info("Tracing is already disabled for vhost '" + v.name + "'")
	case on:
		v.log.Info("Enabling tracing for vhost '" + v.name + "'")
	default:
		v.log.Info("Disabling tracing for vhost '" + v.name + "'")
	}
	return was != on
}

// closeTrace stops the tracer and waits for it (Close, Destroy).
func (v *VHost) closeTrace() {
	t := &v.trace
	t.mu.Lock()
	running := t.running && !t.closed
	t.closed = true
	t.pending, t.bytes = nil, 0
	t.mu.Unlock()
	v.tracing.Store(false)
	if running {
		close(t.stop)
		<-t.done
	}
}

// TracePublish routes the trace copy of msg, published by src and routed
// to qs (extra: its CC and BCC keys), on the caller's goroutine; fl is
// the caller's (see queue.Queue.PublishConfirm). Call it when Tracing.
func (v *VHost) TracePublish(msg *queue.Message, qs []*queue.Queue, extra []string, src TraceSource, fl *queue.Flushes) {
	if msg.Exchange == TraceExchange {
		return
	}
	routed := make([]any, len(qs))
	for i, q := range qs {
		routed[i] = q.Name()
	}
	keys := make([]any, 0, 1+len(extra))
	keys = append(keys, msg.RoutingKey)
	for _, k := range extra {
		keys = append(keys, k)
	}
	h := v.traceHeaders(msg, keys)
	h["vhost"], h["connection"], h["channel"], h["user"] = v.name, src.Conn, int32(src.Channel), src.User
	h["routed_queues"] = routed
	var sc Scratch
	v.routeTrace("publish."+msg.Exchange, msg.Body, h, &sc, fl)
}

// TraceDeliver queues the trace copy of a delivery of msg from queue q to
// src, for the tracer to route. It never blocks and posts nothing: safe
// under a queue's exec and a channel's lock. Call it when Tracing.
func (v *VHost) TraceDeliver(msg *queue.Message, q string, redelivered bool, src TraceSource) {
	if msg.Exchange == TraceExchange {
		return
	}
	t := &v.trace
	t.mu.Lock()
	if !t.running || t.closed || len(t.pending) >= maxTracePending || t.bytes+int64(len(msg.Body)) > maxTracePendingBytes {
		t.mu.Unlock()
		return
	}
	t.pending = append(t.pending, traceDelivery{msg: msg, queue: q, redelivered: redelivered, src: src})
	t.bytes += int64(len(msg.Body))
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// traceLoop routes the delivery copies queued by TraceDeliver.
func (v *VHost) traceLoop() {
	t := &v.trace
	defer close(t.done)
	for {
		select {
		case <-t.stop:
			return
		case <-t.wake:
		}
		t.mu.Lock()
		batch := t.pending
		t.pending, t.bytes = nil, 0
		t.mu.Unlock()
		for _, d := range batch {
			h := v.traceHeaders(d.msg, []any{d.msg.RoutingKey})
			h["redelivered"] = int32(0)
			if d.redelivered {
				h["redelivered"] = int32(1)
			}
			h["vhost"], h["connection"], h["channel"], h["user"] = v.name, d.src.Conn, int32(d.src.Channel), d.src.User
			v.routeTrace("deliver."+d.queue, d.msg.Body, h, &t.sc, &t.fl)
		}
		t.fl.Flush()
	}
}

// traceHeaders are the headers every copy has (rabbit_trace:msg_to_table).
func (v *VHost) traceHeaders(msg *queue.Message, keys []any) amqp.Table {
	node := ""
	if n := v.traceNode.Load(); n != nil {
		node = *n
	}
	return amqp.Table{"exchange_name": msg.Exchange, "routing_keys": keys,
		"properties": propertiesTable(msg.Props), "node": node}
}

// routeTrace publishes a copy with headers h and body to amq.rabbitmq.trace
// with routing key key: transient, confirmed to nobody.
func (v *VHost) routeTrace(key string, body []byte, h amqp.Table, sc *Scratch, fl *queue.Flushes) {
	p := amqp.Properties{Flags: amqp.FlagHeaders, Headers: h}
	props := p.Append(nil)
	sc.RawHeaders, sc.Props, sc.Extra = amqp.PropsHeaders(props), props, nil
	sc.Queues, sc.Delayed, sc.decoded, sc.DedupWrote = sc.Queues[:0], sc.Delayed[:0], false, false
	// From the exchange itself: it is internal, which refuses publishers
	// (Route), not the broker's own copies.
	v.mu.RLock()
	if ex := v.exchanges[TraceExchange]; ex != nil {
		v.routeFrom(ex, key, sc)
	}
	v.mu.RUnlock()
	if sc.DedupWrote {
		v.store.Kick()
	}
	qs := sc.Queues
	if len(qs) == 0 {
		sc.ResetSeen()
		return
	}
	m := &queue.Message{Exchange: TraceExchange, RoutingKey: key, Props: props, Body: body, Enqueued: queue.Now()}
	FanOut(v.Store(), m, qs, false /* rejects */, nil, fl)
	sc.ResetSeen()
}

// propertiesTable is a message's properties as rabbit_trace lists them:
// by the P_basic record's field names, those set only; integers as
// signed 32-bit, the headers as a table, the rest as long strings.
func propertiesTable(raw []byte) amqp.Table {
	t := amqp.Table{}
	p, err := amqp.DecodeProperties(raw)
	if err != nil {
		return t
	}
	str := func(flag uint16, name, v string) {
		if p.Flags&flag != 0 {
			t[name] = v
		}
	}
	str(amqp.FlagContentType, "content_type", p.ContentType)
	str(amqp.FlagContentEncoding, "content_encoding", p.ContentEncoding)
	if p.Flags&amqp.FlagHeaders != 0 {
		h := p.Headers
		if h == nil {
			h = amqp.Table{}
		}
		t["headers"] = h
	}
	if p.Flags&amqp.FlagDeliveryMode != 0 {
		t["delivery_mode"] = int32(p.DeliveryMode)
	}
	if p.Flags&amqp.FlagPriority != 0 {
		t["priority"] = int32(p.Priority)
	}
	str(amqp.FlagCorrelationID, "correlation_id", p.CorrelationID)
	str(amqp.FlagReplyTo, "reply_to", p.ReplyTo)
	str(amqp.FlagExpiration, "expiration", p.Expiration)
	str(amqp.FlagMessageID, "message_id", p.MessageID)
	if p.Flags&amqp.FlagTimestamp != 0 {
		if s := p.Timestamp.Unix(); s >= -1<<31 && s < 1<<31 {
			t["timestamp"] = int32(s)
		} else {
			t["timestamp"] = s
		}
	}
	str(amqp.FlagType, "type", p.Type)
	str(amqp.FlagUserID, "user_id", p.UserID)
	str(amqp.FlagAppID, "app_id", p.AppID)
	str(amqp.FlagReserved, "cluster_id", p.Reserved)
	return t
}
