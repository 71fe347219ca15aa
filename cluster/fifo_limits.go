package cluster

import "sort"

// A quorum queue's delivery limit and delayed retries, as RabbitMQ 4.3's
// rabbit_fifo (deps/rabbit/src/rabbit_fifo.erl at v4.3.5):
//
//   - Two counts per message. A return raises the acquired count; only a
//     failed delivery raises the delivery count too (incr_msg_headers):
//     basic.reject with requeue and a consumer that went (its channel
//     closed, its connection or node died: return_all with Reason ==
//     down) fail; basic.nack with requeue, basic.recover and a consumer
//     timeout do not (return with DeliveryFailed false). The delivery
//     limit is checked against the delivery count on every return
//     (return_one: DeliveryCount > DeliveryLimit), so a nack never
//     dead-letters a message, unless a policy lowered the limit below
//     what the message already counts.
//   - Modify is the return that says which it was (a cmdReturn of an
//     older log is a failed one: every return counted then), and when
//     the message is ready again: a returned message may be held back
//     (delayed retry) until its due time, which the node that returns it
//     computes from the queue's retry setting (queue.Retry, the one
//     backoff computation of classic and quorum queues) and writes into
//     the command, so that applying it stays a pure function. A held
//     message is neither ready nor checked out; the leader's Tick
//     (stamped with its clock) makes those due ready again, among the
//     returns, by id.
//   - Config changes the delivery limit in log order (rabbit_fifo's
//     update_config, which a policy change on a live queue sends:
//     rabbit_quorum_queue:policy_changed), so every member applies the
//     same limit to the same returns.

// Modify returns messages checked out to tag: failed counts toward the
// delivery limit; due (unix ms, 0: none) holds them until then.
func Modify(tag string, failed bool, due int64, ids ...uint64) Command {
	return Command{Kind: cmdModify, Consumer: tag, Failed: failed, Due: due, IDs: ids}
}

// Config sets what a policy may change on a live queue (RabbitMQ 4.3's
// rabbit_quorum_queue:policy_changed): the delivery limit (negative:
// none), the length limits, x-overflow reject-publish and the message
// TTL, as cfg has them (its other fields are not taken).
func Config(cfg FifoConfig) Command {
	return Command{Kind: cmdConfig, Limit: cfg.DeliveryLimit, Conf: &cfg}
}

// Policied is the part of a queue's configuration that Config sets.
func (c FifoConfig) Policied() FifoConfig {
	ml, mlOn := c.lengthLimit()
	mb, mbOn := c.bytesLimit()
	if !mlOn {
		ml = 0
	}
	if !mbOn {
		mb = 0
	}
	return FifoConfig{DeliveryLimit: max(c.DeliveryLimit, -1), MaxLength: ml, MaxLengthOn: mlOn, MaxLengthBytes: mb, MaxLengthBytesOn: mbOn,
		RejectPublish: c.RejectPublish, MessageTTL: c.MessageTTL}
}

// Config is the queue's configuration as its log has set it.
func (f *Fifo) Config() FifoConfig { return f.cfg }

// Delayed is the count of messages held for a delayed retry.
func (f *Fifo) Delayed() int { return len(f.delayed) }

// NextDue is when the first held message is due (unix ms), 0 if none
// is held: a Tick at or after it makes it ready.
func (f *Fifo) NextDue() int64 {
	if len(f.delayed) == 0 {
		return 0
	}
	return f.msgs[f.delayed[0]].ReadyAt
}

// applyLimits applies this file's commands.
func (f *Fifo) applyLimits(c *Command, e *Effects) {
	switch c.Kind {
	case cmdModify:
		f.returnAs(c.Consumer, c.IDs, c.Failed, c.Due, e)
	case cmdConfig:
		f.cfg.DeliveryLimit = c.Limit
		if p := c.Conf; p != nil {
			f.cfg.MaxLength, f.cfg.MaxLengthOn = p.MaxLength, p.MaxLengthOn
			f.cfg.MaxLengthBytes, f.cfg.MaxLengthBytesOn = p.MaxLengthBytes, p.MaxLengthBytesOn
			f.cfg.RejectPublish, f.cfg.MessageTTL = p.RejectPublish, p.MessageTTL
		}
	case cmdGroupHeader:
		f.setGroupHeader(c.Consumer) // fifo_groups.go
	}
}

// delay holds m (off the ready list, checked out to none) until due,
// keeping f.delayed in due order (ties by id).
func (f *Fifo) delay(m *fifoMsg, due int64) {
	m.ReadyAt = due
	f.grpHeld(m, 1) // its group waits (fifo_groups.go)
	i := sort.Search(len(f.delayed), func(i int) bool {
		o := f.msgs[f.delayed[i]]
		return o.ReadyAt > due || (o.ReadyAt == due && o.ID > m.ID)
	})
	f.delayed = append(f.delayed, 0)
	copy(f.delayed[i+1:], f.delayed[i:])
	f.delayed[i] = m.ID
}

// releaseDelayed makes the held messages due at now ready again, among
// the returns.
func (f *Fifo) releaseDelayed(now int64) {
	if now == 0 {
		return // a nudge, not a tick with a time
	}
	n := 0
	for n < len(f.delayed) && f.msgs[f.delayed[n]].ReadyAt <= now {
		f.msgs[f.delayed[n]].ReadyAt = 0
		n++
	}
	if n == 0 {
		return
	}
	due := make([]*fifoMsg, n)
	for i, id := range f.delayed[:n] {
		due[i] = f.msgs[id]
		f.grpHeld(due[i], -1)
	}
	f.delayed = append(f.delayed[:0], f.delayed[n:]...)
	f.toReturns(due)
}

// purgeDelayed drops the held messages (a purge takes them with the
// ready ones, as rabbit_fifo's purge does); it returns how many.
func (f *Fifo) purgeDelayed() int {
	n := len(f.delayed)
	for _, id := range f.delayed {
		f.grpHeld(f.msgs[id], -1)
		f.remove(f.msgs[id])
	}
	f.delayed = f.delayed[:0]
	return n
}

// restoreDelayed orders the held messages of a restored state.
func (f *Fifo) restoreDelayed() {
	sort.Slice(f.delayed, func(i, j int) bool {
		a, b := f.msgs[f.delayed[i]], f.msgs[f.delayed[j]]
		return a.ReadyAt < b.ReadyAt || (a.ReadyAt == b.ReadyAt && a.ID < b.ID)
	})
}

// encodeLimits appends this file's commands' fields (after the kind and
// Now, as Encode writes them).
func encodeLimits(c *Command, e Enc) Enc {
	switch c.Kind {
	case cmdModify:
		e = e.Str32(c.Consumer).Bool(c.Failed).U64(uint64(c.Due)).U32(uint32(len(c.IDs)))
		for _, id := range c.IDs {
			e = e.U64(id)
		}
	case cmdConfig:
		p := c.Conf
		if p == nil {
			p = &FifoConfig{}
		}
		var flags uint8
		for i, b := range []bool{p.MaxLengthOn, p.MaxLengthBytesOn, p.RejectPublish} {
			if b {
				flags |= 1 << i
			}
		}
		e = e.U64(uint64(c.Limit)).U8(flags).U64(uint64(p.MaxLength)).U64(uint64(p.MaxLengthBytes)).U64(uint64(p.MessageTTL))
	case cmdGroupHeader:
		e = e.Str32(c.Consumer)
	}
	return e
}

// decodeLimits reads what encodeLimits wrote; false: not one of this
// file's kinds.
func decodeLimits(c *Command, d *Dec) bool {
	switch c.Kind {
	case cmdModify:
		c.Consumer = d.Str32()
		flag := d.U8()
		if flag > 1 {
			return false
		}
		c.Failed = flag == 1
		c.Due = int64(d.U64())
		n := d.Count32(8)
		if d.Err() != nil {
			return false
		}
		c.IDs = make([]uint64, n)
		for i := range c.IDs {
			c.IDs[i] = d.U64()
		}
	case cmdConfig:
		c.Limit = int64(d.U64())
		flags := d.U8()
		if flags > 7 {
			return false
		}
		c.Conf = &FifoConfig{DeliveryLimit: c.Limit, MaxLengthOn: flags&1 != 0, MaxLengthBytesOn: flags&2 != 0, RejectPublish: flags&4 != 0,
			MaxLength: int64(d.U64()), MaxLengthBytes: int64(d.U64()), MessageTTL: int64(d.U64())}
	case cmdGroupHeader:
		c.Consumer = d.Str32()
	default:
		return false
	}
	return true
}
