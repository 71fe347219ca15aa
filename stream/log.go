package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Who owns what.
//
// The writer goroutine (run), one per Log, owns the files being written
// (the active segment and its index), the tracking file and every
// deletion: it is the only one that writes to disk or publishes a view.
// A view is an immutable snapshot of the log's bounds and segments
// (O(segments)), published through an atomic pointer: readers, Bounds,
// Stats and Changed load it and never take a lock. Records become
// visible to readers only in a view published after their fsync.
//
// Log.mu guards only what other goroutines hand to the writer: the queue
// of appends, the retention settings, the tracked offsets and the closing
// flag. It is held for a few instructions, never across I/O, and nothing
// is taken under it (LOCKS.md: stream.Log.mu). Done callbacks run on the
// writer goroutine with no lock held.

// tickEvery is the writer's periodic check: retention by age and writing
// tracked offsets stored while nothing was appended.
const tickEvery = 500 * time.Millisecond

// trackEvery is the least time between two writes of the tracking file.
const trackEvery = 200 * time.Millisecond

// view is what readers see of the log: immutable once published.
type view struct {
	sealed    []segInfo // older segments, oldest first
	active    segInfo   // the segment being written
	first     uint64    // first offset kept
	next      uint64    // next offset to write: durable records are [first, next)
	lastChunk uint64    // first offset of the last chunk (next if none)
	lastTag   uint64
	closed    bool
	changed   chan struct{} // closed when a newer view is published
}

// seg returns the segment holding offset o (o in [first, next)), or the
// active one for o == next; ok is false if o is before the first kept.
func (v *view) seg(o uint64) (segInfo, bool) {
	if o >= v.active.first {
		return v.active, true
	}
	i := searchSegs(v.sealed, o)
	if i < 0 {
		return segInfo{}, false
	}
	return v.sealed[i], true
}

// searchSegs is the index of the last segment whose first offset <= o, or -1.
func searchSegs(s []segInfo, o uint64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].first > o {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo - 1
}

type appendReq struct {
	recs []Record
	tag  uint64
	done func(first uint64, err error)
}

// Log is one stream's storage, in its own directory.
type Log struct {
	dir string
	o   Options
	log *zap.Logger

	v atomic.Pointer[view]

	signal chan struct{} // one slot: the writer has work
	exited chan struct{} // closed when the writer returns

	mu         sync.Mutex
	queue      []appendReq
	maxBytes   int64
	maxAge     time.Duration
	retention  bool // retention changed: apply it
	closing    bool
	tracked    map[string]uint64
	trackDirty bool

	// Owned by the writer goroutine.
	seg, idx         *os.File
	segSize, idxSize int64 // bytes written and synced
	buf, ibuf        []byte
	recs             []Record
	broken           error // a failed write could not be undone: no more writes
	rollFailed       bool
	trackWritten     time.Time
	closeErr         error

	chunks, appended, segsDeleted atomic.Uint64
}

// Open opens (creating if needed) the log in dir, recovering it: a torn
// or corrupt tail of the last segment (a crash) is truncated to the last
// whole chunk, with a Warn log saying how many bytes went.
func Open(dir string, o Options) (*Log, error) {
	if o.MaxSegmentBytes <= 0 {
		o.MaxSegmentBytes = 500_000_000
	}
	if o.FilterSize <= 0 {
		o.FilterSize = 16
	}
	if o.FilterSize > 255 {
		o.FilterSize = 255
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stream: open %s: %w", dir, err)
	}
	l := &Log{
		dir:      dir,
		o:        o,
		log:      o.Log.With(zap.String("stream_dir", dir)),
		signal:   make(chan struct{}, 1),
		exited:   make(chan struct{}),
		maxBytes: o.MaxBytes,
		maxAge:   o.MaxAge,
		tracked:  map[string]uint64{},
	}
	if o.Seal != nil {
		if err := l.reseal(); err != nil { // reseal.go
			return nil, fmt.Errorf("stream: open %s: %w", dir, err)
		}
	}
	v, err := l.recover()
	if err != nil {
		return nil, fmt.Errorf("stream: open %s: %w", dir, err)
	}
	if err := l.loadTracking(); err != nil {
		l.seg.Close()
		l.idx.Close()
		return nil, fmt.Errorf("stream: open %s: %w", dir, err)
	}
	v.changed = make(chan struct{})
	l.v.Store(v)
	l.retention = true // apply the retention at once
	l.kick()
	go l.run()
	return l, nil
}

func (l *Log) kick() {
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// Append queues records to be written, in order after every earlier
// Append; done runs once they are fsynced (or failed), with the first
// one's offset, on the log's writer goroutine (it must not block).
// Appends that arrive while the writer writes and syncs go out together
// in the next chunk (cut into several past 4 MiB): batching comes from
// load, never from a timer. After Close, done runs at once with
// ErrClosed.
func (l *Log) Append(recs []Record, done func(first uint64, err error)) {
	l.AppendTagged(recs, 0, done)
}

// AppendTagged is Append for a replicated stream: tag (the Raft index of
// the entry the records came in) is stored in the chunk's header, and
// LastTag reports the highest one written, so that an entry applied
// again after a restart is recognised and skipped.
func (l *Log) AppendTagged(recs []Record, tag uint64, done func(first uint64, err error)) {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		if done != nil {
			done(0, ErrClosed)
		}
		return
	}
	l.queue = append(l.queue, appendReq{recs: recs, tag: tag, done: done})
	l.mu.Unlock()
	l.kick()
}

// LastTag is the highest tag written by AppendTagged (0: none).
func (l *Log) LastTag() uint64 { return l.v.Load().lastTag }

// Changed returns a channel closed at the next change: records made
// durable, or the first offset moved by retention. Take a new one after
// each close.
func (l *Log) Changed() <-chan struct{} { return l.v.Load().changed }

// Bounds returns the first offset kept and the next offset to be written
// (durable records are [first, next)).
func (l *Log) Bounds() (first, next uint64) {
	v := l.v.Load()
	return v.first, v.next
}

// Stats describe the log now.
func (l *Log) Stats() Stats {
	v := l.v.Load()
	s := Stats{
		First:           v.first,
		Next:            v.next,
		Segments:        len(v.sealed) + 1,
		Bytes:           v.active.size + v.active.idxSize,
		Chunks:          l.chunks.Load(),
		Appended:        l.appended.Load(),
		SegmentsDeleted: l.segsDeleted.Load(),
	}
	for _, sg := range v.sealed {
		s.Bytes += sg.size + sg.idxSize
	}
	if v.next > v.first {
		if len(v.sealed) > 0 {
			s.FirstTimestamp = v.sealed[0].firstTs
		} else {
			s.FirstTimestamp = v.active.firstTs
		}
		s.LastTimestamp = v.active.maxTs
		if v.active.size <= fileHeaderSize && len(v.sealed) > 0 {
			s.LastTimestamp = v.sealed[len(v.sealed)-1].maxTs
		}
	}
	return s
}

// SetRetention changes the retention (a policy change) and applies it.
func (l *Log) SetRetention(maxBytes int64, maxAge time.Duration) {
	l.mu.Lock()
	l.maxBytes, l.maxAge, l.retention = maxBytes, maxAge, true
	l.mu.Unlock()
	l.kick()
}

// Close stops the writer (after writing what was queued) and closes the
// files. Readers fail afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		<-l.exited
		return nil
	}
	l.closing = true
	l.mu.Unlock()
	l.kick()
	<-l.exited
	return l.closeErr
}

// Delete closes the log and removes its directory.
func (l *Log) Delete() error {
	err := l.Close()
	if rerr := os.RemoveAll(l.dir); rerr != nil {
		return fmt.Errorf("stream: delete %s: %w", l.dir, rerr)
	}
	return err
}

// publish makes nv the view readers see; changed: wake those waiting on
// Changed.
func (l *Log) publish(nv *view, changed bool) {
	old := l.v.Load()
	if !changed {
		nv.changed = old.changed
		l.v.Store(nv)
		return
	}
	nv.changed = make(chan struct{})
	l.v.Store(nv)
	close(old.changed)
}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.exited)
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	var batch []appendReq
	for {
		select {
		case <-l.signal:
		case <-tick.C:
			l.mu.Lock()
			age := l.maxAge > 0
			l.mu.Unlock()
			if age {
				l.applyRetention()
			}
			l.flushTracking(false)
			continue
		}
		l.mu.Lock()
		batch, l.queue = l.queue, batch[:0]
		closing := l.closing
		ret := l.retention
		l.retention = false
		l.mu.Unlock()
		if len(batch) > 0 {
			l.commit(batch)
			clear(batch)
		}
		if ret {
			l.applyRetention()
		}
		l.flushTracking(closing)
		if closing {
			l.shutdown()
			return
		}
	}
}

// shutdown closes the files and publishes a closed view (writer goroutine).
func (l *Log) shutdown() {
	var err error
	if !l.o.NoSync {
		err = l.idx.Sync()
	}
	if cerr := l.seg.Close(); err == nil {
		err = cerr
	}
	if cerr := l.idx.Close(); err == nil {
		err = cerr
	}
	l.closeErr = err
	nv := *l.v.Load()
	nv.closed = true
	l.publish(&nv, true)
}

// segPath and idxPath name a segment's files.
func (l *Log) segPath(first uint64) string { return filepath.Join(l.dir, segName(first)) }
func (l *Log) idxPath(first uint64) string { return filepath.Join(l.dir, idxName(first)) }
