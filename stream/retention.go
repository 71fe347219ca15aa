package stream

import (
	"os"
	"time"

	"go.uber.org/zap"
)

// applyRetention deletes whole segments, oldest first and never the
// active one, while the log is over MaxBytes or the oldest segment's
// newest record is older than MaxAge (writer goroutine). It runs after
// each segment roll, on Open and SetRetention, and every tickEvery for
// the age limit. The first offset moves to the oldest segment kept and
// Changed fires; readers behind it move to it on their next call.
func (l *Log) applyRetention() {
	l.mu.Lock()
	maxBytes, maxAge := l.maxBytes, l.maxAge
	l.mu.Unlock()
	if maxBytes <= 0 && maxAge <= 0 {
		return
	}
	v := l.v.Load()
	if len(v.sealed) == 0 {
		return
	}
	total := v.active.size + v.active.idxSize
	for _, s := range v.sealed {
		total += s.size + s.idxSize
	}
	cutoff := time.Now().Add(-maxAge).UnixMilli()
	k := 0
	for k < len(v.sealed) {
		s := v.sealed[k]
		if (maxBytes > 0 && total > maxBytes) || (maxAge > 0 && s.maxTs < cutoff) {
			total -= s.size + s.idxSize
			k++
			continue
		}
		break
	}
	if k == 0 {
		return
	}
	gone := v.sealed[:k]
	nv := *v
	nv.sealed = v.sealed[k:]
	if len(nv.sealed) > 0 {
		nv.first = nv.sealed[0].first
	} else {
		nv.first = nv.active.first
	}
	// Publish first, so that no new reader opens a file being removed
	// (one that has it open keeps reading it until it moves on).
	l.publish(&nv, true)
	for _, s := range gone {
		for _, p := range []string{l.segPath(s.first), l.idxPath(s.first)} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				l.log.Error("stream segment remove failed", zap.String("path", p), zap.Error(err))
			}
		}
	}
	if err := syncDir(l.dir); err != nil {
		l.log.Error("stream dir sync failed", zap.Error(err))
	}
	l.segsDeleted.Add(uint64(k))
	l.log.Info("stream retention deleted segments", zap.Int("segments", k), zap.Uint64("first", nv.first))
}
