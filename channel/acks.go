package channel

import (
	"math"
	"sort"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

type ackKind uint8

const (
	ackAck ackKind = iota
	ackReject
	ackNack // basic.nack: with requeue, not a failed delivery (RabbitMQ 4.3's quorum queues)
)

func (c *Channel) ack(m amqp.Method, tag uint64, multiple bool, kind ackKind, requeue bool) error {
	if c.tx {
		c.deferOp(txOp{ack: cloneAck(m)})
		return nil
	}
	return c.settle(tag, multiple, kind, requeue)
}

func cloneAck(m amqp.Method) amqp.Method {
	switch a := m.(type) {
	case *amqp.BasicAck:
		x := *a
		return &x
	case *amqp.BasicNack:
		x := *a
		return &x
	case *amqp.BasicReject:
		x := *a
		return &x
	}
	return m
}

// batch groups settled deliveries by queue.
type batch struct {
	q  *queue.Queue
	ds []queue.Delivery
}

// settle acks, rejects or requeues delivery tag (and, with multiple, every
// earlier one; tag 0 with multiple means all).
func (c *Channel) settle(tag uint64, multiple bool, kind ackKind, requeue bool) error {
	c.mu.Lock()
	var one [1]batch // the common case, one queue, without an allocation
	bs := one[:0]
	add := func(u *unacked) {
		for i := range bs {
			if bs[i].q == u.q {
				bs[i].ds = append(bs[i].ds, u.d)
				return
			}
		}
		bs = append(bs, batch{q: u.q, ds: []queue.Delivery{u.d}})
	}
	// The tag itself must be outstanding, also with multiple (RabbitMQ's
	// collect_acks); multiple with tag 0 settles everything.
	i := sort.Search(len(c.unacked), func(i int) bool { return c.unacked[i].tag >= tag })
	if !(multiple && tag == 0) && (i == len(c.unacked) || c.unacked[i].tag != tag || c.unacked[i].done) {
		c.mu.Unlock()
		return precondition("unknown delivery tag %d", tag)
	}
	first, last := i, i
	if multiple {
		first = 0
		if tag == 0 {
			last = len(c.unacked) - 1
		}
	}
	for j := first; j <= last; j++ {
		if u := &c.unacked[j]; !u.done {
			c.release(u)
			if !u.returned { // else its queue has it back already (timeout.go)
				add(u)
			}
		}
	}
	c.compact()
	kicks := c.kicksLocked()
	c.mu.Unlock()
	for _, b := range bs {
		switch {
		case kind == ackAck:
			c.counts.Acknowledged.Add(int64(len(b.ds)))
			c.stats.Ack.Add(int64(len(b.ds)))
			b.q.Ack(b.ds, c.cfg.Flushes)
		case requeue && kind == ackNack:
			// The consumer's verdict: held back first when the queue's
			// retry delay holds it (queue.Retry.Holds).
			b.q.RequeueNacked(b.ds, c.cfg.Flushes)
		case requeue:
			b.q.RequeueRejected(b.ds, c.cfg.Flushes)
		default:
			b.q.Discard(b.ds, c.cfg.Flushes)
		}
	}
	kick(kicks, c.cfg.Flushes)
	return nil
}

// release marks u settled and frees its prefetch slot. c.mu held.
func (c *Channel) release(u *unacked) {
	u.done = true
	c.outstanding--
	if u.c != nil {
		u.c.Unacked--
		c.globalUnacked--
	}
}

// compact drops settled entries from the front. c.mu held.
func (c *Channel) compact() {
	i := 0
	for i < len(c.unacked) && c.unacked[i].done {
		c.unacked[i] = unacked{}
		i++
	}
	if i == 0 {
		return
	}
	if i == len(c.unacked) {
		c.unacked = c.unacked[:0]
		return
	}
	if i > len(c.unacked)/2 {
		n := copy(c.unacked, c.unacked[i:])
		c.unacked = c.unacked[:n]
	} else {
		c.unacked = c.unacked[i:]
	}
}

// takeAllLocked removes every unacked delivery, grouped by queue in tag
// order. c.mu held.
func (c *Channel) takeAllLocked() []batch {
	var bs []batch
	for i := range c.unacked {
		u := &c.unacked[i]
		if u.done {
			continue
		}
		c.release(u)
		if u.returned {
			continue // its queue has it back already (timeout.go)
		}
		found := false
		for j := range bs {
			if bs[j].q == u.q {
				bs[j].ds = append(bs[j].ds, u.d)
				found = true
				break
			}
		}
		if !found {
			bs = append(bs, batch{q: u.q, ds: []queue.Delivery{u.d}})
		}
	}
	c.unacked = c.unacked[:0]
	return bs
}

// requeueAll returns every unacked delivery to its queue (basic.recover).
func (c *Channel) requeueAll() {
	c.mu.Lock()
	bs := c.takeAllLocked()
	kicks := c.kicksLocked()
	c.mu.Unlock()
	for _, b := range bs {
		b.q.Recover(b.ds, c.cfg.Flushes)
	}
	kick(kicks, c.cfg.Flushes)
}

// AckWait reports how many deliveries on the channel are not yet settled,
// and whether the connection may read their acks late (the broker's ack
// coalescing): every consumer (and the channel's global prefetch) has at
// least half its prefetch free, so no delivery waits for those acks, and
// the channel never had a delivery from a queue whose state is elsewhere
// (a quorum queue, a classic queue on another node), whose acks must
// reach its leader before a failover can hand the messages out again.
// room is how many more deliveries keep it so: the least, over the
// consumers and the global prefetch, of half the prefetch less what is
// unacked (math.MaxInt32 without a prefetch).
func (c *Channel) AckWait() (outstanding, room int, roomy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room = math.MaxInt32
	if c.replicated || (c.globalPrefetch > 0 && 2*c.globalUnacked > c.globalPrefetch) {
		return c.outstanding, 0, false
	}
	if c.globalPrefetch > 0 {
		room = min(room, c.globalPrefetch/2-c.globalUnacked)
	}
	for _, cs := range c.consumers {
		if p := cs.Prefetch; p > 0 {
			if 2*cs.Unacked > p {
				return c.outstanding, 0, false
			}
			room = min(room, p/2-cs.Unacked)
		}
	}
	return c.outstanding, room, true
}
