package cluster

// At-least-once dead-lettering (x-dead-letter-strategy at-least-once), as
// RabbitMQ's rabbit_fifo_dlx (v4.3.5): a message dead-lettered by a queue
// with the strategy does not leave the state when it dies. It stays, in
// the discards, until the leader has republished it to the dead-letter
// exchange and every queue it was routed to has confirmed it; the leader
// then proposes DeadSettled, and applying that removes it. The discards
// are in the replicated state, so whichever member leads sends again what
// was not settled when the last leader went (rabbit_fifo_dlx:state_enter:
// the dead-letter worker starts wherever the leader is, and checks out
// every discard). They count toward x-max-length and x-max-length-bytes,
// as rabbit_fifo:is_over_limit counts them, and toward the queue's
// messages (rabbit_fifo:messages_total), not toward its ready or
// unacknowledged ones (messages_dlx in the management API).
//
// RabbitMQ takes the strategy only with x-overflow reject-publish (a
// drop-head queue falls back to at-most-once: rabbit_quorum_queue:dlh), and
// never discards a message for maxlen under it (rabbit_fifo_dlx:discard's
// guard); the caller sets FifoConfig.AtLeastOnce accordingly.

// DeadSettled removes dead-lettered messages that their dead-letter
// targets have confirmed (RabbitMQ's {dlx, #settle{}}); ids no longer
// held are ignored, so it may be sent again.
func DeadSettled(ids ...uint64) Command { return Command{Kind: cmdDeadSettled, IDs: ids} }

// deadLetter takes m out of the queue's ready and checked-out messages for
// reason (m is already off f.ready, and off its consumer's count when
// checked out). At most once, it is gone and its dead letter is an effect;
// at least once, it stays held, in the discards, and the effect names it
// (DeadLetter.ID, Held) for the leader to settle.
func (f *Fifo) deadLetter(m *fifoMsg, reason string, e *Effects) {
	if !f.cfg.AtLeastOnce || reason == ReasonMaxLen {
		f.remove(m)
		e.DeadLetters = append(e.DeadLetters, DeadLetter{Msg: m.message(), Reason: reason})
		return
	}
	if m.Consumer != "" {
		if k := f.cons[m.Consumer]; k != nil {
			k.Out--
		}
		f.unhold(m)
		m.Consumer = ""
	}
	m.Reason = reason
	if f.dedup != nil {
		f.dedupForget(m.Props) // it left the queue: held for its targets only
	}
	f.discards = append(f.discards, m.ID)
	f.dlxBytes += int64(len(m.Body))
	e.DeadLetters = append(e.DeadLetters, DeadLetter{Msg: m.message(), Reason: reason, ID: m.ID, Held: true})
}

// deadSettled applies DeadSettled.
func (f *Fifo) deadSettled(ids []uint64) {
	gone := map[uint64]bool{}
	for _, id := range ids {
		if m := f.msgs[id]; m != nil && m.Reason != "" {
			gone[id] = true
			delete(f.msgs, id)
			f.bytes -= int64(len(m.Body))
			f.dlxBytes -= int64(len(m.Body))
		}
	}
	if len(gone) == 0 {
		return
	}
	keep := f.discards[:0]
	for _, id := range f.discards {
		if !gone[id] {
			keep = append(keep, id)
		}
	}
	f.discards = keep
}

// purgeDiscards drops every held dead letter (a purge takes them too:
// rabbit_fifo's purge counts and drops the dlx state's) and counts them.
func (f *Fifo) purgeDiscards() int {
	n := len(f.discards)
	for _, id := range f.discards {
		if m := f.msgs[id]; m != nil {
			delete(f.msgs, id)
			f.bytes -= int64(len(m.Body))
		}
	}
	f.discards, f.dlxBytes = nil, 0
	return n
}

// Discarded is the count and body bytes of the dead-lettered messages
// held until their targets confirm (RabbitMQ's messages_dlx and
// message_bytes_dlx).
func (f *Fifo) Discarded() (n int, bytes int64) { return len(f.discards), f.dlxBytes }

// EachDiscard calls fn with the held dead letters, oldest first, while
// it returns true. fn must not change f.
func (f *Fifo) EachDiscard(fn func(dl DeadLetter) bool) {
	for _, id := range f.discards {
		m := f.msgs[id]
		if !fn(DeadLetter{Msg: m.message(), Reason: m.Reason, ID: id, Held: true}) {
			return
		}
	}
}

// IsDiscard reports whether id is a held dead letter.
func (f *Fifo) IsDiscard(id uint64) bool {
	m := f.msgs[id]
	return m != nil && m.Reason != ""
}
