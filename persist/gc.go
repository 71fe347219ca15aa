package persist

import (
	"time"

	"go.uber.org/zap"
)

func (s *Store) gcLoop() {
	defer close(s.gcDone)
	dir := s.dir
	gcEvery := s.opt.GCInterval
	if gcEvery < 0 {
		gcEvery = time.Duration(1<<63 - 1)
	}
	lastGC := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.gcStop:
			return
		case <-t.C:
			pageOut(dir)
			if time.Since(lastGC) < gcEvery {
				continue
			}
			lastGC = time.Now()
			if s.freed.Swap(0) > 0 {
				s.beforeRound()
				// Deleted messages free value-log space only once a
				// compaction has dropped their keys and counted it: flush
				// the memtable (dropping an unused prefix does that) and
				// compact.
				if err := s.db.DropPrefix([]byte{prefixUnused}); err != nil {
					s.log.Warn("store flush failed", zap.Error(err))
				}
				if err := s.db.Flatten(1); err != nil {
					s.log.Warn("store compaction failed", zap.Error(err))
				}
			}
			ratio := s.gcRatio()
			if ratio > 0 {
				s.beforeRound()
			}
			n := 0
			for ratio > 0 && n < 16 && s.db.RunValueLogGC(ratio) == nil {
				n++
			}
			if n > 0 {
				s.log.Info("value log garbage collected", zap.Int("files", n))
			}
		}
	}
}

// beforeRound runs Options.BeforeRound, if set.
func (s *Store) beforeRound() {
	if s.opt.BeforeRound != nil {
		s.opt.BeforeRound()
	}
}

// gcRatio is the discard ratio for the value log's garbage collection,
// or 0 to skip it: collecting a file rewrites the live part of it (up to
// 1-ratio of vlogFileSize) through Badger's mmaps, which must find room on
// the filesystem beyond the reserve (see space.go). Short of room, only
// files nearly all garbage are collected.
func (s *Store) gcRatio() float64 {
	free, err := FreeSpace(s.dir)
	if err != nil {
		return 0.5
	}
	switch {
	case int64(free) >= s.reserve+vlogFileSize/2:
		return 0.5
	case int64(free) >= s.reserve/2+vlogFileSize/10:
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
