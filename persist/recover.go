package persist

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

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
		p := entryPrefix(queue)
		it := txn.NewIterator(scanOptions(p))
		defer it.Close()
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
				// The scan reads every record through Badger's mmaps: page
				// them out as it goes, or a backlog's gigabyte stays in RSS.
				if s.touched.Add(int64(len(v))) >= pageOutEvery {
					s.maybePageOut()
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
