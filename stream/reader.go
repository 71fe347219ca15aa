package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// readBuffer is a reader's buffer: its memory, whatever the log's size.
const readBuffer = ReaderMemory

// ReaderMemory is what a Reader holds: its read buffer (its owner may
// count it in a memory figure).
const ReaderMemory = 64 << 10

// Reader reads the log from an offset onwards, sequentially, with its
// own file handle and a small buffer: its memory does not grow with the
// log. One goroutine at a time.
//
// It reads only durable bytes: its file is read through segSrc, which
// stops at the size the last published view gives the segment, so the
// buffer never holds bytes written but not yet synced.
type Reader struct {
	l      *Log
	f      *os.File
	src    segSrc
	br     *bufio.Reader
	seg    uint64 // first offset of the open segment
	off    uint64 // offset of the next record in the file
	left   uint32 // records left in the current chunk
	target uint64 // records before it are skipped (a seek into a chunk)
	filter *Filter
	keys   []string // filter values as stored
	closed bool
	hdr    [chunkHeaderSize]byte
	rh     [recordHeaderSize]byte
	bloom  []byte
	big    []byte
	// in is where record reads: br, or pbr over a sealed chunk opened
	// into sealed (crypt.go).
	in     *bufio.Reader
	pbr    *bufio.Reader
	plain  bytes.Reader
	sealed []byte
}

// segSrc reads a segment file up to limit, with ReadAt.
type segSrc struct {
	f          *os.File
	pos, limit int64
}

func (s *segSrc) Read(p []byte) (int, error) {
	if s.pos >= s.limit {
		return 0, io.EOF
	}
	if int64(len(p)) > s.limit-s.pos {
		p = p[:s.limit-s.pos]
	}
	n, err := s.f.ReadAt(p, s.pos)
	s.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// NewReader starts a reader at s, reading the records f selects.
func (l *Log) NewReader(s Spec, f *Filter) (*Reader, error) {
	r := &Reader{l: l, filter: f}
	if f != nil {
		for _, v := range f.Values {
			r.keys = append(r.keys, filterKey(v))
		}
	}
	for try := 0; ; try++ {
		v := l.v.Load()
		if v.closed {
			return nil, ErrClosed
		}
		var err error
		switch s.Kind {
		case First:
			err = r.seek(v, v.first)
		case Last:
			err = r.seek(v, v.lastChunk)
		case Next:
			err = r.seek(v, v.next)
		case Offset:
			err = r.seek(v, s.Offset)
		case Timestamp:
			err = r.seekTime(v, s.Timestamp)
		default:
			return nil, fmt.Errorf("stream: unknown spec kind %d", s.Kind)
		}
		if err == nil {
			return r, nil
		}
		// A segment deleted by retention between the view and the open:
		// try again with the newer view.
		if !errors.Is(err, os.ErrNotExist) || try > 100 {
			r.Close()
			return nil, err
		}
	}
}

// seek positions the reader at offset o, clamped to [first, next]: at
// the chunk holding it (the segment from the view, the chunk from the
// segment's index by binary search), skipping the records before it.
func (r *Reader) seek(v *view, o uint64) error {
	o = max(o, v.first)
	o = min(o, v.next)
	si, _ := v.seg(o)
	if o == v.next {
		return r.open(si, si.size, o, o)
	}
	x, err := openIdx(r.l.idxPath(si.first), si.idxSize)
	if err != nil {
		return err
	}
	defer x.Close()
	i, err := x.search(func(e idxEntry) bool { return e.next() > o })
	if err != nil {
		return err
	}
	if i >= x.n {
		return fmt.Errorf("%w: offset %d not in the index of segment %d", ErrCorrupt, o, si.first)
	}
	e, err := x.entry(i)
	if err != nil {
		return err
	}
	return r.open(si, e.pos, e.first, o)
}

// seekTime positions the reader at the first record with timestamp >= ts
// (ms): the first segment whose newest record is that recent, then the
// first such chunk in its index, then records are skipped up to it.
func (r *Reader) seekTime(v *view, ts int64) error {
	i := sort.Search(len(v.sealed), func(i int) bool { return v.sealed[i].maxTs >= ts })
	var si segInfo
	switch {
	case i < len(v.sealed):
		si = v.sealed[i]
	case v.next > v.active.first && v.active.maxTs >= ts:
		si = v.active
	default:
		return r.seek(v, v.next)
	}
	x, err := openIdx(r.l.idxPath(si.first), si.idxSize)
	if err != nil {
		return err
	}
	defer x.Close()
	j, err := x.search(func(e idxEntry) bool { return e.maxTs >= ts })
	if err != nil {
		return err
	}
	if j >= x.n {
		return r.seek(v, v.next)
	}
	e, err := x.entry(j)
	if err != nil {
		return err
	}
	if err := r.open(si, e.pos, e.first, e.first); err != nil {
		return err
	}
	// The first record of the chunk at or after ts: read the records'
	// headers, then start again at the chunk with that target.
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return r.corrupt(err)
	}
	h, err := parseHeader(r.hdr[:])
	if err != nil {
		return r.corrupt(err)
	}
	if h.flags&flagSealed != 0 {
		target, err := r.sealedTarget(h, ts)
		if err != nil {
			return err
		}
		return r.open(si, e.pos, e.first, target)
	}
	if _, err := r.br.Discard(int(h.filterSize)); err != nil {
		return r.corrupt(err)
	}
	target := h.next()
	for k := uint32(0); k < h.count; k++ {
		if _, err := io.ReadFull(r.br, r.rh[:]); err != nil {
			return r.corrupt(err)
		}
		if int64(binary.BigEndian.Uint64(r.rh[4:])) >= ts {
			target = h.first + uint64(k)
			break
		}
		n := int(binary.BigEndian.Uint32(r.rh[:])) + int(binary.BigEndian.Uint16(r.rh[12:]))
		if _, err := r.br.Discard(n); err != nil {
			return r.corrupt(err)
		}
	}
	return r.open(si, e.pos, e.first, target)
}

// open points the reader at position pos of segment si, where the chunk
// starting at offset off is; records before target are skipped.
func (r *Reader) open(si segInfo, pos int64, off, target uint64) error {
	if r.f == nil || r.seg != si.first {
		f, err := os.Open(r.l.segPath(si.first))
		if err != nil {
			return err
		}
		if r.f != nil {
			r.f.Close()
		}
		r.f, r.seg = f, si.first
	}
	r.src = segSrc{f: r.f, pos: pos, limit: si.size}
	if r.br == nil {
		r.br = bufio.NewReaderSize(&r.src, readBuffer)
	} else {
		r.br.Reset(&r.src)
	}
	r.off, r.target, r.left = off, target, 0
	r.in = r.br
	return nil
}

// Offset is the offset the reader reads next.
func (r *Reader) Offset() uint64 { return max(r.off, r.target) }

// Close closes the reader's file.
func (r *Reader) Close() error {
	r.closed = true
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Next returns the next durable record the reader selects, or false when
// it has read every durable record (wait on Changed, then call again). A
// reader whose next offset was deleted by retention moves to the first
// offset kept. The Entry's Data is valid until the next call.
func (r *Reader) Next() (Entry, bool, error) {
	if r.closed {
		return Entry{}, false, ErrClosed
	}
	for {
		v := r.l.v.Load()
		if v.closed {
			return Entry{}, false, ErrClosed
		}
		if r.left == 0 || r.off < v.first {
			ok, err := r.nextChunk(v)
			if err != nil || !ok {
				return Entry{}, false, err
			}
			continue
		}
		e, ok, err := r.record()
		if err != nil || ok {
			return e, ok, err
		}
	}
}

// nextChunk moves the reader onto the next chunk it selects (false: none
// durable yet). Records before the first kept offset are left behind.
func (r *Reader) nextChunk(v *view) (bool, error) {
	if r.off < v.first {
		err := r.seek(v, v.first)
		if errors.Is(err, os.ErrNotExist) {
			return true, nil // deleted meanwhile: look again
		}
		return err == nil, err
	}
	if r.off >= v.next {
		return false, nil
	}
	si, _ := v.seg(r.off)
	if si.first != r.seg {
		// This segment is read: the next one starts at r.off.
		err := r.open(si, fileHeaderSize, r.off, r.target)
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		return err == nil, err
	}
	r.src.limit = si.size
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return false, r.corrupt(err)
	}
	h, err := parseHeader(r.hdr[:])
	if err != nil {
		return false, r.corrupt(err)
	}
	if h.first != r.off {
		return false, r.corrupt(fmt.Errorf("%w: chunk at %d, expected %d", ErrCorrupt, h.first, r.off))
	}
	if h.flags&flagSealed != 0 {
		return r.sealedChunk(h)
	}
	keep := h.next() > r.target && h.typ == chunkTypeUser
	if keep && r.filter != nil && !(r.filter.MatchUnfiltered && h.flags&flagUnfiltered != 0) {
		keep = false
		if h.filterSize > 0 {
			if cap(r.bloom) < int(h.filterSize) {
				r.bloom = make([]byte, 255)
			}
			r.bloom = r.bloom[:h.filterSize]
			if _, err := io.ReadFull(r.br, r.bloom); err != nil {
				return false, r.corrupt(err)
			}
			for _, k := range r.keys {
				if bloomHas(r.bloom, k) {
					keep = true
					break
				}
			}
			h.filterSize = 0 // read
		}
	}
	if !keep {
		if _, err := r.br.Discard(int(h.filterSize) + int(h.dataSize)); err != nil {
			return false, r.corrupt(err)
		}
		r.off = h.next()
		return true, nil
	}
	if _, err := r.br.Discard(int(h.filterSize)); err != nil {
		return false, r.corrupt(err)
	}
	r.left = h.count
	r.in = r.br
	return true, nil
}

// record reads the current chunk's next record; ok is false if the
// reader does not select it.
func (r *Reader) record() (Entry, bool, error) {
	if _, err := io.ReadFull(r.in, r.rh[:]); err != nil {
		return Entry{}, false, r.corrupt(err)
	}
	dl := int(binary.BigEndian.Uint32(r.rh[:]))
	ts := int64(binary.BigEndian.Uint64(r.rh[4:]))
	fl := int(binary.BigEndian.Uint16(r.rh[12:]))
	off := r.off
	r.off++
	r.left--
	fb, err := r.in.Peek(fl)
	if err != nil {
		return Entry{}, false, r.corrupt(err)
	}
	if off < r.target || !r.match(fb) {
		if _, err := r.in.Discard(fl + dl); err != nil {
			return Entry{}, false, r.corrupt(err)
		}
		return Entry{}, false, nil
	}
	e := Entry{Offset: off, Timestamp: ts}
	if fl > 0 {
		e.Filter = string(fb)
	}
	if _, err := r.in.Discard(fl); err != nil {
		return Entry{}, false, r.corrupt(err)
	}
	if dl <= r.in.Size() {
		e.Data, err = r.in.Peek(dl)
		if err == nil {
			_, err = r.in.Discard(dl)
		}
	} else {
		if cap(r.big) < dl {
			r.big = make([]byte, dl)
		}
		e.Data = r.big[:dl]
		_, err = io.ReadFull(r.in, e.Data)
	}
	if err != nil {
		return Entry{}, false, r.corrupt(err)
	}
	return e, true, nil
}

// match is the exact per-record filter test.
func (r *Reader) match(fv []byte) bool {
	if r.filter == nil {
		return true
	}
	if len(fv) == 0 {
		return r.filter.MatchUnfiltered
	}
	for _, k := range r.keys {
		if string(fv) == k {
			return true
		}
	}
	return false
}

func (r *Reader) corrupt(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: segment %d ends inside a chunk at offset %d", ErrCorrupt, r.seg, r.off)
	}
	return fmt.Errorf("stream: read: %w", err)
}
