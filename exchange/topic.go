package exchange

import (
	"slices"
	"strings"
)

// Topic keys are split on '.' with empty words kept ("a..b" is three words),
// except that the empty key has no words at all: that is how RabbitMQ splits
// (rabbit_db_topic_exchange split_topic_key), and it is why "*" does not
// match the empty routing key while "#" and "" do.
//
// A position p in a key is the byte offset where the next word starts; any
// p > len(key) means no words are left. Walking keys by offset keeps Route
// from allocating a []string per message.

// firstPos is the position of the first word of key.
func firstPos(key string) int {
	if key == "" {
		return 1
	}
	return 0
}

// word returns the word starting at p (p <= len(key)) and the position of
// the one after it.
func word(key string, p int) (string, int) {
	if i := strings.IndexByte(key[p:], '.'); i >= 0 {
		return key[p : p+i], p + i + 1
	}
	return key[p:], len(key) + 1
}

func countWords(key string) int {
	if key == "" {
		return 0
	}
	return strings.Count(key, ".") + 1
}

// tnode is a node of the topic trie: one per distinct binding-key prefix, so
// routing cost follows the length of the key and the number of wildcard
// branches it meets, not the number of bindings. Nodes are immutable once
// published; writers copy the path they change.
type tnode struct {
	lit   pmap[*tnode] // children by literal word
	star  *tnode       // child for "*"
	hash  *tnode       // child for "#"
	dests []Dest       // bindings whose key ends here; each Dest once
	// memo is 1 + a dense id for a "#" node that has another "#" above it,
	// else 0. Only such nodes can be reached at the same word along several
	// paths (the upper "#" can end at many places), so Route remembers which
	// (node, word) pairs it has expanded; without that "#.#.#.a" costs
	// O(words^3).
	memo int32
}

func (n *tnode) childless() bool { return n.lit.len() == 0 && n.star == nil && n.hash == nil }

// topicTree is the writer's view of the trie: the root plus the allocator
// for memo ids. e.mu held for every method.
type topicTree struct {
	free []int32 // released memo ids, reused first
	next int32   // ids handed out so far; snapshots size their memo by it
}

// add returns a copy of n with d added under key from position p. underHash
// says whether a "#" lies on the path above. The caller guarantees d is not
// yet bound with this key.
func (t *topicTree) add(n *tnode, key string, p int, underHash bool, d Dest) *tnode {
	c := &tnode{}
	if n != nil {
		*c = *n
	}
	if p > len(key) {
		c.dests = append(slices.Clip(c.dests), d)
		return c
	}
	w, next := word(key, p)
	switch w {
	case "*":
		c.star = t.add(c.star, key, next, underHash, d)
	case "#":
		if c.hash == nil && underHash {
			c.hash = &tnode{memo: t.alloc()}
		}
		c.hash = t.add(c.hash, key, next, true, d)
	default:
		child, _ := c.lit.get(w)
		c.lit = c.lit.set(w, t.add(child, key, next, underHash, d))
	}
	return c
}

// remove returns a copy of n without d under key from position p, or nil
// when the node is left with neither bindings nor children, so unbinding
// prunes the branch it created.
func (t *topicTree) remove(n *tnode, key string, p int, d Dest) *tnode {
	if n == nil {
		return nil
	}
	c := *n
	if p > len(key) {
		i := slices.Index(c.dests, d)
		if i < 0 {
			return n
		}
		c.dests = slices.Delete(slices.Clone(c.dests), i, i+1)
		if len(c.dests) == 0 {
			c.dests = nil
		}
	} else {
		w, next := word(key, p)
		switch w {
		case "*":
			c.star = t.remove(c.star, key, next, d)
		case "#":
			c.hash = t.remove(c.hash, key, next, d)
			if c.hash == nil && n.hash != nil && n.hash.memo != 0 {
				t.free = append(t.free, n.hash.memo)
			}
		default:
			child, ok := c.lit.get(w)
			if !ok {
				return n
			}
			if child = t.remove(child, key, next, d); child == nil {
				c.lit = c.lit.del(w)
			} else {
				c.lit = c.lit.set(w, child)
			}
		}
	}
	if len(c.dests) == 0 && c.childless() {
		return nil
	}
	return &c
}

func (t *topicTree) alloc() int32 {
	if n := len(t.free); n > 0 {
		id := t.free[n-1]
		t.free = t.free[:n-1]
		return id
	}
	t.next++
	return t.next
}

// topicMatcher is one Route call's walk over the trie. It lives on the
// caller's stack; the memo bitset moves to the heap only when the key is long
// and the trie has many nested "#" nodes.
type topicMatcher struct {
	key    string
	out    []Dest
	leaves int   // nodes that contributed dests: more than one means duplicates are possible
	memos  int32 // memo ids in this snapshot
	stride int   // words in key + 1, once a memo node is met
	small  [4]uint64
	big    []uint64
}

// match walks node n with the words from position p (word index wi) left.
// It mirrors RabbitMQ's trie_match: try the literal child, then "*", then "#".
func (m *topicMatcher) match(n *tnode, p, wi int) {
	if p > len(m.key) {
		if len(n.dests) > 0 {
			m.out = append(m.out, n.dests...)
			m.leaves++
		}
		if n.hash != nil {
			m.matchHash(n.hash, p, wi)
		}
		return
	}
	w, next := word(m.key, p)
	if c, ok := n.lit.get(w); ok {
		m.match(c, next, wi+1)
	}
	if n.star != nil {
		m.match(n.star, next, wi+1)
	}
	if n.hash != nil {
		m.matchHash(n.hash, p, wi)
	}
}

// matchHash enters "#" node h with the words from p left: the "#" may
// swallow zero or more of them, so h's children are tried after each.
func (m *topicMatcher) matchHash(h *tnode, p, wi int) {
	if h.childless() {
		// A trailing "#" swallows whatever is left.
		if h.memo != 0 && m.seen(h.memo, 0) {
			return
		}
		m.out = append(m.out, h.dests...)
		m.leaves++
		return
	}
	for {
		if h.memo != 0 && m.seen(h.memo, wi) {
			return // expanded already, along with every later position
		}
		m.match(h, p, wi)
		if p > len(m.key) {
			return
		}
		_, p = word(m.key, p)
		wi++
	}
}

// seen marks (memo node id, word index) visited and reports whether it
// already was.
func (m *topicMatcher) seen(id int32, wi int) bool {
	if m.stride == 0 {
		m.stride = countWords(m.key) + 1
		if need := (int(m.memos)*m.stride + 63) / 64; need > len(m.small) {
			m.big = make([]uint64, need)
		}
	}
	i := int(id-1)*m.stride + wi
	set := m.small[:]
	if m.big != nil {
		set = m.big
	}
	w, bit := &set[i/64], uint64(1)<<(i%64)
	if *w&bit != 0 {
		return true
	}
	*w |= bit
	return false
}

// dedupe removes repeated destinations from out[start:]. Small results (the
// usual case) are compacted in place keeping their order; large ones are
// sorted first so the cost stays O(m log m) without allocating.
func dedupe(out []Dest, start int) []Dest {
	s := out[start:]
	if len(s) <= 32 {
		j := 0
		for i := range s {
			if !slices.Contains(s[:j], s[i]) {
				s[j] = s[i]
				j++
			}
		}
		clear(s[j:]) // drop references to names past the new end
		return out[:start+j]
	}
	slices.SortFunc(s, compareDest)
	return out[:start+len(slices.Compact(s))]
}

func compareDest(a, b Dest) int {
	if a.Exchange != b.Exchange {
		if a.Exchange {
			return 1
		}
		return -1
	}
	return strings.Compare(a.Name, b.Name)
}
