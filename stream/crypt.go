package stream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Encryption at rest (docs/encryption.md). With Options.Seal set, each
// chunk's filter and records are sealed as one (AES-GCM through the
// Sealer, which appends its tag, nonce and key id): the chunk's header
// stays in the clear (offsets, counts, timestamps, the Raft tag: what
// recovery and seeks need without the key), carries flagSealed, counts
// the sealed bytes in its data size, and is authenticated with them (its
// first 40 bytes, the CRC's field left out). The CRC covers the bytes on
// disk, so recovery still tells a torn write (cut off) from a chunk it
// cannot open, which is an error, never cut: a wrong key must not
// truncate a stream.

// Sealer encrypts records in place (crypt.Sealer).
type Sealer interface {
	Seal(b []byte, at int, ad []byte) []byte
	Open(b, ad []byte) ([]byte, error)
	// Current reports whether a sealed record is under the current key.
	Current(sealed []byte) bool
}

// sealOverhead is what a Sealer adds (crypt.Overhead).
const sealOverhead = 36

// errNeedKey is returned for a sealed chunk in a log opened without a
// Sealer.
var errNeedKey = errors.New("the stream is encrypted, but no data encryption key was given")

// appendSealed is appendChunk, sealed under seal when set.
func appendSealed(buf []byte, recs []Record, first, tag uint64, filterSize int, seal Sealer) ([]byte, chunkInfo) {
	start := len(buf)
	buf, ci := appendChunk(buf, recs, first, tag, filterSize)
	if seal == nil {
		return buf, ci
	}
	h := buf[start:]
	h[4] |= flagSealed
	binary.BigEndian.PutUint32(h[12:], binary.BigEndian.Uint32(h[12:])+sealOverhead)
	var ad [40]byte
	copy(ad[:], h[:40])
	buf = seal.Seal(buf, start+chunkHeaderSize, ad[:])
	h = buf[start:]
	binary.BigEndian.PutUint32(h[40:], chunkCRC(h))
	ci.size = int64(len(h))
	return buf, ci
}

// openChunk checks a whole chunk in b (checkChunk) and, when it is
// sealed, opens it in place: it returns the chunk in the clear (a prefix
// of b, its header's data size the records'). A chunk that passes its
// CRC but cannot be opened is an error that is not ErrCorrupt (recovery
// must not cut it off).
func (l *Log) openChunk(b []byte) (chunkHeader, []byte, error) {
	h, err := checkChunk(b)
	if err != nil || h.flags&flagSealed == 0 {
		return h, b, err
	}
	if l.o.Seal == nil {
		return h, nil, errNeedKey
	}
	var ad [40]byte
	copy(ad[:], b[:40])
	p, err := l.o.Seal.Open(b[chunkHeaderSize:], ad[:])
	if err != nil {
		return h, nil, fmt.Errorf("chunk at offset %d: %w", h.first, err)
	}
	if len(p) < int(h.filterSize) {
		return h, nil, fmt.Errorf("%w: sealed chunk shorter than its filter", ErrCorrupt)
	}
	h.dataSize = uint32(len(p)) - uint32(h.filterSize)
	b = b[:chunkHeaderSize+len(p)]
	if err := checkRecords(b, h); err != nil {
		return h, nil, err
	}
	return h, b, nil
}

// sealedKeep is the largest sealed-chunk buffer a reader keeps.
const sealedKeep = 256 << 10

// sealedChunk moves the reader onto a sealed chunk whose header it read
// (r.hdr): the chunk is read whole, opened, and its records served from
// memory.
func (r *Reader) sealedChunk(h chunkHeader) (bool, error) {
	body := int(h.filterSize) + int(h.dataSize)
	if h.next() <= r.target || h.typ != chunkTypeUser {
		if _, err := r.br.Discard(body); err != nil {
			return false, r.corrupt(err)
		}
		r.off = h.next()
		return true, nil
	}
	if r.l.o.Seal == nil {
		return false, fmt.Errorf("stream: read: %w", errNeedKey)
	}
	// A chunk is read whole (up to maxChunkData and its filter): the
	// buffer is kept for the next chunk only when small, so that a
	// reader's memory stays near ReaderMemory between large chunks.
	buf := r.sealed
	if cap(buf) < body {
		buf = make([]byte, body)
		if body <= sealedKeep {
			r.sealed = buf
		}
	}
	buf = buf[:body]
	if _, err := io.ReadFull(r.br, buf); err != nil {
		return false, r.corrupt(err)
	}
	var ad [40]byte
	copy(ad[:], r.hdr[:40])
	p, err := r.l.o.Seal.Open(buf, ad[:])
	if err != nil {
		return false, fmt.Errorf("stream: read: chunk at offset %d: %w", h.first, err)
	}
	if len(p) < int(h.filterSize) {
		return false, r.corrupt(fmt.Errorf("%w: sealed chunk shorter than its filter", ErrCorrupt))
	}
	if r.filter != nil && !(r.filter.MatchUnfiltered && h.flags&flagUnfiltered != 0) {
		keep := false
		for _, k := range r.keys {
			if h.filterSize > 0 && bloomHas(p[:h.filterSize], k) {
				keep = true
				break
			}
		}
		if !keep {
			r.off = h.next()
			return true, nil
		}
	}
	r.plain.Reset(p[h.filterSize:])
	if r.pbr == nil {
		r.pbr = bufio.NewReaderSize(&r.plain, readBuffer)
	} else {
		r.pbr.Reset(&r.plain)
	}
	r.in = r.pbr
	r.left = h.count
	return true, nil
}

// sealedTarget is seekTime's scan of a sealed chunk whose header it read:
// the offset of its first record with timestamp >= ts (the next chunk's
// first offset if none).
func (r *Reader) sealedTarget(h chunkHeader, ts int64) (uint64, error) {
	if r.l.o.Seal == nil {
		return 0, fmt.Errorf("stream: read: %w", errNeedKey)
	}
	body := int(h.filterSize) + int(h.dataSize)
	b := make([]byte, body)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return 0, r.corrupt(err)
	}
	var ad [40]byte
	copy(ad[:], r.hdr[:40])
	p, err := r.l.o.Seal.Open(b, ad[:])
	if err != nil {
		return 0, fmt.Errorf("stream: read: chunk at offset %d: %w", h.first, err)
	}
	if len(p) < int(h.filterSize) {
		return 0, r.corrupt(fmt.Errorf("%w: sealed chunk shorter than its filter", ErrCorrupt))
	}
	data := p[h.filterSize:]
	for k := uint32(0); k < h.count; k++ {
		if len(data) < recordHeaderSize {
			return 0, r.corrupt(fmt.Errorf("%w: record header", ErrCorrupt))
		}
		if int64(binary.BigEndian.Uint64(data[4:])) >= ts {
			return h.first + uint64(k), nil
		}
		n := recordHeaderSize + int(binary.BigEndian.Uint32(data)) + int(binary.BigEndian.Uint16(data[12:]))
		if n > len(data) {
			return 0, r.corrupt(fmt.Errorf("%w: record length", ErrCorrupt))
		}
		data = data[n:]
	}
	return h.next(), nil
}
