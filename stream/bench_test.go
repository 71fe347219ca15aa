package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The storage decision: the same workloads on segment files (this
// package) and on Badger, configured as railmq's store (persist/store.go:
// value threshold 256, no sync writes, one Sync per group commit), keyed
// by offset. Write amplification is read from /proc/self/io write_bytes
// (bytes this process sent to the storage layer, compactions included)
// and reported as disk-B/B.
//
//	go test -run XXX -bench 'Append|Replay' -benchtime 100000x ./stream/

// procWriteBytes is write_bytes of /proc/self/io (0 if unreadable).
func procWriteBytes() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("write_bytes: ")); ok {
			n, _ := strconv.ParseInt(string(v), 10, 64)
			return n
		}
	}
	return 0
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// appender is what the append benchmark drives.
type appender interface {
	append(data []byte, done func(error))
	close() error
}

type segAppender struct{ l *Log }

func (s segAppender) append(data []byte, done func(error)) {
	s.l.Append([]Record{{Timestamp: time.Now().UnixMilli(), Data: data}}, func(_ uint64, err error) { done(err) })
}
func (s segAppender) close() error { return s.l.Close() }

// badgerAppender is a group-commit writer over Badger like the Log's and
// persist's: one goroutine takes everything queued, writes it in one
// WriteBatch keyed by offset, Syncs once, then runs the callbacks.
type badgerAppender struct {
	db     *badger.DB
	mu     sync.Mutex
	queue  []bReq
	signal chan struct{}
	stop   chan struct{}
	exited chan struct{}
	next   uint64
}

type bReq struct {
	data []byte
	done func(error)
}

func openBadger(dir string) (*badger.DB, error) {
	return badger.Open(badger.DefaultOptions(dir).
		WithLogger(nil).
		WithSyncWrites(false).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false).
		WithNumMemtables(2).
		WithNumLevelZeroTables(1).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueThreshold(256).
		WithNumCompactors(2))
}

func newBadgerAppender(dir string) (*badgerAppender, error) {
	db, err := openBadger(dir)
	if err != nil {
		return nil, err
	}
	a := &badgerAppender{db: db, signal: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{})}
	go a.run()
	return a, nil
}

func (a *badgerAppender) append(data []byte, done func(error)) {
	a.mu.Lock()
	a.queue = append(a.queue, bReq{data, done})
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

func (a *badgerAppender) run() {
	defer close(a.exited)
	var batch []bReq
	for {
		select {
		case <-a.signal:
		case <-a.stop:
			return
		}
		a.mu.Lock()
		batch, a.queue = a.queue, batch[:0]
		a.mu.Unlock()
		wb := a.db.NewWriteBatch()
		var err error
		for _, r := range batch {
			k := binary.BigEndian.AppendUint64(nil, a.next)
			a.next++
			if err = wb.Set(k, r.data); err != nil {
				break
			}
		}
		if err == nil {
			err = wb.Flush()
		}
		if err == nil {
			err = a.db.Sync()
		}
		for _, r := range batch {
			r.done(err)
		}
		clear(batch)
	}
}

func (a *badgerAppender) close() error {
	close(a.stop)
	<-a.exited
	return a.db.Close()
}

// benchAppend: b.N appends of size bytes from 64 concurrent appenders,
// each waiting for its confirm (fsync) before the next.
func benchAppend(b *testing.B, open func(dir string) (appender, error), size int) {
	dir := b.TempDir()
	a, err := open(dir)
	if err != nil {
		b.Fatal(err)
	}
	const appenders = 64
	data := bytes.Repeat([]byte{'x'}, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	w0 := procWriteBytes()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := 0; g < appenders; g++ {
		n := b.N / appenders
		if g < b.N%appenders {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			for i := 0; i < n; i++ {
				a.append(data, func(err error) { done <- err })
				if err := <-done; err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := a.close(); err != nil { // Badger flushes its memtable here
		b.Fatal(err)
	}
	w := procWriteBytes() - w0
	b.ReportMetric(float64(w)/float64(int64(b.N)*int64(size)), "disk-B/B")
	b.ReportMetric(float64(dirSize(dir))/float64(int64(b.N)*int64(size)), "dir-B/B")
}

func BenchmarkAppend(b *testing.B) {
	b.Run("segments/1KiB/64", func(b *testing.B) {
		benchAppend(b, func(dir string) (appender, error) {
			l, err := Open(dir, Options{})
			return segAppender{l}, err
		}, 1024)
	})
	b.Run("badger/1KiB/64", func(b *testing.B) {
		benchAppend(b, func(dir string) (appender, error) { return newBadgerAppender(dir) }, 1024)
	})
}

// replayRecords is how many records the replay benchmarks write first.
const replayRecords = 500_000

// BenchmarkReplay: reading a log of replayRecords records from the
// start, sequentially, again and again (an op is a record).
func BenchmarkReplay(b *testing.B) {
	for _, size := range []int{16, 1024} {
		name := strconv.Itoa(size) + "B"
		b.Run("segments/"+name, func(b *testing.B) {
			l, err := Open(b.TempDir(), Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			data := bytes.Repeat([]byte{'x'}, size)
			recs := make([]Record, 1000)
			for i := range recs {
				recs[i] = Record{Timestamp: 1, Data: data}
			}
			for i := 0; i < replayRecords/len(recs); i++ {
				appendWait(b, l, recs)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			t0 := time.Now()
			r, err := l.NewReader(Spec{Kind: First}, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				_, ok, err := r.Next()
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					r.Close()
					if r, err = l.NewReader(Spec{Kind: First}, nil); err != nil {
						b.Fatal(err)
					}
					i--
				}
			}
			r.Close()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "records/s")
		})
		b.Run("badger/"+name, func(b *testing.B) {
			db, err := openBadger(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			data := bytes.Repeat([]byte{'x'}, size)
			wb := db.NewWriteBatch()
			for i := 0; i < replayRecords; i++ {
				if err := wb.Set(binary.BigEndian.AppendUint64(nil, uint64(i)), data); err != nil {
					b.Fatal(err)
				}
			}
			if err := wb.Flush(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			t0 := time.Now()
			err = db.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.DefaultIteratorOptions)
				defer it.Close()
				it.Rewind()
				n := 0
				for i := 0; i < b.N; i++ {
					if !it.Valid() {
						it.Rewind()
					}
					if err := it.Item().Value(func(v []byte) error { n += len(v); return nil }); err != nil {
						return err
					}
					it.Next()
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "records/s")
		})
	}
}

// BenchmarkReaderMemory: the heap a reader holds, positioned at an offset
// and having read a record, in a log of many segments (its file handle,
// its 64 KiB buffer), and the log's own in-memory state per segment.
func BenchmarkReaderMemory(b *testing.B) {
	l, err := Open(b.TempDir(), Options{NoSync: true, MaxSegmentBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := bytes.Repeat([]byte{'x'}, 1024)
	recs := make([]Record, 256)
	for i := range recs {
		recs[i] = Record{Timestamp: 1, Data: data}
	}
	for i := 0; i < 400; i++ { // 100 MB: 100 segments
		appendWait(b, l, recs)
	}
	_, next := l.Bounds()
	const readers = 100
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h0 := heap()
		rs := make([]*Reader, readers)
		for k := range rs {
			r, err := l.NewReader(Spec{Kind: Offset, Offset: next * uint64(k) / readers}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok, err := r.Next(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			rs[k] = r
		}
		h1 := heap()
		b.ReportMetric(float64(h1-h0)/readers, "heap-B/reader")
		for _, r := range rs {
			r.Close()
		}
	}
	b.ReportMetric(float64(l.Stats().Segments), "segments")
}
