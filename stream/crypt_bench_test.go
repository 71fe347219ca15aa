package stream

import (
	"bytes"
	"testing"

	"github.com/railmq/railmq/crypt"
)

// BenchmarkChunkSeal: encoding a chunk of 64 records of 1 KiB as the
// writer does, without a key through appendChunk itself and through
// appendSealed with no Sealer (the path every log without a key takes:
// one nil check more), and sealed under a key (one AES-GCM pass).
//
//	go test -run XXX -bench ChunkSeal ./stream/
func BenchmarkChunkSeal(b *testing.B) {
	recs := make([]Record, 64)
	for i := range recs {
		recs[i] = Record{Timestamp: ms0, Data: bytes.Repeat([]byte{byte(i)}, 1024)}
	}
	s, err := (&crypt.Keys{Key: bytes.Repeat([]byte{1}, 32)}).Sealer()
	if err != nil {
		b.Fatal(err)
	}
	size := int64(64 * (1024 + recordHeaderSize))
	buf := make([]byte, 0, 80<<10)
	b.Run("appendChunk", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			buf, _ = appendChunk(buf[:0], recs, 0, 0, 16)
		}
	})
	b.Run("no-key", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			buf, _ = appendSealed(buf[:0], recs, 0, 0, 16, nil)
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			buf, _ = appendSealed(buf[:0], recs, 0, 0, 16, s)
		}
	})
}

// BenchmarkSealedRead: reading a log of 64 Ki records of 1 KiB from the
// first offset, without a key and sealed.
func BenchmarkSealedRead(b *testing.B) {
	s, err := (&crypt.Keys{Key: bytes.Repeat([]byte{1}, 32)}).Sealer()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		seal Sealer
	}{{"no-key", nil}, {"key", s}} {
		b.Run(tc.name, func(b *testing.B) {
			l := openT(b, b.TempDir(), Options{NoSync: true, Seal: tc.seal})
			defer l.Close()
			recs := make([]Record, 256)
			for i := range recs {
				recs[i] = Record{Timestamp: ms0, Data: bytes.Repeat([]byte{byte(i)}, 1024)}
			}
			for range 256 {
				appendWait(b, l, recs)
			}
			b.ReportAllocs()
			b.SetBytes(256 * 256 * 1024)
			for b.Loop() {
				r, err := l.NewReader(Spec{Kind: First}, nil)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					_, ok, err := r.Next()
					if err != nil {
						b.Fatal(err)
					}
					if !ok {
						break
					}
					n++
				}
				r.Close()
				if n != 256*256 {
					b.Fatalf("read %d", n)
				}
			}
		})
	}
}
