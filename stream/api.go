package stream

import (
	"time"

	"go.uber.org/zap"
)

// Options configure a Log.
type Options struct {
	// MaxSegmentBytes is the size at which a segment is closed and a new
	// one started (x-stream-max-segment-size-bytes; 0: 500,000,000,
	// RabbitMQ's default).
	MaxSegmentBytes int64
	// MaxBytes and MaxAge are the retention (x-max-length-bytes,
	// x-max-age); 0: none.
	MaxBytes int64
	MaxAge   time.Duration
	// FilterSize is the size in bytes of each chunk's Bloom filter
	// (x-stream-filter-size-bytes, 16-255; 0: 16).
	FilterSize int
	// NoSync skips fsync (tests of other things only).
	NoSync bool
	Log    *zap.Logger
	// Seal, if set, encrypts every chunk written (crypt.go); chunks
	// written sealed cannot be read without it.
	Seal Sealer
}

// Record is what Append takes.
type Record struct {
	Timestamp int64  // unix milliseconds
	Filter    string // x-stream-filter-value, or ""
	Data      []byte // opaque
}

// Entry is a record read back. Data is valid until the reader's next
// call.
type Entry struct {
	Offset    uint64
	Timestamp int64
	Filter    string
	Data      []byte
}

// SpecKind says where a reader starts.
type SpecKind uint8

const (
	First     SpecKind = iota // the first offset still kept
	Last                      // the first offset of the last chunk
	Next                      // the next offset to be written
	Offset                    // Spec.Offset (clamped to [first, next])
	Timestamp                 // the first record with timestamp >= Spec.Timestamp (ms)
)

// Spec is a reader's starting point (x-stream-offset).
type Spec struct {
	Kind      SpecKind
	Offset    uint64
	Timestamp int64 // unix milliseconds
}

// Filter selects records by their filter value (x-stream-filter): a
// record whose Filter is one of Values, or (MatchUnfiltered) has none.
// A nil *Filter selects every record.
type Filter struct {
	Values          []string
	MatchUnfiltered bool
}

// Stats describe a Log.
type Stats struct {
	First, Next     uint64 // offsets: first kept, next to write (Next-First records)
	Segments        int
	Bytes           int64 // on disk, segments and indexes
	FirstTimestamp  int64 // unix ms of the first record kept, 0 if none
	LastTimestamp   int64
	Chunks          uint64 // written since Open
	Appended        uint64 // records written since Open
	SegmentsDeleted uint64 // by retention since Open
}
