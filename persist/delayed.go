package persist

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"
)

// Delayed messages are indexed by due time: 'y' name due seq (keys.go),
// so that the messages of one exchange come out of a prefix scan earliest
// first and the registry reads the due ones in batches, never holding
// more than a batch in memory however many are delayed.

// Delayed is a delayed message read back from the store.
type Delayed struct {
	Due  int64  // Unix ms
	Seq  uint64 // tells apart messages due at the same millisecond
	Data []byte // the record given to PutDelayed (a copy)
}

// NoDue is the next due time ReadDelayed and RecoverDelayed report when
// no message is left.
const NoDue = int64(math.MaxInt64)

// ReadDelayed reads up to max messages of the exchange name due from
// from to until (Unix ms, inclusive), earliest first, and the due time of
// the first message after them (NoDue if none). It reads Badger directly,
// on the caller's goroutine: it sees what was committed before it (a
// write whose done has run), not what is still pending on the committer.
func (s *Store) ReadDelayed(name []byte, from, until int64, max int) ([]Delayed, int64, error) {
	var out []Delayed
	next := NoDue
	p := delayedPrefix(name)
	err := s.db.View(func(txn *badger.Txn) error {
		// No prefetching: a read that keeps up finds a handful due, and
		// stops at the first one that is not; only the tables holding
		// the exchange's keys are looked at.
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		o.Prefix = p
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(delayedKey(name, max64(from, 0), 0)); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != len(p)+16 {
				return fmt.Errorf("corrupt delayed message key %x", k)
			}
			due := int64(binary.BigEndian.Uint64(k[len(p):]))
			if due > until || len(out) >= max {
				next = due
				break
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) < 1 {
				return fmt.Errorf("corrupt delayed message %x", k)
			}
			s.touched.Add(int64(len(v)))
			out = append(out, Delayed{Due: due, Seq: binary.BigEndian.Uint64(k[len(p)+8:]), Data: v[1:]})
		}
		return nil
	})
	return out, next, err // the committer pages out what was touched (maybePageOut)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// DelayedSummary is what recovery learns of an exchange's delayed
// messages.
type DelayedSummary struct {
	Count int   // messages kept
	Next  int64 // the earliest due time, NoDue if none
}

// RecoverDelayed scans the delayed messages whose key starts with
// 'y' prefix (the registry's key for a vhost: its exchanges' keys extend
// it) at start-up. Those of an exchange keep does not keep (not durable,
// or gone), and transient ones, are deleted; the others are counted per
// exchange name (as a string). It also makes message ids handed out from
// now on larger than every stored sequence, so that no new key can
// overwrite one. It must run before any Commit.
func (s *Store) RecoverDelayed(prefix []byte, keep func(name []byte) bool) (map[string]DelayedSummary, int, error) {
	sums := map[string]DelayedSummary{}
	var drop [][]byte
	var maxSeq uint64
	p := delayedPrefix(prefix)
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		var cur []byte // the exchange name of the last key
		kept := false
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) < 1+16 {
				drop = append(drop, item.KeyCopy(nil))
				continue
			}
			name := k[1 : len(k)-16]
			if !bytes.Equal(name, cur) {
				cur = bytes.Clone(name)
				kept = keep(cur)
			}
			maxSeq = max(maxSeq, binary.BigEndian.Uint64(k[len(k)-8:]))
			if !kept {
				drop = append(drop, item.KeyCopy(nil))
				continue
			}
			var transient bool
			err := item.Value(func(v []byte) error {
				transient = len(v) < 1 || v[0]&delayedTransient != 0
				return nil
			})
			if err != nil {
				return err
			}
			if transient {
				drop = append(drop, item.KeyCopy(nil))
				continue
			}
			sum, ok := sums[string(cur)]
			if !ok {
				sum.Next = int64(binary.BigEndian.Uint64(k[len(k)-16:]))
			}
			sum.Count++
			sums[string(cur)] = sum
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for {
		n := s.nextMsg.Load()
		if n >= maxSeq || s.nextMsg.CompareAndSwap(n, maxSeq) {
			break
		}
	}
	if len(drop) == 0 {
		return sums, 0, nil
	}
	wb := s.db.NewWriteBatch()
	for _, k := range drop {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return nil, 0, err
		}
	}
	return sums, len(drop), wb.Flush()
}
