package exchange

import "sync"

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

// DedupCache is a deduplication cache: at most size entries, each with an
// optional expiry. A lookup is one map access; a full cache drops its
// least recently used entry to make room (the plugin drops an arbitrary
// one). Expired entries are dropped lazily: when looked up, and from the
// cold end of the list as new ones come in.
//
// Locking: d.mu is a leaf (LOCKS.md); routing takes it under vhost.mu.
type DedupCache struct {
	Size int   // x-cache-size
	TTL  int64 // x-cache-ttl in ms, 0 without
	// Owner, when not nil, is the store's name for the cache: its
	// entries are written to the store (a durable exchange's).
	Owner []byte

	mu   sync.Mutex
	m    map[string]*dedupEntry
	root dedupEntry // list sentinel: root.next is the most recently used
}

type dedupEntry struct {
	key        string
	expires    int64 // unix ms, 0 never
	added      int64 // unix ms, orders recovered entries
	prev, next *dedupEntry
}

// NewDedup returns an empty cache of size entries, each kept ttl ms
// (0: until evicted).
func NewDedup(size int, ttl int64) *DedupCache {
	d := &DedupCache{Size: size, TTL: ttl, m: make(map[string]*dedupEntry)}
	d.root.next, d.root.prev = &d.root, &d.root
	return d
}

// Check looks key up at time now (unix ms). A live entry makes the
// message a duplicate (dup true; the entry becomes the most recently
// used). Otherwise key is added, expiring after ttl ms (the message's
// x-cache-ttl header; hasTTL false uses the cache's TTL), and expires
// (0: never) is what the entry holds. gone is called, under d.mu, with
// the key of each entry dropped meanwhile (expired or evicted), so that a
// durable cache can delete its records.
func (d *DedupCache) Check(key []byte, now, ttl int64, hasTTL bool, gone func(key string)) (dup bool, expires int64) {
	if !hasTTL {
		ttl = d.TTL
		hasTTL = ttl > 0
	}
	if hasTTL {
		expires = now + ttl
		if ttl <= 0 {
			// The plugin stores it already expired: it never makes a
			// duplicate, so there is nothing to keep.
			expires = -1
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.m[string(key)]; e != nil {
		if e.expires == 0 || e.expires > now {
			d.unlink(e)
			d.pushFront(e)
			return true, 0
		}
		d.drop(e, gone)
	}
	if expires < 0 {
		return false, -1
	}
	d.add(string(key), expires, now, gone)
	return false, expires
}

// Restore adds a recovered entry (oldest first, so that the list order is
// the order they were added in). It reports false, adding nothing, for an
// entry expired at now; gone is called for entries it evicts, as in
// Check.
func (d *DedupCache) Restore(key string, expires, added, now int64, gone func(key string)) bool {
	if expires != 0 && expires <= now {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.m[key]; ok {
		return true
	}
	d.add(key, expires, now, gone)
	d.root.next.added = added
	return true
}

// Len is the number of entries (expired ones not yet dropped included).
func (d *DedupCache) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// add inserts key as the most recently used entry, dropping expired
// entries from the cold end and, if still full, the least recently used.
// d.mu held.
func (d *DedupCache) add(key string, expires, now int64, gone func(string)) {
	for i := 0; i < 2 && d.root.prev != &d.root; i++ {
		if t := d.root.prev; t.expires != 0 && t.expires <= now {
			d.drop(t, gone)
			continue
		}
		break
	}
	for len(d.m) >= d.Size && d.root.prev != &d.root {
		d.drop(d.root.prev, gone)
	}
	e := &dedupEntry{key: key, expires: expires, added: now}
	d.m[key] = e
	d.pushFront(e)
}

// drop removes e. d.mu held.
func (d *DedupCache) drop(e *dedupEntry, gone func(string)) {
	d.unlink(e)
	delete(d.m, e.key)
	if gone != nil {
		gone(e.key)
	}
}

func (d *DedupCache) unlink(e *dedupEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (d *DedupCache) pushFront(e *dedupEntry) {
	e.prev = &d.root
	e.next = d.root.next
	d.root.next.prev = e
	d.root.next = e
}
