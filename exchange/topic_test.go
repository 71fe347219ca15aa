package exchange

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var q = func(name string) Dest { return Dest{Name: name} }

// refTopicMatch is the textbook definition, used to check both the table
// below and the trie on random input.
func refTopicMatch(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if refTopicMatch(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && refTopicMatch(pattern[1:], key[1:])
	default:
		return len(key) > 0 && key[0] == pattern[0] && refTopicMatch(pattern[1:], key[1:])
	}
}

func splitWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

func TestTopicMatch(t *testing.T) {
	long := strings.Repeat("x.", 40)
	tests := []struct {
		pattern, key string
		want         bool
	}{
		{"", "", true},
		{"", "a", false},
		{"", ".", false},
		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b.c", true},
		{"#", ".", true},
		{"*", "", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*", ".", false},
		{"*.*", ".", true},
		{"a", "a", true},
		{"a", "b", false},
		{"a", "a.b", false},
		{"a", "*", false},
		{"*", "*", true},
		{"a*", "ab", false},
		{"a*", "a*", true},
		{"a#", "a#", true},
		{"a.#", "a", true},
		{"a.#", "a.b.c", true},
		{"a.#", "a.", true},
		{"a.#", "b", false},
		{"a.#", "", false},
		{"#.a", "a", true},
		{"#.a", "b.c.a", true},
		{"#.a", "a.b", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.c", false},
		{"a.*.c", "a.b.b.c", false},
		{"a.*.c", "a..c", true},
		{"a..b", "a..b", true},
		{"a..b", "a.b", false},
		{"a.b", "a.b.", false},
		{"a.b.", "a.b.", true},
		{"a.b.*", "a.b.", true},
		{"*.a", ".a", true},
		{".a", ".a", true},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.x.y.b", true},
		{"a.#.b", "a.x.y", false},
		{"#.b.#", "b", true},
		{"#.a.#", "x.a.y", true},
		{"#.a.#", "x.b.y", false},
		{"*.#", "", false},
		{"*.#", "a", true},
		{"#.*", "", false},
		{"#.*", "a.b", true},
		{"a.*.#", "a", false},
		{"a.*.#", "a.b", true},
		{"*.*.*", "a.b", false},
		{"#.#", "", true},
		{"#.#", "a.b", true},
		{"#.#.#.a", "a", true},
		{"#.#.#.a", long + "a", true},
		{"#.#.#.a", long + "b", false},
		{"#.*.#.*.#", "a", false},
		{"#.*.#.*.#", "a.b", true},
		{"stock.*.nyse", "stock.ibm.nyse", true},
		{"stock.*.nyse", "stock.ibm.nasdaq", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"|"+tt.key, func(t *testing.T) {
			if ref := refTopicMatch(splitWords(tt.pattern), splitWords(tt.key)); ref != tt.want {
				t.Fatalf("table disagrees with reference matcher (%v)", ref)
			}
			e := New("t", Topic, false, false, false, nil)
			e.Bind(Binding{Dest: q("q"), Key: tt.pattern})
			got := len(e.Route(tt.key, nil, nil)) == 1
			if got != tt.want {
				t.Fatalf("Route(%q) with binding %q matched = %v, want %v", tt.key, tt.pattern, got, tt.want)
			}
		})
	}
}

// TestTopicDedupe binds one destination through several patterns that
// match the same key: it must come out once, on both the small (in-place)
// and large (sorting) dedupe paths.
func TestTopicDedupe(t *testing.T) {
	tests := []struct {
		name  string
		dests int
	}{
		{"small", 3},
		{"large", 50},
	}
	patterns := []string{"#", "a.#", "*.b.c", "a.b.c", "#.c", "#.#.c", "a.#.#"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New("t", Topic, false, false, false, nil)
			var want []Dest
			for i := range tt.dests {
				d := q(string(rune('A' + i)))
				want = append(want, d)
				for _, p := range patterns {
					e.Bind(Binding{Dest: d, Key: p})
				}
			}
			got := e.Route("a.b.c", nil, []Dest{q("pre-existing")})
			if got[0] != q("pre-existing") {
				t.Fatalf("Route clobbered out[0]: %v", got[0])
			}
			got = got[1:]
			slices.SortFunc(got, compareDest)
			if !slices.Equal(got, want) {
				t.Fatalf("Route = %v, want %v", got, want)
			}
		})
	}
}

// TestTopicRandom checks the trie against the reference matcher on random
// patterns and keys over a small alphabet, so wildcards, empty words and
// shared prefixes collide often; then unbinds everything in random order
// and checks the trie is pruned and memo ids are recycled.
func TestTopicRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"a", "b", "", "*", "#"}
	gen := func(wild bool, n int) string {
		ws := make([]string, n)
		for i := range ws {
			w := words[r.IntN(len(words))]
			for !wild && (w == "*" || w == "#") {
				w = words[r.IntN(len(words))]
			}
			ws[i] = w
		}
		return strings.Join(ws, ".")
	}
	e := New("t", Topic, false, false, false, nil)
	var bs []Binding
	for i := range 300 {
		b := Binding{Dest: q(string(rune('A' + i%40))), Key: gen(true, r.IntN(6))}
		if e.Bind(b) {
			bs = append(bs, b)
		}
	}
	check := func() {
		t.Helper()
		for range 300 {
			key := gen(false, r.IntN(7))
			var want []Dest
			for _, b := range bs {
				if refTopicMatch(splitWords(b.Key), splitWords(key)) && !slices.Contains(want, b.Dest) {
					want = append(want, b.Dest)
				}
			}
			got := e.Route(key, nil, nil)
			slices.SortFunc(got, compareDest)
			slices.SortFunc(want, compareDest)
			if !slices.Equal(got, want) {
				t.Fatalf("Route(%q) = %v, want %v", key, got, want)
			}
		}
	}
	check()
	ids := e.topic.next
	r.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
	for len(bs) > 0 {
		if !e.Unbind(bs[0]) {
			t.Fatalf("Unbind(%v) = false", bs[0])
		}
		bs = bs[1:]
		if len(bs)%50 == 0 {
			check()
		}
	}
	if s := e.snap.Load(); s.topic != nil || s.n != 0 {
		t.Fatalf("trie not pruned: root %v, n %d", s.topic, s.n)
	}
	if len(e.topic.free) != int(ids) {
		t.Fatalf("memo ids: %d handed out, %d released", ids, len(e.topic.free))
	}
}

// TestTopicNestedHashLongKey would take ~words^k steps without the memo;
// it also overflows the on-stack memo bitset.
func TestTopicNestedHashLongKey(t *testing.T) {
	e := New("t", Topic, false, false, false, nil)
	e.Bind(Binding{Dest: q("q1"), Key: "#.#.#.#.#.#.z"})
	e.Bind(Binding{Dest: q("q2"), Key: "#.x.#.x.#.x.#.y"})
	key := strings.Repeat("x.", 200)
	if got := e.Route(key+"z", nil, nil); !slices.Equal(got, []Dest{q("q1")}) {
		t.Fatalf("got %v", got)
	}
	if got := e.Route(key+"y", nil, nil); !slices.Equal(got, []Dest{q("q2")}) {
		t.Fatalf("got %v", got)
	}
	if got := e.Route(key+"w", nil, nil); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}
