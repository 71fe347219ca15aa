package persist

import (
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Commit submits the batch; done (may be nil) runs on the committer once
// the batch is durable, or with the error that kept it from being so.
// Writes that arrive while a sync is under way go into the next one.
func (s *Store) Commit(b *Batch, done func(error)) {
	if err := s.TryCommit(b, done); err != nil && done != nil {
		done(err)
	}
}

// TryCommit is Commit, but for a closed store: it returns ErrClosed and
// does not call done, so that a caller holding a lock that done's work
// must not run under (done runs at once, on the caller's goroutine, when
// Commit finds the store closed) handles the refusal after releasing it.
func (s *Store) TryCommit(b *Batch, done func(error)) error {
	b.done = done
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.pending = append(s.pending, b)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
	return nil
}

// AddFlusher has f add its writes to every group commit, before the
// round's batches: anything f was given before a batch was submitted is
// durable once that batch is, and a crash that keeps any of a round's
// batches keeps what f wrote in that round (a prefix of the round's
// writes survives). f runs on the committer with no lock held
// and must not block. remove stops it (it may run once more meanwhile).
func (s *Store) AddFlusher(f func(*Batch)) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flushers == nil {
		s.flushers = make(map[int]func(*Batch))
	}
	s.flushID++
	id := s.flushID
	s.flushers[id] = f
	return func() {
		s.mu.Lock()
		delete(s.flushers, id)
		s.mu.Unlock()
	}
}

// Kick has the committer run a round even if nothing is submitted, for
// the flushers' writes.
func (s *Store) Kick() {
	if s.kicked.Swap(true) {
		return // a round is due already
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// CommitSync commits b and waits until it is durable.
func (s *Store) CommitSync(b *Batch) error {
	ch := make(chan error, 1)
	s.Commit(b, func(err error) { ch <- err })
	return <-ch
}

// commitLoop commits what is pending each time it is woken. Once Close
// was called it goes on until a round leaves nothing pending: done
// callbacks may commit more (the committer runs them), and those writes
// must not be refused. Then it marks the store closed, under mu, so that
// no Commit after that is accepted and left behind.
func (s *Store) commitLoop() {
	defer close(s.stopped)
	for range s.wake {
		s.commitPending()
		s.mu.Lock()
		if s.closing && len(s.pending) == 0 {
			s.closed = true
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

func (s *Store) commitPending() {
	kicked := s.kicked.Swap(false)
	s.mu.Lock()
	batch := s.pending
	s.pending = nil
	var flushers []func(*Batch)
	for _, f := range s.flushers {
		flushers = append(flushers, f)
	}
	s.mu.Unlock()
	if len(batch) == 0 && !kicked {
		return
	}
	s.beforeRound()
	growErr, allErr := s.spaceCheck(batch)
	wb := s.db.NewWriteBatch()
	var dones []func(error)
	var refused []*Batch // batches whose record writes were dropped: done gets growErr
	var failed []failedBatch
	var writeErr error // fails the whole round: nothing of it is reported durable
	wrote := false
	flush := func() {
		if !wrote {
			wb.Cancel()
			wb = s.db.NewWriteBatch()
			return
		}
		if err := wb.Flush(); err != nil && writeErr == nil {
			writeErr = err
		}
		wb = s.db.NewWriteBatch()
		wrote = false
	}
	if allErr == nil && len(flushers) > 0 {
		w, err := s.runFlushers(flushers, &wb, flush)
		wrote = wrote || w
		if err != nil && writeErr == nil {
			writeErr = err
		}
	}
	for _, b := range batch {
		if b.load != nil {
			flush()
			err := s.db.View(b.load)
			b.done(err)
			continue
		}
		if allErr != nil || b.atomic {
			// Refused (no room at all), or an atomic batch (txn.go).
			s.roundAtomic(b, allErr, growErr, flush, &dones, &failed, &refused)
			continue
		}
		if err := b.check(s.opt.ValueLogFileSize); err != nil {
			// A key or value Badger would refuse: this batch fails,
			// whole and alone; the others of the round are written.
			failed = append(failed, failedBatch{b, err})
			continue
		}
		dropped := false
		var opErr error
		for i := range b.ops {
			if growErr != nil && b.ops[i].grows() {
				// No room for it: the publish is nacked. The batch's
				// deletes and small updates are still written, so that
				// acks free space on a full disk.
				dropped = true
				continue
			}
			if err := s.apply(&wb, &b.ops[i], flush); err != nil && opErr == nil {
				// Its own op's error (a drop's read) is this batch's
				// answer; a failed write of the round (flush) is
				// everyone's, through writeErr.
				opErr = err
			}
			s.touched.Add(int64(len(b.ops[i].val)))
			wrote = true
		}
		switch {
		case opErr != nil:
			failed = append(failed, failedBatch{b, opErr})
		case dropped:
			refused = append(refused, b)
		case b.done != nil:
			dones = append(dones, b.done)
		}
	}
	if s.opt.Fault != nil && writeErr == nil {
		if err := s.opt.Fault(); err != nil {
			// Nothing of this round may be reported durable: drop it.
			wb.Cancel()
			wb = s.db.NewWriteBatch()
			wrote = false
			writeErr = err
		}
	}
	flush()
	wb.Cancel() // the fresh batch flush left: an open batch pins old versions
	if writeErr == nil {
		t := time.Now()
		// Sync covers the memtable written last; one that filled up
		// during the round is synced first (wal.go).
		if err := s.syncRotatedWALs(); err != nil {
			writeErr = fmt.Errorf("fsync of a rotated memtable's WAL: %w", err)
		} else if err := s.db.Sync(); err != nil {
			writeErr = fmt.Errorf("fsync: %w", err)
		}
		s.metrics.Fsync.Observe(since(t))
	}
	s.metrics.Batches.Observe(int64(len(batch)))
	s.syncs.Add(1)
	s.maybePageOut()
	if writeErr != nil {
		s.log.Error("store commit failed", zap.Error(writeErr), zap.Int("batches", len(batch)))
	}
	if s.opt.AfterSync != nil {
		s.opt.AfterSync()
	}
	for _, d := range dones {
		d(writeErr)
	}
	for _, f := range failed {
		s.log.Warn("store write refused", zap.Error(f.err))
		if f.b.done != nil {
			f.b.done(f.err)
		}
	}
	for _, b := range refused {
		if b.done != nil {
			if allErr != nil {
				b.done(allErr)
			} else {
				b.done(growErr)
			}
		}
	}
}

// runFlushers adds the flushers' writes to the round, first: they are
// writes that ride on every commit (deduplication caches), taken now,
// so they hold everything added before this round's batches were
// submitted, and are durable with them. They go first because a crash
// keeps a prefix of the round: whatever a batch of the round deletes (an
// ack of the message a cache entry stands for) is gone only if the
// flushers' writes are kept. It reports whether it wrote anything, and
// the first failed write (which fails the whole round).
func (s *Store) runFlushers(flushers []func(*Batch), wbp **badger.WriteBatch, flush func()) (wrote bool, firstErr error) {
	fb := &Batch{}
	for _, f := range flushers {
		f(fb)
	}
	for i := range fb.ops {
		if err := checkEntry(fb.ops[i].key, fb.ops[i].val, s.opt.ValueLogFileSize); err != nil {
			s.log.Error("flusher write refused", zap.Error(err))
			continue
		}
		if err := s.apply(wbp, &fb.ops[i], flush); err != nil && firstErr == nil {
			firstErr = err
		}
		wrote = true
	}
	return wrote, firstErr
}

// failedBatch is a batch refused alone, with its error.
type failedBatch struct {
	b   *Batch
	err error
}

// apply adds one change to *wbp; flush may replace *wbp (a drop reads the
// store, so what was batched before it is written first).
func (s *Store) apply(wbp **badger.WriteBatch, o *op, flush func()) error {
	wb := *wbp
	switch o.kind {
	case opSet:
		if len(o.val) >= valueThreshold {
			s.vlogPuts.Add(1)
			s.vlogPutBytes.Add(int64(len(o.key) + len(o.val)))
		}
		return wb.Set(o.key, o.val)
	case opDelete:
		s.deletes.Add(1)
		return wb.Delete(o.key)
	case opPutEntry:
		if o.shared {
			s.refs[o.msg]++
		}
		return wb.Set(o.key, o.val)
	case opDeleteEntry:
		if err := wb.Delete(o.key); err != nil {
			return err
		}
		return s.release(wb, o.msg, o.shared)
	case opDropQueue:
		flush()
		if err := s.dropRange(*wbp, o.queue, 0); err != nil {
			return err
		}
		return (*wbp).Delete(deliveredKey(o.queue))
	case opDropRange:
		flush()
		return s.dropRange(*wbp, o.queue, o.msg)
	case opDropPrefix:
		flush()
		return s.dropPrefix(*wbp, o.key)
	}
	return nil
}

// release drops one reference to msg and deletes it when none is left.
func (s *Store) release(wb *badger.WriteBatch, msg uint64, shared bool) error {
	if shared {
		n := s.refs[msg] - 1
		if n > 0 {
			s.refs[msg] = n
			return nil
		}
		delete(s.refs, msg)
	}
	s.deletes.Add(1)
	return wb.Delete(messageKey(msg))
}

func (s *Store) dropRange(wb *badger.WriteBatch, queue, from uint64) error {
	type ent struct {
		key    []byte
		msg    uint64
		shared bool
		inline bool
	}
	var ents []ent
	err := s.db.View(func(txn *badger.Txn) error {
		p := entryPrefix(queue)
		it := txn.NewIterator(scanOptions(p))
		defer it.Close()
		for it.Seek(entryKey(queue, from)); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			err := item.Value(func(v []byte) error {
				msg, flags, _, ok := parseEntry(v)
				if ok {
					ents = append(ents, ent{item.KeyCopy(nil), msg, flags&entryShared != 0, flags&entryInline != 0})
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := wb.Delete(e.key); err != nil {
			return err
		}
		if e.inline {
			s.deletes.Add(1)
			continue
		}
		if err := s.release(wb, e.msg, e.shared); err != nil {
			return err
		}
	}
	return nil
}

// dropPrefix deletes every key starting with p (a deduplication cache's
// log, a delayed exchange's messages). The committer's.
func (s *Store) dropPrefix(wb *badger.WriteBatch, p []byte) error {
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		opt := badger.DefaultIteratorOptions
		opt.PrefetchValues = false
		it := txn.NewIterator(opt)
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	s.deletes.Add(int64(len(keys)))
	return nil
}
