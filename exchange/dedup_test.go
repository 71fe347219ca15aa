package exchange

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func TestDedupCache(t *testing.T) {
	type step struct {
		key string
		now int64
		ttl int64 // with hasTTL when not 0
		dup bool
	}
	long := strings.Repeat("x", inlineKey+1)
	for _, tc := range []struct {
		name  string
		size  int
		ttl   int64
		steps []step
	}{
		{"duplicates", 10, 0, []step{
			{key: "a", now: 1}, {key: "a", now: 2, dup: true}, {key: "b", now: 3}, {key: "a", now: 4, dup: true},
			{key: long, now: 5}, {key: long, now: 6, dup: true}, {key: long + "y", now: 7},
		}},
		{"lru", 2, 0, []step{
			{key: "a", now: 1}, {key: "b", now: 2},
			{key: "a", now: 3, dup: true}, // a is now the most recently used
			{key: "c", now: 4},            // evicts b, not a
			{key: "a", now: 5, dup: true},
			{key: "b", now: 6}, // evicts c
			{key: "a", now: 7, dup: true},
			{key: "c", now: 8},
		}},
		{"ttl", 10, 100, []step{
			{key: "a", now: 1000}, {key: "a", now: 1099, dup: true},
			// Added within millisecond 1000, perhaps at its end: it
			// lives through 1100, a full 100 ms, and no longer.
			{key: "a", now: 1100, dup: true},
			{key: "a", now: 1101}, // expired: added anew
			{key: "a", now: 1102, dup: true},
		}},
		{"message-ttl", 10, 100, []step{
			{key: "a", now: 1000, ttl: 5000}, {key: "a", now: 5999, dup: true},
			{key: "b", now: 1000, ttl: -1}, {key: "b", now: 1000}, // a TTL <= 0 keeps nothing
			{key: "b", now: 1001, dup: true},
		}},
		{"cold-end-expiry", 1, 10, []step{
			{key: "a", now: 0}, {key: "b", now: 100}, {key: "b", now: 101, dup: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDedup(tc.size, tc.ttl, nil)
			for i, s := range tc.steps {
				if dup := d.Check([]byte(s.key), s.now, s.ttl, s.ttl != 0); dup != s.dup {
					t.Fatalf("step %d %q: dup %v", i, s.key, dup)
				}
				if d.Len() > tc.size {
					t.Fatalf("step %d: %d entries in a cache of %d", i, d.Len(), tc.size)
				}
			}
		})
	}
}

// TestDedupLog follows a durable cache's log: one segment per flush with
// the entries added since, segments deleted once their last entry is
// evicted, and a replay that brings back the newest entries.
func TestDedupLog(t *testing.T) {
	d := NewDedup(3, 0, []byte("owner"))
	stored := map[uint64][]byte{}
	flush := func() {
		d.Flush(nil, func(seg uint64, entries []byte, dead []uint64) {
			if entries != nil {
				stored[seg] = entries
			}
			for _, s := range dead {
				delete(stored, s)
			}
		})
	}
	d.Check([]byte("a"), 1, 0, false)
	d.Check([]byte("b"), 2, 0, false)
	flush() // segment 0: a, b
	d.Check([]byte("c"), 3, 0, false)
	d.Check([]byte("d"), 4, 0, false) // evicts a
	flush()                           // segment 1: c, d
	if len(stored) != 2 {
		t.Fatalf("%d segments", len(stored))
	}
	d.Check([]byte("e"), 5, 0, false) // evicts b: segment 0 is empty
	d.Check([]byte("f"), 6, 0, false) // evicts c
	flush()                           // segment 2: e, f; segment 0 deleted
	if _, ok := stored[0]; ok || len(stored) != 2 {
		t.Fatalf("segments %v", stored)
	}
	d.Check([]byte("x"), 7, 0, false)
	flush()
	d.Close()
	d.Check([]byte("y"), 8, 0, false)
	flush() // closed: nothing
	if _, ok := stored[4]; ok {
		t.Fatal("flushed after Close")
	}

	if len(stored) != 2 || stored[2] == nil || stored[3] == nil {
		t.Fatalf("segments %v, want 2 (e, f) and 3 (x): 1 went with d", stored)
	}
	replay := func(size int) (*DedupCache, []uint64) {
		r := NewDedup(size, 0, []byte("owner"))
		var dead []uint64
		for _, seg := range []uint64{2, 3} {
			dd, ok := r.Restore(seg, stored[seg], 100)
			if !ok {
				t.Fatal("corrupt segment")
			}
			dead = append(dead, dd...)
		}
		return r, dead
	}
	r, dead := replay(3)
	for _, k := range []string{"e", "f", "x"} {
		if !r.Check([]byte(k), 200, 0, false) {
			t.Fatalf("%s not restored", k)
		}
	}
	if len(dead) != 0 {
		t.Fatalf("dead segments %v", dead)
	}
	// Replayed into a smaller cache, the oldest go, and segment 2 with
	// them.
	r, dead = replay(1)
	if r.Check([]byte("e"), 200, 0, false) || len(dead) != 1 || dead[0] != 2 {
		t.Fatalf("dead %v", dead)
	}
}

func TestDedupRestoreExpired(t *testing.T) {
	var seg []byte
	seg = AppendEntry(seg, []byte("old"), 50, 1)
	seg = AppendEntry(seg, []byte("new"), 0, 2)
	d := NewDedup(10, 0, []byte("o"))
	if _, ok := d.Restore(7, seg, 100); !ok {
		t.Fatal("corrupt")
	}
	if d.Check([]byte("old"), 100, 0, false) || !d.Check([]byte("new"), 100, 0, false) {
		t.Fatal("expired entry restored, or live one not")
	}
	if _, ok := d.Restore(8, seg[:5], 100); ok {
		t.Fatal("truncated segment parsed")
	}
}

func BenchmarkDedupCheck(b *testing.B) {
	keys := make([][]byte, 1<<20)
	for i := range keys {
		keys[i] = []byte("message-id-" + strconv.Itoa(i))
	}
	d := NewDedup(1<<16, 60_000, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Check(keys[i&(len(keys)-1)], int64(i), 0, false)
		i++
	}
}

// TestDedupCacheCountsMemory: a cache's entries count into the memory
// figure it is given (x-cache-size is the client's), and give it back as
// they leave and when the cache is closed.
func TestDedupCacheCountsMemory(t *testing.T) {
	var mem atomic.Int64
	d := NewDedup(100, 0, nil)
	d.Memory = &mem
	long := strings.Repeat("x", 200)
	for i := range 150 { // 50 evicted: 100 entries held
		d.Check([]byte(strconv.Itoa(i)), 1, 0, false)
	}
	d.Check([]byte(long), 1, 0, false) // evicts one short id
	want := 99*entryBytes(3) + entryBytes(len(long))
	if got := mem.Load(); got != want {
		t.Fatalf("memory %d, want %d", got, want)
	}
	d.Close()
	if got := mem.Load(); got != 0 {
		t.Fatalf("memory %d after Close, want 0", got)
	}
}
