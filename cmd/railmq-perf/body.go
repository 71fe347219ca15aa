package main

import (
	"encoding/binary"
	"errors"
)

// headerSize is the fixed prefix every message body carries: producer id
// (uint32), sequence number (uint64) and send time in Unix nanoseconds
// (int64), all big-endian. The rest of the body is padding.
const headerSize = 4 + 8 + 8

// errShortBody reports a body too small to hold the header, i.e. a message
// this tool did not publish.
var errShortBody = errors.New("body shorter than the perf header")

// header is the decoded body prefix.
type header struct {
	producer uint32
	seq      uint64
	sentNano int64
}

// newBody returns a body of size bytes (at least headerSize) with the padding
// filled in; putHeader rewrites the prefix for each publish.
func newBody(size int) []byte {
	size = max(size, headerSize)
	b := make([]byte, size)
	for i := headerSize; i < size; i++ {
		b[i] = 'x'
	}
	return b
}

// putHeader writes h into the first headerSize bytes of b.
func putHeader(b []byte, h header) {
	_ = b[headerSize-1] // one bounds check
	binary.BigEndian.PutUint32(b[0:4], h.producer)
	binary.BigEndian.PutUint64(b[4:12], h.seq)
	binary.BigEndian.PutUint64(b[12:20], uint64(h.sentNano))
}

// parseHeader decodes the prefix of b.
func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, errShortBody
	}
	return header{
		producer: binary.BigEndian.Uint32(b[0:4]),
		seq:      binary.BigEndian.Uint64(b[4:12]),
		sentNano: int64(binary.BigEndian.Uint64(b[12:20])),
	}, nil
}
