package channel

import (
	"errors"
	"math"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// withDeliveryCount returns props with the x-delivery-count header set to
// n (when not 0) and x-acquired-count to acquired (when not 0), as
// RabbitMQ 4.3's quorum queues add them to redeliveries (x-delivery-count
// the failed deliveries, x-acquired-count every return:
// rabbit_fifo_client.erl v4.3.5 add_delivery_count_header); railmq adds
// x-delivery-count on classic queues with a delivery limit too
// (queue.CountsDeliveries), whose deliveries have no acquired count.
func withDeliveryCount(props []byte, n, acquired uint32) []byte {
	p, err := amqp.DecodeProperties(props)
	if err != nil {
		return props
	}
	h := make(amqp.Table, len(p.Headers)+1)
	for k, v := range p.Headers {
		h[k] = v
	}
	if n > 0 {
		h["x-delivery-count"] = int64(n)
	}
	if acquired > 0 {
		h["x-acquired-count"] = int64(acquired)
	}
	p.Headers = h
	p.Flags |= amqp.FlagHeaders
	return p.Append(nil)
}

func (c *Channel) qos(m *amqp.BasicQos) error {
	if m.PrefetchSize != 0 {
		return amqp.Errorf(amqp.NotImplemented, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	if m.Global {
		c.mu.Lock()
		c.globalPrefetch = int(m.PrefetchCount)
		kicks := c.kicksLocked()
		c.mu.Unlock()
		kick(kicks, c.cfg.Flushes)
	} else {
		c.prefetch = int(m.PrefetchCount)
		c.prefetchA.Store(int32(m.PrefetchCount))
		c.unlimitGlobal()
	}
	c.send(&amqp.BasicQosOk{})
	return nil
}

func (c *Channel) consume(m *amqp.BasicConsume) error {
	if m.Queue == replyToQueue {
		return c.consumeReplies(m)
	}
	q, name, err := c.lookupQueueFor(auth.Read, m.Queue)
	if err != nil {
		return err
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = vhost.GenerateName("amq.ctag-")
	}
	c.mu.Lock()
	_, dup := c.consumers[tag]
	c.mu.Unlock()
	if dup || tag == c.replyTag && tag != "" {
		return amqp.Errorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
	}
	prio, err := consumerPriority(m.Arguments, name, c.cfg.VHost.Name())
	if err != nil {
		return err
	}
	timeout, err := consumerTimeout(m.Arguments)
	if err != nil {
		return err
	}
	qc := &queue.Consumer{
		Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Priority: prio, Timeout: timeout,
		Sink: c, Out: c.cfg.Sink, Prefetch: c.prefetch, Args: m.Arguments,
	}
	if err := c.globalQosRefused(q, qc, name); err != nil {
		return err
	}
	qc.Hold() // consume-ok must reach the client before any delivery
	if err := q.Consume(qc); err != nil {
		if errors.Is(err, queue.ErrExclusiveConsumer) {
			return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", name, c.cfg.VHost.Name())
		}
		return c.queueGone(err, name)
	}
	c.mu.Lock()
	c.consumers[tag] = &consumer{Consumer: qc, q: q}
	c.mu.Unlock()
	if !m.NoWait {
		c.send(&amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	q.Kick(qc, c.cfg.Flushes)
	return nil
}

// consumerPriority reads basic.consume's x-priority: an integer of any
// wire type (rabbit_amqqueue:consume_args, check_int_arg), else a 406
// naming the queue and the type, in RabbitMQ's words.
func consumerPriority(args amqp.Table, queueName, vhostName string) (int32, error) {
	v, ok := args["x-priority"]
	if !ok {
		return 0, nil
	}
	if n, ok := amqp.Int(v); ok {
		// RabbitMQ's integers are unbounded; past int32 a priority still
		// outranks (or ranks below) every int32 one.
		return int32(max(min(n, math.MaxInt32), math.MinInt32)), nil
	}
	return 0, precondition(`invalid arg 'x-priority' for queue '%s' in vhost '%s': "expected integer, got %s"`, queueName, vhostName, amqp.TypeName(v))
}

// consumerTimeout reads basic.consume's x-consumer-timeout (ms), which
// overrides the queue's and the broker's for this consumer's deliveries,
// as in RabbitMQ (rabbit_queue_type:consume).
func consumerTimeout(args amqp.Table) (time.Duration, error) {
	v, ok := args["x-consumer-timeout"]
	if !ok {
		return 0, nil
	}
	n, ok := amqp.Int(v)
	if !ok {
		return 0, precondition("invalid arg 'x-consumer-timeout' for consumer: expected integer")
	}
	if n < 0 {
		return 0, precondition("invalid arg 'x-consumer-timeout' for consumer: {value_negative,%d}", n)
	}
	if n > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64, nil // past 292 years: still the longest lease, never a negative one
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (c *Channel) cancel(m *amqp.BasicCancel) error {
	c.mu.Lock()
	cons := c.consumers[m.ConsumerTag]
	delete(c.consumers, m.ConsumerTag)
	isReply := m.ConsumerTag != "" && m.ConsumerTag == c.replyTag
	if isReply {
		c.replyTag = ""
	}
	c.mu.Unlock()
	if isReply {
		c.cfg.Replies.unregister(c.replyToken)
	}
	if cons != nil {
		cons.q.Cancel(cons.Consumer)
	}
	if !m.NoWait {
		c.send(&amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

// Deliver hands a message to one of this channel's consumers. It is
// called with the queue's exec held, on whichever goroutine holds it
// (queue/exec.go): never blocks, posts nothing. It refuses when the consumer or the channel is
// at its prefetch limit or the connection's outbound buffer is full.
func (c *Channel) Deliver(qc *queue.Consumer, q *queue.Queue, d queue.Delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if !qc.NoAck && ((qc.Prefetch > 0 && qc.Unacked >= qc.Prefetch) ||
		(c.globalPrefetch > 0 && c.globalUnacked >= c.globalPrefetch)) {
		qc.NeedKick, c.kickDue = true, true
		return false
	}
	if c.sinkFull {
		qc.NeedKick, c.kickDue = true, true
		if !c.waitingWrite {
			c.waitingWrite = true
			c.cfg.Sink.NotifyWritable(c.writable)
		}
		return false
	}
	c.nextTag++
	if !qc.NoAck {
		qc.Unacked++
		c.globalUnacked++
		c.track(q, qc, d, q.DeliveredAt())
	}
	c.counts.DeliveredConsume[b2i(qc.NoAck)].Add(1)
	c.stats.countDelivery(false /* get */, qc.NoAck, d.Redelivered)
	if d.Redelivered {
		c.counts.Redelivered.Add(1)
	}
	c.deliver = amqp.BasicDeliver{ConsumerTag: qc.Tag, DeliveryTag: c.nextTag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey}
	props := d.Msg.Props
	if (d.Count > 0 || d.Acquired > 0) && q.CountsDeliveries() {
		props = withDeliveryCount(props, d.Count, d.Acquired)
	}
	// The cap is checked after the append (one lock, not two, per
	// delivery): a channel may go one message over it.
	// The queue has the connection write it (qc.Out is the sink).
	c.sinkFull = c.cfg.Sink.AppendContent(c.cfg.Number, &c.deliver, props, d.Msg.Body)
	if c.cfg.VHost.Tracing() {
		c.traceDeliver(q, d)
	}
	return true
}

// track records an unacked delivery with tag c.nextTag, made at at (unix
// nanoseconds). c.mu held.
func (c *Channel) track(q *queue.Queue, qc *queue.Consumer, d queue.Delivery, at int64) {
	timeout := c.cfg.ConsumerTimeout
	if qt := q.ConsumerTimeout(); qt > 0 {
		timeout = qt
	}
	if qc != nil && qc.Timeout > 0 {
		timeout = qc.Timeout
	}
	if timeout < 0 {
		timeout = 0
	}
	if timeout > 0 && (c.minTimeout == 0 || timeout < c.minTimeout) {
		c.minTimeout = timeout
	}
	if c.outstanding == 0 {
		c.unacked = c.unacked[:0]
	}
	c.unacked = append(c.unacked, unacked{tag: c.nextTag, q: q, c: qc, d: d, at: at, timeout: timeout})
	c.outstanding++
	c.replicated = c.replicated || q.Replicated()
}

// writable runs on the writer goroutine once the outbound buffer drained.
func (c *Channel) writable() {
	c.mu.Lock()
	c.waitingWrite, c.sinkFull = false, false
	kicks := c.kicksLocked()
	c.mu.Unlock()
	kick(kicks, nil)
}

type kickReq struct {
	q *queue.Queue
	c *queue.Consumer
}

// kicksLocked collects the consumers that were refused a delivery and may
// now take one. c.mu held.
func (c *Channel) kicksLocked() []kickReq {
	if !c.kickDue {
		return nil // no consumer was refused (one map walk less per ack)
	}
	c.kickDue = false
	var ks []kickReq
	for _, cons := range c.consumers {
		if cons.NeedKick {
			cons.NeedKick = false
			ks = append(ks, kickReq{cons.q, cons.Consumer})
		}
	}
	return ks
}

func kick(ks []kickReq, fl *queue.Flushes) {
	for _, k := range ks {
		k.q.Kick(k.c, fl)
	}
}

// Cancelled is called by a queue being deleted: the consumer is gone, and
// the client is told if it asked to be (consumer_cancel_notify).
func (c *Channel) Cancelled(qc *queue.Consumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.consumers[qc.Tag]; cur == nil || cur.Consumer != qc {
		return
	}
	delete(c.consumers, qc.Tag)
	if c.closed || !c.cfg.CancelNotify {
		return
	}
	if c.holdCancels {
		c.heldCancels = append(c.heldCancels, qc.Tag) // sent after the delete-ok
		return
	}
	c.send(&amqp.BasicCancel{ConsumerTag: qc.Tag, NoWait: true})
}

func (c *Channel) get(m *amqp.BasicGet) error {
	q, name, err := c.lookupQueueFor(auth.Read, m.Queue)
	if err != nil {
		return err
	}
	d, ok, remaining, err := q.Get(m.NoAck)
	if err != nil {
		return c.queueGone(err, name)
	}
	if !ok {
		c.counts.GetEmpty.Add(1)
		c.stats.GetEmpty.Add(1)
		c.send(&amqp.BasicGetEmpty{})
		return nil
	}
	c.counts.DeliveredGet[b2i(m.NoAck)].Add(1)
	c.stats.countDelivery(true /* get */, m.NoAck, d.Redelivered)
	if d.Redelivered {
		c.counts.Redelivered.Add(1)
	}
	c.mu.Lock()
	c.nextTag++
	if !m.NoAck {
		c.track(q, nil, d, queue.Now())
	}
	tag := c.nextTag
	c.mu.Unlock()
	props := d.Msg.Props
	if (d.Count > 0 || d.Acquired > 0) && q.CountsDeliveries() {
		props = withDeliveryCount(props, d.Count, d.Acquired)
	}
	c.cfg.Sink.SendContent(c.cfg.Number, &amqp.BasicGetOk{DeliveryTag: tag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey, MessageCount: uint32(remaining)}, props, d.Msg.Body)
	if c.cfg.VHost.Tracing() {
		c.traceDeliver(q, d)
	}
	return nil
}

// TimedOut reports whether a delivery has stayed unacked past its
// consumer timeout, and the timeout it exceeded. Safe from any goroutine;
// it looks only at deliveries old enough to have expired.
func (c *Channel) TimedOut() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outstanding == 0 || c.minTimeout == 0 || c.closed {
		return 0, false
	}
	n := queue.Now()
	for i := range c.unacked {
		u := &c.unacked[i]
		if n-u.at < int64(c.minTimeout) {
			break // later deliveries are younger still
		}
		if !u.done && !u.returned && u.timeout > 0 && n >= u.deadline() {
			return u.timeout, true
		}
	}
	return 0, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// queueGone is the channel error for a queue operation that failed: the
// queue's own answer if it has one (a classic queue whose home node is
// down says so with a 404, a quorum queue that cannot commit with a
// 541), else "no queue".
func (c *Channel) queueGone(err error, name string) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae
	}
	return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, c.cfg.VHost.Name())
}
