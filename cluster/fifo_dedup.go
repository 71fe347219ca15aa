package cluster

// Deduplication in a quorum queue's state (x-message-deduplication on a
// quorum queue, with GroupConfig.DedupKey): as a classic queue's (the
// rabbitmq-message-deduplication plugin's queue level), a message whose
// id is that of a message held, ready or checked out, is refused as a
// duplicate (Effects.Duplicate), and the id leaves with its message:
// settled, dequeued without ack, dead-lettered, dropped or purged.
//
// The ids are part of the replicated state: an enqueue is a log entry,
// applied on every member in log order, so every member knows the same
// ids, and a publisher that retries after the leader that confirmed its
// message failed finds the new leader refusing the retry as a
// duplicate, not storing it twice. A snapshot holds the messages, and
// the ids are rebuilt from them on restore (setDedupKey); the log and
// snapshot formats are unchanged.
//
// The ids are kept whole (a string each), not hashed: a hash collision
// would have to refuse the same message on every member alike, which a
// seeded hash cannot promise.

// dedupAdmit records the id of a message with props and reports true, or
// reports false if a held message has that id. f.dedup not nil.
func (f *Fifo) dedupAdmit(props []byte) bool {
	key, ok := f.dedupKey(props)
	if !ok {
		return true // no id: never a duplicate
	}
	if f.dedup[string(key)] > 0 {
		return false
	}
	f.dedup[string(key)] = 1
	return true
}

// dedupForget removes the id of a message with props, which leaves the
// queue. f.dedup not nil.
func (f *Fifo) dedupForget(props []byte) {
	key, ok := f.dedupKey(props)
	if !ok {
		return
	}
	if n := f.dedup[string(key)]; n > 1 {
		f.dedup[string(key)] = n - 1
	} else {
		delete(f.dedup, string(key))
	}
}

// setDedupKey gives a state restored from a snapshot its member's
// DedupKey (nil: the queue does not deduplicate) and rebuilds the ids
// of the messages it holds.
func (f *Fifo) setDedupKey(key func(props []byte) ([]byte, bool)) {
	f.dedupKey = key
	f.dedup = nil
	if key == nil {
		return
	}
	f.dedup = make(map[string]int32, len(f.msgs))
	for _, m := range f.msgs {
		if m.Reason != "" {
			continue // a held dead letter: out of the queue
		}
		if k, ok := key(m.Props); ok {
			f.dedup[string(k)]++
		}
	}
}

// Deduplicating reports whether the queue refuses duplicates.
func (f *Fifo) Deduplicating() bool { return f.dedup != nil }

// SetDedupKey makes the queue deduplicate by the ids key finds in its
// messages (GroupConfig.DedupKey), before the group applies anything.
func (q *QueueFSM) SetDedupKey(key func(props []byte) ([]byte, bool)) {
	q.mu.Lock()
	q.f.setDedupKey(key)
	q.mu.Unlock()
}
