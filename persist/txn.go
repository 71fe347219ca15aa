package persist

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// ErrTxnTooBig: an atomic batch (CommitAtomic) holds more than one Badger
// transaction takes (TxnLimits). Nothing of it is written.
var ErrTxnTooBig = errors.New("persist: atomic batch larger than one store transaction")

// errAtomicOp: an atomic batch holds a change that reads the store first
// (a drop), which only ordinary batches may.
var errAtomicOp = errors.New("persist: a drop in an atomic batch")

// CommitAtomic is Commit for a batch that must be written whole or not at
// all, across a crash too: its changes go into one Badger transaction
// (the write batch an ordinary round uses splits into several when large,
// and a crash can keep some of them). It is written in order with the
// other batches of its round and fsynced with them; done gets
// ErrTxnTooBig (wrapped) when the batch is over TxnLimits, and then
// nothing of it is written. Sets, deletes and entries only (no drop).
func (s *Store) CommitAtomic(b *Batch, done func(error)) {
	b.atomic = true
	s.Commit(b, done)
}

// TxnLimits are the most changes, and their estimated bytes, that one
// Badger transaction takes: Badger's own limits for the store's memtable
// size (15% of it; a value of valueThreshold bytes or more counts the
// size of its pointer into the value log, not its own).
func (s *Store) TxnLimits() (count, size int64) {
	return s.db.MaxBatchCount(), s.db.MaxBatchSize()
}

// writeAtomic writes b in one Badger transaction. The committer's; the
// reference counts of shared records change only once it committed.
func (s *Store) writeAtomic(b *Batch) error {
	if err := b.check(s.opt.ValueLogFileSize); err != nil {
		return err
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	refs := map[uint64]int32{} // changes to s.refs, applied after the commit
	var deletes, touched int64
	for i := range b.ops {
		o := &b.ops[i]
		var err error
		switch o.kind {
		case opSet:
			err = txn.Set(o.key, o.val)
		case opDelete:
			deletes++
			err = txn.Delete(o.key)
		case opPutEntry:
			if o.shared {
				refs[o.msg]++
			}
			err = txn.Set(o.key, o.val)
		case opDeleteEntry:
			err = txn.Delete(o.key)
			if err == nil {
				// As release: the record goes with its last reference.
				last := !o.shared
				if o.shared {
					refs[o.msg]--
					last = s.refs[o.msg]+refs[o.msg] <= 0
				}
				if last {
					deletes++
					err = txn.Delete(messageKey(o.msg))
				}
			}
		default:
			return errAtomicOp
		}
		if errors.Is(err, badger.ErrTxnTooBig) {
			count, size := s.TxnLimits()
			return fmt.Errorf("%w: %d changes (one transaction takes at most %d changes, %d bytes)", ErrTxnTooBig, len(b.ops), count, size)
		}
		if err != nil {
			return err
		}
		touched += int64(len(o.val))
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("atomic write: %w", err)
	}
	for m, d := range refs {
		if n := s.refs[m] + d; n > 0 {
			s.refs[m] = n
		} else {
			delete(s.refs, m)
		}
	}
	s.deletes.Add(deletes)
	s.touched.Add(touched)
	return nil
}

// roundAtomic writes atomic batch b in its place in a round (after the
// batches before it), adding it to what the round reports; with allErr
// (the disk has no room for anything) it refuses b, atomic or not.
func (s *Store) roundAtomic(b *Batch, allErr, growErr error, flush func(), dones *[]func(error), failed *[]failedBatch, refused *[]*Batch) {
	if allErr != nil || s.atomicRefused(b, growErr) {
		*refused = append(*refused, b)
		return
	}
	flush() // the batches before it are written first
	if err := s.writeAtomic(b); err != nil {
		*failed = append(*failed, failedBatch{b, err})
	} else if b.done != nil {
		*dones = append(*dones, b.done)
	}
}

// atomicRefused reports whether the disk has no room for what b adds:
// an atomic batch is refused whole (an ordinary one keeps its deletes).
func (s *Store) atomicRefused(b *Batch, growErr error) bool {
	if growErr == nil {
		return false
	}
	for i := range b.ops {
		if b.ops[i].grows() {
			return true
		}
	}
	return false
}
