package persist

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// lazy formats as what it returns when the message is made.
type lazy func() string

func (l lazy) String() string { return l() }

// dirBytes is the disk space the files under dir take (allocated blocks,
// as du reports them: Badger's files are sparse).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file Badger removed meanwhile
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A drained backlog gives its disk space back (issue 38, item 3: 1 M ×
// 1 KiB published and drained left 1.1 GiB in the data dir ten minutes
// later, 196 MiB before): the deletes of its last part stayed in Badger's
// memtable and L0, uncompacted, so the value log never learnt its files
// were garbage. Here a backlog of about twelve value-log files is
// published and deleted; the store must come back within twice its size
// before the backlog plus a value-log file and a few memtables (the
// newest value-log file, which Badger never collects, the memtable's log,
// the tables), with no further write to help it.
//
// The collector is held back until the drain is written: Badger's
// value-log rewrite reads the memtable's highest version (DB.MaxVersion)
// without the lock its writer holds (badger v4.9.6 value.go rewrite), which
// the race detector reports when a commit is in flight meanwhile. What a
// publisher sees during the reclaim is measured with railmq-perf
// (bench/RESULTS-store.md).
func TestSpaceComesBackAfterDrain(t *testing.T) {
	const (
		memTable = 4 << 20
		vlogFile = 4 << 20
		n        = 48 << 10 // 48 Ki × 1 KiB
	)
	dir := t.TempDir()
	hold := make(chan struct{})
	s, err := Open(Options{Dir: dir, GCInterval: time.Second, MemTableSize: memTable, ValueLogFileSize: vlogFile, gcHold: hold})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pre := dirBytes(t, dir)
	rec := make([]byte, 1024)
	for seq := uint64(1); seq <= n; {
		b := &Batch{}
		for i := 0; i < 512; i++ {
			b.PutEntryInline(1, seq, s.NewMessageID(), false, false, 0, rec)
			seq++
		}
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	peak := dirBytes(t, dir)
	if peak < pre+40<<20 {
		t.Fatalf("the backlog took %d bytes on disk, expected about 50 MiB", peak-pre)
	}
	for seq := uint64(1); seq <= n; {
		b := &Batch{}
		for i := 0; i < 256; i++ {
			b.DeleteEntryInline(1, seq)
			seq++
		}
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	drained := dirBytes(t, dir)
	close(hold)
	// The slack is the production figure's (64 MiB: a 32 MiB value-log
	// file and twice a 16 MiB memtable) at this test's sizes, plus a
	// memtable for the tables and Badger's bookkeeping files.
	limit := 2*pre + vlogFile + 3*memTable
	var now int64
	poll.Eventually(t, 3*time.Minute, func() bool {
		now = dirBytes(t, dir)
		return now <= limit
	}, "data dir %d bytes before the backlog, %d with it, %d drained: still %v, more than %d",
		pre, peak, drained, lazy(func() string { return strconv.FormatInt(now, 10) }), limit)
	t.Logf("data dir: %d bytes before, %d with the backlog, %d drained, %d now", pre, peak, drained, now)
}
