package stream

import (
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"
)

// segState is what recovery learns of a segment.
type segState struct {
	info segInfo
	last idxEntry // its last chunk, if has
	has  bool
	tag  uint64 // the last chunk's tag
}

// recover opens the log's segments (Open): the older ones from their
// index files (the first and last entry, O(1) each), the last one by
// checking its tail (recoverSegment). It leaves the last segment and its
// index open for the writer.
func (l *Log) recover() (*view, error) {
	firsts, err := listSegments(l.dir)
	if err != nil {
		return nil, err
	}
	if len(firsts) == 0 {
		seg, idx, err := createSegment(l.dir, 0)
		if err != nil {
			return nil, err
		}
		l.seg, l.idx = seg, idx
		l.segSize, l.idxSize = fileHeaderSize, fileHeaderSize
		return &view{active: segInfo{size: fileHeaderSize, idxSize: fileHeaderSize}}, nil
	}
	v := &view{}
	var prev segState
	for _, f := range firsts[:len(firsts)-1] {
		st, err := l.sealedState(f)
		if err != nil {
			return nil, err
		}
		v.sealed = append(v.sealed, st.info)
		prev = st
	}
	last := firsts[len(firsts)-1]
	seg, idx, st, err := l.recoverSegment(last)
	if err != nil {
		return nil, err
	}
	l.seg, l.idx = seg, idx
	l.segSize, l.idxSize = st.info.size, st.info.idxSize
	v.active = st.info
	v.next, v.lastChunk = last, last
	switch {
	case st.has:
		v.next, v.lastChunk, v.lastTag = st.last.next(), st.last.first, st.tag
	case prev.has:
		v.lastChunk = prev.last.first
		tag, err := l.chunkTag(prev.info.first, prev.last)
		if err != nil {
			seg.Close()
			idx.Close()
			return nil, err
		}
		v.lastTag = tag
	}
	v.first = v.active.first
	if len(v.sealed) > 0 {
		v.first = v.sealed[0].first
	}
	return v, nil
}

// sealedState reads a closed segment's bounds from its index: O(1) when
// the index's last entry ends where the segment ends, else the segment
// is checked and repaired as a tail is.
func (l *Log) sealedState(first uint64) (segState, error) {
	st, ok, err := l.sealedQuick(first)
	if err != nil || ok {
		return st, err
	}
	seg, idx, st, err := l.recoverSegment(first)
	if err != nil {
		return st, err
	}
	seg.Close()
	idx.Close()
	return st, nil
}

func (l *Log) sealedQuick(first uint64) (segState, bool, error) {
	fi, err := os.Stat(l.segPath(first))
	if err != nil {
		return segState{}, false, err
	}
	ii, err := os.Stat(l.idxPath(first))
	if err != nil {
		return segState{}, false, nil
	}
	x, err := openIdx(l.idxPath(first), ii.Size())
	if err != nil {
		return segState{}, false, nil
	}
	defer x.Close()
	var hdr [fileHeaderSize]byte
	if _, err := x.f.ReadAt(hdr[:], 0); err != nil || hdr != idxHeader || x.n == 0 ||
		ii.Size() != fileHeaderSize+int64(x.n)*idxEntrySize {
		return segState{}, false, nil
	}
	e0, err := x.entry(0)
	if err != nil {
		return segState{}, false, err
	}
	last, err := x.entry(x.n - 1)
	if err != nil {
		return segState{}, false, err
	}
	if e0.first != first || e0.pos != fileHeaderSize || last.pos+int64(last.size) != fi.Size() {
		return segState{}, false, nil
	}
	info := segInfo{first: first, firstTs: e0.firstTs, maxTs: last.maxTs, size: fi.Size(), idxSize: ii.Size()}
	return segState{info: info, last: last, has: true}, true, nil
}

// chunkTag reads the tag of the chunk e names in segment first.
func (l *Log) chunkTag(first uint64, e idxEntry) (uint64, error) {
	f, err := os.Open(l.segPath(first))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [chunkHeaderSize]byte
	if _, err := f.ReadAt(b[:], e.pos); err != nil {
		return 0, err
	}
	h, err := parseHeader(b[:])
	if err != nil {
		return 0, err
	}
	return h.tag, nil
}

// recoverSegment opens a segment and its index for writing and makes
// them agree on the last whole chunk: index entries that name no valid
// chunk are dropped from the end (each checked by its CRC, newest
// first, until one holds), the chunks after the last good one are
// checked and indexed, and whatever follows the last whole chunk (a torn
// or corrupt write) is cut off. It reads only the tail: the last indexed
// chunk and what follows it.
func (l *Log) recoverSegment(first uint64) (seg, idx *os.File, st segState, err error) {
	seg, err = os.OpenFile(l.segPath(first), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, st, err
	}
	idx, err = os.OpenFile(l.idxPath(first), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		seg.Close()
		return nil, nil, st, err
	}
	st, err = l.repair(first, seg, idx)
	if err != nil {
		seg.Close()
		idx.Close()
		return nil, nil, st, fmt.Errorf("segment %d: %w", first, err)
	}
	return seg, idx, st, nil
}

// resetFile makes f hold just a file header.
func resetFile(f *os.File, hdr [fileHeaderSize]byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(hdr[:], 0)
	return err
}

func (l *Log) repair(first uint64, seg, idx *os.File) (segState, error) {
	var st segState
	segSize, err := fileSize(seg)
	if err != nil {
		return st, err
	}
	var hdr [fileHeaderSize]byte
	if segSize < fileHeaderSize { // torn creation
		if err := resetFile(seg, segHeader); err != nil {
			return st, err
		}
		segSize = fileHeaderSize
	} else if _, err := seg.ReadAt(hdr[:], 0); err != nil {
		return st, err
	} else if hdr != segHeader {
		return st, fmt.Errorf("%w: not a segment file", ErrCorrupt)
	}
	idxSize, err := fileSize(idx)
	if err != nil {
		return st, err
	}
	if idxSize >= fileHeaderSize {
		if _, err := idx.ReadAt(hdr[:], 0); err != nil {
			return st, err
		}
	}
	if idxSize < fileHeaderSize || hdr != idxHeader {
		if err := resetFile(idx, idxHeader); err != nil {
			return st, err
		}
		idxSize = fileHeaderSize
	}
	x := &idxFile{f: idx, n: int((idxSize - fileHeaderSize) / idxEntrySize)}
	var buf []byte
	readChunk := func(pos int64, size int64) ([]byte, error) {
		if int64(cap(buf)) < size {
			buf = make([]byte, size)
		}
		b := buf[:size]
		_, err := seg.ReadAt(b, pos)
		return b, err
	}
	// Walk back from the last index entry to one naming a valid chunk.
	n := x.n
	pos := int64(fileHeaderSize)
	for n > 0 {
		e, err := x.entry(n - 1)
		if err != nil {
			return st, err
		}
		ok, err := x.follows(n-1, e, first)
		if err != nil {
			return st, err
		}
		if ok && e.size >= chunkHeaderSize && e.pos+int64(e.size) <= segSize {
			b, err := readChunk(e.pos, int64(e.size))
			if err != nil {
				return st, err
			}
			h, _, err := l.openChunk(b)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return st, err // a chunk it cannot open (no key, a wrong one) is not cut off
			}
			if err == nil && h.first == e.first && h.count == e.count {
				st.last, st.has, st.tag = e, true, h.tag
				pos = e.pos + int64(e.size)
				break
			}
		}
		n--
	}
	if n > 0 {
		e0, err := x.entry(0)
		if err != nil {
			return st, err
		}
		st.info.firstTs = e0.firstTs
	}
	// Check and index the chunks written after the last indexed one.
	var ibuf []byte
	expect := first
	if st.has {
		expect = st.last.next()
	}
	for pos+chunkHeaderSize <= segSize {
		var hb [chunkHeaderSize]byte
		if _, err := seg.ReadAt(hb[:], pos); err != nil {
			return st, err
		}
		h, err := parseHeader(hb[:])
		if err != nil || h.first != expect || pos+h.size() > segSize {
			break
		}
		b, err := readChunk(pos, h.size())
		if err != nil {
			return st, err
		}
		h, b, err = l.openChunk(b)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return st, err
		}
		if err != nil {
			break
		}
		e := idxEntry{first: h.first, firstTs: h.firstTs, maxTs: h.firstTs, pos: pos, size: uint32(h.size()), count: h.count}
		decodeRecords(b, h, func(en Entry) {
			if en.Timestamp > e.maxTs {
				e.maxTs = en.Timestamp
			}
		})
		if !st.has {
			st.info.firstTs = e.firstTs
		}
		ibuf = appendIdx(ibuf, e)
		st.last, st.has, st.tag = e, true, h.tag
		pos += int64(e.size)
		expect = e.next()
	}
	if st.has {
		st.info.maxTs = st.last.maxTs
	}
	if dropped := segSize - pos; dropped > 0 {
		l.log.Warn("stream segment tail truncated to the last whole chunk",
			zap.Uint64("segment", first), zap.Int64("bytes_dropped", dropped), zap.Int64("size", pos))
		if err := seg.Truncate(pos); err != nil {
			return st, err
		}
		if err := seg.Sync(); err != nil {
			return st, err
		}
	}
	kept := fileHeaderSize + int64(n)*idxEntrySize
	newSize := kept + int64(len(ibuf))
	if newSize != idxSize || len(ibuf) > 0 {
		if idxSize > kept {
			l.log.Warn("stream index entries dropped", zap.Uint64("segment", first), zap.Int64("entries", (idxSize-kept)/idxEntrySize))
		}
		if _, err := idx.WriteAt(ibuf, kept); err != nil {
			return st, err
		}
		if err := idx.Truncate(newSize); err != nil {
			return st, err
		}
		if err := idx.Sync(); err != nil {
			return st, err
		}
	}
	st.info.first, st.info.size, st.info.idxSize = first, pos, newSize
	return st, nil
}

func fileSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// follows reports whether entry i (e) comes right after entry i-1 (or
// starts segment first, for i == 0): same file position and offset.
func (x *idxFile) follows(i int, e idxEntry, first uint64) (bool, error) {
	if i == 0 {
		return e.pos == fileHeaderSize && e.first == first, nil
	}
	p, err := x.entry(i - 1)
	if err != nil {
		return false, err
	}
	return p.pos+int64(p.size) == e.pos && p.next() == e.first, nil
}
