package persist

import (
	"encoding/binary"
	"os"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Giving disk space back. Message records of 256 bytes and more live in
// Badger's value log; Badger frees a value-log file only by rewriting what
// is still live in it (RunValueLogGC), and it picks a file by its discard
// stats, which only its LSM compactions update: a deleted record counts
// once a compaction merges the delete's tombstone with the key that points
// at the record. After a backlog drains, the tombstones of its last part
// sit in the memtable and in an L0 table, or in a level above the one
// holding the keys, and no later write moves them: 1 M × 1 KiB published
// and drained left 1.1 GiB ten minutes later. So, once records worth more
// than the work have been deleted, the collector
//
//  1. completes the memtable with entries that are expired as written
//     (Badger's memtable can be flushed only by filling it or by DropPrefix,
//     which refuses every write while it runs), so that Badger flushes it
//     to L0 in the background; with NumLevelZeroTables 1 an L0 table is
//     compacted at once;
//  2. runs Flatten, which compacts the levels down into one (it stops
//     Badger's own compactions, never writes), so every tombstone meets its
//     key and the discard stats count every deleted record; and
//  3. collects, for the next gcSettle seconds, every file at least half
//     garbage (files whose records were deleted before the flush), a few
//     a second.
//
// It does so once the deletes have come to rest (a drain has ended): while
// a drain goes on its memtables fill and are compacted by themselves, and
// a file half drained would be rewritten for nothing.
//
// None of it holds the committer: publishers' commits go on meanwhile. The
// filler and Flatten's rewrite of the LSM (keys and value pointers only)
// cost a fraction of what they let come back, which is checked first.
// Between those rounds, files nearly all garbage are collected every
// GCInterval.

// Discard ratios: collect a file once this part of it is garbage.
const (
	gcRatioIdle    = 0.9 // every GCInterval
	gcRatioSettled = 0.5 // after a flush, and on a disk short of room: the default
)

// gcSettle is how many one-second ticks after a flush the collector keeps
// collecting, while Badger's compactions report what was deleted; it
// rewrites at most gcSettleFiles files a tick meanwhile, so that the
// reading of them (a file's pages, through Badger's mmaps) leaves the disk
// to the publishers' fsyncs: with 16 at once a probe publisher's median
// confirm latency went from 2 to 15 ms during the reclaim of 1 M × 1 KiB,
// with 2 to 4-6 ms (bench/RESULTS-store.md).
const (
	gcSettle      = 60
	gcSettleFiles = 2
)

// fillerValue is the size of a filler entry's value: under the value
// threshold (256), so it goes to the memtable and its log, not the value log.
const fillerValue = 200

func (s *Store) gcLoop() {
	defer close(s.gcDone)
	dir := s.dir
	gcEvery := s.opt.GCInterval
	if gcEvery < 0 {
		gcEvery = time.Duration(1<<63 - 1)
	}
	if s.opt.gcHold != nil {
		select {
		case <-s.opt.gcHold:
		case <-s.gcStop:
			return
		}
	}
	lastGC, lastIdle := time.Now(), time.Now()
	settle := 0
	tail := false // a flush happened: the next one may be smaller (its burst's last part)
	var deletes int64
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.gcStop:
			return
		case <-t.C:
		}
		pageOut(dir)
		rest := s.atRest(&deletes)
		if settle > 0 {
			settle--
			s.collect(gcRatioSettled, gcSettleFiles)
			continue
		}
		if time.Since(lastGC) < gcEvery {
			continue
		}
		if !rest {
			// A drain is under way: its memtables fill and are compacted
			// by themselves; flush what is left once it has ended.
			if time.Since(lastIdle) >= gcEvery {
				lastIdle = time.Now()
				s.collect(gcRatioIdle, 16)
			}
			continue
		}
		lastGC, lastIdle = time.Now(), time.Now()
		freed := s.flushDeletes(tail)
		tail = freed >= 4*s.opt.MemTableSize
		if freed > 0 {
			settle = gcSettle
			s.collect(gcRatioSettled, gcSettleFiles)
			continue
		}
		s.collect(gcRatioIdle, 16)
	}
}

// atRest reports whether the records deleted in the last second (the
// count was *last a second ago) are few: under a sixteenth of a memtable.
func (s *Store) atRest(last *int64) bool {
	d := s.deletes.Load()
	n := d - *last
	if n < 0 { // a flush reset the count
		n = d
	}
	*last = d
	return n*s.recordMean() < s.opt.MemTableSize/16
}

// recordMean is the mean size of the values written to the value log.
func (s *Store) recordMean() int64 {
	n, b := s.vlogPuts.Load(), s.vlogPutBytes.Load()
	if n == 0 {
		return 0
	}
	return b / n
}

// freedEstimate is what the deletes counted since the last flush freed in
// the value log, going by the mean size of the records written there.
func (s *Store) freedEstimate() int64 {
	return s.deletes.Load() * s.recordMean()
}

// flushDeletes has Badger count the deletes of the records it holds in the
// value log (steps 1 and 2 above), when what they may free is worth four
// times the work (the filler, at most a memtable, and Flatten's rewrite of
// the LSM tree). It returns the bytes it estimates they freed, 0 if it did
// not flush. A flush during a drain leaves out the drain's last part: the
// one after a full flush (tail) needs only half a value-log file's worth.
func (s *Store) flushDeletes(tail bool) int64 {
	freed := s.freedEstimate()
	var lsm int64
	for _, l := range s.db.Levels() {
		lsm += l.Size
	}
	if freed < 4*lsm || freed < s.opt.ValueLogFileSize/2 || !tail && freed < 4*s.opt.MemTableSize {
		return 0
	}
	if free, err := FreeSpace(s.dir); err == nil && int64(free) < s.reserve+2*s.opt.MemTableSize {
		return 0 // the filler needs room beyond the reserve
	}
	s.deletes.Store(0)
	s.beforeRound()
	start := time.Now()
	if err := s.fillMemtable(); err != nil {
		s.log.Warn("store flush failed", zap.Error(err))
		return 0
	}
	if err := s.db.Flatten(1); err != nil {
		s.log.Warn("store compaction failed", zap.Error(err))
	}
	s.log.Info("store deletes flushed", zap.Int64("freed_estimate_bytes", freed),
		zap.Int64("lsm_bytes", lsm), zap.Duration("took", time.Since(start)))
	return freed
}

// fillMemtable writes entries that are expired as they are written until
// Badger has started a new memtable (a new memtable log file appears), at
// most a memtable's size of them, then waits (briefly) for the full one to
// reach L0. The entries are never read; compactions drop them.
func (s *Store) fillMemtable() error {
	start := lastMemFile(s.dir)
	val := make([]byte, fillerValue)
	chunk := int(s.opt.MemTableSize / 64 / (fillerValue + 32))
	for written := int64(0); written < s.opt.MemTableSize+s.opt.MemTableSize/8; {
		wb := s.db.NewWriteBatch()
		for i := 0; i < chunk; i++ {
			s.fillerSeq++
			e := badger.NewEntry(binary.BigEndian.AppendUint64([]byte{prefixUnused}, s.fillerSeq), val)
			e.ExpiresAt = 1 // 1970: already expired, read as absent
			if err := wb.SetEntry(e); err != nil {
				wb.Cancel()
				return err
			}
			written += fillerValue + 32
		}
		if err := wb.Flush(); err != nil {
			return err
		}
		if lastMemFile(s.dir) != start {
			break
		}
		// Paced: each chunk's pages go out with the next commit's fsync.
		select {
		case <-s.gcStop:
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The full memtable is flushed to L0 in the background; Flatten
	// compacts it once it is there.
	for i := 0; i < 100 && s.memtablesPending(start); i++ {
		select {
		case <-s.gcStop:
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// memtablesPending reports whether the memtable log that was current
// before the filler is still on disk (its memtable not yet in L0).
func (s *Store) memtablesPending(name string) bool {
	if name == "" {
		return false
	}
	_, err := os.Stat(s.dir + name)
	return err == nil
}

// lastMemFile is the name of the newest memtable log file in dir ("" if
// none): Badger names them NNNNN.mem, one per memtable, in order.
func lastMemFile(dir string) string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	last := ""
	for _, e := range es {
		n := e.Name()
		if strings.HasSuffix(n, ".mem") && (len(n) > len(last) || len(n) == len(last) && n > last) {
			last = n
		}
	}
	return last
}

// collect rewrites value-log files at least ratio garbage (fewer when the
// disk is short of room: see gcRatio), up to most of them.
func (s *Store) collect(ratio float64, most int) {
	r := s.gcRatio()
	if r == 0 {
		return
	}
	if r > ratio {
		ratio = r
	}
	s.beforeRound()
	n := 0
	for n < most && s.db.RunValueLogGC(ratio) == nil {
		n++
	}
	if n > 0 {
		s.log.Info("value log garbage collected", zap.Int("files", n), zap.Float64("ratio", ratio))
	}
}

// beforeRound runs Options.BeforeRound, if set.
func (s *Store) beforeRound() {
	if s.opt.BeforeRound != nil {
		s.opt.BeforeRound()
	}
}

// gcRatio is the lowest discard ratio the disk has room for, or 0 to skip
// the collection: collecting a file rewrites the live part of it (up to
// 1-ratio of ValueLogFileSize) through Badger's mmaps, which must find room
// on the filesystem beyond the reserve (see space.go). Short of room, only
// files nearly all garbage are collected.
func (s *Store) gcRatio() float64 {
	free, err := FreeSpace(s.dir)
	if err != nil {
		return gcRatioSettled
	}
	switch {
	case int64(free) >= s.reserve+s.opt.ValueLogFileSize/2:
		return gcRatioSettled
	case int64(free) >= s.reserve/2+s.opt.ValueLogFileSize/10:
		return 0.9
	}
	return 0
}

// badgerLogger adapts zap to Badger's Logger; Badger's info chatter is
// logged at debug.
type badgerLogger struct{ s *zap.SugaredLogger }

func (l badgerLogger) Errorf(f string, a ...any) { l.s.Errorf(f, a...) }

func (l badgerLogger) Warningf(f string, a ...any) { l.s.Warnf(f, a...) }

func (l badgerLogger) Infof(f string, a ...any) { l.s.Debugf(f, a...) }

func (l badgerLogger) Debugf(f string, a ...any) { l.s.Debugf(f, a...) }
