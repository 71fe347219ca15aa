package persist

import (
	"errors"
	"fmt"
	"syscall"

	"go.uber.org/zap"
)

// Badger writes its value log and memtable logs through mmaps of sparse,
// preallocated files. Writing (on tmpfs even reading) a page that has no
// block behind it on a full filesystem faults with SIGBUS, which takes the
// process down. So the store never lets the filesystem fill: before each
// group commit it checks the free space, and a commit that would leave
// less than the reserve is refused with ErrNoSpace (publishers are nacked)
// instead of being written. Commits that only delete (acks) may go on
// into half the reserve, so that consumers drain a backlog on a full disk;
// Badger's own background writes (memtable flushes, compactions) use the
// rest. The store does not open with less than a quarter of it.

// ErrNoSpace fails a commit that would leave the store's filesystem with
// less free space than the store keeps in reserve.
var ErrNoSpace = errors.New("persist: not enough free disk space")

// FreeSpace is the bytes available to an unprivileged writer on dir's
// filesystem.
func FreeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// defaultReserve is the free space kept for Badger's background writes:
// two memtables flushed to tables, and room for a compaction.
func defaultReserve(memTable int64) int64 { return 2*memTable + 8<<20 }

// growth estimates the bytes a batch adds to the store (value log and
// memtable log each hold the key; the value goes to one of them): all of
// them, those of the ops that store messages, and those of the others
// (deletes, small rewrites).
func (b *Batch) growth() (bytes, growing, other int64) {
	for i := range b.ops {
		o := &b.ops[i]
		n := int64(2*len(o.key)+len(o.val)) + 64
		bytes += n
		if o.grows() {
			growing += n
		} else {
			other += n
		}
	}
	return bytes, growing, other
}

// grows reports whether o stores a message (its record, or an entry that
// references one) rather than deleting or rewriting bookkeeping.
func (o *op) grows() bool { return o.kind == opPutEntry || len(o.val) > 64 }

// spaceCheck decides which of batch may be written: it returns the error
// for those that may not (nil when all may), and logs when the store
// starts and stops refusing. The Fault hook stands in for the filesystem
// in tests that have no small one.
func (s *Store) spaceCheck(batch []*Batch) (growErr, allErr error) {
	var need, needFree int64
	for _, b := range batch {
		n, _, other := b.growth()
		need += n
		needFree += other
	}
	if need == 0 {
		return nil, nil
	}
	free, err := FreeSpace(s.dir)
	if err != nil {
		return nil, nil // no figure (not a regular filesystem): write, as before
	}
	r := s.reserve
	switch {
	case int64(free) >= need+r:
		if need > needFree { // only a round that stores messages tells
			s.noteSpace(false, free)
		}
		return nil, nil
	case int64(free) >= needFree+r/2:
		growErr = fmt.Errorf("%w: %s free in %s, the store keeps %s", ErrNoSpace, bytesText(free), s.dir, bytesText(uint64(r)))
		s.noteSpace(true, free)
		return growErr, nil
	default:
		allErr = fmt.Errorf("%w: %s free in %s, the store keeps %s", ErrNoSpace, bytesText(free), s.dir, bytesText(uint64(r)))
		s.noteSpace(true, free)
		return allErr, allErr
	}
}

// noteSpace logs a change between refusing and accepting writes, once.
func (s *Store) noteSpace(short bool, free uint64) {
	if short == s.short.Load() {
		return
	}
	s.short.Store(short)
	if short {
		s.log.Error("store refusing writes: disk nearly full",
			zap.Uint64("free_bytes", free), zap.Int64("reserve_bytes", s.reserve), zap.String("dir", s.dir))
	} else {
		s.log.Info("store accepting writes again", zap.Uint64("free_bytes", free), zap.Int64("reserve_bytes", s.reserve))
	}
}

// checkOpenSpace refuses to open a store on a filesystem too full for
// Badger to replay its logs and flush them.
func checkOpenSpace(dir string, reserve int64) error {
	free, err := FreeSpace(dir)
	if err != nil {
		return nil
	}
	if int64(free) < reserve/4 {
		return fmt.Errorf("%w: %s free in %s, the store needs at least %s to open; free some space and start again",
			ErrNoSpace, bytesText(free), dir, bytesText(uint64(reserve/4)))
	}
	return nil
}

func bytesText(n uint64) string {
	switch {
	case n >= 10<<30:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
