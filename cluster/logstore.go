package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// LogStore keeps a Raft member's log and its stable state (term, vote)
// in Badger, the store railmq keeps everything else in: hashicorp/raft's
// LogStore and StableStore. StoreLogs returns once the entries are
// fsynced, which is what lets a member acknowledge an append (and so a
// leader count it toward a commit, and a publisher get its confirm) only
// when the entry survives a crash.
//
// Keys: 'l' + the index (8 bytes, big-endian) for entries, so that they
// iterate in index order; 's' + the key for stable values.
//
// Several groups may share one Badger (a node's quorum queues do): each
// one's keys then start with its prefix.
type LogStore struct {
	db    *badger.DB
	pfx   []byte
	owned bool // Close closes db
	// afterSync, if set, runs after each fsync of appended entries (a
	// test's hook: NodeConfig.AfterLogSync).
	afterSync func()

	mu          sync.Mutex // guards first and last
	first, last uint64     // 0, 0 when empty
}

// errNotFound is hashicorp/raft's "not found", which it compares by text.
var errNotFound = errors.New("not found")

// OpenLogStore opens (or creates) a log store in dir.
func OpenLogStore(dir string) (*LogStore, error) { return openLogStore(dir, nil) }

// A raft log Badger's memtables and caches, all on the Go heap. Badger's
// defaults (five memtables, a 256 MiB block cache, every table index in
// memory) would put a few hundred MiB on the heap of a node that counts
// only the store's share in its heap target, and have its GC run all the
// time; a log is written once, read back by followers catching up and
// then truncated, so small caches are enough.
const (
	logMemTableSize = 16 << 20
	logMemtables    = 2
	logBlockCache   = 16 << 20
	logIndexCache   = 8 << 20
)

// LogDBHeap is what one log Badger opened by OpenLogDB keeps on the Go
// heap however little it holds (as persist.Store.HeapFixed counts it).
const LogDBHeap = logMemtables*(logMemTableSize*13/10) + logBlockCache + logIndexCache

// OpenLogDB opens (or creates) a Badger for raft logs in dir.
func OpenLogDB(dir string) (*badger.DB, error) { return openLogDB(dir, nil) }

func logDBOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(false).
		WithNumVersionsToKeep(1).WithDetectConflicts(false).
		WithMemTableSize(logMemTableSize).WithNumMemtables(logMemtables).
		WithNumLevelZeroTables(4).WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(logBlockCache).WithIndexCacheSize(logIndexCache).
		WithNumCompactors(2).WithValueThreshold(1 << 10)
}

// GroupLogStore is the log store of the group whose keys start with pfx
// in db (which its owner closes).
func GroupLogStore(db *badger.DB, pfx []byte) (*LogStore, error) {
	s := &LogStore{db: db, pfx: pfx}
	lp := s.key('l', nil)
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: lp})
		defer it.Close()
		it.Rewind()
		if !it.Valid() {
			return nil
		}
		s.first = binary.BigEndian.Uint64(it.Item().Key()[len(lp):])
		rit := txn.NewIterator(badger.IteratorOptions{Prefix: lp, Reverse: true})
		defer rit.Close()
		rit.Seek(s.logKey(^uint64(0)))
		if rit.Valid() {
			s.last = binary.BigEndian.Uint64(rit.Item().Key()[len(lp):])
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// DropGroupLog deletes a group's log and stable state from db (its queue
// was deleted), key by key. Not with Badger's DropPrefix: that blocks
// every write to db while it runs, and the other groups sharing db (the
// node's other quorum queues) write their terms and entries meanwhile;
// hashicorp/raft panics when it cannot save its term ("Writes are
// blocked, possibly due to DropAll or Close": a standalone node deleting
// one of several quorum queues declared a moment before, while the others
// were electing themselves).
func DropGroupLog(db *badger.DB, pfx []byte) error {
	var keys [][]byte
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	}); err != nil {
		return err
	}
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// Close closes the store (its Badger, when it owns it).
func (s *LogStore) Close() error {
	if !s.owned {
		return nil
	}
	return s.db.Close()
}

func (s *LogStore) key(kind byte, k []byte) []byte {
	b := make([]byte, 0, len(s.pfx)+1+len(k))
	b = append(append(b, s.pfx...), kind)
	return append(b, k...)
}

func (s *LogStore) logKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64(s.key('l', nil), i)
}

// FirstIndex is the first index in the log, 0 when empty.
func (s *LogStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

// LastIndex is the last index in the log, 0 when empty.
func (s *LogStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

// GetLog reads entry index into out.
func (s *LogStore) GetLog(index uint64, out *raft.Log) error {
	return s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(s.logKey(index))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { return decodeLog(v, out) })
	})
}

// StoreLog stores one entry.
func (s *LogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// logBufs are StoreLogs' buffers: the entries' encodings, which Badger
// has copied (into its value log, or its memtable's arena) once the
// batch is flushed. A leader's entry is a round of commands (some 200 KiB
// under S3's workload), each one a fresh buffer for the garbage collector
// without them.
var logBufs sync.Pool // *[]byte

// maxPooledLogBuf: a larger buffer (a round of large messages) is left
// to the garbage collector rather than kept.
const maxPooledLogBuf = 4 << 20

// StoreLogs stores entries and fsyncs them before it returns.
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	n := 0
	for _, l := range logs {
		n += logHeader + 8 + len(l.Data) + len(l.Extensions)
	}
	bp, _ := logBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	buf := (*bp)[:0]
	if cap(buf) < n {
		buf = make([]byte, 0, n)
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, l := range logs {
		at := len(buf)
		buf = appendLog(buf, l)
		if err := wb.Set(s.logKey(l.Index), buf[at:len(buf):len(buf)]); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if cap(buf) <= maxPooledLogBuf {
		*bp = buf[:0]
		logBufs.Put(bp)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("cluster: fsync of the raft log: %w", err)
	}
	if s.afterSync != nil {
		s.afterSync()
	}
	s.mu.Lock()
	if s.first == 0 || logs[0].Index < s.first {
		s.first = logs[0].Index
	}
	if n := logs[len(logs)-1].Index; n > s.last {
		s.last = n
	}
	s.mu.Unlock()
	return nil
}

// DeleteRange deletes the entries from min to max, inclusive (raft
// compacts the log after a snapshot, and a follower drops a conflicting
// tail).
func (s *LogStore) DeleteRange(min, max uint64) error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for i := min; i <= max; i++ {
		if err := wb.Delete(s.logKey(i)); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if err := s.db.Sync(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case min <= s.first && max >= s.last:
		s.first, s.last = 0, 0
	case min <= s.first:
		s.first = max + 1
	case max >= s.last:
		s.last = min - 1
	}
	return nil
}

// Set stores a stable value, fsynced.
func (s *LogStore) Set(key, val []byte) error {
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(s.key('s', key), val) }); err != nil {
		return err
	}
	return s.db.Sync()
}

// Get reads a stable value; a missing one is raft's "not found".
func (s *LogStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(s.key('s', key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	return out, err
}

// SetUint64 stores a stable number.
func (s *LogStore) SetUint64(key []byte, v uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, v))
}

// GetUint64 reads a stable number.
func (s *LogStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cluster: stable value %q is %d bytes, not 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// An entry: index, term, type, appended-at (unix ns), then data and
// extensions, each with a 4-byte length (the fixed-width fields of the
// codec: this is the log store's format, which must not change).
func encodeLog(l *raft.Log) []byte {
	return appendLog(make([]byte, 0, logHeader+8+len(l.Data)+len(l.Extensions)), l)
}

// logHeader is an entry's fixed-width fields before its data.
const logHeader = 33

// appendLog appends l's encoding (encodeLog's) to b.
func appendLog(b []byte, l *raft.Log) []byte {
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	return Enc(b).U64(l.Index).U64(l.Term).U8(byte(l.Type)).U64(uint64(at)).Bytes32(l.Data).Bytes32(l.Extensions)
}

func decodeLog(v []byte, l *raft.Log) error {
	d := NewDec(v)
	l.Index = d.U64()
	l.Term = d.U64()
	t := d.U8()
	at := int64(d.U64())
	data := d.Bytes32()
	ext := d.Bytes32()
	if d.End() != nil {
		return errors.New("cluster: a raft log entry does not decode")
	}
	l.Type = raft.LogType(t)
	l.Data = append([]byte(nil), data...)
	l.Extensions = append([]byte(nil), ext...)
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}
