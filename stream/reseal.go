package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
)

// Key rotation (docs/encryption.md): a log opened with a Sealer whose
// current key is new rewrites, before recovery, every segment holding a
// chunk sealed under an old key, so that the old key is not needed
// afterwards. A chunk sealed again keeps its length (the overhead is the
// same) and its position, so the index stays right. A segment is copied
// to a temporary file, synced and renamed over the old one: a crash
// leaves either whole file. Chunks after the first invalid one (a torn
// tail) are copied as they are, for recovery to cut.

// resealSuffix names a segment being rewritten.
const resealSuffix = ".reseal"

// reseal rewrites the segments that hold chunks under an old key.
func (l *Log) reseal() error {
	firsts, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	n := 0
	for _, first := range firsts {
		path := l.segPath(first)
		_ = os.Remove(path + resealSuffix) // left by a crash
		old, err := l.hasOldChunks(path)
		if err != nil {
			return err
		}
		if !old {
			continue
		}
		if err := l.resealSegment(path); err != nil {
			return fmt.Errorf("sealing segment %d again under the new key: %w", first, err)
		}
		n++
	}
	if n > 0 {
		l.log.Info("stream segments sealed again under the new data encryption key", zap.Int("segments", n))
		return syncDir(l.dir)
	}
	return nil
}

// walkChunks calls fn with the position and header of each chunk of the
// segment file f (size bytes) that fits in it, in order, until fn
// returns false or a header is not valid.
func walkChunks(f *os.File, size int64, fn func(pos int64, h chunkHeader) (bool, error)) (int64, error) {
	pos := int64(fileHeaderSize)
	var hb [chunkHeaderSize]byte
	for pos+chunkHeaderSize <= size {
		if _, err := f.ReadAt(hb[:], pos); err != nil {
			return pos, err
		}
		h, err := parseHeader(hb[:])
		if err != nil || pos+h.size() > size {
			break
		}
		more, err := fn(pos, h)
		if err != nil || !more {
			return pos, err
		}
		pos += h.size()
	}
	return pos, nil
}

// hasOldChunks reports whether a segment holds a chunk sealed under
// another key than the current one (reading only the headers and the
// key ids).
func (l *Log) hasOldChunks(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	old := false
	var tail [sealOverhead]byte
	_, err = walkChunks(f, fi.Size(), func(pos int64, h chunkHeader) (bool, error) {
		if h.flags&flagSealed == 0 || h.dataSize < sealOverhead {
			return true, nil
		}
		if _, err := f.ReadAt(tail[:], pos+h.size()-sealOverhead); err != nil {
			return false, err
		}
		old = !l.o.Seal.Current(tail[:])
		return !old, nil
	})
	return old, err
}

// resealSegment copies a segment with every chunk under an old key
// sealed again under the current one, then renames the copy over it.
func (l *Log) resealSegment(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(path+resealSuffix, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := io.Copy(out, io.NewSectionReader(f, 0, fileHeaderSize)); err != nil {
		return err
	}
	var buf []byte
	end, err := walkChunks(f, fi.Size(), func(pos int64, h chunkHeader) (bool, error) {
		if cap(buf) < int(h.size()) {
			buf = make([]byte, h.size())
		}
		b := buf[:h.size()]
		if _, err := f.ReadAt(b, pos); err != nil {
			return false, err
		}
		b, err := l.resealChunk(b, h)
		if errors.Is(err, ErrCorrupt) {
			return false, nil // a torn tail: copied as it is below
		}
		if err != nil {
			return false, err
		}
		_, err = out.Write(b)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, end, fi.Size()-end)); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(path+resealSuffix, path)
}

// resealChunk returns a whole chunk b sealed under the current key (b
// itself when it is not sealed or already is).
func (l *Log) resealChunk(b []byte, h chunkHeader) ([]byte, error) {
	if h.flags&flagSealed == 0 || l.o.Seal.Current(b) {
		if _, err := checkChunk(b); err != nil {
			return nil, err
		}
		return b, nil
	}
	n := len(b)
	_, p, err := l.openChunk(b)
	if err != nil {
		return nil, err
	}
	// p is b's prefix in the clear, its header's data size the records':
	// sealed again, its header as it was (flags, sealed size), it is n
	// bytes again.
	var ad [40]byte
	copy(ad[:], b[:40])
	b = l.o.Seal.Seal(p, chunkHeaderSize, ad[:])
	if len(b) != n {
		return nil, fmt.Errorf("sealed again, a chunk of %d bytes is %d", n, len(b))
	}
	binary.BigEndian.PutUint32(b[40:], chunkCRC(b))
	return b, nil
}
