package exchange

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestPmapRandom checks set/del/get against a Go map, and that every old
// version stays intact after later changes (persistence).
func TestPmapRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m pmap[int]
	ref := map[string]int{}
	type version struct {
		m   pmap[int]
		ref map[string]int
	}
	var versions []version
	one := pmap[int]{}.set("only", 1)
	versions = append(versions, version{one, map[string]int{"only": 1}})
	for i := range 5000 {
		k := strconv.Itoa(r.IntN(700))
		if r.IntN(3) == 0 {
			m = m.del(k)
			delete(ref, k)
		} else {
			m = m.set(k, i)
			ref[k] = i
		}
		if i%500 == 0 {
			c := make(map[string]int, len(ref))
			for k, v := range ref {
				c[k] = v
			}
			versions = append(versions, version{m, c})
		}
	}
	versions = append(versions, version{m, ref})
	for vi, v := range versions {
		checkPmap(t, vi, v.m, v.ref)
	}
}

func checkPmap(t *testing.T, vi int, m pmap[int], ref map[string]int) {
	t.Helper()
	if m.len() != len(ref) {
		t.Fatalf("version %d: len %d, want %d", vi, m.len(), len(ref))
	}
	for k, want := range ref {
		if got, ok := m.get(k); !ok || got != want {
			t.Fatalf("version %d: get(%q) = %d, %v; want %d", vi, k, got, ok, want)
		}
	}
	n := 0
	m.each(func(k string, v int) {
		n++
		if ref[k] != v {
			t.Fatalf("version %d: each saw %q=%d, want %d", vi, k, v, ref[k])
		}
	})
	if n != len(ref) {
		t.Fatalf("version %d: each saw %d entries, want %d", vi, n, len(ref))
	}
	if v, ok := m.get("absent"); ok || v != 0 {
		t.Fatalf("version %d: found absent key", vi)
	}
}

// TestPmapCollisions forces hashes that share chunks, and whole hashes, to
// exercise deep nodes and collision lists.
func TestPmapCollisions(t *testing.T) {
	tests := []struct {
		name   string
		hashes []uint64
	}{
		{"same hash", []uint64{7, 7, 7, 7}},
		{"shared low bits", []uint64{1, 1 | 1<<40, 1 | 1<<55, 1 | 1<<63}},
		{"distinct", []uint64{0, 1, 2, 1 << 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m pmap[int]
			for i, h := range tt.hashes {
				m = m.setHash(h, "k"+strconv.Itoa(i), i)
				m = m.setHash(h, "k"+strconv.Itoa(i), i) // overwrite: no growth
			}
			if m.len() != len(tt.hashes) {
				t.Fatalf("len = %d", m.len())
			}
			for i, h := range tt.hashes {
				if v, ok := m.getHash(h, "k"+strconv.Itoa(i)); !ok || v != i {
					t.Fatalf("get k%d = %d, %v", i, v, ok)
				}
			}
			if _, ok := m.getHash(tt.hashes[0], "other"); ok {
				t.Fatal("found key never set")
			}
			for i, h := range tt.hashes {
				m = m.delHash(h, "k"+strconv.Itoa(i))
				m = m.delHash(h, "k"+strconv.Itoa(i)) // absent: no change
				if m.len() != len(tt.hashes)-i-1 {
					t.Fatalf("after del k%d: len = %d", i, m.len())
				}
				for j := i + 1; j < len(tt.hashes); j++ {
					if _, ok := m.getHash(tt.hashes[j], "k"+strconv.Itoa(j)); !ok {
						t.Fatalf("after del k%d: lost k%d", i, j)
					}
				}
			}
			if len(m.root.slots) != 0 {
				t.Fatal("empty map kept nodes")
			}
		})
	}
}
