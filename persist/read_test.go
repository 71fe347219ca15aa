package persist

import (
	"bytes"
	"runtime"
	"testing"
)

// readEntries is ReadEntries, waited for.
func readEntries(s *Store, queue, after uint64, max int, maxBytes int64) ([]Entry, error) {
	type res struct {
		es  []Entry
		err error
	}
	ch := make(chan res, 1)
	s.ReadEntries(queue, after, max, maxBytes, func(es []Entry, err error) { ch <- res{es, err} })
	r := <-ch
	return r.es, r.err
}

// A queue reads its backlog back in steps bounded by its byte window
// (maxBytes), one record at least. The read must allocate what it returns
// and not the records after it: Badger's iterator, with its default
// options, copies up to 100 values ahead into the heap (prefetch), so that
// reading one 20 MiB record among 200 allocated 2 GB, and a broker in a
// 1 GiB cgroup was OOM-killed on its first delivery of a persistent
// backlog. Records inline in their entries and records apart (a fanout's
// shared message) both.
func TestReadBackAllocatesWhatItReads(t *testing.T) {
	const size, n = 2 << 20, 24
	s := open(t, t.TempDir())
	defer s.Close()
	rec := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }
	for i := range n {
		b := &Batch{}
		b.PutEntryInline(1, uint64(i+1), s.NewMessageID(), false, false, 0, rec(i))
		id := s.NewMessageID()
		b.PutMessage(id, rec(i))
		b.PutEntry(2, uint64(i+1), id, true /* shared */, false, false, 0)
		b.PutEntry(3, uint64(i+1), id, true /* shared */, false, false, 0)
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []uint64{1, 2} {
		for _, tc := range []struct {
			max      int
			maxBytes int64
			want     int
		}{
			{max: 100, maxBytes: 1, want: 1},
			{max: 1, maxBytes: 0, want: 1},
			{max: 100, maxBytes: 3 * size, want: 3},
		} {
			least := allocated(t, func() error {
				es, err := readEntries(s, q, 4, tc.max, tc.maxBytes)
				if err != nil || len(es) != tc.want {
					t.Fatalf("queue %d, %+v: read %d entries, %v", q, tc, len(es), err)
				}
				for j, e := range es {
					if e.Seq != uint64(5+j) || len(e.Data) != size || bytes.Count(e.Data, []byte{byte(4 + j)}) != size {
						t.Fatalf("queue %d: entry %d is seq %d with a wrong record", q, j, e.Seq)
					}
				}
				return nil
			})
			if limit := uint64(tc.want*size + size); least > limit {
				t.Errorf("queue %d, %+v: reading %d records of %d bytes allocated %d bytes (at most %d expected)",
					q, tc, tc.want, size, least, limit)
			}
		}
	}
}

// allocated is the least the heap grew by over three calls of f (Badger's
// own goroutines allocate too, now and then, never the reverse).
func allocated(t *testing.T, f func() error) uint64 {
	t.Helper()
	var least uint64
	for try := range 3 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := f(); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; try == 0 || d < least {
			least = d
		}
	}
	return least
}

// Recovery and a purge scan a queue's entries for their headers only, and
// reading the definitions at start reads none: they must not copy the
// records inline in the entries into the heap (Badger's prefetch took 100
// of them at a time: a broker restarted on 200 records of 20 MiB reached
// 4.4 GB of RSS before it served anyone).
func TestEntryScansAllocateNoRecords(t *testing.T) {
	const size, n = 2 << 20, 24
	dir := t.TempDir()
	s := open(t, dir)
	rec := bytes.Repeat([]byte{7}, size)
	def := &Batch{}
	def.PutDef('q', []byte("q1"), []byte("durable"))
	if err := s.CommitSync(def); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := &Batch{}
		b.PutEntryInline(1, uint64(i+1), s.NewMessageID(), false, false, 0, rec)
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	// Definitions sort just before the entries: reading them at start
	// must not read the records after them.
	if d := allocated(t, func() error {
		defs := 0
		err := s.Definitions(func(kind byte, name, val []byte) error {
			defs++
			return nil
		})
		if err == nil && defs != 1 {
			t.Fatalf("read %d definitions, want 1", defs)
		}
		return err
	}); d > size {
		t.Errorf("reading one definition beside %d entries of %d bytes allocated %d bytes (at most %d expected)", n, size, d, size)
	}
	if d := allocated(t, func() error {
		sum, err := s.RecoverQueue(1)
		if err == nil && sum.Count != n {
			t.Fatalf("recovered %d entries, want %d", sum.Count, n)
		}
		return err
	}); d > size {
		t.Errorf("recovering %d entries of %d bytes allocated %d bytes (at most %d expected)", n, size, d, size)
	}
	// DropRange scans before it deletes: the third try finds nothing, so
	// measure once, on a store holding the records.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := &Batch{}
	b.DropRange(1, 1)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 4*size {
		t.Errorf("dropping %d entries of %d bytes allocated %d bytes (at most %d expected)", n, size, d, 4*size)
	}
	if es, err := s.LoadEntries(1, 0, 10); err != nil || len(es) != 0 {
		t.Fatalf("after the drop: %d entries, %v", len(es), err)
	}
}
