package persist

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func spillRecord(seq uint64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(seq) ^ byte(i)
	}
	if size >= 8 {
		binary.BigEndian.PutUint64(b, seq)
	}
	return b
}

func spillRead(t *testing.T, s *Spill, q, after uint64, max int, maxBytes int64) []Entry {
	t.Helper()
	ch := make(chan []Entry, 1)
	s.Read(q, after, max, maxBytes, func(es []Entry, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- es
	})
	return <-ch
}

func spillWrite(t *testing.T, s *Spill, q uint64, puts []SpillEntry, drop, gone bool) {
	t.Helper()
	ch := make(chan error, 1)
	s.Write(q, puts, drop, gone, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func checkEntries(t *testing.T, es []Entry, from uint64, sizes map[uint64]int) uint64 {
	t.Helper()
	for _, e := range es {
		if e.Seq != from {
			t.Fatalf("read seq %d, want %d", e.Seq, from)
		}
		if !bytes.Equal(e.Data, spillRecord(e.Seq, sizes[e.Seq])) || !e.Transient || !e.Inline || e.Msg != e.Seq+1000 {
			t.Fatalf("entry %d read back wrong (%d bytes, %+v)", e.Seq, len(e.Data), e.Count)
		}
		from++
	}
	return from
}

// Entries come back in order, whole, within the read's limits, across
// segment files and entries larger than a read's chunk; read segments are
// removed and the counters return to zero.
func TestSpillRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	s, err := OpenSpill(dir, 0, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.segMax = 256 << 10
	sizes := map[uint64]int{}
	seq := uint64(1)
	put := func(n, size int) {
		var ps []SpillEntry
		for range n {
			sizes[seq] = size
			ps = append(ps, SpillEntry{Seq: seq, Msg: seq + 1000, Count: uint32(seq % 3), Record: spillRecord(seq, size)})
			seq++
		}
		spillWrite(t, s, 7, ps, false, false)
	}
	put(500, 100)
	put(3, 3<<20) // larger than readChunk
	put(2000, 1000)
	next := uint64(1)
	es := spillRead(t, s, 7, 0, 100, 0)
	if len(es) != 100 {
		t.Fatalf("read %d, asked 100", len(es))
	}
	next = checkEntries(t, es, next, sizes)
	es = spillRead(t, s, 7, next-1, 1000, 10<<10)
	if len(es) != 103 { // stops once the records passed 10 KiB: 103 x 100 bytes
		t.Fatalf("read %d entries under a 10 KiB limit", len(es))
	}
	next = checkEntries(t, es, next, sizes)
	put(10, 50) // written while the queue is being read
	for next < seq {
		es = spillRead(t, s, 7, next-1, 300, 1<<20)
		if len(es) == 0 {
			t.Fatalf("nothing read at %d of %d", next, seq)
		}
		next = checkEntries(t, es, next, sizes)
	}
	if es := spillRead(t, s, 7, next-1, 10, 0); len(es) != 0 {
		t.Fatalf("read %d past the end", len(es))
	}
	if n := s.Bytes.Load(); n != 0 {
		t.Fatalf("%d bytes counted unread after reading everything", n)
	}
	files, _ := os.ReadDir(dir)
	if len(files) > 1 {
		t.Fatalf("%d segment files left after reading everything", len(files))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("spill directory left after Close: %v", err)
	}
}

// A purge drops what was paged; a deleted queue's files go; a new spill
// drops what an earlier run left.
func TestSpillDropAndRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1-1.spill"), []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSpill(dir, 0, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("files of an earlier run kept: %v", files)
	}
	sizes := map[uint64]int{1: 10, 2: 10, 3: 10}
	spillWrite(t, s, 1, []SpillEntry{{Seq: 1, Msg: 1001, Record: spillRecord(1, 10)}, {Seq: 2, Msg: 1002, Record: spillRecord(2, 10)}}, false, false)
	spillWrite(t, s, 1, []SpillEntry{{Seq: 3, Msg: 1003, Record: spillRecord(3, 10)}}, true, false)
	checkEntries(t, spillRead(t, s, 1, 0, 10, 0), 3, sizes)
	spillWrite(t, s, 2, []SpillEntry{{Seq: 1, Msg: 1001, Record: spillRecord(1, 10)}}, false, false)
	spillWrite(t, s, 2, nil, false, true)
	if es := spillRead(t, s, 2, 0, 10, 0); len(es) != 0 {
		t.Fatalf("a deleted queue read %d entries", len(es))
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Fatalf("want queue 1's file only, have %v", files)
	}
}

// With no room on the filesystem beyond the reserve, page-outs wait in
// memory, in order behind what the files hold, and go to disk once there
// is room.
func TestSpillHoldsWithoutRoom(t *testing.T) {
	var mem atomic.Int64
	s, err := OpenSpill(filepath.Join(t.TempDir(), "spill"), 0, &mem, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := map[uint64]int{}
	seq := uint64(1)
	put := func(n int) {
		var ps []SpillEntry
		for range n {
			sizes[seq] = 200
			ps = append(ps, SpillEntry{Seq: seq, Msg: seq + 1000, Record: spillRecord(seq, 200)})
			seq++
		}
		spillWrite(t, s, 3, ps, false, false)
	}
	put(10)             // on disk
	s.reserve = 1 << 62 // no filesystem has that free
	put(10)
	if s.Held.Load() != 10*200 || mem.Load() != 10*200 {
		t.Fatalf("held %d bytes, counted %d in memory, want 2000", s.Held.Load(), mem.Load())
	}
	s.reserve = 0
	put(10) // room again: the held ones are written first
	if s.Held.Load() != 0 {
		t.Fatalf("still held: %d", s.Held.Load())
	}
	next := uint64(1)
	for next < seq {
		es := spillRead(t, s, 3, next-1, 7, 0)
		if len(es) == 0 {
			t.Fatalf("nothing read at %d", next)
		}
		next = checkEntries(t, es, next, sizes)
	}
	// Held and read from memory, too.
	s.reserve = 1 << 62
	put(5)
	next = checkEntries(t, spillRead(t, s, 3, next-1, 10, 0), next, sizes)
	if next != seq || s.Held.Load() != 0 || mem.Load() != 0 {
		t.Fatalf("read to %d of %d, held %d", next, seq, s.Held.Load())
	}
}

// A segment file's decoder never panics or reads past the file, whatever
// the file holds (a torn write, a corrupted disk).
func FuzzSpillSegment(f *testing.F) {
	good := appendSpill(nil, &SpillEntry{Seq: 1, Msg: 2, Count: 3, Record: []byte("record")})
	f.Add(good, 10, int64(0))
	f.Add(append(good, good[:7]...), 10, int64(3))
	f.Add([]byte{0, 0, 0, 1, 9}, 1, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, most int, maxBytes int64) {
		if most <= 0 || most > 1000 {
			most = 10
		}
		g := &spillSeg{path: "fuzz", size: int64(len(data))}
		r := bytes.NewReader(data)
		for range 100 {
			es, n, err := readSeg(r, g, most, maxBytes, 0)
			if n < 0 || g.read+n > g.size {
				t.Fatalf("consumed %d bytes at %d of %d", n, g.read, g.size)
			}
			for _, e := range es {
				if len(e.Data) > len(data) {
					t.Fatal("record longer than the file")
				}
			}
			g.read += n
			if err != nil || n == 0 {
				return
			}
		}
	})
}
