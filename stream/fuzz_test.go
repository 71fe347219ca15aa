package stream

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzChunk: the chunk decoder never panics and never accepts a chunk
// whose CRC fails.
func FuzzChunk(f *testing.F) {
	valid, _ := appendChunk(nil, mkRecs(3, 3, ms0, ""), 3, 0, 16)
	filtered, _ := appendChunk(nil, []Record{{Timestamp: ms0, Filter: "red", Data: []byte("x")}, {Timestamp: ms0 + 1}}, 3, 9, 32)
	f.Add(valid)
	f.Add(filtered)
	f.Add(valid[:chunkHeaderSize])
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(b []byte) {
			h, err := checkChunk(b)
			if err != nil {
				return
			}
			if chunkCRC(b) != h.crc {
				t.Fatal("accepted a chunk whose CRC fails")
			}
			n := uint32(0)
			decodeRecords(b, h, func(Entry) { n++ })
			if n != h.count {
				t.Fatalf("%d records, header says %d", n, h.count)
			}
		}
		check(b)
		// The same bytes with their CRC made right, to reach the record
		// checks behind it.
		if len(b) >= chunkHeaderSize {
			fixed := bytes.Clone(b)
			binary.BigEndian.PutUint32(fixed[40:], chunkCRC(fixed))
			check(fixed)
		}
	})
}

// FuzzRecoverTail: a segment whose tail is the fuzzed bytes recovers to
// the whole chunks before them (plus whole valid chunks in them that
// follow), never panics, and reads back.
func FuzzRecoverTail(f *testing.F) {
	valid, _ := appendChunk(nil, mkRecs(3, 3, ms0, ""), 3, 0, 16)
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{})
	prefix, _ := appendChunk(nil, mkRecs(0, 3, ms0, ""), 0, 0, 16)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		dir := t.TempDir()
		seg := append(append(segHeader[:], prefix...), b...)
		if err := os.WriteFile(filepath.Join(dir, segName(0)), seg, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, next := l.Bounds()
		want := uint64(3) // and the whole chunks that follow in b
		for rest := b; len(rest) >= chunkHeaderSize; {
			h, err := parseHeader(rest)
			if err != nil || h.first != want || h.size() > int64(len(rest)) {
				break
			}
			if _, err := checkChunk(rest[:h.size()]); err != nil {
				break
			}
			want, rest = h.next(), rest[h.size():]
		}
		if next != want {
			t.Fatalf("recovered to %d, want %d", next, want)
		}
		r, err := l.NewReader(Spec{Kind: First}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := uint64(0)
		for {
			e, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if e.Offset != n {
				t.Fatalf("offset %d, want %d", e.Offset, n)
			}
			n++
		}
		if n != next {
			t.Fatalf("read %d of %d", n, next)
		}
	})
}
