package exchange

import (
	"slices"
	"strconv"
	"testing"
)

// TestDtableResize grows the table past several doublings, checks every
// key, then shrinks it back, checking again at each step.
func TestDtableResize(t *testing.T) {
	tests := []struct {
		name string
		keys int
	}{
		{"within min size", minBuckets},
		{"grows", 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDtable(minBuckets)
			dests := func(i int) []Dest { return []Dest{q("q" + strconv.Itoa(i))} }
			for i := range tt.keys {
				d = d.put(strconv.Itoa(i), dests(i))
			}
			d = d.put("0", dests(0)) // overwrite keeps the count
			if d.n != tt.keys || len(d.buckets) < tt.keys || len(d.buckets) > 2*tt.keys+minBuckets {
				t.Fatalf("n %d, %d buckets for %d keys", d.n, len(d.buckets), tt.keys)
			}
			for i := 0; i < tt.keys; i++ {
				if got := d.get(strconv.Itoa(i)); !slices.Equal(got, dests(i)) {
					t.Fatalf("get(%d) = %v", i, got)
				}
				d = d.put(strconv.Itoa(i), nil)
				if d.get(strconv.Itoa(i)) != nil || d.n != tt.keys-i-1 {
					t.Fatalf("after removing %d: n = %d", i, d.n)
				}
				if j := tt.keys - 1; j > i && !slices.Equal(d.get(strconv.Itoa(j)), dests(j)) {
					t.Fatalf("after removing %d lost %d", i, j)
				}
			}
			if len(d.buckets) != minBuckets {
				t.Fatalf("%d buckets left when empty", len(d.buckets))
			}
			if d.get("absent") != nil {
				t.Fatal("found an absent key")
			}
		})
	}
}
