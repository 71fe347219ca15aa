package exchange

import (
	"hash/maphash"
	"math/bits"
	"slices"
)

// seed keys every pmap in the process. Hashes are never persisted, so a
// per-process seed is enough, and it keeps clients from choosing routing keys
// that pile into one branch.
var seed = maphash.MakeSeed()

// pmap is a persistent hash array mapped trie keyed by string. set and del
// return a new map sharing every untouched node with the old one: a writer
// copies O(log32 n) small nodes per change instead of the whole table, and
// readers still holding the old version see it unchanged. Routing snapshots
// use it where a Go map would have to be cloned on every Bind.
//
// The zero pmap is empty and ready to use.
type pmap[V any] struct {
	root pnode[V]
	n    int
}

// pnode is one trie level, held by value in its parent slot (or the pmap),
// so a lookup touches one slots array per level rather than a node header
// and then its slots. Below hashBits of depth every hash bit is spent, so
// such a node is a plain collision list and bitmap is unused.
type pnode[V any] struct {
	bitmap uint32     // bit c set: slots holds the entry for chunk c
	slots  []pslot[V] // in chunk order; empty means an empty node
}

// pslot is either a sub-node (len(sub.slots) > 0) or one entry.
type pslot[V any] struct {
	sub  pnode[V]
	hash uint64
	key  string
	val  V
}

const (
	chunkBits = 5
	chunkMask = 1<<chunkBits - 1
	hashBits  = 64
)

func hashKey(key string) uint64 { return maphash.String(seed, key) }

func (m pmap[V]) len() int { return m.n }

func (m *pmap[V]) get(key string) (V, bool) {
	switch m.n {
	case 0:
		// Skip hashing: most topic trie nodes have no literal children,
		// and most of the rest have one.
		var zero V
		return zero, false
	case 1:
		// del folds single entries up to the root, so this is a leaf.
		if s := &m.root.slots[0]; len(s.sub.slots) == 0 {
			if s.key == key {
				return s.val, true
			}
			var zero V
			return zero, false
		}
	}
	return m.getHash(hashKey(key), key)
}

func (m *pmap[V]) getHash(h uint64, key string) (v V, ok bool) {
	n := &m.root
	for shift := uint(0); ; shift += chunkBits {
		if shift >= hashBits {
			for i := range n.slots {
				if n.slots[i].key == key {
					return n.slots[i].val, true
				}
			}
			return v, false
		}
		bit := uint32(1) << (h >> shift & chunkMask)
		if n.bitmap&bit == 0 {
			return v, false
		}
		s := &n.slots[bits.OnesCount32(n.bitmap&(bit-1))]
		if len(s.sub.slots) > 0 {
			n = &s.sub
			continue
		}
		if s.hash == h && s.key == key {
			return s.val, true
		}
		return v, false
	}
}

func (m pmap[V]) set(key string, v V) pmap[V] { return m.setHash(hashKey(key), key, v) }

func (m pmap[V]) setHash(h uint64, key string, v V) pmap[V] {
	root, added := m.root.set(0, h, key, v)
	if added {
		m.n++
	}
	return pmap[V]{root: root, n: m.n}
}

func (m pmap[V]) del(key string) pmap[V] { return m.delHash(hashKey(key), key) }

func (m pmap[V]) delHash(h uint64, key string) pmap[V] {
	root, removed := m.root.del(0, h, key)
	if !removed {
		return m
	}
	return pmap[V]{root: root, n: m.n - 1}
}

// each calls f for every entry, in no particular order.
func (m pmap[V]) each(f func(key string, v V)) { m.root.each(f) }

func (n pnode[V]) each(f func(string, V)) {
	for i := range n.slots {
		if s := &n.slots[i]; len(s.sub.slots) > 0 {
			s.sub.each(f)
		} else {
			f(s.key, s.val)
		}
	}
}

// set returns a copy of n holding key, and whether the key is new. n's
// slots are never written: older versions may still be read.
func (n pnode[V]) set(shift uint, h uint64, key string, v V) (pnode[V], bool) {
	leaf := pslot[V]{hash: h, key: key, val: v}
	if shift >= hashBits {
		for i := range n.slots {
			if n.slots[i].key == key {
				slots := slices.Clone(n.slots)
				slots[i].val = v
				return pnode[V]{slots: slots}, false
			}
		}
		return pnode[V]{slots: append(slices.Clip(n.slots), leaf)}, true
	}
	bit := uint32(1) << (h >> shift & chunkMask)
	i := bits.OnesCount32(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		return pnode[V]{bitmap: n.bitmap | bit, slots: slices.Insert(slices.Clip(n.slots), i, leaf)}, true
	}
	c := pnode[V]{bitmap: n.bitmap, slots: slices.Clone(n.slots)}
	s := &c.slots[i]
	switch {
	case len(s.sub.slots) > 0:
		sub, added := s.sub.set(shift+chunkBits, h, key, v)
		s.sub = sub
		return c, added
	case s.hash == h && s.key == key:
		s.val = v
		return c, false
	default:
		// Two keys share this chunk: push both one level down.
		sub, _ := pnode[V]{}.set(shift+chunkBits, s.hash, s.key, s.val)
		sub, _ = sub.set(shift+chunkBits, h, key, v)
		*s = pslot[V]{sub: sub}
		return c, true
	}
}

// del returns a copy of n without key (empty if that empties it), and
// whether key was there. A sub-node left with a single entry is folded into
// its parent, so the trie stays as shallow as its contents need.
func (n pnode[V]) del(shift uint, h uint64, key string) (pnode[V], bool) {
	if shift >= hashBits {
		for i := range n.slots {
			if n.slots[i].key == key {
				return pnode[V]{slots: slices.Delete(slices.Clone(n.slots), i, i+1)}, true
			}
		}
		return n, false
	}
	bit := uint32(1) << (h >> shift & chunkMask)
	if n.bitmap&bit == 0 {
		return n, false
	}
	i := bits.OnesCount32(n.bitmap & (bit - 1))
	s := &n.slots[i]
	if len(s.sub.slots) == 0 {
		if s.hash != h || s.key != key {
			return n, false
		}
		return pnode[V]{bitmap: n.bitmap &^ bit, slots: slices.Delete(slices.Clone(n.slots), i, i+1)}, true
	}
	sub, removed := s.sub.del(shift+chunkBits, h, key)
	if !removed {
		return n, false
	}
	c := pnode[V]{bitmap: n.bitmap, slots: slices.Clone(n.slots)}
	switch {
	case len(sub.slots) == 0:
		c.bitmap &^= bit
		c.slots = slices.Delete(c.slots, i, i+1)
	case len(sub.slots) == 1 && len(sub.slots[0].sub.slots) == 0:
		c.slots[i] = sub.slots[0]
	default:
		c.slots[i].sub = sub
	}
	return c, true
}
