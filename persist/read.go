package persist

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Entry is a queue entry read back from the store.
type Entry struct {
	Seq         uint64
	Msg         uint64
	Shared      bool
	Transient   bool
	Redelivered bool
	Inline      bool // the record was stored inside the entry
	Count       uint32
	Until       int64  // held back for a retry delay until then (unix nanos); 0: not held
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
	s.ReadEntries(queue, after, max, 0, func(es []Entry, err error) { ch <- res{es, err} })
	r := <-ch
	return r.es, r.err
}

// ReadEntries is LoadEntries without waiting: the read is queued on the
// committer behind every batch submitted before it (so it sees them,
// synced or not), and done runs there with what it found. done must not
// block: it runs on the committer, between one round's writes and its
// fsync. A queue pages its backlog in this way, so that no one holding
// the queue waits behind an fsync.
//
// The read stops after max entries, or once their records passed
// maxBytes when that is positive (at least one entry is read).
func (s *Store) ReadEntries(queue, after uint64, max int, maxBytes int64, done func([]Entry, error)) {
	var out []Entry
	b := &Batch{load: func(txn *badger.Txn) error {
		var err error
		out, err = loadEntries(txn, queue, after, max, maxBytes)
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
		s.pagedOut.Add(pageOut(s.dir))
	}
}

// scanOptions are the options of an iterator over the keys with prefix
// p. It prefetches no values: Badger's default copies the next 100 values
// into the heap as it goes, past the prefix when none is set (definitions
// sort just before the entries, and read the first 100 records of a
// backlog), which for 20 MiB records read one at a time allocated 2 GB
// per read, beyond any window, and as much at every start. A value is
// read through Badger's mmap when asked for, and copied once, into what
// is returned: a queue's read is what its window asked for.
func scanOptions(p []byte) badger.IteratorOptions {
	o := badger.DefaultIteratorOptions
	o.PrefetchValues = false
	o.Prefix = p
	return o
}

func loadEntries(txn *badger.Txn, queue, after uint64, max int, maxBytes int64) ([]Entry, error) {
	var out []Entry
	var size int64
	p := entryPrefix(queue)
	it := txn.NewIterator(scanOptions(p))
	defer it.Close()
	for it.Seek(entryKey(queue, after+1)); it.ValidForPrefix(p) && len(out) < max && (maxBytes <= 0 || size < maxBytes); it.Next() {
		item := it.Item()
		var e Entry
		e.Seq = beUint64(item.Key()[9:])
		err := item.Value(func(v []byte) error {
			msg, flags, count, ok := parseEntry(v)
			if !ok {
				return fmt.Errorf("corrupt entry %x", item.Key())
			}
			e.Msg, e.Count, e.Until = msg, count, entryUntil(v, flags)
			e.Shared, e.Transient, e.Redelivered = flags&entryShared != 0, flags&entryTransient != 0, flags&entryRedelivered != 0
			if e.Inline = flags&entryInline != 0; e.Inline {
				e.Data = bytes.Clone(v[entryHeader(flags):])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if e.Inline {
			out = append(out, e)
			size += int64(len(e.Data))
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
		size += int64(len(e.Data))
	}
	return out, nil
}

// Definitions calls fn for every stored definition, in key order (so by
// kind, then name), in one scan: recovery reads them all before it
// rebuilds anything.
func (s *Store) Definitions(fn func(kind byte, name, val []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		p := []byte{prefixDef}
		it := txn.NewIterator(scanOptions(p))
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) < 2 {
				continue
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(k[1], bytes.Clone(k[2:]), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Dedups calls fn with every stored segment of owner's deduplication
// cache log, in order.
func (s *Store) Dedups(kind byte, owner []byte, fn func(seg uint64, entries []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		p := dedupPrefix(kind, owner)
		it := txn.NewIterator(scanOptions(p))
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != len(p)+8 {
				continue // not a segment key
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(beUint64(k[len(p):]), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// ScanEntries calls fn with each of queue's entries, in order, reading
// them in chunks (recovery rebuilds a deduplicating queue's ids from its
// messages this way).
func (s *Store) ScanEntries(queue uint64, fn func(Entry)) error {
	var after uint64
	for {
		var es []Entry
		err := s.db.View(func(txn *badger.Txn) error {
			var err error
			es, err = loadEntries(txn, queue, after, 1024, 16<<20)
			return err
		})
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
		for _, e := range es {
			fn(e)
		}
		after = es[len(es)-1].Seq
	}
}
