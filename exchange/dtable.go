package exchange

import "sync/atomic"

// dtable is a direct exchange's index from routing key to destinations. It
// is a chained hash table whose buckets readers load atomically and whose
// writer (e.mu held) replaces one bucket chain copy-on-write per change.
//
// Why not a persistent trie like the topic children: a direct route is one
// key lookup, and with 10,000 keys a HAMT's three dependent loads cost
// about twice a hash table's one. Every chain a reader can load is
// immutable, so a Route sees either the old or the new destinations for its
// key, never a mix. Growing or shrinking builds a new table, published in a
// new snapshot; the old one is never written again.
type dtable struct {
	mask    uint64
	n       int // keys; e.mu held
	buckets []atomic.Pointer[dentry]
}

type dentry struct {
	next  *dentry
	hash  uint64
	key   string
	dests []Dest // never empty
}

const minBuckets = 8

func newDtable(buckets int) *dtable {
	return &dtable{mask: uint64(buckets - 1), buckets: make([]atomic.Pointer[dentry], buckets)}
}

func (t *dtable) get(key string) []Dest {
	h := hashKey(key)
	for e := t.buckets[h&t.mask].Load(); e != nil; e = e.next {
		if e.hash == h && e.key == key {
			return e.dests
		}
	}
	return nil
}

// put sets key's destinations (none removes the key) and returns the table
// to publish: t itself, or a resized copy once the load leaves [1/8, 1].
// e.mu held.
func (t *dtable) put(key string, dests []Dest) *dtable {
	h := hashKey(key)
	b := &t.buckets[h&t.mask]
	// Rebuild the chain up to the entry for key; the rest is shared.
	var prefix []*dentry
	e := b.Load()
	for ; e != nil && (e.hash != h || e.key != key); e = e.next {
		prefix = append(prefix, e)
	}
	rest := (*dentry)(nil)
	if e != nil {
		rest = e.next
		t.n--
	}
	if len(dests) > 0 {
		rest = &dentry{next: rest, hash: h, key: key, dests: dests}
		t.n++
	}
	for i := len(prefix) - 1; i >= 0; i-- {
		c := *prefix[i]
		c.next = rest
		rest = &c
	}
	b.Store(rest)

	switch size := len(t.buckets); {
	case t.n > size:
		return t.resize(size * 2)
	case t.n < size/8 && size > minBuckets:
		return t.resize(size / 2)
	}
	return t
}

func (t *dtable) resize(buckets int) *dtable {
	c := newDtable(buckets)
	c.n = t.n
	for i := range t.buckets {
		for e := t.buckets[i].Load(); e != nil; e = e.next {
			b := &c.buckets[e.hash&c.mask]
			b.Store(&dentry{next: b.Load(), hash: e.hash, key: e.key, dests: e.dests})
		}
	}
	return c
}
