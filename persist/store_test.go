package persist

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReopenKeepsEntriesInOrder(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	b := &Batch{}
	for seq := uint64(1); seq <= 5; seq++ {
		id := s.NewMessageID()
		b.PutMessage(id, []byte{byte(seq)})
		b.PutEntry(7, seq, id, false, false, false, 0)
	}
	b.PutDelivered(7, 2)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	sum, err := s.RecoverQueue(7)
	if err != nil || sum.Count != 5 || sum.MaxSeq != 5 || sum.Delivered != 2 {
		t.Fatalf("summary %+v %v", sum, err)
	}
	es, err := s.LoadEntries(7, 1, 3)
	if err != nil || len(es) != 3 {
		t.Fatalf("load %v %v", es, err)
	}
	for i, e := range es {
		if e.Seq != uint64(i+2) || e.Data[0] != byte(i+2) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if next := s.NewMessageID(); next != 6 {
		t.Fatalf("message ids restart at %d", next)
	}
}

func TestSharedMessageKeptUntilLastEntry(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	b := &Batch{}
	b.PutMessage(1, []byte("fanout"))
	b.PutEntry(1, 1, 1, true, false, false, 0)
	b.PutEntry(2, 1, 1, true, false, false, 0)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.DeleteEntry(1, 1, 1, true)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.LoadEntries(2, 0, 10); len(es) != 1 || string(es[0].Data) != "fanout" {
		t.Fatalf("the other queue lost the shared body: %+v", es)
	}
	b = &Batch{}
	b.DeleteEntry(2, 1, 1, true)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.PutEntry(3, 1, 1, false, false, false, 0) // an entry pointing at the deleted body
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.LoadEntries(3, 0, 10); len(es) != 0 {
		t.Fatalf("body still there after its last entry: %+v", es)
	}
}

func TestTransientEntriesDroppedAtRecovery(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	b := &Batch{}
	b.PutMessage(1, []byte("durable"))
	b.PutEntry(9, 1, 1, false, false, false, 0)
	b.PutMessage(2, []byte("paged transient"))
	b.PutEntry(9, 2, 2, false, true, false, 0)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	sum, err := s.RecoverQueue(9)
	if err != nil || sum.Count != 1 || sum.Dropped != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	if es, _ := s.LoadEntries(9, 0, 10); len(es) != 1 || string(es[0].Data) != "durable" {
		t.Fatalf("%+v", es)
	}
}

func TestDropRangeAndQueue(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	b := &Batch{}
	for seq := uint64(1); seq <= 4; seq++ {
		b.PutMessage(seq, []byte("m"))
		b.PutEntry(5, seq, seq, false, false, false, 0)
	}
	b.DropRange(5, 3)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.LoadEntries(5, 0, 10); len(es) != 2 {
		t.Fatalf("after DropRange(3): %d entries", len(es))
	}
	b = &Batch{}
	b.DropQueue(5)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.LoadEntries(5, 0, 10); len(es) != 0 {
		t.Fatalf("after DropQueue: %d entries", len(es))
	}
}

// Commits submitted while a sync is under way all go into the next one
// (STYLE.md, Confirms: batching comes from load, not from a timer). The
// first fsync is held in AfterSync until 199 more commits, from as many
// goroutines, have been submitted: they must then take one fsync between
// them, two for the 200.
func TestGroupCommit(t *testing.T) {
	syncing := make(chan struct{}) // closed when the first fsync is done
	release := make(chan struct{}) // closed to let the committer go on
	var first sync.Once
	s, err := Open(Options{Dir: t.TempDir(), GCInterval: -1, AfterSync: func() {
		first.Do(func() {
			close(syncing)
			<-release
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 200
	errs := make(chan error, n)
	commit := func(id uint64) {
		b := &Batch{}
		b.PutMessage(id, []byte("x"))
		s.Commit(b, func(err error) { errs <- err })
	}
	before := s.Syncs()
	commit(1)
	select {
	case <-syncing:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the first commit was not synced within 10s")
	}
	var submitted sync.WaitGroup
	for i := 2; i <= n; i++ {
		submitted.Add(1)
		go func() {
			defer submitted.Done()
			commit(uint64(i))
		}()
	}
	submitted.Wait() // Commit has queued each of them
	close(release)
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
		case <-timeout:
			t.Fatalf("%d of %d commits durable within 10s", i, n)
		}
	}
	if got := s.Syncs() - before; got != 2 {
		t.Fatalf("%d fsyncs for %d commits, %d of them submitted during the first fsync: want 2", got, n, n-1)
	}
}

func TestFaultFailsCommit(t *testing.T) {
	fail := errors.New("disk full")
	s, err := Open(Options{Dir: t.TempDir(), GCInterval: -1, Fault: func() error { return fail }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := &Batch{}
	b.PutMessage(1, []byte("x"))
	if err := s.CommitSync(b); !errors.Is(err, fail) {
		t.Fatalf("got %v", err)
	}
}

func TestLockedStoreRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	if _, err := Open(Options{Dir: dir}); err == nil {
		t.Fatal("opened a store another Store holds")
	}
}

func TestInlineEntries(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	b := &Batch{}
	b.PutEntryInline(4, 1, 11, false, false, 0, []byte("one"))
	b.PutEntryInline(4, 2, 12, true, false, 0, []byte("paged"))
	b.PutEntryInline(4, 3, 13, false, false, 0, []byte("three"))
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.PutEntryInline(4, 3, 13, false, true, 2, []byte("three")) // a requeue rewrites it
	b.DeleteEntryInline(4, 1)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	sum, err := s.RecoverQueue(4)
	if err != nil || sum.Count != 1 || sum.Dropped != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	es, err := s.LoadEntries(4, 0, 10)
	if err != nil || len(es) != 1 || string(es[0].Data) != "three" || !es[0].Inline || !es[0].Redelivered || es[0].Count != 2 {
		t.Fatalf("%+v %v", es, err)
	}
}

// Commits racing Close, including commits made from done callbacks on
// the committer itself (as dead-lettering does), are either written or
// refused with ErrClosed: never a send on the closed wake channel (a
// panic, and a race the detector reported at broker shutdown).
func TestCommitRacingClose(t *testing.T) {
	for range 10 {
		s := open(t, t.TempDir())
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 2000 {
					select {
					case <-stop:
						return
					default:
					}
					b := &Batch{}
					b.PutMessage(uint64(g<<20|i+1), []byte("x"))
					s.Commit(b, func(error) {
						// A follow-up from the committer, as a dead-letter
						// delete is.
						s.Commit(&Batch{}, nil)
					})
				}
			}()
		}
		time.Sleep(5 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
	}
}

// Close writes what the done callbacks of the last writes submit in turn:
// a dead-lettered copy made durable deletes its original from its done
// callback, and at shutdown that delete must not be refused, or the
// original comes back after the restart next to its copy.
func TestCloseCommitsWhatCallbacksSubmit(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	orig := &Batch{}
	orig.PutEntryInline(3, 1, s.NewMessageID(), false, false, 0, []byte("original"))
	if err := s.CommitSync(orig); err != nil {
		t.Fatal(err)
	}
	var delErr error
	deleted := make(chan struct{})
	copyB := &Batch{}
	copyB.PutEntryInline(4, 1, s.NewMessageID(), false, false, 0, []byte("copy"))
	s.Commit(copyB, func(err error) {
		if err != nil {
			t.Errorf("copy: %v", err)
		}
		del := &Batch{}
		del.DeleteEntryInline(3, 1)
		s.Commit(del, func(err error) { delErr = err; close(deleted) })
	})
	if err := s.Close(); err != nil { // at once: the copy is in the last round
		t.Fatal(err)
	}
	select {
	case <-deleted:
	default:
		t.Fatal("Close returned before the delete submitted by a callback was done")
	}
	if delErr != nil {
		t.Fatalf("the delete submitted by a callback during Close: %v", delErr)
	}
	s = open(t, dir)
	defer s.Close()
	if es, _ := s.LoadEntries(3, 0, 10); len(es) != 0 {
		t.Fatalf("the original is still stored: %d entries", len(es))
	}
	if es, _ := s.LoadEntries(4, 0, 10); len(es) != 1 {
		t.Fatalf("the copy: %d entries", len(es))
	}
	// After Close, commits are refused, never left behind.
	s2 := open(t, t.TempDir())
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s2.CommitSync(&Batch{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit after Close: %v, want ErrClosed", err)
	}
}

// Recovery scans every entry of a queue, records and all, through
// Badger's mmaps: it pages them out as it goes, as reads of a backlog do,
// so that recovering a gigabyte does not leave a gigabyte in RSS (a 1M x
// 1 KiB backlog: 599 MiB VmHWM after a kill -9 before, 137 MiB after).
func TestRecoverQueuePagesOut(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("page-outs are Linux's MADV_PAGEOUT")
	}
	dir := t.TempDir()
	s := open(t, dir)
	rec := make([]byte, 1024)
	for i := range 40 { // 40 MiB of inline records, more than two page-out steps
		b := &Batch{}
		for j := range 1024 {
			b.PutEntryInline(5, uint64(i*1024+j+1), s.NewMessageID(), false, false, 0, rec)
		}
		if err := s.CommitSync(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	before := s.pagedOut.Load()
	sum, err := s.RecoverQueue(5)
	if err != nil || sum.Count != 40*1024 {
		t.Fatalf("recovered %+v, %v", sum, err)
	}
	if s.pagedOut.Load() == before {
		t.Fatal("recovery read 40 MiB of records and paged none of them out")
	}
}

// A retry hold's due time lives in the entry (entryHeld): written for
// entries with their record apart and inline, read back after a reopen,
// counted by recovery, and gone with the entry; a later rewrite without
// it clears it.
func TestHeldEntries(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	b := &Batch{}
	id := s.NewMessageID()
	b.PutMessage(id, []byte("apart"))
	b.PutEntry(5, 1, id, false, false, false, 0)
	b.PutEntryInline(5, 2, 22, false, false, 0, []byte("inline"))
	b.PutEntryInline(5, 3, 23, false, false, 0, []byte("plain"))
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.HoldEntry(5, 1, id, false, false, true, 1, 1234567890123)
	b.HoldEntryInline(5, 2, 22, false, true, 2, 987654321, []byte("inline"))
	b.HoldEntryInline(5, 3, 23, false, true, 1, 5, []byte("plain"))
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.PutEntryInline(5, 3, 23, false, true, 1, []byte("plain")) // released, nacked no more
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	sum, err := s.RecoverQueue(5)
	if err != nil || sum.Count != 3 {
		t.Fatalf("%+v %v", sum, err)
	}
	es, err := s.LoadEntries(5, 0, 10)
	if err != nil || len(es) != 3 {
		t.Fatalf("%+v %v", es, err)
	}
	want := []struct {
		data  string
		until int64
		count uint32
	}{{"apart", 1234567890123, 1}, {"inline", 987654321, 2}, {"plain", 0, 1}}
	for i, w := range want {
		e := es[i]
		if string(e.Data) != w.data || e.Until != w.until || e.Count != w.count || !e.Redelivered {
			t.Fatalf("entry %d: %+v, want %+v", i, e, w)
		}
	}
	b = &Batch{}
	b.DeleteEntry(5, 1, id, false)
	b.DeleteEntryInline(5, 2)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	if es, err := s.LoadEntries(5, 0, 10); err != nil || len(es) != 1 || es[0].Seq != 3 {
		t.Fatalf("after delete: %+v %v", es, err)
	}
}

// The value log's garbage collection is disk work too: BeforeRound runs
// before it compacts or rewrites (the broker's one-P mode must not meet
// it with the only P).
func TestGCRunsBeforeRound(t *testing.T) {
	var rounds atomic.Int64
	s, err := Open(Options{Dir: t.TempDir(), GCInterval: time.Nanosecond, BeforeRound: func() { rounds.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := &Batch{}
	for seq := uint64(1); seq <= 4; seq++ {
		b.PutMessage(seq, []byte("m"))
		b.PutEntry(5, seq, seq, false, false, false, 0)
	}
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	b = &Batch{}
	b.DropQueue(5) // deletes: the next GC tick compacts
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	committed := rounds.Load()
	if committed < 2 {
		t.Fatalf("BeforeRound ran %d times for 2 commits", committed)
	}
	// Nothing is committed from here on: a call is the collector's.
	deadline := time.Now().Add(10 * time.Second)
	for rounds.Load() == committed {
		if time.Now().After(deadline) {
			t.Fatal("the garbage collection ran without BeforeRound")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
