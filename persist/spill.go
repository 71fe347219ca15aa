package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/railmq/railmq/crypt"
	"go.uber.org/zap"
)

// Spill holds what non-durable queues page out: their messages beyond the
// in-memory window. Nothing of it outlives the process (RabbitMQ drops
// transient messages at a restart too), so it needs none of Badger's
// machinery: per queue, append-only segment files written without fsync
// and read back once, in order. A queue's paged messages are a FIFO tail
// (every message after the first paged one is paged), so no index is
// needed, and a segment is removed once it has been read.
//
// One goroutine does every write and read, in the order submitted, so a
// read sees every earlier write (queue.Store's rule). When the filesystem
// has no room for a write (less than the Store's reserve would be left:
// Badger must keep its room, see space.go), the entries are kept in memory
// instead, behind what the files hold, and written once there is room:
// nothing paged is lost, and memory (and the memory alarm) takes the
// strain.
type Spill struct {
	dir     string
	log     *zap.Logger
	reserve int64

	mu      sync.Mutex
	jobs    []spillJob
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	nextID atomic.Uint64
	// Bytes is what the segment files hold unread, and Held what waits in
	// memory for room; for metrics and tests.
	Bytes, Held atomic.Int64
	mem         *atomic.Int64 // the broker's memory figure: Held counts in it

	before func()                 // runs before each round of disk work (OpenSpill)
	queues map[uint64]*spillQueue // the loop's
	short  bool                   // the last write found no room (logged once)
	free   int64                  // bytes free on the filesystem this round (-1: not looked at)
	segMax int64                  // spillSegMax (tests make it small)
	seal   *crypt.Sealer          // encrypts the records (crypt.go); nil: none
}

// spillSegMax is the size at which a queue's segment file is closed for
// writing and a new one begun.
const spillSegMax = 64 << 20

// spillHeader: length (u32) of what follows it, seq (u64), msg (u64),
// flags (u8), count (u32).
const spillHeader = 4 + 8 + 8 + 1 + 4

type spillQueue struct {
	segs []*spillSeg // oldest first; the last is the one written
	mem  []Entry     // entries with no room on disk yet, after the segments'
	n    int         // segment files created
	// pend is this round's page-outs, encoded, and pendPuts the same
	// entries, to hold should there be no room for them.
	pend     []byte
	pendPuts []SpillEntry
}

type spillSeg struct {
	f          *os.File
	path       string
	size, read int64
}

// SpillEntry is one entry to page out.
type SpillEntry struct {
	Seq, Msg    uint64
	Redelivered bool
	Count       uint32
	Record      []byte
}

type spillJob struct {
	queue uint64
	puts  []SpillEntry
	drop  bool // drop every entry of queue written so far (before puts)
	gone  bool // the queue is deleted: remove its files
	// a read
	load     bool
	after    uint64
	max      int
	maxBytes int64
	done     func([]Entry, error)
	wrote    func(error)
}

// OpenSpill empties dir (what a previous run paged is dropped, as
// RabbitMQ drops transient messages) and starts the spill's goroutine.
// reserve is the free space to leave on dir's filesystem; mem (may be
// nil) is the memory figure that entries held for want of room count in;
// before (may be nil) runs on the spill's goroutine before each round of
// page-file work.
func OpenSpill(dir string, reserve int64, mem *atomic.Int64, before func(), log *zap.Logger) (*Spill, error) {
	return openSpill(dir, reserve, mem, before, log, nil)
}

func openSpill(dir string, reserve int64, mem *atomic.Int64, before func(), log *zap.Logger, seal *crypt.Sealer) (*Spill, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	s := &Spill{dir: dir, log: log, reserve: reserve, mem: mem, before: before, wake: make(chan struct{}, 1),
		stopped: make(chan struct{}), queues: make(map[uint64]*spillQueue), segMax: spillSegMax, seal: seal}
	go s.loop()
	return s, nil
}

// NewMessageID returns an id for a paged message (unique in this run).
func (s *Spill) NewMessageID() uint64 { return s.nextID.Add(1) }

// Write pages out puts of queue, after dropping what was paged before
// when drop is set (a purge), or removes the queue's files when gone is
// set (it was deleted). done (may be nil) runs on the spill's goroutine
// once the entries are written (or held for room).
func (s *Spill) Write(queue uint64, puts []SpillEntry, drop, gone bool, done func(error)) {
	s.submit(spillJob{queue: queue, puts: puts, drop: drop, gone: gone, wrote: done})
}

// Read reads up to max of queue's paged entries with seq > after, in
// order, stopping once their records passed maxBytes (at least one is
// read), and calls done with them on the spill's goroutine.
func (s *Spill) Read(queue, after uint64, max int, maxBytes int64, done func([]Entry, error)) {
	s.submit(spillJob{queue: queue, load: true, after: after, max: max, maxBytes: maxBytes, done: done})
}

func (s *Spill) submit(j spillJob) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if j.load {
			j.done(nil, ErrClosed)
		} else if j.wrote != nil {
			j.wrote(ErrClosed)
		}
		return
	}
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close finishes what was submitted, then removes the files.
func (s *Spill) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.wake)
	<-s.stopped
	for _, q := range s.queues {
		for _, g := range q.segs {
			g.f.Close()
		}
	}
	return os.RemoveAll(s.dir)
}

func (s *Spill) loop() {
	defer close(s.stopped)
	var dones []func(error)
	for range s.wake {
		for {
			s.mu.Lock()
			jobs := s.jobs
			s.jobs = nil
			s.mu.Unlock()
			if len(jobs) == 0 {
				break
			}
			if s.before != nil {
				s.before()
			}
			// Page-outs are gathered per queue and written once per round
			// (one write per queue, one free-space check): a queue's
			// writes go to its file before a read or a drop of it.
			s.free = -1
			for i := range jobs {
				j := &jobs[i]
				if j.load {
					s.flush(j.queue)
					es, err := s.read(j)
					j.done(es, err)
					continue
				}
				s.write(j)
				if j.wrote != nil {
					dones = append(dones, j.wrote)
				}
			}
			for id, q := range s.queues {
				if len(q.pend) > 0 {
					s.flushQueue(id, q)
				}
			}
			for i, d := range dones {
				d(nil) // written, or held in memory: paged either way
				dones[i] = nil
			}
			dones = dones[:0]
		}
	}
	s.mu.Lock()
	jobs := s.jobs
	s.jobs = nil
	s.mu.Unlock()
	for _, j := range jobs { // submitted as Close ran
		if j.load {
			j.done(nil, ErrClosed)
		} else if j.wrote != nil {
			j.wrote(ErrClosed)
		}
	}
}

func (s *Spill) queue(id uint64) *spillQueue {
	q := s.queues[id]
	if q == nil {
		q = &spillQueue{}
		s.queues[id] = q
	}
	return q
}

// write takes in a job's page-outs (gathered for flushQueue), after the
// drop it asks for.
func (s *Spill) write(j *spillJob) {
	if j.drop || j.gone {
		if q := s.queues[j.queue]; q != nil {
			s.dropAll(q)
			if j.gone {
				delete(s.queues, j.queue)
			}
		}
		if j.gone {
			return
		}
	}
	if len(j.puts) == 0 {
		return
	}
	q := s.queue(j.queue)
	for i := range j.puts {
		q.pend = s.appendEntry(q.pend, &j.puts[i])
	}
	q.pendPuts = append(q.pendPuts, j.puts...)
}

func (s *Spill) flush(id uint64) {
	if q := s.queues[id]; q != nil && len(q.pend) > 0 {
		s.flushQueue(id, q)
	}
}

// flushQueue writes what q gathered, behind what it holds in memory for
// want of room (written first, if there is room now); without room, the
// gathered entries are held too.
func (s *Spill) flushQueue(id uint64, q *spillQueue) {
	if len(q.mem) > 0 {
		s.flushHeld(id, q)
	}
	if len(q.mem) > 0 || s.appendSeg(id, q, q.pend) != nil {
		s.hold(q, q.pendPuts)
	}
	clear(q.pendPuts)
	q.pendPuts = q.pendPuts[:0]
	if cap(q.pend) > 4<<20 {
		q.pend = nil // a burst's buffer is not kept
	} else {
		q.pend = q.pend[:0]
	}
}

// appendSpill encodes one entry.
func appendSpill(b []byte, e *SpillEntry) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(spillHeader-4+len(e.Record)))
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, e.Msg)
	var f byte
	if e.Redelivered {
		f = 1
	}
	b = append(b, f)
	b = binary.BigEndian.AppendUint32(b, e.Count)
	return append(b, e.Record...)
}

// appendSeg writes b at the end of q's last segment (a new one when there
// is none or it is full), if the filesystem has room for it.
func (s *Spill) appendSeg(id uint64, q *spillQueue, b []byte) error {
	if s.free < 0 {
		if free, err := FreeSpace(s.dir); err == nil {
			s.free = int64(free)
		} else {
			s.free = 1 << 62 // no figure: write, and learn from the error
		}
	}
	if s.free < int64(len(b))+s.reserve {
		if !s.short {
			s.short = true
			s.log.Warn("no room on disk for paged transient messages: holding them in memory",
				zap.Int64("free_bytes", s.free), zap.Int64("reserve_bytes", s.reserve))
		}
		return ErrNoSpace
	}
	if s.short {
		s.short = false
		s.log.Info("paging transient messages to disk again")
	}
	var g *spillSeg
	if n := len(q.segs); n > 0 && q.segs[n-1].size < s.segMax {
		g = q.segs[n-1]
	} else {
		q.n++
		path := filepath.Join(s.dir, fmt.Sprintf("%d-%d.spill", id, q.n))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			s.log.Error("creating a page file", zap.Error(err))
			return err
		}
		g = &spillSeg{f: f, path: path}
		q.segs = append(q.segs, g)
	}
	if _, err := g.f.WriteAt(b, g.size); err != nil {
		// A short write leaves nothing counted: the next write goes over it.
		s.log.Error("writing a page file", zap.Error(err))
		return err
	}
	g.size += int64(len(b))
	s.free -= int64(len(b))
	s.Bytes.Add(int64(len(b)))
	return nil
}

// segsRead reports whether the segment files hold nothing unread.
func (q *spillQueue) segsRead() bool {
	for _, g := range q.segs {
		if g.read < g.size {
			return false
		}
	}
	return true
}

func (s *Spill) hold(q *spillQueue, puts []SpillEntry) {
	for _, e := range puts {
		q.mem = append(q.mem, Entry{Seq: e.Seq, Msg: e.Msg, Transient: true, Inline: true,
			Redelivered: e.Redelivered, Count: e.Count, Data: e.Record})
		s.held(int64(len(e.Record)))
	}
}

// held counts n bytes more (or fewer) held in memory for want of room, in
// Held and in the broker's memory figure, so that the memory alarm sees
// them.
func (s *Spill) held(n int64) {
	s.Held.Add(n)
	if s.mem != nil {
		s.mem.Add(n)
	}
}

// flushHeld writes the entries held in memory, if there is room now.
func (s *Spill) flushHeld(id uint64, q *spillQueue) {
	var b []byte
	for i := range q.mem {
		e := &q.mem[i]
		b = s.appendEntry(b, &SpillEntry{Seq: e.Seq, Msg: e.Msg, Redelivered: e.Redelivered, Count: e.Count, Record: e.Data})
	}
	if s.appendSeg(id, q, b) == nil {
		for i := range q.mem {
			s.held(-int64(len(q.mem[i].Data)))
		}
		q.mem = nil
	}
}

func (s *Spill) dropAll(q *spillQueue) {
	q.pend, q.pendPuts = q.pend[:0], q.pendPuts[:0]
	for _, g := range q.segs {
		s.Bytes.Add(-(g.size - g.read))
		g.f.Close()
		os.Remove(g.path)
	}
	q.segs = nil
	for i := range q.mem {
		s.held(-int64(len(q.mem[i].Data)))
	}
	q.mem = nil
}

func (s *Spill) read(j *spillJob) ([]Entry, error) {
	q := s.queues[j.queue]
	if q == nil {
		return nil, nil
	}
	var out []Entry
	var got int64
	full := func() bool { return len(out) >= j.max || (j.maxBytes > 0 && got >= j.maxBytes) }
	for len(q.segs) > 0 && !full() {
		g := q.segs[0]
		for g.read < g.size && !full() {
			es, n, err := readSeg(g.f, g, j.max-len(out), j.maxBytes-got, j.after)
			if err == nil {
				err = s.open(es)
			}
			if err != nil {
				return out, fmt.Errorf("reading page file %s: %w", g.path, err)
			}
			out = append(out, es...)
			for i := range es {
				got += int64(len(es[i].Data))
			}
			g.read += n
			s.Bytes.Add(-n)
			if n == 0 {
				break
			}
		}
		if g.read < g.size {
			break
		}
		// Read to its end: a full segment goes; the one written is reused.
		if len(q.segs) > 1 || g.size >= s.segMax {
			g.f.Close()
			os.Remove(g.path)
			q.segs = q.segs[1:]
		} else {
			if err := g.f.Truncate(0); err == nil {
				g.size, g.read = 0, 0
			}
			break
		}
	}
	for len(q.mem) > 0 && q.segsRead() && !full() {
		e := q.mem[0]
		q.mem = q.mem[1:]
		s.held(-int64(len(e.Data)))
		if e.Seq > j.after {
			out = append(out, e)
			got += int64(len(e.Data))
		}
	}
	return out, nil
}

// readChunk is how much of a segment one readSeg takes at most (more when
// a single entry is larger). The records read alias their chunk, which
// lives as long as the last of them: small chunks keep memory close to
// what the queue holds.
const readChunk = 1 << 20

// readSeg reads entries from g's read offset (g's file is r): up to max, stopping once
// their records passed maxBytes (at least one). It returns them and the
// bytes consumed. The records alias one buffer per read.
func readSeg(r io.ReaderAt, g *spillSeg, most int, maxBytes int64, after uint64) ([]Entry, int64, error) {
	want := min(g.size-g.read, readChunk)
	buf := make([]byte, want)
	if _, err := r.ReadAt(buf, g.read); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	var out []Entry
	var base, off, got int64 // buf begins base bytes after g.read
	for len(out) < most && (maxBytes <= 0 || got < maxBytes || len(out) == 0) {
		at := g.read + base + off
		if at >= g.size {
			break
		}
		if off+4 > int64(len(buf)) || off+4+int64(binary.BigEndian.Uint32(buf[off:])) > int64(len(buf)) {
			if len(out) > 0 {
				break
			}
			// The next entry runs past the chunk: read it whole.
			var h [4]byte
			if _, err := r.ReadAt(h[:], at); err != nil {
				return nil, 0, err
			}
			n := int64(binary.BigEndian.Uint32(h[:]))
			if n < spillHeader-4 || at+4+n > g.size {
				return nil, 0, fmt.Errorf("corrupt entry at %d", at)
			}
			big := make([]byte, 4+n)
			if _, err := r.ReadAt(big, at); err != nil && !errors.Is(err, io.EOF) {
				return nil, 0, err
			}
			base, off, buf = base+off, 0, big
		}
		n := int64(binary.BigEndian.Uint32(buf[off:]))
		if n < spillHeader-4 {
			return out, base + off, fmt.Errorf("corrupt entry at %d", at)
		}
		p := buf[off+4 : off+4+n]
		e := Entry{Seq: binary.BigEndian.Uint64(p), Msg: binary.BigEndian.Uint64(p[8:]),
			Redelivered: p[16]&1 != 0, Count: binary.BigEndian.Uint32(p[17:]),
			Transient: true, Inline: true, Data: p[spillHeader-4:]}
		off += 4 + n
		if e.Seq > after {
			out = append(out, e)
			got += int64(len(e.Data))
		}
	}
	return out, base + off, nil
}
