package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxKeySize is the longest key the store takes: Badger's limit
// (badger/v4 txn.go, Txn.modify: maxKeySize = 65000, the uint16 of its
// table header less room for a prefix and the version). A batch with a
// longer key is refused whole (ErrKeyTooLarge), and only that batch: see
// Batch.check.
const MaxKeySize = 65000

// ErrKeyTooLarge refuses a batch holding a key over MaxKeySize;
// ErrValueTooLarge one holding a value over a value-log file (Badger's
// other per-entry limit, Txn.modify).
var (
	ErrKeyTooLarge   = errors.New("persist: key too large")
	ErrValueTooLarge = errors.New("persist: value too large")
)

// checkEntry is Badger's per-entry check (Txn.modify), made before
// anything of a batch is written: an entry Badger would refuse fails its
// own batch, never the group commit it shares with others.
// maxVal is the store's value-log file size, Badger's bound on a value.
func checkEntry(key, val []byte, maxVal int64) error {
	if len(key) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLarge, len(key), MaxKeySize)
	}
	if int64(len(val)) > maxVal {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrValueTooLarge, len(val), maxVal)
	}
	return nil
}

// Key prefixes. Every key is a one-byte prefix and big-endian fixed-width
// integers or length-prefixed strings, so a prefix scan returns records in
// order: a queue's entries in sequence order.
const (
	prefixDef       = 'd' // 'd' kind name                   → definition (exchange, queue, binding)
	prefixMessage   = 'm' // 'm' id(8)                       → message record
	prefixEntry     = 'e' // 'e' queue(8) seq(8)             → entry: message id, flags, delivery count
	prefixDelivered = 'w' // 'w' queue(8)                    → highest sequence ever delivered
	prefixDedup     = 'u' // 'u' kind owner seg(8)          → deduplication cache log segment (entries)
	prefixDelayed   = 'y' // 'y' name due(8) seq(8)          → delayed message: flags(1), record
	prefixUnused    = 'z' // 'z' seq(8) → filler, written expired to fill the memtable (gc.go)
	// 'h' is reserved for retry holds; they live in the entry instead
	// (entryHeld), so that deleting an entry drops its hold with it.
)

// Definition kinds (the byte after prefixDef). The store treats every
// definition alike; the kinds are listed here so that one file names every
// key the store holds.
const (
	DefExchange = 'x' // vhost, exchange               → exchange (vhost)
	DefQueue    = 'q' // vhost, queue                  → queue (vhost)
	DefBinding  = 'b' // vhost, source, destination... → binding (vhost)
	DefVHost    = 'v' // vhost                         → description, tags, limits (broker)
	DefUser     = 'u' // user                          → password hash, tags (broker)
	DefPerm     = 'p' // vhost, user                   → configure, write, read (broker)
	DefTopic    = 't' // vhost, user, exchange         → topic permissions (broker)
	DefPolicy   = 'l' // vhost, policy                 → policy (broker)
	DefOpPolicy = 'o' // vhost, policy                 → operator policy (broker)
	DefParam    = 'r' // vhost, component, name        → runtime parameter's value, JSON (broker)
)

// Deduplication cache owners (the byte after prefixDedup).
const (
	DedupExchange = 'x'
)

// dedupKey is 'u' kind owner seg: one segment of an owner's
// deduplication cache log.
func dedupKey(kind byte, owner []byte, seg uint64) []byte {
	return binary.BigEndian.AppendUint64(dedupPrefix(kind, owner), seg)
}

// dedupPrefix is 'u' kind owner, the prefix of an owner's segments. owner is the registry's self-delimiting
// name (vhost and exchange, each length prefixed), so one owner's prefix
// never covers another's entries.
func dedupPrefix(kind byte, owner []byte) []byte {
	k := make([]byte, 0, 2+len(owner)+8)
	k = append(k, prefixDedup, kind)
	return append(k, owner...)
}

// defKey is 'd' kind name; name is opaque to the store (the registry
// builds it, e.g. vhost and exchange name for a binding).
func defKey(kind byte, name []byte) []byte {
	k := make([]byte, 0, 2+len(name))
	k = append(k, prefixDef, kind)
	return append(k, name...)
}

func messageKey(id uint64) []byte {
	var k [9]byte
	k[0] = prefixMessage
	binary.BigEndian.PutUint64(k[1:], id)
	return k[:]
}

func entryKey(queue, seq uint64) []byte {
	var k [17]byte
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:], queue)
	binary.BigEndian.PutUint64(k[9:], seq)
	return k[:]
}

func entryPrefix(queue uint64) []byte {
	var k [9]byte
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:], queue)
	return k[:]
}

func deliveredKey(queue uint64) []byte {
	var k [9]byte
	k[0] = prefixDelivered
	binary.BigEndian.PutUint64(k[1:], queue)
	return k[:]
}

// Entry flags.
const (
	entryShared    = 1 << iota // the message is referenced by entries of other queues
	entryTransient             // paged out transient message: dropped at recovery
	entryRedelivered
	entryInline // the message record follows the entry's header
	entryHeld   // held back for a retry delay: the header ends with the unix nanos it is due
)

// entryValue is message id(8), flags(1), delivery count(4).
func entryValue(msg uint64, flags byte, count uint32) []byte {
	var v [13]byte
	binary.BigEndian.PutUint64(v[:], msg)
	v[8] = flags
	binary.BigEndian.PutUint32(v[9:], count)
	return v[:]
}

// entryValueHeld is entryValue with entryHeld and the time the hold is
// due (8): 21 bytes.
func entryValueHeld(msg uint64, flags byte, count uint32, until int64) []byte {
	v := make([]byte, 13, 21)
	binary.BigEndian.PutUint64(v, msg)
	v[8] = flags | entryHeld
	binary.BigEndian.PutUint32(v[9:], count)
	return binary.BigEndian.AppendUint64(v, uint64(until))
}

// entryHeader is the length of an entry's header: what precedes an inline
// record.
func entryHeader(flags byte) int {
	if flags&entryHeld != 0 {
		return 21
	}
	return 13
}

// entryUntil is when a held entry's hold is due (unix nanos), or 0.
func entryUntil(v []byte, flags byte) int64 {
	if flags&entryHeld == 0 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v[13:]))
}

func parseEntry(v []byte) (msg uint64, flags byte, count uint32, ok bool) {
	if len(v) < 13 {
		return 0, 0, 0, false
	}
	h := entryHeader(v[8])
	if len(v) < h || (len(v) > h) != (v[8]&entryInline != 0) {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint64(v), v[8], binary.BigEndian.Uint32(v[9:]), true
}

// delayedKey is 'y' name due seq. name is the registry's key for the
// delayed exchange (self-delimiting: no exchange's name is a prefix of
// another's), so 'y' name is the prefix of that exchange's messages, in
// due order; the name is what precedes the fixed 16-byte tail.
func delayedKey(name []byte, due int64, seq uint64) []byte {
	k := make([]byte, 0, 1+len(name)+16)
	k = append(k, prefixDelayed)
	k = append(k, name...)
	k = binary.BigEndian.AppendUint64(k, uint64(due))
	return binary.BigEndian.AppendUint64(k, seq)
}

func delayedPrefix(name []byte) []byte {
	return append([]byte{prefixDelayed}, name...)
}

// Delayed-message flags (the first byte of the value).
const delayedTransient = 1 // dropped at recovery
