package exchange

import (
	"strconv"
	"strings"
	"testing"
)

func TestDedupCache(t *testing.T) {
	type step struct {
		key    string
		now    int64
		ttl    int64 // with hasTTL when not 0
		dup    bool
		slot   int32 // want, when not dup
		expiry int64 // want expires when not dup
	}
	long := strings.Repeat("x", inlineKey+1)
	for _, tc := range []struct {
		name  string
		size  int
		ttl   int64
		steps []step
	}{
		{"duplicates", 10, 0, []step{
			{key: "a", now: 1, slot: 0}, {key: "a", now: 2, dup: true}, {key: "b", now: 3, slot: 1}, {key: "a", now: 4, dup: true},
			{key: long, now: 5, slot: 2}, {key: long, now: 6, dup: true}, {key: long + "y", now: 7, slot: 3},
		}},
		{"lru", 2, 0, []step{
			{key: "a", now: 1, slot: 0}, {key: "b", now: 2, slot: 1},
			{key: "a", now: 3, dup: true}, // a is now the most recently used
			{key: "c", now: 4, slot: 1},   // evicts b, not a: b's slot
			{key: "a", now: 5, dup: true},
			{key: "b", now: 6, slot: 1}, // evicts c
			{key: "c", now: 7, slot: 0}, // evicts a
		}},
		{"ttl", 10, 100, []step{
			{key: "a", now: 1000, expiry: 1100}, {key: "a", now: 1099, dup: true},
			{key: "a", now: 1100, expiry: 1200}, // expired: added anew
		}},
		{"message-ttl", 10, 100, []step{
			{key: "a", now: 1000, ttl: 5000, expiry: 6000}, {key: "a", now: 5999, dup: true},
			{key: "b", now: 1000, ttl: -1, slot: -1}, {key: "b", now: 1000, slot: 1, expiry: 1100}, // a TTL <= 0 keeps nothing
		}},
		{"cold-end-expiry", 10, 10, []step{
			{key: "a", now: 0, expiry: 10, slot: 0}, {key: "b", now: 100, expiry: 110, slot: 0}, // a's slot freed
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDedup(tc.size, tc.ttl)
			for i, s := range tc.steps {
				dup, slot, exp := d.Check([]byte(s.key), s.now, s.ttl, s.ttl != 0)
				if dup != s.dup {
					t.Fatalf("step %d %q: dup %v", i, s.key, dup)
				}
				if !dup && slot != s.slot {
					t.Fatalf("step %d %q: slot %d, want %d", i, s.key, slot, s.slot)
				}
				if !dup && s.expiry != 0 && exp != s.expiry {
					t.Fatalf("step %d %q: expires %d, want %d", i, s.key, exp, s.expiry)
				}
				if d.Len() > tc.size {
					t.Fatalf("step %d: %d entries in a cache of %d", i, d.Len(), tc.size)
				}
			}
		})
	}
}

func TestDedupRestore(t *testing.T) {
	d := NewDedup(3, 0)
	n := d.Restore([]Entry{
		{Slot: 2, Key: []byte("a"), Added: 1},
		{Slot: 0, Key: []byte("old"), Expires: 50, Added: 2}, // expired
		{Slot: 7, Key: []byte("big"), Added: 3},              // beyond the size
		{Slot: 1, Key: []byte("b"), Added: 4},
	}, 100)
	if n != 2 {
		t.Fatalf("restored %d", n)
	}
	for _, k := range []string{"a", "b"} {
		if dup, _, _ := d.Check([]byte(k), 200, 0, false); !dup {
			t.Fatalf("%s not restored", k)
		}
	}
	// The free slot 0 first, then the least recently used (a, slot 2:
	// b was looked up after it).
	if _, slot, _ := d.Check([]byte("c"), 200, 0, false); slot != 0 {
		t.Fatalf("c in slot %d", slot)
	}
	if _, slot, _ := d.Check([]byte("d"), 200, 0, false); slot != 2 {
		t.Fatalf("d in slot %d", slot)
	}
}

func BenchmarkDedupCheck(b *testing.B) {
	keys := make([][]byte, 1<<20)
	for i := range keys {
		keys[i] = []byte("message-id-" + strconv.Itoa(i))
	}
	d := NewDedup(1<<16, 60_000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Check(keys[i&(len(keys)-1)], int64(i), 0, false)
		i++
	}
}
