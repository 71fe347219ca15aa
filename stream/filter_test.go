package stream

import (
	"fmt"
	"testing"
)

// TestFilter: chunks whose Bloom filter matches none of the values are
// skipped, records are matched exactly (a Bloom false positive is not
// delivered), and MatchUnfiltered adds records with no filter value.
func TestFilter(t *testing.T) {
	l := openT(t, t.TempDir(), Options{FilterSize: 16})
	defer l.Close()
	// Chunk 0: all "red"; chunk 1: all "blue"; chunk 2: no filter value;
	// chunk 3: mixed red, green, none; chunk 4: many values (a filter
	// saturated with bits: false positives for any value).
	appendWait(t, l, mkRecs(0, 5, ms0, "red"))
	appendWait(t, l, mkRecs(5, 5, ms0, "blue"))
	appendWait(t, l, mkRecs(10, 5, ms0, ""))
	appendWait(t, l, []Record{
		{Timestamp: ms0, Filter: "red", Data: []byte("rec-15")},
		{Timestamp: ms0, Filter: "green", Data: []byte("rec-16")},
		{Timestamp: ms0, Data: []byte("rec-17")},
	})
	var many []Record
	for i := 0; i < 200; i++ {
		many = append(many, Record{Timestamp: ms0, Filter: fmt.Sprintf("v%d", i), Data: fmt.Appendf(nil, "rec-%d", 18+i)})
	}
	appendWait(t, l, many)
	offsets := func(f *Filter) []uint64 {
		r, err := l.NewReader(Spec{Kind: First}, f)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []uint64
		for _, e := range readAll(t, r) {
			if string(e.Data) != fmt.Sprintf("rec-%d", e.Offset) {
				t.Fatalf("offset %d data %q", e.Offset, e.Data)
			}
			out = append(out, e.Offset)
		}
		return out
	}
	cases := []struct {
		name string
		f    *Filter
		want []uint64
	}{
		{"red", &Filter{Values: []string{"red"}}, []uint64{0, 1, 2, 3, 4, 15}},
		{"red blue", &Filter{Values: []string{"blue", "red"}}, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15}},
		{"green unfiltered", &Filter{Values: []string{"green"}, MatchUnfiltered: true}, []uint64{10, 11, 12, 13, 14, 16, 17}},
		{"v7", &Filter{Values: []string{"v7"}}, []uint64{25}},
		{"absent", &Filter{Values: []string{"nope"}}, nil},
		{"only unfiltered", &Filter{MatchUnfiltered: true}, []uint64{10, 11, 12, 13, 14, 17}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := offsets(c.f); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
	// Every record comes back with its filter value.
	r, err := l.NewReader(Spec{Kind: Offset, Offset: 15}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	es := readAll(t, r)
	if es[0].Filter != "red" || es[1].Filter != "green" || es[2].Filter != "" || es[3].Filter != "v0" {
		t.Fatalf("filters %q %q %q %q", es[0].Filter, es[1].Filter, es[2].Filter, es[3].Filter)
	}
}

// TestBloomSkips: a chunk whose filter holds none of the values is not
// decoded; the Bloom filter is sized as configured.
func TestBloomSkips(t *testing.T) {
	b := make([]byte, 16)
	bloomAdd(b, "red")
	if !bloomHas(b, "red") {
		t.Fatal("added value not in the filter")
	}
	fp := 0
	for i := 0; i < 1000; i++ {
		if bloomHas(b, fmt.Sprintf("x%d", i)) {
			fp++
		}
	}
	if fp > 50 { // one value in 128 bits: ~0.02% expected
		t.Fatalf("%d false positives in 1000", fp)
	}
	buf, _ := appendChunk(nil, []Record{{Filter: "a", Data: []byte("x")}}, 0, 0, 200)
	h, err := checkChunk(buf)
	if err != nil || h.filterSize != 200 || h.flags&flagUnfiltered != 0 {
		t.Fatalf("header %+v %v", h, err)
	}
	buf, _ = appendChunk(nil, []Record{{Data: []byte("x")}}, 0, 0, 200)
	h, err = checkChunk(buf)
	if err != nil || h.filterSize != 0 || h.flags&flagUnfiltered == 0 {
		t.Fatalf("unfiltered chunk header %+v %v", h, err)
	}
}
