package stream

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// A segment file starts with segHeader; its index file with idxHeader,
// then one idxEntrySize entry per chunk, in order:
//
//	0  first offset u64
//	8  first time   i64 unix ms
//	16 max time     i64 unix ms (the chunk's newest record)
//	24 position     u64 of the chunk in the segment file
//	32 size         u32 of the chunk
//	36 records      u32
//
// An entry is written after its chunk, so the index never names a chunk
// that is not in the segment once both are synced; recovery rebuilds a
// short index from the segment's tail.
const (
	fileHeaderSize = 8
	idxEntrySize   = 40
)

var (
	segHeader = [fileHeaderSize]byte{'R', 'M', 'Q', 'S', 'S', 'E', 'G', 1}
	idxHeader = [fileHeaderSize]byte{'R', 'M', 'Q', 'S', 'I', 'D', 'X', 1}
)

type idxEntry struct {
	first          uint64
	firstTs, maxTs int64
	pos            int64
	size           uint32
	count          uint32
}

func (e idxEntry) next() uint64 { return e.first + uint64(e.count) }

func appendIdx(b []byte, e idxEntry) []byte {
	b = binary.BigEndian.AppendUint64(b, e.first)
	b = binary.BigEndian.AppendUint64(b, uint64(e.firstTs))
	b = binary.BigEndian.AppendUint64(b, uint64(e.maxTs))
	b = binary.BigEndian.AppendUint64(b, uint64(e.pos))
	b = binary.BigEndian.AppendUint32(b, e.size)
	return binary.BigEndian.AppendUint32(b, e.count)
}

func parseIdx(b []byte) idxEntry {
	return idxEntry{
		first:   binary.BigEndian.Uint64(b),
		firstTs: int64(binary.BigEndian.Uint64(b[8:])),
		maxTs:   int64(binary.BigEndian.Uint64(b[16:])),
		pos:     int64(binary.BigEndian.Uint64(b[24:])),
		size:    binary.BigEndian.Uint32(b[32:]),
		count:   binary.BigEndian.Uint32(b[36:]),
	}
}

// idxFile reads an index file with ReadAt (binary search, O(log chunks)
// reads, nothing kept in memory).
type idxFile struct {
	f *os.File
	n int // entries usable
}

func openIdx(path string, size int64) (*idxFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	n := 0
	if size > fileHeaderSize {
		n = int((size - fileHeaderSize) / idxEntrySize)
	}
	return &idxFile{f: f, n: n}, nil
}

func (x *idxFile) entry(i int) (idxEntry, error) {
	var b [idxEntrySize]byte
	if _, err := x.f.ReadAt(b[:], fileHeaderSize+int64(i)*idxEntrySize); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("%w: index entry %d past end", ErrCorrupt, i)
		}
		return idxEntry{}, err
	}
	return parseIdx(b[:]), nil
}

// search returns the smallest i in [0, n) for which pred(entry i) holds
// (n if none), pred being false then true along the index.
func (x *idxFile) search(pred func(idxEntry) bool) (int, error) {
	lo, hi := 0, x.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		e, err := x.entry(m)
		if err != nil {
			return 0, err
		}
		if pred(e) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo, nil
}

func (x *idxFile) Close() error { return x.f.Close() }
