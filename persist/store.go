// Package persist is railmq's store: Badger under the data dir, written by
// one committer goroutine that groups every write submitted since its last
// fsync into one batch and one fsync (group commit), then reports each
// batch durable. It stores opaque records (definitions, messages, queue
// entries) and knows nothing of channels or methods. It imports badger and
// zap only.
package persist

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Options configure a Store.
type Options struct {
	Dir    string
	Logger *zap.Logger
	// AfterSync, if set, runs on the committer after each fsync, before
	// the batch's callbacks (tests check fsync-before-confirm with it).
	AfterSync func()
	// Fault, if set, is consulted before each group commit; an error it
	// returns fails the commit as a full disk would (a test hook).
	Fault func() error
	// GCInterval is how often the value log is garbage-collected; 0 means
	// one minute, negative disables.
	GCInterval time.Duration
	// MemTableSize bounds Badger's memtables (two of them); 0 means 16 MiB.
	MemTableSize int64
}

// Store is the message and definition store.
type Store struct {
	db  *badger.DB
	log *zap.Logger
	opt Options

	mu      sync.Mutex // guards pending and closed
	pending []*Batch
	closed  bool
	wake    chan struct{}
	stopped chan struct{}
	gcStop  chan struct{}
	gcDone  chan struct{}

	nextMsg atomic.Uint64
	syncs   atomic.Uint64
	freed   atomic.Int64 // message records deleted since the last GC
	touched atomic.Int64 // bytes written or read through Badger's mmaps since the last page-out
	dir     string       // absolute, for page-outs
	// refs counts the entries left for messages shared by several queues.
	// Owned by the committer (and by recovery before it starts).
	refs map[uint64]int32
}

// ErrClosed is returned for work submitted after Close.
var ErrClosed = errors.New("persist: store closed")

// Open opens (or creates) the store. A store that cannot be opened (held
// by another process, corrupt, unwritable) is an error, never an empty
// start.
func Open(opt Options) (*Store, error) {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.MemTableSize == 0 {
		opt.MemTableSize = 16 << 20
	}
	if opt.GCInterval == 0 {
		opt.GCInterval = time.Minute
	}
	bo := badger.DefaultOptions(opt.Dir).
		WithLogger(badgerLogger{opt.Logger.Named("badger").Sugar()}).
		WithSyncWrites(false). // we fsync once per group commit
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false).
		WithMemTableSize(opt.MemTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueThreshold(256).
		WithValueLogFileSize(128 << 20).
		WithNumCompactors(2).
		WithCompactL0OnClose(true)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("opening store in %s: %w", opt.Dir, err)
	}
	s := &Store{
		db: db, log: opt.Logger, opt: opt,
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		gcStop:  make(chan struct{}),
		gcDone:  make(chan struct{}),
		refs:    make(map[uint64]int32),
		dir:     absDir(opt.Dir),
	}
	last, err := s.lastMessageID()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("reading store in %s: %w", opt.Dir, err)
	}
	s.nextMsg.Store(last)
	go s.commitLoop()
	go s.gcLoop()
	return s, nil
}

// Close stops the committer after it has written what was submitted, and
// closes Badger.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.wake)
	<-s.stopped
	close(s.gcStop)
	<-s.gcDone
	return s.db.Close()
}

// NewMessageID returns a fresh message id.
func (s *Store) NewMessageID() uint64 { return s.nextMsg.Add(1) }

// Syncs counts the fsyncs done so far.
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

func (s *Store) lastMessageID() (uint64, error) {
	var last uint64
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Reverse, o.PrefetchValues = true, false
		it := txn.NewIterator(o)
		defer it.Close()
		it.Seek([]byte{prefixMessage, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		if it.ValidForPrefix([]byte{prefixMessage}) {
			k := it.Item().Key()
			last = beUint64(k[1:])
		}
		return nil
	})
	return last, err
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// --- batches -------------------------------------------------------------

type opKind uint8

const (
	opSet opKind = iota
	opDelete
	opPutEntry
	opDeleteEntry
	opDropQueue
	opDropRange
)

type op struct {
	kind   opKind
	key    []byte
	val    []byte
	queue  uint64
	msg    uint64
	shared bool
}

// Batch is a group of changes committed together.
type Batch struct {
	ops  []op
	load func(*badger.Txn) error // a read ordered after earlier writes
	done func(error)
}

// PutMessage stores a message record.
func (b *Batch) PutMessage(id uint64, rec []byte) {
	b.ops = append(b.ops, op{kind: opSet, key: messageKey(id), val: rec})
}

// PutEntry stores (or rewrites) queue's entry seq for message msg. shared
// marks a message that entries of other queues reference too; transient a
// paged-out message that recovery drops.
func (b *Batch) PutEntry(queue, seq, msg uint64, shared, transient, redelivered bool, count uint32) {
	var f byte
	if shared {
		f |= entryShared
	}
	if transient {
		f |= entryTransient
	}
	if redelivered {
		f |= entryRedelivered
	}
	b.ops = append(b.ops, op{kind: opPutEntry, key: entryKey(queue, seq), val: entryValue(msg, f, count), msg: msg, shared: shared})
}

// PutEntryInline stores queue's entry seq with the message record inside
// it: one key written and one deleted per message, for a message no other
// queue references.
func (b *Batch) PutEntryInline(queue, seq, msg uint64, transient, redelivered bool, count uint32, rec []byte) {
	f := byte(entryInline)
	if transient {
		f |= entryTransient
	}
	if redelivered {
		f |= entryRedelivered
	}
	v := append(entryValue(msg, f, count), rec...)
	b.ops = append(b.ops, op{kind: opSet, key: entryKey(queue, seq), val: v})
}

// DeleteEntryInline removes an entry stored with its record.
func (b *Batch) DeleteEntryInline(queue, seq uint64) {
	b.ops = append(b.ops, op{kind: opDelete, key: entryKey(queue, seq)})
}

// UpdateEntry rewrites an existing entry (redelivered flag, delivery
// count) without counting a new reference.
func (b *Batch) UpdateEntry(queue, seq, msg uint64, shared, transient, redelivered bool, count uint32) {
	b.PutEntry(queue, seq, msg, shared, transient, redelivered, count)
	b.ops[len(b.ops)-1].kind = opSet
}

// DeleteEntry removes queue's entry seq, and the message record once no
// entry references it.
func (b *Batch) DeleteEntry(queue, seq, msg uint64, shared bool) {
	b.ops = append(b.ops, op{kind: opDeleteEntry, key: entryKey(queue, seq), msg: msg, shared: shared})
}

// DropQueue removes every entry of a queue (and unreferenced messages).
func (b *Batch) DropQueue(queue uint64) {
	b.ops = append(b.ops, op{kind: opDropQueue, queue: queue})
}

// DropRange removes queue's entries with seq >= from (a purge of the
// part of a queue that is on disk only).
func (b *Batch) DropRange(queue, from uint64) {
	b.ops = append(b.ops, op{kind: opDropRange, queue: queue, msg: from})
}

// PutDelivered records the highest sequence of queue handed to a consumer:
// recovery flags the entries up to it redelivered.
func (b *Batch) PutDelivered(queue, seq uint64) {
	var v [8]byte
	putUint64(v[:], seq)
	b.ops = append(b.ops, op{kind: opSet, key: deliveredKey(queue), val: v[:]})
}

// PutDef stores a definition; name is the registry's key for it.
func (b *Batch) PutDef(kind byte, name, val []byte) {
	b.ops = append(b.ops, op{kind: opSet, key: defKey(kind, name), val: val})
}

// DeleteDef removes a definition.
func (b *Batch) DeleteDef(kind byte, name []byte) {
	b.ops = append(b.ops, op{kind: opDelete, key: defKey(kind, name)})
}

// Len is the number of changes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

func putUint64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

// Commit submits the batch; done (may be nil) runs on the committer once
// the batch is durable, or with the error that kept it from being so.
// Writes that arrive while a sync is under way go into the next one.
func (s *Store) Commit(b *Batch, done func(error)) {
	b.done = done
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if done != nil {
			done(ErrClosed)
		}
		return
	}
	s.pending = append(s.pending, b)
	// The wake-up goes under mu (it never blocks): Close closes wake once
	// it has set closed under mu, so it cannot come in between and make
	// this a send on a closed channel. Done callbacks commit from the
	// committer itself, also while Close runs.
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
}

// CommitSync commits b and waits until it is durable.
func (s *Store) CommitSync(b *Batch) error {
	ch := make(chan error, 1)
	s.Commit(b, func(err error) { ch <- err })
	return <-ch
}

func (s *Store) commitLoop() {
	defer close(s.stopped)
	for range s.wake {
		s.commitPending()
	}
	s.commitPending()
}

func (s *Store) commitPending() {
	s.mu.Lock()
	batch := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	wb := s.db.NewWriteBatch()
	var dones []func(error)
	var writeErr error
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
	for _, b := range batch {
		if b.load != nil {
			flush()
			err := s.db.View(b.load)
			b.done(err)
			continue
		}
		for i := range b.ops {
			if err := s.apply(&wb, &b.ops[i], flush); err != nil && writeErr == nil {
				writeErr = err
			}
			s.touched.Add(int64(len(b.ops[i].val)))
			wrote = true
		}
		if b.done != nil {
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
		if err := s.db.Sync(); err != nil {
			writeErr = fmt.Errorf("fsync: %w", err)
		}
	}
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
}

// apply adds one change to *wbp; flush may replace *wbp (a drop reads the
// store, so what was batched before it is written first).
func (s *Store) apply(wbp **badger.WriteBatch, o *op, flush func()) error {
	wb := *wbp
	switch o.kind {
	case opSet:
		return wb.Set(o.key, o.val)
	case opDelete:
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
	s.freed.Add(1)
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
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		p := entryPrefix(queue)
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
			continue
		}
		if err := s.release(wb, e.msg, e.shared); err != nil {
			return err
		}
	}
	return nil
}

// --- reads ---------------------------------------------------------------

// Entry is a queue entry read back from the store.
type Entry struct {
	Seq         uint64
	Msg         uint64
	Shared      bool
	Transient   bool
	Redelivered bool
	Inline      bool // the record was stored inside the entry
	Count       uint32
	Data        []byte // the message record (a copy)
}

// LoadEntries reads up to max entries of queue with seq > after, in order,
// with their message records. It sees every batch committed before it,
// and waits for its turn on the committer (see ReadEntries).
func (s *Store) LoadEntries(queue, after uint64, max int) ([]Entry, error) {
	type res struct {
		es  []Entry
		err error
	}
	ch := make(chan res, 1)
	s.ReadEntries(queue, after, max, func(es []Entry, err error) { ch <- res{es, err} })
	r := <-ch
	return r.es, r.err
}

// ReadEntries is LoadEntries without waiting: the read is queued on the
// committer behind every batch submitted before it (so it sees them,
// synced or not), and done runs there with what it found. done must not
// block: it runs on the committer, between one round's writes and its
// fsync. A queue pages its backlog in this way, so that no one holding
// the queue waits behind an fsync.
func (s *Store) ReadEntries(queue, after uint64, max int, done func([]Entry, error)) {
	var out []Entry
	b := &Batch{load: func(txn *badger.Txn) error {
		var err error
		out, err = loadEntries(txn, queue, after, max)
		for i := range out {
			s.touched.Add(int64(len(out[i].Data)))
		}
		s.maybePageOut()
		return err
	}}
	s.Commit(b, func(err error) { done(out, err) })
}

// pageOutEvery is how many bytes may pass through Badger's mappings
// before they are paged out, on top of the once-a-second page-out: a
// backlog read or written at 150 MB/s would otherwise show in the RSS.
const pageOutEvery = 16 << 20

func (s *Store) maybePageOut() {
	if s.touched.Load() >= pageOutEvery {
		s.touched.Store(0)
		pageOut(s.dir)
	}
}

func loadEntries(txn *badger.Txn, queue, after uint64, max int) ([]Entry, error) {
	var out []Entry
	it := txn.NewIterator(badger.DefaultIteratorOptions)
	defer it.Close()
	p := entryPrefix(queue)
	for it.Seek(entryKey(queue, after+1)); it.ValidForPrefix(p) && len(out) < max; it.Next() {
		item := it.Item()
		var e Entry
		e.Seq = beUint64(item.Key()[9:])
		err := item.Value(func(v []byte) error {
			msg, flags, count, ok := parseEntry(v)
			if !ok {
				return fmt.Errorf("corrupt entry %x", item.Key())
			}
			e.Msg, e.Count = msg, count
			e.Shared, e.Transient, e.Redelivered = flags&entryShared != 0, flags&entryTransient != 0, flags&entryRedelivered != 0
			if e.Inline = flags&entryInline != 0; e.Inline {
				e.Data = bytes.Clone(v[13:])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if e.Inline {
			out = append(out, e)
			continue
		}
		mi, err := txn.Get(messageKey(e.Msg))
		if err != nil {
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue // an entry whose message never became durable
			}
			return nil, err
		}
		if e.Data, err = mi.ValueCopy(nil); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Definitions calls fn for every stored definition of kind, in key order.
func (s *Store) Definitions(kind byte, fn func(name, val []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		p := []byte{prefixDef, kind}
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(bytes.Clone(item.Key()[2:]), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// QueueSummary is what recovery learns of a queue's stored entries.
type QueueSummary struct {
	Count     int    // durable entries
	MaxSeq    uint64 // highest sequence stored
	Delivered uint64 // highest sequence ever delivered
	Dropped   int    // transient entries removed
}

// RecoverQueue scans a queue's entries at start-up: it counts them, notes
// which messages are shared (for reference counts), and removes paged-out
// transient messages, which do not survive a restart. It must run before
// any Commit.
func (s *Store) RecoverQueue(queue uint64) (QueueSummary, error) {
	var sum QueueSummary
	var drop []Entry
	err := s.db.View(func(txn *badger.Txn) error {
		if item, err := txn.Get(deliveredKey(queue)); err == nil {
			_ = item.Value(func(v []byte) error {
				if len(v) == 8 {
					sum.Delivered = beUint64(v)
				}
				return nil
			})
		}
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		p := entryPrefix(queue)
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			seq := beUint64(item.Key()[9:])
			err := item.Value(func(v []byte) error {
				msg, flags, _, ok := parseEntry(v)
				if !ok {
					return fmt.Errorf("corrupt entry %x", item.Key())
				}
				if flags&entryTransient != 0 {
					drop = append(drop, Entry{Seq: seq, Msg: msg, Shared: flags&entryShared != 0, Inline: flags&entryInline != 0})
					return nil
				}
				if flags&entryShared != 0 {
					s.refs[msg]++
				}
				sum.Count++
				if sum.Count%250000 == 0 {
					s.log.Info("recovering queue", zap.Uint64("queue", queue), zap.Int("messages_so_far", sum.Count))
				}
				sum.MaxSeq = max(sum.MaxSeq, seq)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || len(drop) == 0 {
		return sum, err
	}
	wb := s.db.NewWriteBatch()
	for _, e := range drop {
		if err := wb.Delete(entryKey(queue, e.Seq)); err != nil {
			wb.Cancel()
			return sum, err
		}
		if !e.Shared && !e.Inline {
			_ = wb.Delete(messageKey(e.Msg))
		}
	}
	sum.Dropped = len(drop)
	return sum, wb.Flush()
}

// DropOrphans removes the entries of queues not in keep (queues that were
// not durable, or deleted while their entries were being written).
func (s *Store) DropOrphans(keep map[uint64]bool) (int, error) {
	var orphans []uint64
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		p := []byte{prefixEntry}
		for it.Seek(p); it.ValidForPrefix(p); {
			q := beUint64(it.Item().Key()[1:])
			if !keep[q] {
				orphans = append(orphans, q)
			}
			it.Seek(entryPrefix(q + 1))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, q := range orphans {
		b := &Batch{}
		b.DropQueue(q)
		if err := s.CommitSync(b); err != nil {
			return 0, err
		}
	}
	return len(orphans), nil
}

// --- value log GC and logging ----------------------------------------------

func (s *Store) gcLoop() {
	defer close(s.gcDone)
	dir := s.dir
	gcEvery := s.opt.GCInterval
	if gcEvery < 0 {
		gcEvery = time.Duration(1<<63 - 1)
	}
	lastGC := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.gcStop:
			return
		case <-t.C:
			pageOut(dir)
			if time.Since(lastGC) < gcEvery {
				continue
			}
			lastGC = time.Now()
			if s.freed.Swap(0) > 0 {
				// Deleted messages free value-log space only once a
				// compaction has dropped their keys and counted it: flush
				// the memtable (dropping an unused prefix does that) and
				// compact.
				if err := s.db.DropPrefix([]byte{prefixUnused}); err != nil {
					s.log.Warn("store flush failed", zap.Error(err))
				}
				if err := s.db.Flatten(1); err != nil {
					s.log.Warn("store compaction failed", zap.Error(err))
				}
			}
			n := 0
			for n < 16 && s.db.RunValueLogGC(0.5) == nil {
				n++
			}
			if n > 0 {
				s.log.Info("value log garbage collected", zap.Int("files", n))
			}
		}
	}
}

// badgerLogger adapts zap to Badger's Logger; Badger's info chatter is
// logged at debug.
type badgerLogger struct{ s *zap.SugaredLogger }

func (l badgerLogger) Errorf(f string, a ...any)   { l.s.Errorf(f, a...) }
func (l badgerLogger) Warningf(f string, a ...any) { l.s.Warnf(f, a...) }
func (l badgerLogger) Infof(f string, a ...any)    { l.s.Debugf(f, a...) }
func (l badgerLogger) Debugf(f string, a ...any)   { l.s.Debugf(f, a...) }
