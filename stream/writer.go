package stream

import (
	"fmt"

	"go.uber.org/zap"
)

// commit writes a batch of appends (everything queued since the last
// sync) as one or a few chunks, syncs once, publishes the new bounds and
// runs the callbacks in order. On failure the segment and index are cut
// back to where they were and the batch's callbacks get the error.
// Writer goroutine.
func (l *Log) commit(batch []appendReq) {
	v := l.v.Load()
	err := l.broken
	var infos []chunkInfo
	if err == nil {
		infos, err = l.writeBatch(batch, v.next)
	}
	if err != nil {
		for _, r := range batch {
			if r.done != nil {
				r.done(0, err)
			}
		}
		return
	}
	nv := *v
	var n uint64
	for _, ci := range infos {
		if nv.active.size <= fileHeaderSize && nv.active.firstTs == 0 {
			nv.active.firstTs = ci.firstTs
		}
		if ci.maxTs > nv.active.maxTs || nv.active.maxTs == 0 {
			nv.active.maxTs = ci.maxTs
		}
		nv.active.size += ci.size
		nv.active.idxSize += idxEntrySize
		nv.lastChunk = ci.first
		if ci.tag > nv.lastTag {
			nv.lastTag = ci.tag
		}
		n += uint64(ci.count)
	}
	nv.next = v.next + n
	l.segSize, l.idxSize = nv.active.size, nv.active.idxSize
	l.publish(&nv, len(infos) > 0)
	l.chunks.Add(uint64(len(infos)))
	l.appended.Add(n)
	next := v.next
	for _, r := range batch {
		if r.done != nil {
			r.done(next, nil)
		}
		next += uint64(len(r.recs))
	}
	if l.segSize >= l.o.MaxSegmentBytes {
		l.roll()
	}
}

// writeBatch encodes and writes the batch's chunks from offset next and
// syncs the segment; the index entries are written after the chunks
// (and synced at a roll and at Close: recovery rebuilds a short index
// from the segment).
func (l *Log) writeBatch(batch []appendReq, next uint64) ([]chunkInfo, error) {
	buf, ibuf := l.buf[:0], l.ibuf[:0]
	// Sized once for the whole batch: grown record by record, a batch of
	// large records was copied over and over (growslice was half the
	// writer's time at 1 MiB records).
	need := 0
	for _, r := range batch {
		for i := range r.recs {
			need += len(r.recs[i].Data) + recordHeaderSize + len(r.recs[i].Filter)
		}
	}
	need += (need/maxChunkData + len(batch) + 1) * (chunkHeaderSize + 255 + sealOverhead)
	if cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	var infos []chunkInfo
	recs := l.recs[:0]
	var size int
	var tag uint64
	flush := func() {
		if len(recs) == 0 {
			return
		}
		pos := l.segSize + int64(len(buf))
		var ci chunkInfo
		buf, ci = appendSealed(buf, recs, next, tag, l.o.FilterSize, l.o.Seal)
		ibuf = appendIdx(ibuf, idxEntry{first: ci.first, firstTs: ci.firstTs, maxTs: ci.maxTs, pos: pos, size: uint32(ci.size), count: ci.count})
		infos = append(infos, ci)
		next += uint64(len(recs))
		clear(recs)
		recs, size, tag = recs[:0], 0, 0
	}
	for _, r := range batch {
		for i := range r.recs {
			if size > 0 && size+len(r.recs[i].Data) > maxChunkData {
				flush()
			}
			recs = append(recs, r.recs[i])
			size += len(r.recs[i].Data) + recordHeaderSize + len(r.recs[i].Filter)
		}
		if r.tag > tag {
			tag = r.tag
		}
	}
	flush()
	l.recs = recs
	if len(buf) == 0 {
		return nil, nil
	}
	l.buf, l.ibuf = buf, ibuf
	if len(l.buf) > 16<<20 { // do not keep a huge batch's buffer
		l.buf = nil
	}
	_, err := l.seg.WriteAt(buf, l.segSize)
	if err == nil {
		_, err = l.idx.WriteAt(ibuf, l.idxSize)
	}
	if err == nil && !l.o.NoSync {
		err = l.seg.Sync()
	}
	if err != nil {
		l.log.Error("stream write failed", zap.Error(err), zap.Int("bytes", len(buf)))
		l.undo()
		return nil, fmt.Errorf("stream: write: %w", err)
	}
	return infos, nil
}

// undo cuts the active segment and index back to their last synced size
// after a failed write; if even that fails, the log takes no more writes.
func (l *Log) undo() {
	err := l.seg.Truncate(l.segSize)
	if err == nil {
		err = l.idx.Truncate(l.idxSize)
	}
	if err == nil && !l.o.NoSync {
		err = l.seg.Sync()
	}
	if err != nil {
		l.log.Error("stream truncate after failed write failed: log refuses writes", zap.Error(err))
		l.broken = fmt.Errorf("stream: log broken by a failed write: %w", err)
	}
}

// roll closes the active segment and starts a new one at the next
// offset, then applies the retention (writer goroutine). If the new
// segment cannot be created, the active one keeps growing and the roll
// is tried again after the next batch.
func (l *Log) roll() {
	v := l.v.Load()
	if !l.o.NoSync {
		if err := l.idx.Sync(); err != nil {
			l.log.Error("stream index sync failed", zap.Error(err))
			return
		}
	}
	seg, idx, err := createSegment(l.dir, v.next)
	if err != nil {
		if !l.rollFailed {
			l.log.Error("stream segment create failed", zap.Error(err))
		}
		l.rollFailed = true
		return
	}
	l.rollFailed = false
	if err := l.seg.Close(); err != nil {
		l.log.Error("stream segment close failed", zap.Error(err))
	}
	if err := l.idx.Close(); err != nil {
		l.log.Error("stream index close failed", zap.Error(err))
	}
	l.seg, l.idx = seg, idx
	l.segSize, l.idxSize = fileHeaderSize, fileHeaderSize
	nv := *v
	nv.sealed = make([]segInfo, len(v.sealed)+1)
	copy(nv.sealed, v.sealed)
	nv.sealed[len(v.sealed)] = v.active
	nv.active = segInfo{first: v.next, size: fileHeaderSize, idxSize: fileHeaderSize}
	l.publish(&nv, false)
	l.applyRetention()
}
