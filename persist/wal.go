package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Badger's DB.Sync does not cover a memtable that rotated during a round
// (badger/v4 v4.9.6):
//
//   - Sync (db.go) msyncs db.mt's WAL (memTable.SyncWAL) and the current
//     value-log file (valueLog.sync: vlog.filesMap[maxFid] only).
//   - writeRequests (db.go) calls ensureRoomForWrite before each request
//     it writes; when db.mt is full, ensureRoomForWrite pushes it onto
//     flushChan and db.imm and makes a new memtable (newMemTable: a new
//     WAL file, "%05d.mem", with the next fid). Nothing syncs the old WAL
//     there: it is msynced only with SyncWrites (writeToLSM), which the
//     store does not use.
//   - The old memtable is durable once flushMemtable has written it to a
//     level-0 table (handleMemTableFlush: table.CreateTable msyncs the
//     table, levelsController.addLevel0Table fsyncs the MANIFEST), after
//     which the WAL is deleted (the skiplist's OnClose). That runs on
//     Badger's flusher goroutine, whenever it gets to it.
//
// So the writes of a round that went into the memtable before it rotated
// sit in a WAL nobody synced, until the flusher is done with it; a power
// loss in between (a crash of the process alone loses nothing: the pages
// are in the kernel's cache) would lose writes already confirmed. (A
// value-log file that fills up is synced when it is closed:
// logFile.doneWriting truncates it, and z.MmapFile.Truncate msyncs
// first.)
//
// syncRotatedWALs closes that gap: after each round's writes, before its
// Sync, it looks whether a WAL newer than the one the last round ended
// in exists (one stat, the cost in a round that did not rotate) and, if
// so, fsyncs every older WAL still there (fsync on a descriptor of its
// own writes back the pages the mmap dirtied: they are the file's pages
// in the page cache). A WAL already deleted was flushed, hence durable.
// The cost is one fsync of a WAL file per memtable rotation: about one
// per MemTableSize of keys and small values written.

// walName is the file name of Badger's memtable WAL fid (db.mtFilePath).
func walName(fid int) string { return fmt.Sprintf("%05d.mem", fid) }

// lastWAL is the highest memtable WAL fid in dir (0 if none): the memtable
// Badger writes to once Open returned (openMemTables replays the older
// ones, and newMemTable makes one after them).
func lastWAL(dir string) (int, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	last := 0
	for _, e := range es {
		n, ok := strings.CutSuffix(e.Name(), ".mem")
		if !ok {
			continue
		}
		if fid, err := strconv.Atoi(n); err == nil && fid > last {
			last = fid
		}
	}
	return last, nil
}

// syncRotatedWALs fsyncs the WALs of the memtables that rotated since the
// last round (see above). The committer's, after the round's writes and
// before its Sync.
func (s *Store) syncRotatedWALs() error {
	next := s.walFid + 1
	if _, err := os.Stat(filepath.Join(s.opt.Dir, walName(next))); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no rotation: Sync covers the one WAL written
		}
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(s.opt.Dir, walName(next+1))); err != nil {
			break
		}
		next++
	}
	for fid := s.walFid; fid < next; fid++ {
		if err := syncFile(filepath.Join(s.opt.Dir, walName(fid))); err != nil {
			return err
		}
		s.walSyncs.Add(1)
	}
	s.walFid = next
	return nil
}

// syncFile fsyncs path; one that is gone (a WAL flushed meanwhile) is
// fine.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
