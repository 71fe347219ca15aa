package cluster

// x-max-length(-bytes), x-overflow and x-expires as RabbitMQ's rabbit_fifo
// (deps/rabbit/src/rabbit_fifo.erl at v4.3.5; 3.10.8 behaves the same):
//
// The limits count the ready messages and their bytes (messages_ready,
// msg_bytes_enqueue), not those checked out to consumers. A queue is over
// its limit with more than x-max-length ready, or more than
// x-max-length-bytes (is_over_limit). After each command (its deliveries
// made: evaluate_limit follows checkout), drop-head drops the messages
// served next until it is not over (drop_head, dead-lettered maxlen);
// reject-publish takes the message that goes over and refuses the next
// ones until the queue is back at 80% of its limits (is_below_soft_limit,
// ?LOW_LIMIT 0.8). RabbitMQ 3.10.8 asked: x-max-length 2, reject-publish,
// six publishes with confirms one by one: ack, ack, ack, nack, nack,
// nack, "messages 3"; after a basic.get and its ack (2 ready), nack.
//
// x-expires: the queue is deleted when it has had no consumer and no
// basic.get for the period (is_expired, last_active; the deletion is the
// leader's to make, tick's spawn_deleter). A redeclare is no use: it
// does not reach the state machine (rabbit_quorum_queue:declare answers
// {existing, Q}); RabbitMQ 3.10.8 asked, x-expires 1500, redeclared every
// 0.2 s: deleted (and made anew) after 5 s, its message gone.

// lowLimit is rabbit_fifo's ?LOW_LIMIT: reject-publish takes publishes
// again at this share of the limits.
const lowLimit = 0.8

// Touch marks the queue used at now, for x-expires: the start of the
// period of a queue no command has stamped yet.
func Touch(now int64) Command { return Command{Kind: cmdTouch, Now: now} }

// over reports whether more is ready, with the dead letters held
// (at-least-once, fifo_dlx.go), than a limit allows (rabbit_fifo.erl
// is_over_limit at v4.3.5: messages_ready plus rabbit_fifo_dlx:stat).
func (f *Fifo) over() bool {
	n, b := f.limited()
	ml, mlOn := f.cfg.lengthLimit()
	mb, mbOn := f.cfg.bytesLimit()
	return (mlOn && n > ml) || (mbOn && b > mb)
}

// belowSoft reports whether the ready messages (and the held dead
// letters) are back within 80% of the limits (is_below_soft_limit).
func (f *Fifo) belowSoft() bool {
	below := func(limit int64, on bool, n int64) bool { return !on || n <= int64(float64(limit)*lowLimit) }
	n, b := f.limited()
	ml, mlOn := f.cfg.lengthLimit()
	mb, mbOn := f.cfg.bytesLimit()
	return below(ml, mlOn, n) && below(mb, mbOn, b)
}

// limited is what the length limits count: messages and bytes.
func (f *Fifo) limited() (n, bytes int64) {
	return int64(f.ready.len() + len(f.discards)), f.ready.bytes + f.dlxBytes
}

// limit applies the overflow behaviour after a command.
func (f *Fifo) limit(e *Effects) {
	if f.cfg.RejectPublish {
		if f.blocked && !f.over() && f.belowSoft() {
			f.blocked = false
		}
		return
	}
	f.blocked = false
	for f.over() {
		m := f.ready.pop()
		f.remove(m)
		e.DeadLetters = append(e.DeadLetters, DeadLetter{Msg: m.message(), Reason: ReasonMaxLen})
	}
}

// Blocked reports whether reject-publish refuses publishes now.
func (f *Fifo) Blocked() bool { return f.blocked }

// used notes the time of a command that counts as use for x-expires: a
// consumer attaching or leaving, a basic.get, a Touch (c.Now 0: a command
// made without the time).
func (f *Fifo) used(c *Command) {
	switch c.Kind {
	case cmdCheckout, cmdCancel, cmdDown, cmdDequeue, cmdTouch:
		if c.Now > f.lastActive {
			f.lastActive = c.Now
		}
	}
}

// LastActive is when the queue was last used (unix ms), 0 if no command
// with the time has said so yet.
func (f *Fifo) LastActive() int64 { return f.lastActive }

// Unused reports whether x-expires has run out at now: no consumer, and
// no use for longer than it. Deleting the queue is the leader's to do.
func (f *Fifo) Unused(now int64) bool {
	return f.cfg.Expires > 0 && f.lastActive > 0 && len(f.cons) == 0 && now > f.lastActive+f.cfg.Expires
}

// lengthLimit is x-max-length, if in force.
func (c *FifoConfig) lengthLimit() (int64, bool) {
	return c.MaxLength, c.MaxLengthOn || c.MaxLength > 0
}

// bytesLimit is x-max-length-bytes, if in force.
func (c *FifoConfig) bytesLimit() (int64, bool) {
	return c.MaxLengthBytes, c.MaxLengthBytesOn || c.MaxLengthBytes > 0
}
