package persist

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// One batch with a key over Badger's limit fails alone: the batches
// committed in the same round are written and reported durable (issue 38
// item 1: a binding whose key was too long had every publisher of its
// round nacked, their messages stored all the same).
func TestOversizedKeyFailsOnlyItsBatch(t *testing.T) {
	dir := t.TempDir()
	entered := make(chan struct{})
	release := make(chan struct{})
	var first sync.Once
	s, err := Open(Options{Dir: dir, GCInterval: -1, BeforeRound: func() {
		first.Do(func() {
			close(entered)
			<-release
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The first round holds the committer, so that the next three
	// batches are taken together, in one round.
	s.Commit(&Batch{}, nil)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the committer did not start a round")
	}
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	before := &Batch{}
	before.PutDef(DefQueue, []byte("before"), []byte("v"))
	bad := &Batch{}
	bad.PutDef(DefQueue, []byte("bad-but-short"), []byte("v")) // refused with the rest of its batch
	bad.PutDef(DefBinding, bytes.Repeat([]byte("k"), MaxKeySize-1), []byte("v"))
	after := &Batch{}
	after.PutDef(DefQueue, []byte("after"), []byte("v"))
	for i, b := range []*Batch{before, bad, after} {
		s.Commit(b, func(err error) { errs[i] <- err })
	}
	close(release)
	for i, want := range []error{nil, ErrKeyTooLarge, nil} {
		select {
		case err := <-errs[i]:
			if !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Fatalf("batch %d: got %v, want %v", i, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d: no answer within 10s", i)
		}
	}
	// A key of exactly MaxKeySize is Badger's limit, and taken.
	edge := &Batch{}
	edge.PutDef(DefBinding, bytes.Repeat([]byte("k"), MaxKeySize-2), []byte("v"))
	if err := s.CommitSync(edge); err != nil {
		t.Fatalf("a key of %d bytes: %v", MaxKeySize, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	got := map[string]bool{}
	if err := s.Definitions(func(kind byte, name, val []byte) error {
		got[string(name)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !got["before"] || !got["after"] || got["bad-but-short"] || len(got) != 3 {
		t.Fatalf("stored %d definitions; before %v after %v bad %v", len(got), got["before"], got["after"], got["bad-but-short"])
	}
}

// A round whose writes fill the memtable has Badger start a new one (and
// a new WAL); Badger's Sync syncs only the new one (wal.go). Every WAL
// older than the newest is fsynced before the round's callbacks run: at
// each fsync, the WALs passed over are exactly those the store synced.
func TestRotatedMemtableWALSynced(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	var mu sync.Mutex
	var bad []string
	first := -1
	rotations := 0
	s, err := Open(Options{Dir: dir, GCInterval: -1, MemTableSize: 1 << 20, AfterSync: func() {
		last, err := lastWAL(dir)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad = append(bad, err.Error())
			return
		}
		if first < 0 {
			first = last
		}
		rotations = last - first
		if synced := int(s.walSyncs.Load()); synced != rotations {
			bad = append(bad, "at an fsync: "+strconv.Itoa(rotations)+" WALs rotated since the first round, "+strconv.Itoa(synced)+" synced")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CommitSync(&Batch{}); err != nil { // the first round: where the WALs start
		t.Fatal(err)
	}
	// 4 MiB of entries with values kept in the LSM tree (under the
	// value threshold), 256 KiB a round: several rotations, most of them
	// in the middle of a round.
	val := bytes.Repeat([]byte("v"), 200)
	var seq uint64
	for round := 0; round < 16; round++ {
		b := &Batch{}
		for range (256 << 10) / len(val) {
			seq++
			b.PutEntryInline(1, seq, seq, false, false, 0, val)
		}
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	if rotations < 2 {
		t.Fatalf("%d memtable rotations in 4 MiB of writes with a 1 MiB memtable", rotations)
	}
}
