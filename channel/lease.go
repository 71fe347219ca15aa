package channel

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Leases and retries a worker asks for with a publish on the channel that
// holds the delivery (docs/leases.md):
//
//   - amq.railmq.lease, routing key a delivery tag of this channel
//     (decimal): the delivery's ack deadline becomes now + x-lease-ms
//     (header, int or decimal string; default the delivery's consumer
//     timeout again). A delivery with no consumer timeout has no
//     deadline: the lease is confirmed and changes nothing.
//   - amq.railmq.retry, routing key a delivery tag, header x-delay (ms):
//     the delivery goes back to its queue, held there until the delay has
//     passed (queue.RetryAfter), as a failed delivery would be by
//     x-retry-delay: redelivered flagged, its delivery count up.
//
// The publish is consumed here, before permissions and routing: it needs
// what a basic.ack needs (the channel, hence access to its vhost), not
// write on the exchange; nothing is routed, so mandatory returns nothing
// and the body is ignored. It acts at once, in a transaction too (a lease
// is not a settlement to defer; a retry settles as the worker asks, now).
// Under confirms a lease or retry done is acked; one refused (an unknown
// or settled tag, a malformed key or header, a queue that cannot hold a
// return) is nacked, and logged at Warn: never a channel error, which
// would take the worker's other deliveries away from it.

// leasePublish takes a publish to amq.railmq.lease or amq.railmq.retry;
// it reports false, doing nothing, for any other exchange.
func (c *Channel) leasePublish(p *amqp.BasicPublish, v amqp.PropertiesView) bool {
	var err error
	switch p.Exchange {
	case vhost.LeaseExchange:
		err = c.extendLease(p.RoutingKey, v.Headers)
	case vhost.RetryExchange:
		if err = c.retryLater(p.RoutingKey, v.Headers); err == nil {
			return true // confirmed once the hold is durable
		}
	default:
		return false
	}
	if err != nil {
		c.cfg.Totals.LeasesRefused.Add(1)
		c.logRefused(p, err)
		c.confirmNack()
		return true
	}
	c.confirmNow()
	return true
}

// logRefused logs a refused lease or retry at Warn (a client's mistake),
// worded as RabbitMQ's channel errors are (broker/connlog.go), with the
// same facts as typed fields:
//
//	Lease refused on connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:
//	operation basic.publish to exchange 'amq.railmq.lease' refused: unknown delivery tag 42
//
// One line per refused publish: a client's mistake, not per message.
func (c *Channel) logRefused(p *amqp.BasicPublish, err error) {
	vh := c.vhostName()
	c.cfg.Logger.Warn(fmt.Sprintf("Lease refused on connection <0.%d.0> (%s, vhost: '%s', user: '%s'), channel %d:\noperation basic.publish to exchange '%s' refused: %s",
		c.cfg.ConnID, c.cfg.ConnName, vh, c.cfg.User, c.cfg.Number, p.Exchange, err.Error()),
		zap.String("connection", c.cfg.ConnName), zap.String("vhost", vh), zap.String("user", c.cfg.User),
		zap.Uint16("channel", c.cfg.Number), zap.String("exchange", p.Exchange), zap.String("routing_key", p.RoutingKey),
		zap.String("reason", err.Error()))
}

func (c *Channel) vhostName() string {
	if c.cfg.VHost == nil {
		return ""
	}
	return c.cfg.VHost.Name()
}

// confirmNack numbers the latest publish and nacks it.
func (c *Channel) confirmNack() {
	if !c.confirm {
		return
	}
	c.published++
	c.trackConfirm(c.published)
	c.settleConfirm(c.published, false)
}

// maxLease bounds x-lease-ms and x-delay: 10 years, the longest TTL.
const maxLease = maxTTL

// leaseTag parses a routing key as a delivery tag: decimal digits only,
// not 0.
func leaseTag(key string) (uint64, error) {
	tag, err := strconv.ParseUint(key, 10, 64)
	if err != nil || tag == 0 {
		return 0, fmt.Errorf("invalid delivery tag '%s' in the routing key", key)
	}
	return tag, nil
}

// headerMillis reads header name as milliseconds: an integer of any width
// or a string of decimal digits, from 0 up to maxLease. ok is false when
// the header is absent.
func headerMillis(h []byte, name string) (ms int64, ok bool, err error) {
	val, ok := amqp.HeaderField(h, name)
	if !ok {
		return 0, false, nil
	}
	n, isInt := amqp.FieldInt(val)
	if !isInt && len(val) >= 5 && val[0] == 'S' {
		n, err = strconv.ParseInt(string(val[5:]), 10, 64)
		isInt = err == nil
	}
	if !isInt {
		return 0, true, fmt.Errorf("invalid %s header: expected an integer of milliseconds", name)
	}
	if n < 0 || n > maxLease {
		return 0, true, fmt.Errorf("invalid %s header: %d is out of range (0 to %d ms)", name, n, int64(maxLease))
	}
	return n, true, nil
}

// errUnknownTag is the refusal of a tag that is not an unacked delivery
// of this channel, in RabbitMQ's words for basic.ack's.
func errUnknownTag(tag uint64) error {
	return fmt.Errorf("unknown delivery tag %d", tag)
}

// lookupUnacked finds the unsettled delivery tag. c.mu held.
func (c *Channel) lookupUnacked(tag uint64) *unacked {
	i := sort.Search(len(c.unacked), func(i int) bool { return c.unacked[i].tag >= tag })
	if i == len(c.unacked) || c.unacked[i].tag != tag || c.unacked[i].done || c.unacked[i].returned {
		return nil
	}
	return &c.unacked[i]
}

// extendLease moves a delivery's ack deadline (amq.railmq.lease).
func (c *Channel) extendLease(key string, h []byte) error {
	tag, err := leaseTag(key)
	if err != nil {
		return err
	}
	ms, given, err := headerMillis(h, "x-lease-ms")
	if err != nil {
		return err
	}
	if given && ms == 0 {
		return errors.New("invalid x-lease-ms header: 0 is out of range (1 to 315360000000 ms)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.lookupUnacked(tag)
	if u == nil {
		return errUnknownTag(tag)
	}
	if u.timeout <= 0 {
		return nil // no deadline to move
	}
	d := u.timeout
	if given {
		d = time.Duration(ms) * time.Millisecond
	}
	u.lease = queue.Now() + int64(d)
	// TimedOut stops at the first delivery younger than minTimeout: every
	// deadline stays at least minTimeout after its delivery.
	if since := time.Duration(u.lease - u.at); since < c.minTimeout {
		c.minTimeout = max(since, 1)
	}
	c.cfg.Totals.LeasesExtended.Add(1)
	return nil
}

// retryLater gives a delivery back to its queue, to be redelivered after
// x-delay (amq.railmq.retry). Under confirms, the publish is confirmed
// once the hold is durable (written with the queue's entry, or committed
// to a quorum queue's log), as a publish to the queue would be.
func (c *Channel) retryLater(key string, h []byte) error {
	tag, err := leaseTag(key)
	if err != nil {
		return err
	}
	ms, given, err := headerMillis(h, "x-delay")
	if err != nil {
		return err
	}
	if !given {
		return errors.New("no x-delay header")
	}
	c.mu.Lock()
	u := c.lookupUnacked(tag)
	if u == nil {
		c.mu.Unlock()
		return errUnknownTag(tag)
	}
	if !u.q.HoldsReturns() {
		c.mu.Unlock()
		return fmt.Errorf("queue '%s' cannot hold a delivery for a retry", u.q.Name())
	}
	q, d := u.q, u.d
	c.release(u)
	c.compact()
	kicks := c.kicksLocked()
	c.mu.Unlock()
	conf := c.newConfirm(1)
	if err := q.RetryAfter([]queue.Delivery{d}, time.Duration(ms)*time.Millisecond, conf, c.cfg.Flushes); err != nil {
		// HoldsReturns said it could: a bug. The publish is nacked; the
		// delivery is settled here and stays unacked in its queue.
		c.cfg.Logger.Error("retry not held", zap.String("queue", q.Name()), zap.Error(err))
		if conf != nil {
			conf.Done(err)
		}
		return nil
	}
	c.cfg.Totals.RetriesScheduled.Add(1)
	kick(kicks, c.cfg.Flushes)
	return nil
}

// deadline is when u's consumer timeout runs out (unix nanos): its lease
// when one was taken, else its timeout after its delivery; 0 for none.
func (u *unacked) deadline() int64 {
	switch {
	case u.timeout <= 0:
		return 0
	case u.lease != 0:
		return u.lease
	}
	return u.at + int64(u.timeout)
}

// PendingAck is an unacked delivery of a channel as the management API
// shows it (pending_acks).
type PendingAck struct {
	Tag         uint64
	Queue       string
	ConsumerTag string // "" for basic.get
	DeliveredAt int64  // unix nanos
	Deadline    int64  // unix nanos; 0: no consumer timeout
	Leased      bool   // the deadline was moved by amq.railmq.lease
}

// PendingAcks lists up to limit of the channel's unacked deliveries, in
// tag order, with their deadlines. Any goroutine may call it.
func (c *Channel) PendingAcks(limit int) []PendingAck {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []PendingAck
	for i := range c.unacked {
		u := &c.unacked[i]
		if u.done || u.returned {
			continue
		}
		if len(out) == limit {
			break
		}
		p := PendingAck{Tag: u.tag, Queue: u.q.Name(), DeliveredAt: u.at, Deadline: u.deadline(), Leased: u.lease != 0}
		if u.c != nil {
			p.ConsumerTag = u.c.Tag
		}
		out = append(out, p)
	}
	return out
}
