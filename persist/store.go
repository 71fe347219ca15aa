package persist

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/railmq/railmq/crypt"
	"go.uber.org/zap"
)

// Options configure a Store.
type Options struct {
	Dir    string
	Logger *zap.Logger
	// AfterSync, if set, runs on the committer after each fsync, before
	// the batch's callbacks (tests check fsync-before-confirm with it).
	AfterSync func()
	// BeforeRound, if set, runs before each round of disk work: on the
	// committer before its writes, reads and fsync, and on the garbage
	// collector before it compacts or rewrites the value log.
	BeforeRound func()
	// Fault, if set, is consulted before each group commit; an error it
	// returns fails the commit as a full disk would (a test hook).
	Fault func() error
	// GCInterval is how often the value log is garbage-collected; 0 means
	// one minute, negative disables.
	GCInterval time.Duration
	// MemTableSize bounds Badger's memtables (two of them); 0 means 16 MiB.
	MemTableSize int64
	// Reserve is the free space the store keeps on its filesystem (see
	// space.go); 0 means twice MemTableSize plus 8 MiB.
	Reserve int64
	// ValueLogFileSize is the size of a value-log file (Badger maps twice
	// that); 0 means 32 MiB. Space comes back a whole file at a time.
	ValueLogFileSize int64
	// gcHold, if set, holds the value log's garbage collection back until
	// it is closed (tests: see TestSpaceComesBackAfterDrain).
	gcHold <-chan struct{}
	// Keys, if set, encrypt the store (Badger's encryption: persist/crypt.go).
	Keys *crypt.Keys
}

// defaultVlogFileSize is the default Options.ValueLogFileSize. A file
// comes back only once nearly all of it is garbage, and the newest one not
// before it is full: small files give space back sooner, and a file a
// long-lived message keeps costs less.
const defaultVlogFileSize = 32 << 20

// vlogMaxEntries is how many values a value-log file takes before Badger
// starts the next. Files larger than the default are there to hold one
// large message (Badger refuses a value larger than a file); small
// messages still fill a file of about the default size before the next
// begins (32 Ki values of 1 KiB), since the newest file, which is never
// collected, is what stays of a drained backlog.
func vlogMaxEntries(fileSize int64) uint32 {
	if fileSize <= defaultVlogFileSize {
		return 1000000 // Badger's default: the file size decides
	}
	return defaultVlogFileSize >> 10
}

// valueThreshold is the value size from which Badger keeps a value in the
// value log rather than in the LSM tree.
const valueThreshold = 256

// Badger's memtables and caches, all on the Go heap.
const (
	numMemtables   = 2
	blockCacheSize = 16 << 20
	indexCacheSize = 16 << 20
	// compactionHeap is what Badger's compactions hold on the heap while
	// they run: the table builders' buffers (z.Calloc, 21.5 MiB in use in
	// a heap profile of a million delayed messages being routed) and the
	// blocks they read.
	compactionHeap = 32 << 20
)

// HeapFixed is what Badger keeps on the Go heap however little the store
// holds: its memtables' arenas (a memtable's size plus Badger's 15% for
// its largest batch and as much again for that batch's skiplist nodes),
// its block and index caches, and what a busy store's compactions hold.
// A heap target below it would have the GC run all the time: without
// the compactions' part, routing a million delayed messages ran the GC
// 50 times a second (the heap target 138 MiB, 83 MiB live), and allocations
// gave memory back to the kernel as they went (the runtime scavenges
// synchronously over its memory limit).
func (s *Store) HeapFixed() int64 {
	return numMemtables*(s.opt.MemTableSize*13/10) + blockCacheSize + indexCacheSize + compactionHeap
}

// Store is the message and definition store.
type Store struct {
	db  *badger.DB
	log *zap.Logger
	opt Options

	mu      sync.Mutex // guards pending, closing and closed
	closing bool       // Close was called: the committer exits once nothing is pending
	pending []*Batch
	closed  bool
	// flushers add their writes to every commit (AddFlusher), by id.
	flushers map[int]func(*Batch)
	flushID  int
	kicked   atomic.Bool // a round is due even with nothing pending (Kick)
	wake     chan struct{}
	stopped  chan struct{}
	gcStop   chan struct{}
	gcDone   chan struct{}

	nextMsg atomic.Uint64
	syncs   atomic.Uint64
	metrics Metrics
	// deletes counts the deletes of keys whose value may be a record in
	// the value log since the collector last flushed them (gc.go);
	// vlogPuts and vlogPutBytes the writes of values that go there, and
	// their bytes, for the mean record size.
	deletes      atomic.Int64
	vlogPuts     atomic.Int64
	vlogPutBytes atomic.Int64
	fillerSeq    uint64       // the last filler key written (the collector's)
	touched      atomic.Int64 // bytes written or read through Badger's mmaps since the last page-out
	reserve      int64
	short        atomic.Bool // the last space check refused writes (logged once)
	// pagedOut counts the bytes of mappings advised out (tests).
	pagedOut atomic.Int64
	dir      string // absolute, for page-outs
	// walFid is the memtable WAL the last round ended in (wal.go);
	// walSyncs counts the rotated WALs synced (tests). The committer's.
	walFid   int
	walSyncs atomic.Int64
	// refs counts the entries left for messages shared by several queues.
	// Owned by the committer (and by recovery before it starts).
	refs map[uint64]int32
}

// ErrClosed is returned for work submitted after Close.
var ErrClosed = errors.New("persist: store closed")

// Open opens (or creates) the store. A store that cannot be opened (held
// by another process, corrupt, unwritable) is an error, never an empty
// start.
func Open(opt Options) (*Store, error) {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.MemTableSize == 0 {
		opt.MemTableSize = 16 << 20
	}
	if opt.GCInterval == 0 {
		opt.GCInterval = time.Minute
	}
	if opt.Reserve == 0 {
		opt.Reserve = defaultReserve(opt.MemTableSize)
	}
	if opt.ValueLogFileSize == 0 {
		opt.ValueLogFileSize = defaultVlogFileSize
	}
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening store in %s: %w", opt.Dir, err)
	}
	if err := checkOpenSpace(opt.Dir, opt.Reserve); err != nil {
		return nil, fmt.Errorf("opening store in %s: %w", opt.Dir, err)
	}
	bo := badger.DefaultOptions(opt.Dir).
		WithLogger(badgerLogger{opt.Logger.Named("badger").Sugar()}).
		WithSyncWrites(false). // we fsync once per group commit
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false).
		WithMemTableSize(opt.MemTableSize).
		WithNumMemtables(numMemtables).
		WithNumLevelZeroTables(1).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(blockCacheSize).
		WithIndexCacheSize(indexCacheSize).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(opt.ValueLogFileSize).
		WithValueLogMaxEntries(vlogMaxEntries(opt.ValueLogFileSize)).
		WithNumCompactors(2).
		WithCompactL0OnClose(true)
	db, err := openBadger(bo, opt)
	if err != nil {
		return nil, err
	}
	s := &Store{
		db: db, log: opt.Logger, opt: opt, metrics: newMetrics(),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		gcStop:  make(chan struct{}),
		gcDone:  make(chan struct{}),
		refs:    make(map[uint64]int32),
		dir:     absDir(opt.Dir),
		reserve: opt.Reserve,
	}
	if s.walFid, err = lastWAL(opt.Dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("reading store in %s: %w", opt.Dir, err)
	}
	last, err := s.lastMessageID()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("reading store in %s: %w", opt.Dir, err)
	}
	s.nextMsg.Store(last)
	go s.commitLoop()
	go s.gcLoop()
	return s, nil
}

// Close stops the committer after it has written what was submitted,
// including what the callbacks of those writes submit in turn (a
// dead-lettered copy made durable deletes its original), and closes
// Badger. Call it once nothing else submits work (the queues stopped).
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
	<-s.stopped
	close(s.gcStop)
	<-s.gcDone
	return s.db.Close()
}

// Reserve is the free space the store keeps on its filesystem.
func (s *Store) Reserve() int64 { return s.reserve }

// NewMessageID returns a fresh message id.
func (s *Store) NewMessageID() uint64 { return s.nextMsg.Add(1) }

// Syncs counts the fsyncs done so far.
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

func (s *Store) lastMessageID() (uint64, error) {
	var last uint64
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Reverse, o.PrefetchValues = true, false
		it := txn.NewIterator(o)
		defer it.Close()
		it.Seek([]byte{prefixMessage, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		if it.ValidForPrefix([]byte{prefixMessage}) {
			k := it.Item().Key()
			last = beUint64(k[1:])
		}
		return nil
	})
	return last, err
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// --- value log GC and logging ----------------------------------------------
