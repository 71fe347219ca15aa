package channel

import (
	"sync/atomic"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// pubConfirm waits for the store writes of one publish: its record and
// each durable queue's entry.
type pubConfirm struct {
	c       *Channel
	tag     uint64
	pending atomic.Int32
	failed  atomic.Bool
}

// Done is called (on the store's committer) as each write is durable.
func (p *pubConfirm) Done(err error) {
	if err != nil {
		p.failed.Store(true)
	}
	if p.pending.Add(-1) == 0 {
		p.c.settleConfirm(p.tag, !p.failed.Load())
	}
}

const (
	confPending byte = iota
	confAck
	confNack
)

// newConfirm numbers the publish being routed and tracks its confirm,
// due once n store writes or queue takes are done (vhost.FanOut); nil
// outside confirm mode.
func (c *Channel) newConfirm(n int) queue.Confirmer {
	if !c.confirm {
		return nil
	}
	c.published++
	conf := &pubConfirm{c: c, tag: c.published}
	conf.pending.Store(int32(n))
	c.trackConfirm(conf.tag)
	return conf
}

// trackConfirm registers publish tag as awaiting its confirm.
func (c *Channel) trackConfirm(tag uint64) {
	c.cmu.Lock()
	if len(c.cstate) == 0 {
		c.cbase = tag
	}
	c.cstate = append(c.cstate, confPending)
	c.cmu.Unlock()
}

// confirmNow confirms the latest publish (nothing of it needed the store).
func (c *Channel) confirmNow() {
	if !c.confirm {
		return
	}
	c.published++
	c.cmu.Lock()
	if len(c.cstate) == 0 {
		// Nothing outstanding: due at once.
		c.cbase = c.published + 1
		c.readyUpTo = c.published
	} else {
		c.cstate = append(c.cstate, confAck)
	}
	c.cmu.Unlock()
	c.confirmsDue()
}

// confirmsDue has Flush run on the connection's writer before its next
// write, once for all the confirms that become due until it runs. This is
// the one way confirms go out, whether they became due on the reader
// (nothing to store) or on the store's committer (durable): the writer
// coalesces what is due when it gets to it into one basic.ack.
func (c *Channel) confirmsDue() {
	if !c.cdirty.Swap(true) {
		c.cfg.Sink.Schedule(c.Flush)
	}
}

// settleConfirm records the outcome of an asynchronous confirm and has it
// sent with the next write.
func (c *Channel) settleConfirm(tag uint64, ok bool) {
	c.cmu.Lock()
	if i := tag - c.cbase; tag >= c.cbase && i < uint64(len(c.cstate)) {
		if ok {
			c.cstate[i] = confAck
		} else {
			c.cstate[i] = confNack
		}
	}
	c.cmu.Unlock()
	c.confirmsDue()
}

// Flush sends the confirms that are due, in tag order: a run of acks as
// one basic.ack (multiple when it covers several), a failed publish as
// basic.nack. Safe from any goroutine: the writer runs it (confirmsDue),
// and the reader before it closes the channel, so that the confirms
// already earned go out before the close.
func (c *Channel) Flush() {
	if !c.cdirty.Swap(false) {
		return
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.cclosed {
		return // a hook that ran after Close: the number may be reused
	}
	upTo := c.readyUpTo
	i := 0
	for ; i < len(c.cstate) && c.cstate[i] != confPending; i++ {
		tag := c.cbase + uint64(i)
		if c.cstate[i] == confNack {
			c.sendAcks(upTo)
			c.send(&amqp.BasicNack{DeliveryTag: tag})
			c.ackedUpTo = tag
			upTo = tag
			continue
		}
		upTo = tag
	}
	c.cstate = c.cstate[:copy(c.cstate, c.cstate[i:])]
	c.cbase += uint64(i)
	c.readyUpTo = upTo
	c.sendAcks(upTo)
}

// sendAcks acknowledges every publish up to tag not yet acknowledged.
// c.cmu held.
func (c *Channel) sendAcks(tag uint64) {
	if tag <= c.ackedUpTo {
		return
	}
	c.send(&amqp.BasicAck{DeliveryTag: tag, Multiple: tag-c.ackedUpTo > 1})
	c.counts.Confirmed.Add(int64(tag - c.ackedUpTo))
	c.stats.Confirm.Add(int64(tag - c.ackedUpTo))
	c.ackedUpTo = tag
}
