package exchange

import (
	"errors"
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
	if dup, tz := d.Hold([]byte("a"), 2, 0, false); !dup || tz != ta {
		t.Fatalf("held id again: dup %v, ticket %v; want a duplicate, the original's ticket %v", dup, tz, ta)
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
	// A full cache keeps its newer ids: an older stored message's id
	// does not push them out.
	f := NewDedup(2, 0, []byte("owner"))
	f.Check([]byte("n1"), 500, 0, false)
	f.Check([]byte("n2"), 600, 0, false)
	f.Recall([]byte("older"), 400, 700, 0, false)
	if !f.Check([]byte("n1"), 700, 0, false) || !f.Check([]byte("n2"), 700, 0, false) {
		t.Fatal("an older recalled id evicted a newer one")
	}
	f.Recall([]byte("newer"), 800, 900, 0, false)
	if !f.Check([]byte("newer"), 900, 0, false) {
		t.Fatal("a newer recalled id was not added to a full cache")
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

// TestDedupWait: a duplicate of a held entry waits for the original's
// Release (then its own confirm may follow the commit that writes the
// entry) or Abandon (its error; the entry stays in memory, never
// written); one of a settled entry does not wait.
func TestDedupWait(t *testing.T) {
	d := NewDedup(4, 0, []byte("owner"))
	_, ta := d.Hold([]byte("a"), 1, 0, false)
	_, tb := d.Hold([]byte("b"), 1, 0, false)
	var got []string
	wait := func(id string, tk DedupTicket) bool {
		return d.Wait(tk, func(err error) {
			if ids, _ := flushedIDs(t, d); err == nil && !slices.Contains(ids, id) {
				t.Errorf("%s's waiter ran before its entry was in the log (flushed %v)", id, ids)
			}
			got = append(got, id+":"+map[bool]string{true: "err", false: "ok"}[err != nil])
		})
	}
	if _, dupA := d.Hold([]byte("a"), 2, 0, false); !wait("a", dupA) {
		t.Fatal("duplicate of held a did not wait")
	}
	if _, dupB := d.Hold([]byte("b"), 2, 0, false); !wait("b", dupB) {
		t.Fatal("duplicate of held b did not wait")
	}
	if len(got) != 0 {
		t.Fatalf("ran before settling: %v", got)
	}
	d.Release(ta)
	d.Abandon(tb, errTest)
	if !slices.Equal(got, []string{"a:ok", "b:err"}) {
		t.Fatalf("waiters: %v", got)
	}
	if ids, _ := flushedIDs(t, d); ids != nil {
		t.Fatalf("abandoned b written: %v", ids)
	}
	if dup := d.Check([]byte("b"), 3, 0, false); !dup {
		t.Fatal("abandoned b left the cache")
	}
	if wait("a", ta) || wait("a", DedupTicket{}) {
		t.Fatal("waited for a settled entry")
	}
	// Evicting the abandoned entry keeps the log's counts right.
	for _, id := range []string{"c", "e", "f", "g", "h"} {
		d.Check([]byte(id), 4, 0, false)
	}
	if ids, _ := flushedIDs(t, d); !slices.Equal(ids, []string{"c", "e", "f", "g", "h"}) {
		t.Fatalf("flushed %v", ids)
	}
}

var errTest = errors.New("refused")
