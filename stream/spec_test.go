package stream

import (
	"testing"
)

// fill appends n records in batches of per (one chunk each), numbered and
// timestamped by offset (ts = ms0 + offset).
func fill(t testing.TB, l *Log, n, per int) {
	t.Helper()
	_, next := l.Bounds()
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		o := int(next) + i
		appendWait(t, l, mkRecs(o, k, ms0+int64(o), ""))
	}
}

// TestSegmentRoll: offsets run on across segment rolls, and every offset
// can be read from, before and after a reopen.
func TestSegmentRoll(t *testing.T) {
	dir := t.TempDir()
	o := Options{MaxSegmentBytes: 2048}
	l := openT(t, dir, o)
	fill(t, l, 500, 7)
	st := l.Stats()
	if st.Segments < 5 || st.First != 0 || st.Next != 500 || st.Appended != 500 {
		t.Fatalf("stats %+v", st)
	}
	check := func(l *Log) {
		for _, from := range []uint64{0, 1, 6, 7, 8, 99, 250, 498, 499} {
			r, err := l.NewReader(Spec{Kind: Offset, Offset: from}, nil)
			if err != nil {
				t.Fatal(err)
			}
			es := readAll(t, r)
			r.Close()
			if len(es) != int(500-from) {
				t.Fatalf("from %d: read %d", from, len(es))
			}
			checkData(t, es, from)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, o)
	defer l.Close()
	if got := l.Stats(); got.Segments != st.Segments || got.Next != 500 || got.Bytes != st.Bytes {
		t.Fatalf("after reopen %+v, before %+v", got, st)
	}
	check(l)
	if first := appendWait(t, l, mkRecs(500, 3, ms0+500, "")); first != 500 {
		t.Fatalf("append after reopen at %d", first)
	}
}

// TestSpecs: each starting point.
func TestSpecs(t *testing.T) {
	l := openT(t, t.TempDir(), Options{MaxSegmentBytes: 4096})
	defer l.Close()
	fill(t, l, 300, 10)                           // chunks of 10: the last starts at 290
	appendWait(t, l, mkRecs(300, 4, ms0+300, "")) // last chunk: 300..303
	cases := []struct {
		name string
		s    Spec
		from uint64
	}{
		{"first", Spec{Kind: First}, 0},
		{"last", Spec{Kind: Last}, 300},
		{"next", Spec{Kind: Next}, 304},
		{"offset", Spec{Kind: Offset, Offset: 123}, 123},
		{"offset past next", Spec{Kind: Offset, Offset: 10_000}, 304},
		{"timestamp", Spec{Kind: Timestamp, Timestamp: ms0 + 187}, 187},
		{"timestamp at a chunk start", Spec{Kind: Timestamp, Timestamp: ms0 + 190}, 190},
		{"timestamp before all", Spec{Kind: Timestamp, Timestamp: ms0 - 5000}, 0},
		{"timestamp after all", Spec{Kind: Timestamp, Timestamp: ms0 + 5000}, 304},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := l.NewReader(c.s, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Offset() != c.from {
				t.Fatalf("Offset() %d, want %d", r.Offset(), c.from)
			}
			es := readAll(t, r)
			if len(es) != int(304-c.from) {
				t.Fatalf("read %d, want %d", len(es), 304-c.from)
			}
			checkData(t, es, c.from)
			// It then sees what is appended after it.
			appendWait(t, l, nil)
		})
	}
	// A reader at next sees the next append.
	r, err := l.NewReader(Spec{Kind: Next}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if es := readAll(t, r); len(es) != 0 {
		t.Fatalf("read %d at next", len(es))
	}
	appendWait(t, l, mkRecs(304, 2, ms0+304, ""))
	es := readAll(t, r)
	if len(es) != 2 {
		t.Fatalf("read %d after append", len(es))
	}
	checkData(t, es, 304)
}

// TestTimestampMillis: a timestamp start is exact to the millisecond
// inside a chunk (per-record timestamps), not to the chunk or second.
func TestTimestampMillis(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Timestamp: ms0 + int64(i)*3, Data: []byte{byte(i)}}
	}
	appendWait(t, l, recs) // one chunk
	for _, c := range []struct {
		ts   int64
		want uint64
	}{{ms0, 0}, {ms0 + 1, 1}, {ms0 + 3, 1}, {ms0 + 4, 2}, {ms0 + 2997, 999}, {ms0 + 2998, 1000}} {
		r, err := l.NewReader(Spec{Kind: Timestamp, Timestamp: c.ts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, ok, err := r.Next()
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if c.want == 1000 {
			if ok {
				t.Fatalf("ts %d: got offset %d, want none", c.ts-ms0, e.Offset)
			}
			continue
		}
		if !ok || e.Offset != c.want {
			t.Fatalf("ts +%d: got %d (%v), want %d", c.ts-ms0, e.Offset, ok, c.want)
		}
	}
}
