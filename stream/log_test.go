package stream

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	if f, n := l.Bounds(); f != 0 || n != 0 {
		t.Fatalf("bounds %d %d", f, n)
	}
	ch := l.Changed()
	if got := appendWait(t, l, mkRecs(0, 10, ms0, "")); got != 0 {
		t.Fatalf("first %d", got)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed after a durable append")
	}
	if got := appendWait(t, l, mkRecs(10, 5, ms0+10, "")); got != 10 {
		t.Fatalf("first %d", got)
	}
	r, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := readAll(t, r)
	if len(es) != 15 {
		t.Fatalf("read %d", len(es))
	}
	checkData(t, es, 0)
	if es[3].Timestamp != ms0+3 {
		t.Fatalf("ts %d", es[3].Timestamp)
	}
	r.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, Options{})
	defer l.Close()
	if f, n := l.Bounds(); f != 0 || n != 15 {
		t.Fatalf("bounds after reopen %d %d", f, n)
	}
	r, err = l.NewReader(Spec{Kind: Offset, Offset: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	es = readAll(t, r)
	checkData(t, es, 7)
	if len(es) != 8 {
		t.Fatalf("read %d", len(es))
	}
}

// TestLargeRecords: records larger than a reader's buffer and than a
// chunk's usual cut read back whole, between small ones.
func TestLargeRecords(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	mid := big[:100<<10]
	appendWait(t, l, []Record{{Data: []byte("a")}, {Data: mid}, {Data: big}, {Data: []byte("b")}, {Data: big}})
	r, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	es := readAll(t, r)
	if len(es) != 5 || string(es[0].Data) != "a" || !bytes.Equal(es[1].Data, mid) || !bytes.Equal(es[2].Data, big) ||
		string(es[3].Data) != "b" || !bytes.Equal(es[4].Data, big) {
		t.Fatalf("read %d records back wrong", len(es))
	}
	if st := l.Stats(); st.Chunks < 2 {
		t.Fatalf("%d chunks: a batch over %d bytes is cut", st.Chunks, maxChunkData)
	}
}
