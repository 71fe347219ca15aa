package stream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

func segFiles(t testing.TB, dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".seg") {
			n++
		}
	}
	return n
}

// TestRetentionBytes: whole oldest segments go once the log is over
// MaxBytes, never the active one; the first offset moves, Changed fires
// and a reader behind it moves to the first kept offset.
func TestRetentionBytes(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{MaxSegmentBytes: 4096, MaxBytes: 3 * 4096})
	defer l.Close()
	behind, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Close()
	fill(t, l, 10, 10)
	if e, ok, err := behind.Next(); err != nil || !ok || e.Offset != 0 {
		t.Fatalf("first read: %v %v %v", e.Offset, ok, err)
	}
	ch := l.Changed()
	fill(t, l, 2000, 10)
	<-ch
	st := l.Stats()
	if st.First == 0 || st.SegmentsDeleted == 0 || st.Next != 2010 {
		t.Fatalf("nothing deleted: %+v", st)
	}
	if st.Bytes > 3*4096+2*4096 { // over the limit by at most the active segment
		t.Fatalf("%d bytes kept, limit %d", st.Bytes, 3*4096)
	}
	if n := segFiles(t, dir); n != st.Segments {
		t.Fatalf("%d segment files, stats say %d", n, st.Segments)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(0))); !os.IsNotExist(err) {
		t.Fatalf("segment 0 still there: %v", err)
	}
	first, _ := l.Bounds()
	es := readAll(t, behind)
	if len(es) == 0 || es[0].Offset != first {
		t.Fatalf("reader behind the deleted segments read from %d, first %d", es[0].Offset, first)
	}
	checkData(t, es, first)
	if es[len(es)-1].Offset != 2009 {
		t.Fatalf("read to %d", es[len(es)-1].Offset)
	}
	// A reader asking for a deleted offset starts at the first kept.
	r, err := l.NewReader(Spec{Kind: Offset, Offset: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Offset() != first {
		t.Fatalf("reader at deleted offset 1 starts at %d, first %d", r.Offset(), first)
	}
}

// TestRetentionAge: segments whose newest record is older than MaxAge go
// (checked by the writer's periodic tick and on SetRetention); a policy
// change applies at once.
func TestRetentionAge(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{MaxSegmentBytes: 2048})
	defer l.Close()
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	for i := 0; i < 100; i++ {
		appendWait(t, l, mkRecs(i*5, 5, old, ""))
	}
	now := time.Now().UnixMilli()
	for i := 100; i < 130; i++ {
		appendWait(t, l, mkRecs(i*5, 5, now, ""))
	}
	before := l.Stats()
	if before.First != 0 {
		t.Fatalf("deleted with no retention: %+v", before)
	}
	l.SetRetention(0, time.Hour)
	poll.Eventually(t, 10*time.Second, func() bool {
		f, _ := l.Bounds()
		return f > 0
	}, "old segments deleted")
	st := l.Stats()
	if st.FirstTimestamp < old || st.Next != 650 {
		t.Fatalf("%+v", st)
	}
	// Every kept segment but one may hold old records: the one where the
	// new ones start. Everything from offset 500 is kept.
	r, err := l.NewReader(Spec{Kind: Offset, Offset: 500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if es := readAll(t, r); len(es) != 150 {
		t.Fatalf("new records: %d kept", len(es))
	}
	// The age check also runs by itself: records that age out while the
	// log is idle. Retention applied at open, too.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openT(t, dir, Options{MaxSegmentBytes: 2048, MaxAge: time.Minute})
	defer l2.Close()
	first, _ := l2.Bounds()
	if first != st.First {
		t.Fatalf("first %d after reopen, %d before", first, st.First)
	}
}

// TestRetentionTick: with nothing appended, the writer's tick deletes a
// segment whose newest record ages out.
func TestRetentionTick(t *testing.T) {
	l := openT(t, t.TempDir(), Options{MaxSegmentBytes: 1024})
	defer l.Close()
	now := time.Now().UnixMilli()
	for i := 0; i < 40; i++ {
		appendWait(t, l, mkRecs(i*5, 5, now, ""))
	}
	l.SetRetention(0, 1500*time.Millisecond)
	poll.Eventually(t, 20*time.Second, func() bool {
		f, _ := l.Bounds()
		return f > 0
	}, "segments aged out while idle")
}
