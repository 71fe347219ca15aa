package persist

import (
	"testing"

	"github.com/railmq/railmq/crypt"
)

// BenchmarkSpillEntry: encoding a paged 1 KiB record and decoding it
// back, through appendSpill itself, through appendEntry/open without a
// key (a spill that does not encrypt: one nil check each), and sealed.
//
//	go test -run XXX -bench SpillEntry ./persist/
func BenchmarkSpillEntry(b *testing.B) {
	rec := make([]byte, 1024)
	e := SpillEntry{Seq: 1, Msg: 2, Count: 1, Record: rec}
	seal, err := crypt.Ephemeral()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 2048)
	b.Run("appendSpill", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(1024)
		for b.Loop() {
			buf = appendSpill(buf[:0], &e)
		}
	})
	for _, tc := range []struct {
		name string
		seal *crypt.Sealer
	}{{"no-key", nil}, {"key", seal}} {
		s := &Spill{seal: tc.seal}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(1024)
			for b.Loop() {
				buf = s.appendEntry(buf[:0], &e)
			}
		})
		b.Run(tc.name+"/read", func(b *testing.B) {
			buf = s.appendEntry(buf[:0], &e)
			sealed := append([]byte(nil), buf[spillHeader:]...)
			data := make([]byte, len(sealed))
			es := make([]Entry, 1)
			b.ReportAllocs()
			b.SetBytes(1024)
			for b.Loop() {
				copy(data, sealed) // opened in place
				es[0] = Entry{Seq: 1, Msg: 2, Count: 1, Data: data}
				if err := s.open(es); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
