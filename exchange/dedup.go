package exchange

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
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
// The entries live in at most Size reused slots. Looking an id up is one
// map access (by a 64-bit hash of the id; the slot's id is compared, so a
// collision is a miss, never a false duplicate); an id of up to inlineKey
// bytes costs no allocation.
//
// A durable cache (Owner set) is stored as a log of segments: the
// entries added between two group commits are appended to a buffer,
// which the store's committer takes once per commit (Flush) and writes as
// one record, numbered in sequence. Each segment counts its entries still
// in the cache; a segment whose last entry left is deleted. So a commit
// costs one write for all the ids added since the last, whatever their
// number, and the store never holds more segments than the cache has
// entries. Recovery replays the segments in order (Restore): the newest
// Size ids that have not expired.
//
// Locking: d.mu is a leaf (LOCKS.md); routing takes it under vhost.mu.
type DedupCache struct {
	Size int   // x-cache-size (d.mu held: a policy may change it)
	TTL  int64 // x-cache-ttl in ms, 0 without (d.mu held)
	// Owner, when not nil, is the store's name for the cache: its
	// entries are written to the store (a durable exchange's).
	Owner []byte
	// Unregister, if set, is called by Close (the owner's hook to stop
	// flushing this cache).
	Unregister func()
	// Memory, if set, is the broker's memory figure (what its memory
	// alarm watches): the cache counts its entries into it, since
	// x-cache-size is the client's to choose.
	Memory *atomic.Int64
	held   int64 // bytes counted into Memory (d.mu held)
	// Dropped counts the duplicates found (metrics, management API).
	Dropped atomic.Int64

	mu    sync.Mutex
	seed  maphash.Seed
	m     map[uint64]int32 // id hash -> slot
	slots []dslot
	long  map[int32]string // ids longer than inlineKey, by slot
	free  []int32          // unused slots below len(slots)
	head  int32            // most recently used, -1 when empty
	tail  int32            // least recently used

	// The log of a durable cache.
	seg    uint64           // the segment being filled, written at the next Flush
	live   map[uint64]int32 // entries in the cache, per segment
	pend   []byte           // the entries of segment seg (AppendEntry)
	dead   []uint64         // written segments left without entries: to delete
	closed bool             // the exchange is gone: Flush writes nothing
	clear  bool             // ClearFirst: the next Flush clears first
	// waits are what waits for a held entry's Release or Abandon (a
	// duplicate's confirm), by the entry's ticket.
	waits map[DedupTicket][]func(error)
}

// dslot is one entry; it holds no pointers, so the garbage collector
// never scans a cache's slots.
type dslot struct {
	hash       uint64
	expires    int64 // unix ms, 0 never
	added      int64 // unix ms
	seg        uint64
	gen        uint32 // bumped each time the slot is filled (DedupTicket)
	held       bool   // Hold added it and it is not released: not in the log
	nolog      bool   // abandoned (Abandon): kept in memory, never logged
	prev, next int32
	klen       int32 // -1: slot unused
	key        [inlineKey]byte
}

// NewDedup returns an empty cache of size entries (at least one), each
// kept ttl ms (0: until evicted); owner, if not nil, makes it durable
// (see Owner).
func NewDedup(size int, ttl int64, owner []byte) *DedupCache {
	d := &DedupCache{Size: max(size, 1), TTL: ttl, Owner: owner, seed: maphash.MakeSeed(), m: make(map[uint64]int32),
		head: -1, tail: -1}
	if owner != nil {
		d.live = make(map[uint64]int32)
	}
	return d
}

// Check looks key up at time now (unix ms). A live entry makes the
// message a duplicate (dup true; the entry becomes the most recently
// used). Otherwise key is added, expiring after ttl ms (the message's
// x-cache-ttl header; hasTTL false uses the cache's TTL; 0: never).
// now is a clock truncated to the millisecond, so the message came at
// some point within [now, now+1): the entry lives until now+ttl+1, at
// least ttl ms whatever the fraction was, never less. A
// TTL of 0 or less adds nothing (the plugin stores such an entry already
// expired), but the id is still looked up.
func (d *DedupCache) Check(key []byte, now, ttl int64, hasTTL bool) (dup bool) {
	dup, _ = d.check(key, now, ttl, hasTTL, false)
	return dup
}

// check is Check, and Hold when hold is set.
func (d *DedupCache) check(key []byte, now, ttl int64, hasTTL, hold bool) (dup bool, t DedupTicket) {
	h := maphash.Bytes(d.seed, key)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !hasTTL {
		ttl = d.TTL
		hasTTL = ttl > 0
	}
	var expires int64
	if hasTTL {
		expires = now + ttl + 1
	}
	if i, ok := d.m[h]; ok {
		s := &d.slots[i]
		if d.sameKey(i, key) && (s.expires == 0 || s.expires > now) {
			d.unlink(i)
			d.pushFront(i)
			if s.held {
				t = DedupTicket{slot: i, gen: s.gen} // the original's, for Wait
			}
			return true, t
		}
		d.drop(i) // expired, or a hash collision: the new id takes over
	}
	if hasTTL && ttl <= 0 {
		// Looked up as any id (a message's own x-cache-ttl cannot let
		// a duplicate through, as the plugin's Cache.insert looks the
		// id up first), and not added: it would be expired already.
		return false, t
	}
	i := d.add(h, key, expires, now)
	switch {
	case d.Owner == nil:
	case hold:
		d.slots[i].held = true
		t = DedupTicket{slot: i, gen: d.slots[i].gen}
	default:
		d.logEntry(i)
	}
	return false, t
}

// AppendEntry encodes one stored entry: expires(8) added(8) id length(2)
// id, all big-endian.
func AppendEntry(b, key []byte, expires, added int64) []byte {
	key = key[:min(len(key), 1<<16-1)]
	b = append(b, byte(uint64(expires)>>56), byte(uint64(expires)>>48), byte(uint64(expires)>>40), byte(uint64(expires)>>32),
		byte(uint64(expires)>>24), byte(uint64(expires)>>16), byte(uint64(expires)>>8), byte(expires))
	b = append(b, byte(uint64(added)>>56), byte(uint64(added)>>48), byte(uint64(added)>>40), byte(uint64(added)>>32),
		byte(uint64(added)>>24), byte(uint64(added)>>16), byte(uint64(added)>>8), byte(added))
	b = append(b, byte(len(key)>>8), byte(len(key)))
	return append(b, key...)
}

// ParseSegment calls fn with each entry of a stored segment; it reports
// false for a malformed one (fn has seen the entries before the fault).
func ParseSegment(b []byte, fn func(key []byte, expires, added int64)) bool {
	be := func(p []byte) int64 {
		var v uint64
		for _, c := range p[:8] {
			v = v<<8 | uint64(c)
		}
		return int64(v)
	}
	for len(b) > 0 {
		if len(b) < 18 {
			return false
		}
		n := int(b[16])<<8 | int(b[17])
		if len(b) < 18+n {
			return false
		}
		fn(b[18:18+n], be(b), be(b[8:]))
		b = b[18+n:]
	}
	return true
}

// Flush hands the entries added since the last Flush to write, as the
// record of segment seg, with the segments to delete; the store's
// committer calls it once per group commit, so that a message's
// confirm, which waits for that commit, finds its id stored. Nothing is
// handed over once the cache is closed. wipe (may be nil) is called
// first when ClearFirst asked for it.
func (d *DedupCache) Flush(wipe func(), write func(seg uint64, entries []byte, deleted []uint64)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if d.clear {
		d.clear = false
		if wipe != nil {
			wipe()
		}
	}
	if len(d.pend) == 0 && len(d.dead) == 0 {
		return
	}
	var pend []byte
	if len(d.pend) > 0 {
		if d.live[d.seg] > 0 { // else every entry already left: nothing to keep
			pend = d.pend
		}
		d.pend = nil
		d.seg++
	}
	write(d.seg-1, pend, d.dead)
	d.dead = nil
}

// SetOptions changes the size and the TTL (of entries added from now on;
// 0: none), as a policy does; a smaller size drops the least recently
// used entries at once.
func (d *DedupCache) SetOptions(size int, ttl int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Size, d.TTL = max(size, 1), ttl
	for len(d.m) > d.Size && d.tail >= 0 {
		d.drop(d.tail)
	}
}

// Close stops Flush for good: the exchange is deleted (and its records
// with it).
func (d *DedupCache) Close() {
	d.mu.Lock()
	d.closed = true
	d.count(-d.held)
	d.mu.Unlock()
	if d.Unregister != nil {
		d.Unregister()
	}
}

// Restore replays one recovered segment into the cache (segments in
// order, each once): its entries that have not expired at now are added
// as if just published, evicting the oldest when full. It returns the
// segments left without entries, to delete (seg itself among them when
// none of its entries is kept); the next segment written follows seg.
func (d *DedupCache) Restore(seg uint64, entries []byte, now int64) (dead []uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live == nil {
		d.live = make(map[uint64]int32)
	}
	d.seg = seg // its entries' drops do not mark it dead: it is counted below
	ok = ParseSegment(entries, func(key []byte, expires, added int64) {
		if expires != 0 && expires <= now {
			return
		}
		h := maphash.Bytes(d.seed, key)
		if j, found := d.m[h]; found && d.sameKey(j, key) {
			d.drop(j) // the same id again (an expired one, added anew)
		}
		i := d.add(h, key, expires, added)
		d.slots[i].seg = seg
		d.live[seg]++
	})
	if d.live[seg] == 0 {
		delete(d.live, seg)
		d.dead = append(d.dead, seg)
	}
	d.seg = seg + 1
	dead, d.dead = d.dead, nil
	return dead, ok
}

// Len is the number of entries (expired ones not yet dropped included).
func (d *DedupCache) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// add inserts key as the most recently used entry, in a free slot or a
// new one, dropping expired entries at the cold end first, then, when
// full, the least recently used. It returns the slot. d.mu held.
func (d *DedupCache) add(h uint64, key []byte, expires, now int64) int32 {
	for n := 0; n < 2 && d.tail >= 0; n++ {
		if t := &d.slots[d.tail]; t.expires != 0 && t.expires <= now {
			d.drop(d.tail)
			continue
		}
		break
	}
	for len(d.m) >= d.Size && d.tail >= 0 {
		d.drop(d.tail) // full: the least recently used goes
	}
	var i int32
	if n := len(d.free); n > 0 {
		i = d.free[n-1]
		d.free = d.free[:n-1]
	} else {
		d.slots = append(d.slots, dslot{})
		i = int32(len(d.slots) - 1)
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
	s.held, s.nolog = false, false
	if s.gen++; s.gen == 0 {
		s.gen = 1 // 0 is the zero ticket's
	}
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
	d.count(entryBytes(len(key)))
}

// entryBytes is what an entry of an id of n bytes holds: its slot, its
// map entry and, past inlineKey, its id.
func entryBytes(n int) int64 {
	b := int64(unsafe.Sizeof(dslot{})) + 16
	if n > inlineKey {
		b += int64(n) + 16
	}
	return b
}

// count adds n bytes to the cache's memory figure. d.mu held.
func (d *DedupCache) count(n int64) {
	if d.closed && n > 0 {
		return
	}
	d.held += n
	if d.Memory != nil {
		d.Memory.Add(n)
	}
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
	if !d.closed {
		d.count(-entryBytes(int(s.klen)))
	}
	s.klen = -1
	d.free = append(d.free, i)
	if s.held || s.nolog {
		s.held, s.nolog = false, false // never in the log
	} else if d.live != nil {
		if n := d.live[s.seg] - 1; n > 0 {
			d.live[s.seg] = n
		} else {
			delete(d.live, s.seg)
			if s.seg != d.seg { // the segment being filled is not written yet
				d.dead = append(d.dead, s.seg)
			}
		}
	}
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
