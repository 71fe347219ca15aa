package exchange

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// Deduplication, as the rabbitmq-message-deduplication plugin does it
// (noxdafox/rabbitmq-message-deduplication, README and
// rabbit_message_deduplication_exchange.ex): an exchange of type
// x-message-deduplication routes like fanout, but a message whose
// x-deduplication-header value was seen within the window is not routed
// at all. The window is a cache bounded in entries (x-cache-size) and,
// optionally, in time (x-cache-ttl, or the message's own x-cache-ttl
// header).

// Header names the plugin reads from a message. The id's cache key is
// amqp.FieldKey of the header's value.
const (
	DedupHeader   = "x-deduplication-header"
	DedupTTLField = "x-cache-ttl"
)

// inlineKey is the longest id a slot holds in place; longer ones are kept
// in a side map (one allocation each).
const inlineKey = 48

// DedupCache is a deduplication cache: at most Size entries, each with
// an optional expiry. A full cache drops its least recently used entry
// to make room (the plugin drops an arbitrary one). Expired entries are
// dropped lazily: when looked up, and from the cold end of the list as
// new ones come in.
//
// The entries live in slots, numbered from 0 to Size-1, that are reused:
// a durable cache stores each entry under its slot number, so a new entry
// overwrites the record of the one it replaces, and the store holds at
// most Size records without deleting any (expired ones are skipped when
// recovered). Looking an id up is one map access (by a 64-bit hash of
// the id; the slot's id is compared, so a collision is a miss, never a
// false duplicate); an id of up to inlineKey bytes costs no allocation.
//
// Locking: d.mu is a leaf (LOCKS.md); routing takes it under vhost.mu.
type DedupCache struct {
	Size int   // x-cache-size
	TTL  int64 // x-cache-ttl in ms, 0 without
	// Owner, when not nil, is the store's name for the cache: its
	// entries are written to the store (a durable exchange's).
	Owner []byte

	mu    sync.Mutex
	seed  maphash.Seed
	m     map[uint64]int32 // id hash -> slot
	slots []dslot
	long  map[int32]string // ids longer than inlineKey, by slot
	free  []int32          // unused slots below len(slots)
	head  int32            // most recently used, -1 when empty
	tail  int32            // least recently used
}

// dslot is one entry; it holds no pointers, so the garbage collector
// never scans a cache's slots.
type dslot struct {
	hash       uint64
	expires    int64 // unix ms, 0 never
	added      int64 // unix ms
	prev, next int32
	klen       int32 // -1: slot unused
	key        [inlineKey]byte
}

// NewDedup returns an empty cache of size entries (at least one), each
// kept ttl ms (0: until evicted).
func NewDedup(size int, ttl int64) *DedupCache {
	return &DedupCache{Size: max(size, 1), TTL: ttl, seed: maphash.MakeSeed(), m: make(map[uint64]int32),
		head: -1, tail: -1}
}

// Check looks key up at time now (unix ms). A live entry makes the
// message a duplicate (dup true; the entry becomes the most recently
// used). Otherwise key is added, expiring after ttl ms (the message's
// x-cache-ttl header; hasTTL false uses the cache's TTL), in slot
// (which a durable cache stores it under) with expires (0: never). A
// TTL of 0 or less adds nothing (slot -1): the plugin stores such an
// entry already expired.
func (d *DedupCache) Check(key []byte, now, ttl int64, hasTTL bool) (dup bool, slot int32, expires int64) {
	if !hasTTL {
		ttl = d.TTL
		hasTTL = ttl > 0
	}
	if hasTTL {
		if ttl <= 0 {
			return false, -1, 0
		}
		expires = now + ttl
	}
	h := maphash.Bytes(d.seed, key)
	d.mu.Lock()
	defer d.mu.Unlock()
	if i, ok := d.m[h]; ok {
		s := &d.slots[i]
		if d.sameKey(i, key) && (s.expires == 0 || s.expires > now) {
			d.unlink(i)
			d.pushFront(i)
			return true, 0, 0
		}
		d.drop(i) // expired, or a hash collision: the new id takes over
	}
	return false, d.add(h, key, expires, now), expires
}

// Entry is a stored entry, for Restore.
type Entry struct {
	Slot           int32
	Key            []byte
	Expires, Added int64
}

// Restore fills an empty cache with recovered entries, oldest first (the
// list's order is the order they were added in). Entries expired at now,
// or whose slot is beyond the size, are skipped.
func (d *DedupCache) Restore(es []Entry, now int64) (restored int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	top := int32(-1)
	for _, e := range es {
		if e.Slot >= 0 && int(e.Slot) < d.Size {
			top = max(top, e.Slot)
		}
	}
	d.slots = make([]dslot, top+1)
	for i := range d.slots {
		d.slots[i].klen = -1
	}
	for _, e := range es {
		if e.Slot < 0 || int(e.Slot) >= d.Size || (e.Expires != 0 && e.Expires <= now) {
			continue
		}
		h := maphash.Bytes(d.seed, e.Key)
		if j, ok := d.m[h]; ok {
			d.drop(j) // the same id twice: the later one wins
			d.free = d.free[:0]
		}
		d.fill(e.Slot, h, e.Key, e.Expires, e.Added)
		restored++
	}
	for i := range d.slots {
		if d.slots[i].klen < 0 {
			d.free = append(d.free, int32(i))
		}
	}
	return restored
}

// Len is the number of entries (expired ones not yet dropped included).
func (d *DedupCache) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// add inserts key as the most recently used entry, in a free slot, a new
// one, or the least recently used one's; expired entries at the cold end
// go first. It returns the slot. d.mu held.
func (d *DedupCache) add(h uint64, key []byte, expires, now int64) int32 {
	for n := 0; n < 2 && d.tail >= 0; n++ {
		if t := &d.slots[d.tail]; t.expires != 0 && t.expires <= now {
			d.drop(d.tail)
			continue
		}
		break
	}
	var i int32
	switch {
	case len(d.free) > 0:
		i = d.free[len(d.free)-1]
		d.free = d.free[:len(d.free)-1]
	case len(d.slots) < d.Size:
		d.slots = append(d.slots, dslot{})
		i = int32(len(d.slots) - 1)
	default:
		i = d.tail
		d.drop(i)
		d.free = d.free[:len(d.free)-1] // drop freed it: take it back
	}
	d.fill(i, h, key, expires, now)
	return i
}

// fill puts an entry in unused slot i, as the most recently used. d.mu
// held.
func (d *DedupCache) fill(i int32, h uint64, key []byte, expires, added int64) {
	s := &d.slots[i]
	s.hash, s.expires, s.added = h, expires, added
	s.klen = int32(len(key))
	if len(key) > inlineKey {
		if d.long == nil {
			d.long = make(map[int32]string)
		}
		d.long[i] = string(key)
	} else {
		copy(s.key[:], key)
	}
	d.m[h] = i
	d.pushFront(i)
}

// drop frees slot i. d.mu held.
func (d *DedupCache) drop(i int32) {
	s := &d.slots[i]
	d.unlink(i)
	if d.m[s.hash] == i {
		delete(d.m, s.hash)
	}
	if s.klen > inlineKey {
		delete(d.long, i)
	}
	s.klen = -1
	d.free = append(d.free, i)
}

func (d *DedupCache) unlink(i int32) {
	s := &d.slots[i]
	if s.prev >= 0 {
		d.slots[s.prev].next = s.next
	} else {
		d.head = s.next
	}
	if s.next >= 0 {
		d.slots[s.next].prev = s.prev
	} else {
		d.tail = s.prev
	}
	s.prev, s.next = -1, -1
}

func (d *DedupCache) pushFront(i int32) {
	s := &d.slots[i]
	s.prev, s.next = -1, d.head
	if d.head >= 0 {
		d.slots[d.head].prev = i
	}
	d.head = i
	if d.tail < 0 {
		d.tail = i
	}
}

// sameKey reports whether slot i holds key. d.mu held.
func (d *DedupCache) sameKey(i int32, key []byte) bool {
	s := &d.slots[i]
	if s.klen > inlineKey {
		return d.long[i] == string(key)
	}
	return bytes.Equal(s.key[:s.klen], key)
}
