package stream

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.uber.org/zap"
)

// Tracked offsets (server-side offset tracking) live in one small file,
// offsets.dat, rewritten whole (tmp, fsync, rename, dir fsync) by the
// writer goroutine: with a batch's sync, or at its next tick when nothing
// is appended, at most once per trackEvery, and at Close.
//
//	magic "RMQSOFF1", count u32, then per name: len u16, name, offset u64;
//	then CRC32C u32 of all before it.
const trackFile = "offsets.dat"

var trackMagic = []byte("RMQSOFF1")

// StoreOffset records a named reader's offset (server-side offset
// tracking), durably: written with the next chunk's sync, or within a
// short time when nothing is appended.
func (l *Log) StoreOffset(name string, offset uint64) {
	if len(name) > 0xffff {
		name = name[:0xffff]
	}
	l.mu.Lock()
	if o, ok := l.tracked[name]; !ok || o != offset {
		l.tracked[name] = offset
		l.trackDirty = true
	}
	l.mu.Unlock()
}

// TrackedOffset is the offset stored for name.
func (l *Log) TrackedOffset(name string) (uint64, bool) {
	if len(name) > 0xffff {
		name = name[:0xffff]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.tracked[name]
	return o, ok
}

// flushTracking writes the tracked offsets if they changed and the last
// write is trackEvery old (force: now). Writer goroutine.
func (l *Log) flushTracking(force bool) {
	if !force && time.Since(l.trackWritten) < trackEvery {
		return
	}
	l.mu.Lock()
	if !l.trackDirty {
		l.mu.Unlock()
		return
	}
	names := make([]string, 0, len(l.tracked))
	for n := range l.tracked {
		names = append(names, n)
	}
	sort.Strings(names)
	b := append([]byte(nil), trackMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, n := range names {
		b = binary.BigEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
		b = binary.BigEndian.AppendUint64(b, l.tracked[n])
	}
	l.trackDirty = false
	l.mu.Unlock()
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	l.trackWritten = time.Now()
	if err := l.writeTracking(b); err != nil {
		l.log.Error("stream offset tracking write failed", zap.Error(err))
		l.mu.Lock()
		l.trackDirty = true // try again at the next tick
		l.mu.Unlock()
	}
}

func (l *Log) writeTracking(b []byte) error {
	p := filepath.Join(l.dir, trackFile)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && !l.o.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil && !l.o.NoSync {
		err = syncDir(l.dir)
	}
	return err
}

// loadTracking reads the tracking file at Open.
func (l *Log) loadTracking() error {
	b, err := os.ReadFile(filepath.Join(l.dir, trackFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	bad := fmt.Errorf("%w: %s", ErrCorrupt, trackFile)
	if len(b) < len(trackMagic)+8 || string(b[:len(trackMagic)]) != string(trackMagic) {
		return bad
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return bad
	}
	n := binary.BigEndian.Uint32(body[len(trackMagic):])
	p := body[len(trackMagic)+4:]
	for i := uint32(0); i < n; i++ {
		if len(p) < 2 {
			return bad
		}
		nl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+nl+8 {
			return bad
		}
		l.tracked[string(p[2:2+nl])] = binary.BigEndian.Uint64(p[2+nl:])
		p = p[2+nl+8:]
	}
	return nil
}
