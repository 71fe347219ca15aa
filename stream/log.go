package stream

import (
	"errors"
	"time"
)

// errTODO marks what the storage helper is building (this file is the
// API the rest of the broker codes against; replaced by the real one).
var errTODO = errors.New("stream: storage not built yet")

// Log is one stream's storage, in its own directory.
type Log struct{}

// Open opens (creating if needed) the log in dir, recovering it: a torn
// or corrupt tail of the last segment (a crash) is truncated to the last
// whole chunk, with a Warn log saying how many bytes went.
func Open(dir string, o Options) (*Log, error) { return nil, errTODO }

// Append queues records to be written as one chunk, in order after every
// earlier Append; done runs once they are fsynced (or failed), with the
// first one's offset, on the log's writer goroutine (it must not block).
// Appends that arrive while the writer writes and syncs go out together
// in the next chunk(s): batching comes from load, never from a timer.
func (l *Log) Append(recs []Record, done func(first uint64, err error)) {}

// AppendTagged is Append for a replicated stream: tag (the Raft index of
// the entry the records came in) is stored in the chunk's header, and
// LastTag reports the highest one written, so that an entry applied
// again after a restart is recognised and skipped.
func (l *Log) AppendTagged(recs []Record, tag uint64, done func(first uint64, err error)) {}

// LastTag is the highest tag written by AppendTagged (0: none).
func (l *Log) LastTag() uint64 { return 0 }

// Changed returns a channel closed at the next change: records made
// durable, or the first offset moved by retention. Take a new one after
// each close.
func (l *Log) Changed() <-chan struct{} { return nil }

// Bounds returns the first offset kept and the next offset to be written
// (durable records are [first, next)).
func (l *Log) Bounds() (first, next uint64) { return 0, 0 }

// Stats describe the log now.
func (l *Log) Stats() Stats { return Stats{} }

// SetRetention changes the retention (a policy change) and applies it.
func (l *Log) SetRetention(maxBytes int64, maxAge time.Duration) {}

// Close stops the writer (after writing what was queued) and closes the
// files. Readers fail afterwards.
func (l *Log) Close() error { return errTODO }

// Delete closes the log and removes its directory.
func (l *Log) Delete() error { return errTODO }

// StoreOffset records a named reader's offset (server-side offset
// tracking), durably: written with the next chunk's sync, or within a
// short time when nothing is appended.
func (l *Log) StoreOffset(name string, offset uint64) {}

// TrackedOffset is the offset stored for name.
func (l *Log) TrackedOffset(name string) (uint64, bool) { return 0, false }

// Reader reads the log from an offset onwards, sequentially, with its
// own file handle and a small buffer: its memory does not grow with the
// log. One goroutine at a time.
type Reader struct{}

// NewReader starts a reader at s, reading the records f selects.
func (l *Log) NewReader(s Spec, f *Filter) (*Reader, error) { return nil, errTODO }

// Next returns the next durable record the reader selects, or false when
// it has read every durable record (wait on Changed, then call again). A
// reader whose next offset was deleted by retention moves to the first
// offset kept.
func (r *Reader) Next() (Entry, bool, error) { return Entry{}, false, errTODO }

// Offset is the offset the reader reads next.
func (r *Reader) Offset() uint64 { return 0 }

// Close closes the reader's file.
func (r *Reader) Close() error { return nil }
