package stream

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// crashFixture writes 10 chunks of 3 records (offsets 0..29) and returns
// the segment and index bytes and the last chunk's position and end.
func crashFixture(t *testing.T) (seg, idx []byte, lastPos, lastEnd int) {
	t.Helper()
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	for i := 0; i < 10; i++ {
		appendWait(t, l, mkRecs(i*3, 3, ms0+int64(i*3), ""))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(dir, segName(0)))
	if err != nil {
		t.Fatal(err)
	}
	idx, err = os.ReadFile(filepath.Join(dir, idxName(0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != fileHeaderSize+10*idxEntrySize {
		t.Fatalf("index of %d bytes", len(idx))
	}
	e := parseIdx(idx[len(idx)-idxEntrySize:])
	if int(e.pos)+int(e.size) != len(seg) || e.first != 27 {
		t.Fatalf("last entry %+v, segment %d bytes", e, len(seg))
	}
	return seg, idx, int(e.pos), len(seg)
}

// recoverCase writes seg and idx (nil: no index file) into a new
// directory, opens it and checks that it holds exactly the records
// 0..want-1, intact, and that the index names every chunk again.
func recoverCase(t *testing.T, seg, idx []byte, want uint64, appendAfter bool) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, segName(0)), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	if idx != nil {
		if err := os.WriteFile(filepath.Join(dir, idxName(0)), idx, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := openT(t, dir, Options{NoSync: !appendAfter})
	defer l.Close()
	if f, n := l.Bounds(); f != 0 || n != want {
		t.Fatalf("bounds %d %d, want 0 %d", f, n, want)
	}
	r, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := readAll(t, r)
	r.Close()
	if uint64(len(es)) != want {
		t.Fatalf("read %d, want %d", len(es), want)
	}
	checkData(t, es, 0)
	if want > 4 { // seek through the (rebuilt) index
		r, err := l.NewReader(Spec{Kind: Offset, Offset: want - 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		es := readAll(t, r)
		r.Close()
		if len(es) != 4 {
			t.Fatalf("read %d from %d", len(es), want-4)
		}
		checkData(t, es, want-4)
	}
	if ix, err := os.Stat(filepath.Join(dir, idxName(0))); err != nil || ix.Size() != fileHeaderSize+int64(want/3)*idxEntrySize {
		t.Fatalf("index after recovery: %v %v, want %d chunks", ix.Size(), err, want/3)
	}
	if appendAfter {
		if first := appendWait(t, l, mkRecs(int(want), 2, ms0, "")); first != want {
			t.Fatalf("append after recovery at %d, want %d", first, want)
		}
		r, err := l.NewReader(Spec{Kind: First}, nil)
		if err != nil {
			t.Fatal(err)
		}
		es := readAll(t, r)
		r.Close()
		checkData(t, es, 0)
		if uint64(len(es)) != want+2 {
			t.Fatalf("read %d after append", len(es))
		}
	}
}

// TestTornTail: the segment cut at every byte inside its last chunk (a
// crash during the write) recovers to the 9 whole chunks before it, with
// the index naming the torn chunk or not.
func TestTornTail(t *testing.T) {
	seg, idx, lastPos, lastEnd := crashFixture(t)
	shortIdx := idx[:len(idx)-idxEntrySize]
	for cut := lastPos; cut < lastEnd; cut++ {
		recoverCase(t, seg[:cut], idx, 27, cut == lastPos+1)
		recoverCase(t, seg[:cut], shortIdx, 27, false)
	}
	recoverCase(t, seg, idx, 30, true) // untouched
}

// TestFlippedByte: any byte of the last chunk changed recovers to the
// chunks before it.
func TestFlippedByte(t *testing.T) {
	seg, idx, lastPos, lastEnd := crashFixture(t)
	for i := lastPos; i < lastEnd; i++ {
		b := bytes.Clone(seg)
		b[i] ^= 0x40
		recoverCase(t, b, idx, 27, i == lastEnd-1)
	}
}

// TestGarbageAppended: bytes after the last chunk (a write that was
// never synced, or junk) are cut off; every chunk is kept.
func TestGarbageAppended(t *testing.T) {
	seg, idx, lastPos, lastEnd := crashFixture(t)
	lastChunk := seg[lastPos:lastEnd]
	// A whole valid chunk that does not follow (its first offset is 27
	// again) and one with a later offset but a bad CRC.
	dup := bytes.Clone(lastChunk)
	bad := bytes.Clone(lastChunk)
	binary.BigEndian.PutUint64(bad[16:], 30)
	for _, g := range [][]byte{
		{0}, bytes.Repeat([]byte{0}, 47), bytes.Repeat([]byte{0}, 48), bytes.Repeat([]byte{0xff}, 5000),
		dup, bad, lastChunk[:chunkHeaderSize],
	} {
		recoverCase(t, append(bytes.Clone(seg), g...), idx, 30, len(g) == 1)
	}
}

// TestIndexMismatch: an index longer than the segment (entries for
// chunks that are not there) or shorter (entries not written, a partial
// entry, no index at all) is made to name exactly the whole chunks.
func TestIndexMismatch(t *testing.T) {
	seg, idx, _, _ := crashFixture(t)
	past := appendIdx(nil, idxEntry{first: 30, pos: int64(len(seg)), size: 100, count: 3})
	wrong := appendIdx(nil, idxEntry{first: 30, pos: 8, size: 100, count: 3})
	for name, x := range map[string][]byte{
		"past the segment":     append(bytes.Clone(idx), past...),
		"naming a wrong chunk": append(bytes.Clone(idx), wrong...),
		"duplicate last entry": append(bytes.Clone(idx), idx[len(idx)-idxEntrySize:]...),
		"partial entry":        append(bytes.Clone(idx), past[:13]...),
		"one entry short":      idx[:len(idx)-idxEntrySize],
		"half":                 idx[:fileHeaderSize+5*idxEntrySize],
		"header only":          idx[:fileHeaderSize],
		"empty":                {},
		"garbage header":       append([]byte("garbage!"), idx[fileHeaderSize:]...),
		"missing":              nil,
	} {
		t.Run(name, func(t *testing.T) {
			recoverCase(t, seg, x, 30, name == "missing")
		})
	}
}

// TestRecoverRolledSegments: a crash just after a roll (the new segment
// empty or not even holding its header), a sealed segment with no index,
// and the last tag read from the previous segment.
func TestRecoverRolledSegments(t *testing.T) {
	dir := t.TempDir()
	o := Options{MaxSegmentBytes: 1024}
	l := openT(t, dir, o)
	for i := 0; i < 40; i++ {
		ch := make(chan error, 1)
		l.AppendTagged(mkRecs(i*4, 4, ms0, ""), uint64(100+i), func(_ uint64, err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if l.LastTag() != 139 || st.Segments < 3 {
		t.Fatalf("tag %d, stats %+v", l.LastTag(), st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn new segment (created, header not written) after the last.
	if err := os.WriteFile(filepath.Join(dir, segName(160)), []byte("RMQ"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A sealed segment that lost its index.
	firsts, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, idxName(firsts[1]))); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, o)
	defer l.Close()
	if f, n := l.Bounds(); f != 0 || n != 160 {
		t.Fatalf("bounds %d %d", f, n)
	}
	if l.LastTag() != 139 {
		t.Fatalf("last tag %d after reopen", l.LastTag())
	}
	for _, from := range []uint64{0, firsts[1] + 1, 159} {
		r, err := l.NewReader(Spec{Kind: Offset, Offset: from}, nil)
		if err != nil {
			t.Fatal(err)
		}
		es := readAll(t, r)
		r.Close()
		if uint64(len(es)) != 160-from {
			t.Fatalf("from %d: %d", from, len(es))
		}
		checkData(t, es, from)
	}
	r, err := l.NewReader(Spec{Kind: Last}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Offset() != 156 {
		t.Fatalf("last chunk at %d, want 156", r.Offset())
	}
}
