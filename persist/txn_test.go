package persist

import (
	"errors"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func commitAtomicSync(s *Store, b *Batch) error {
	ch := make(chan error, 1)
	s.CommitAtomic(b, func(err error) { ch <- err })
	return <-ch
}

func (s *Store) has(t *testing.T, key []byte) bool {
	t.Helper()
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		return err
	})
	if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// An atomic batch counts the references of a shared record as an
// ordinary one does: the record goes with its last entry, also when
// entries of it are deleted by ordinary and atomic batches in turn, and
// everything is there after a reopen.
func TestCommitAtomicSharedRecord(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := s.NewMessageID()
	b := &Batch{}
	b.PutMessage(id, []byte("record"))
	for q := uint64(1); q <= 3; q++ {
		b.PutEntry(q, 1, id, true, false, false, 0)
	}
	if err := commitAtomicSync(s, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	for q := uint64(1); q <= 3; q++ {
		if _, err := s.RecoverQueue(q); err != nil {
			t.Fatal(err)
		}
	}
	del := func(q uint64, atomic bool) {
		b := &Batch{}
		b.DeleteEntry(q, 1, id, true)
		var err error
		if atomic {
			err = commitAtomicSync(s, b)
		} else {
			err = s.CommitSync(b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	del(1, true)
	del(2, false)
	if !s.has(t, messageKey(id)) {
		t.Fatal("the record went with two of its three entries")
	}
	del(3, true)
	if s.has(t, messageKey(id)) {
		t.Fatal("the record stayed after its last entry went")
	}
}

// A batch over what one Badger transaction takes is refused with
// ErrTxnTooBig, and nothing of it is written (a write batch would have
// written it in several transactions).
func TestCommitAtomicTooBig(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	count, _ := s.TxnLimits()
	b := &Batch{}
	for seq := uint64(1); seq <= uint64(count)+1; seq++ {
		b.PutEntryInline(9, seq, s.NewMessageID(), false, false, 0, []byte("x"))
	}
	if err := commitAtomicSync(s, b); !errors.Is(err, ErrTxnTooBig) {
		t.Fatalf("commit of %d entries: %v, want ErrTxnTooBig", count+1, err)
	}
	if s.has(t, entryKey(9, 1)) || s.has(t, entryKey(9, uint64(count))) {
		t.Fatal("part of a refused atomic batch was written")
	}
	// The store goes on: a batch within the limits is written.
	b = &Batch{}
	b.PutEntryInline(9, 1, s.NewMessageID(), false, false, 0, []byte("x"))
	if err := commitAtomicSync(s, b); err != nil || !s.has(t, entryKey(9, 1)) {
		t.Fatalf("a small atomic batch after the refused one: %v", err)
	}
}
