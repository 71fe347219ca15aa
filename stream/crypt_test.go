package stream

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/railmq/railmq/crypt"
)

func sealer(t *testing.T, k byte, old ...byte) *crypt.Sealer {
	t.Helper()
	ks := &crypt.Keys{Key: bytes.Repeat([]byte{k}, 32)}
	for _, o := range old {
		ks.Old = append(ks.Old, crypt.OldKey{Key: bytes.Repeat([]byte{o}, 32)})
	}
	s, err := ks.Sealer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// segBytes is every segment file's bytes, by name.
func segBytes(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".seg") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = b
		}
	}
	return out
}

func readFrom(t *testing.T, l *Log, s Spec, f *Filter) []Entry {
	t.Helper()
	r, err := l.NewReader(s, f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return readAll(t, r)
}

// A sealed log: its segments hold none of the records' bytes, and it
// reads back whole, by offset, by timestamp and through a filter, before
// and after a reopen.
func TestSealedLog(t *testing.T) {
	dir := t.TempDir()
	o := Options{MaxSegmentBytes: 4 << 10, Seal: sealer(t, 1)}
	l := openT(t, dir, o)
	for i := 0; i < 200; i += 10 {
		f := "red"
		if i%20 == 0 {
			f = "blue"
		}
		appendWait(t, l, mkRecs(i, 10, ms0+int64(i), f))
	}
	check := func(l *Log) {
		checkData(t, readFrom(t, l, Spec{Kind: First}, nil), 0)
		checkData(t, readFrom(t, l, Spec{Kind: Offset, Offset: 57}, nil), 57)
		checkData(t, readFrom(t, l, Spec{Kind: Timestamp, Timestamp: ms0 + 133}, nil), 133)
		red := readFrom(t, l, Spec{Kind: First}, &Filter{Values: []string{"red"}})
		if len(red) != 100 || red[0].Offset != 10 {
			t.Fatalf("red: %d records from %d", len(red), red[0].Offset)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segBytes(t, dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments: the test rolls none", len(segs))
	}
	for name, b := range segs {
		if bytes.Contains(b, []byte("rec-")) || bytes.Contains(b, []byte("red")) {
			t.Fatalf("%s holds records in the clear", name)
		}
	}
	l = openT(t, dir, o)
	check(l)
	appendWait(t, l, mkRecs(200, 5, ms0+200, ""))
	checkData(t, readFrom(t, l, Spec{Kind: Offset, Offset: 195}, nil), 195)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Opened without its key, or with another, a sealed log is an error
// and no byte of it is cut (a torn tail would be).
func TestSealedLogWrongKey(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{Seal: sealer(t, 1)})
	appendWait(t, l, mkRecs(0, 10, ms0, ""))
	appendWait(t, l, mkRecs(10, 10, ms0, ""))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := segBytes(t, dir)
	for name, o := range map[string]Options{"no key": {}, "wrong key": {Seal: sealer(t, 2)}} {
		if l, err := Open(dir, o); err == nil {
			l.Close()
			t.Fatalf("%s: opened", name)
		} else if name == "no key" && !errors.Is(err, errNeedKey) || name == "wrong key" && !errors.Is(err, crypt.ErrWrongKey) {
			t.Fatalf("%s: %v", name, err)
		}
		after := segBytes(t, dir)
		for f, b := range before {
			if !bytes.Equal(after[f], b) {
				t.Fatalf("%s: segment %s changed (%d bytes, was %d)", name, f, len(after[f]), len(b))
			}
		}
	}
}

// A torn sealed chunk is cut back to the last whole one, as a plain one.
func TestSealedTornTail(t *testing.T) {
	dir := t.TempDir()
	o := Options{Seal: sealer(t, 1)}
	l := openT(t, dir, o)
	appendWait(t, l, mkRecs(0, 10, ms0, ""))
	appendWait(t, l, mkRecs(10, 10, ms0, ""))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, segName(0))
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, o)
	defer l.Close()
	es := readFrom(t, l, Spec{Kind: First}, nil)
	if len(es) != 10 {
		t.Fatalf("%d records after the cut, want the first chunk's 10", len(es))
	}
	checkData(t, es, 0)
}

// A rotation: opened with key 2 and key 1 as old, a log sealed under 1
// is sealed again under 2 (same sizes, so the index holds), after which
// key 2 alone reads it, and key 1 alone does not.
func TestSealedLogRotation(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{MaxSegmentBytes: 4 << 10, Seal: sealer(t, 1)})
	for i := 0; i < 100; i += 10 {
		appendWait(t, l, mkRecs(i, 10, ms0+int64(i), ""))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := segBytes(t, dir)
	l = openT(t, dir, Options{MaxSegmentBytes: 4 << 10, Seal: sealer(t, 2, 1)})
	checkData(t, readFrom(t, l, Spec{Kind: First}, nil), 0)
	appendWait(t, l, mkRecs(100, 10, ms0+100, ""))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	after := segBytes(t, dir)
	for f, b := range before {
		if len(after[f]) < len(b) || bytes.Equal(after[f][:len(b)], b) {
			t.Fatalf("segment %s: %d bytes, was %d; unchanged: %v", f, len(after[f]), len(b), bytes.Equal(after[f][:len(b)], b))
		}
	}
	l = openT(t, dir, Options{MaxSegmentBytes: 4 << 10, Seal: sealer(t, 2)})
	es := readFrom(t, l, Spec{Kind: First}, nil)
	if len(es) != 110 {
		t.Fatalf("%d records under the new key alone, want 110", len(es))
	}
	checkData(t, es, 0)
	checkData(t, readFrom(t, l, Spec{Kind: Timestamp, Timestamp: ms0 + 42}, nil)[:1], 42)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(dir, Options{Seal: sealer(t, 1)}); err == nil {
		l.Close()
		t.Fatal("the old key alone opened the log after the rotation")
	}
}
