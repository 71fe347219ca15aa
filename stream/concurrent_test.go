package stream

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// TestConcurrentReadAppend: readers follow the log while many appenders
// write to it (run with -race); each sees every record once, in order,
// across segment rolls, and only records whose append has been confirmed
// or is being confirmed (durable).
func TestConcurrentReadAppend(t *testing.T) {
	l := openT(t, t.TempDir(), Options{MaxSegmentBytes: 16 << 10})
	const appenders, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, appenders*each)
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				done := make(chan struct{})
				l.Append([]Record{{Timestamp: ms0, Data: fmt.Appendf(nil, "a%d-%d", a, i)}}, func(_ uint64, err error) {
					if err != nil {
						errs <- err
					}
					close(done)
				})
				<-done
			}
		}()
	}
	const readers = 3
	var rwg sync.WaitGroup
	for k := 0; k < readers; k++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			r, err := l.NewReader(Spec{Kind: First}, nil)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			next := uint64(0)
			last := map[int]int{}
			deadline := time.Now().Add(2 * time.Minute)
			for next < appenders*each && time.Now().Before(deadline) {
				ch := l.Changed()
				e, ok, err := r.Next()
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					select {
					case <-ch:
					case <-time.After(time.Second):
					}
					continue
				}
				if _, n := l.Bounds(); e.Offset != next || e.Offset >= n {
					errs <- fmt.Errorf("read offset %d, want %d (next %d)", e.Offset, next, n)
					return
				}
				var a, i int
				if _, err := fmt.Sscanf(string(e.Data), "a%d-%d", &a, &i); err != nil {
					errs <- err
					return
				}
				if p, ok := last[a]; ok && i != p+1 {
					errs <- fmt.Errorf("appender %d: %d after %d", a, i, p)
					return
				}
				last[a] = i
				next++
			}
			if next != appenders*each {
				errs <- fmt.Errorf("reader read %d", next)
			}
		}()
	}
	wg.Wait()
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := l.Stats()
	if st.Next != appenders*each || st.Segments < 2 {
		t.Errorf("stats %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCommit: appends queued while the writer syncs go out together:
// far fewer chunks than appends under load.
func TestGroupCommit(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	var wg sync.WaitGroup
	for a := 0; a < 64; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				appendWait(t, l, []Record{{Timestamp: ms0, Data: make([]byte, 1024)}})
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	if st.Appended != 64*20 || st.Chunks >= st.Appended {
		t.Fatalf("%d chunks for %d appends", st.Chunks, st.Appended)
	}
	t.Logf("%d chunks for %d appends", st.Chunks, st.Appended)
}

// TestCloseAndDelete: what is queued before Close is written; Appends
// after it fail with ErrClosed, readers fail; Delete removes the files.
func TestCloseAndDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	l := openT(t, dir, Options{})
	var got []error
	var mu sync.Mutex
	for i := 0; i < 50; i++ {
		l.Append(mkRecs(i, 1, ms0, ""), func(_ uint64, err error) {
			mu.Lock()
			got = append(got, err)
			mu.Unlock()
		})
	}
	r, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 {
		t.Fatalf("%d callbacks ran before Close returned", len(got))
	}
	for _, err := range got {
		if err != nil {
			t.Fatal(err)
		}
	}
	l.Append(mkRecs(0, 1, ms0, ""), func(_ uint64, err error) { got = append(got, err) })
	if !errors.Is(got[50], ErrClosed) {
		t.Fatalf("append after close: %v", got[50])
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("reader after close: %v", err)
	}
	r.Close()
	l = openT(t, dir, Options{})
	if _, n := l.Bounds(); n != 50 {
		t.Fatalf("next %d after reopen", n)
	}
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir after delete: %v", err)
	}
}

// TestFailedWrite: a write that fails (the file size limit, EFBIG) fails
// that batch's callbacks and leaves the log as it was: later appends
// succeed and the records before and after read back intact.
func TestFailedWrite(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	defer l.Close()
	appendWait(t, l, mkRecs(0, 10, ms0, ""))
	size := l.Stats().Bytes
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip("no RLIMIT_FSIZE:", err)
	}
	lim := old
	lim.Cur = uint64(size) + 100 // the segment may grow by less than a 4 KiB record
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skip("cannot set RLIMIT_FSIZE:", err)
	}
	ch := make(chan error, 1)
	l.Append([]Record{{Timestamp: ms0, Data: make([]byte, 4096)}}, func(_ uint64, err error) { ch <- err })
	werr := <-ch
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if werr == nil {
		t.Fatal("append over the file size limit succeeded")
	}
	if _, n := l.Bounds(); n != 10 {
		t.Fatalf("next %d after a failed write", n)
	}
	if fi, err := os.Stat(filepath.Join(dir, segName(0))); err != nil || fi.Size() != l.Stats().Bytes-fileHeaderSize-idxEntrySize {
		t.Fatalf("segment not cut back: %v", err)
	}
	if first := appendWait(t, l, mkRecs(10, 5, ms0, "")); first != 10 {
		t.Fatalf("append after failure at %d", first)
	}
	r, err := l.NewReader(Spec{Kind: First}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	es := readAll(t, r)
	if len(es) != 15 {
		t.Fatalf("read %d", len(es))
	}
	checkData(t, es, 0)
}

// TestTracking: stored offsets are durable (written without Close within
// a short time, and at Close) and recovered at Open.
func TestTracking(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	if _, ok := l.TrackedOffset("a"); ok {
		t.Fatal("offset before any stored")
	}
	l.StoreOffset("a", 42)
	l.StoreOffset("b", 7)
	l.StoreOffset("a", 43)
	if o, ok := l.TrackedOffset("a"); !ok || o != 43 {
		t.Fatalf("a: %d %v", o, ok)
	}
	// Written with no append and no Close, within a short time.
	poll.Eventually(t, 10*time.Second, func() bool {
		p := &Log{dir: dir, tracked: map[string]uint64{}}
		if err := p.loadTracking(); err != nil {
			t.Fatal(err)
		}
		return p.tracked["a"] == 43 && p.tracked["b"] == 7
	}, "offsets on disk")
	l.StoreOffset("c", 1<<40)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openT(t, dir, Options{})
	defer l.Close()
	for n, want := range map[string]uint64{"a": 43, "b": 7, "c": 1 << 40} {
		if o, ok := l.TrackedOffset(n); !ok || o != want {
			t.Fatalf("%s: %d %v after reopen, want %d", n, o, ok, want)
		}
	}
}
