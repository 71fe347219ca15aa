package exchange

import (
	"slices"
	"testing"
)

// flushedIDs flushes d and returns the ids of the entries written, and
// whether the wipe ran (first).
func flushedIDs(t *testing.T, d *DedupCache) (ids []string, wiped bool) {
	t.Helper()
	d.Flush(func() {
		if len(ids) > 0 {
			t.Fatal("wipe after entries")
		}
		wiped = true
	}, func(seg uint64, entries []byte, dead []uint64) {
		ParseSegment(entries, func(key []byte, expires, added int64) { ids = append(ids, string(key)) })
	})
	return ids, wiped
}

// TestDedupHold: an entry added by Hold is a duplicate at once but is
// not written before Release (its message is not stored yet); an entry
// evicted before Release is never written; Release of the zero ticket
// or of a slot taken since does nothing.
func TestDedupHold(t *testing.T) {
	d := NewDedup(2, 0, []byte("owner"))
	dup, ta := d.Hold([]byte("a"), 1, 0, false)
	if dup || ta == (DedupTicket{}) {
		t.Fatalf("first Hold: dup %v, ticket %v", dup, ta)
	}
	if dup, tz := d.Hold([]byte("a"), 2, 0, false); !dup || tz != (DedupTicket{}) {
		t.Fatalf("held id again: dup %v, ticket %v; want a duplicate, zero ticket", dup, tz)
	}
	if ids, _ := flushedIDs(t, d); ids != nil {
		t.Fatalf("held entry written before Release: %v", ids)
	}
	d.Release(ta)
	d.Release(ta) // twice: once written
	if ids, _ := flushedIDs(t, d); !slices.Equal(ids, []string{"a"}) {
		t.Fatalf("after Release: %v, want [a]", ids)
	}
	_, tb := d.Hold([]byte("b"), 3, 0, false)
	_, tc := d.Hold([]byte("c"), 4, 0, false) // evicts a
	_, td := d.Hold([]byte("d"), 5, 0, false) // evicts b, held: never logged
	d.Release(tb)                             // b's slot is d's now
	d.Release(DedupTicket{})
	if ids, _ := flushedIDs(t, d); ids != nil {
		t.Fatalf("an evicted held entry, or another's slot, was written: %v", ids)
	}
	d.Release(td)
	d.Release(tc)
	if ids, _ := flushedIDs(t, d); !slices.Equal(ids, []string{"d", "c"}) {
		t.Fatalf("after Release: %v, want [d c] (release order)", ids)
	}
	// A memory-only cache holds nothing back: no ticket.
	m := NewDedup(2, 0, nil)
	if _, tm := m.Hold([]byte("a"), 1, 0, false); tm != (DedupTicket{}) {
		t.Fatalf("memory cache gave ticket %v", tm)
	}
}

// TestDedupHoldLongID: an id longer than a slot holds in place is
// written whole on Release.
func TestDedupHoldLongID(t *testing.T) {
	d := NewDedup(4, 0, []byte("owner"))
	long := string(make([]byte, inlineKey+10))
	_, tk := d.Hold([]byte(long), 1, 0, false)
	d.Release(tk)
	if ids, _ := flushedIDs(t, d); !slices.Equal(ids, []string{long}) {
		t.Fatalf("long id written as %q", ids)
	}
}

// TestDedupRecall: recovery's ids from stored messages join the cache
// (a duplicate afterwards) and are written at the next flush, unless
// expired or already there.
func TestDedupRecall(t *testing.T) {
	d := NewDedup(8, 1000, []byte("owner"))
	d.Check([]byte("known"), 100, 0, false)
	flushedIDs(t, d)
	d.Recall([]byte("known"), 100, 500, 0, false)
	d.Recall([]byte("old"), 100, 2000, 0, false)   // cache TTL 1000: expired at 1101
	d.Recall([]byte("fresh"), 900, 1500, 0, false) // expires 1901
	d.Recall([]byte("own"), 100, 1500, 5000, true) // its own x-cache-ttl
	d.Recall([]byte("zero"), 100, 1500, 0, true)   // x-cache-ttl 0: never added
	if ids, _ := flushedIDs(t, d); !slices.Equal(ids, []string{"fresh", "own"}) {
		t.Fatalf("recalled and written: %v, want [fresh own]", ids)
	}
	for id, want := range map[string]bool{"fresh": true, "own": true, "old": false, "zero": false} {
		if got := d.Check([]byte(id), 1600, 0, false); got != want {
			t.Errorf("%s a duplicate: %v, want %v", id, got, want)
		}
	}
}

// TestDedupClearFirst: a new cache's wipe of its name's old records runs
// in its first flush, before its entries, even when it has none yet;
// and only once.
func TestDedupClearFirst(t *testing.T) {
	d := NewDedup(4, 0, []byte("owner"))
	d.ClearFirst()
	if ids, wiped := flushedIDs(t, d); !wiped || ids != nil {
		t.Fatalf("first flush: wiped %v, entries %v", wiped, ids)
	}
	d.Check([]byte("a"), 1, 0, false)
	if ids, wiped := flushedIDs(t, d); wiped || !slices.Equal(ids, []string{"a"}) {
		t.Fatalf("second flush: wiped %v, entries %v", wiped, ids)
	}
	e := NewDedup(4, 0, []byte("owner"))
	e.ClearFirst()
	e.Check([]byte("b"), 1, 0, false)
	if ids, wiped := flushedIDs(t, e); !wiped || !slices.Equal(ids, []string{"b"}) {
		t.Fatalf("wipe and entries: wiped %v, entries %v", wiped, ids)
	}
}
