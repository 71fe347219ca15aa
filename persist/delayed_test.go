package persist

import (
	"testing"
)

// TestDelayedIndex: delayed messages come back per exchange in due
// order, in batches and from a floor; recovery keeps the persistent ones
// of kept exchanges, drops the rest, and moves message ids past every
// stored sequence; DropDelayed removes one exchange's messages only.
func TestDelayedIndex(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a, ab, gone := []byte{0, 1, 'a'}, []byte{0, 2, 'a', 'b'}, []byte{0, 1, 'g'}
	b := &Batch{}
	b.PutDelayed(a, 300, 90, false, []byte("a300"))
	b.PutDelayed(a, 100, 91, false, []byte("a100"))
	b.PutDelayed(a, 100, 5, false, []byte("a100'"))
	b.PutDelayed(a, 200, 92, true, []byte("a200 transient"))
	b.PutDelayed(ab, 50, 93, false, []byte("ab50"))
	b.PutDelayed(gone, 10, 500, false, []byte("gone"))
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	ds, next, err := s.ReadDelayed(a, 0, 250, 2)
	if err != nil || len(ds) != 2 || string(ds[0].Data) != "a100'" || string(ds[1].Data) != "a100" || next != 200 {
		t.Fatalf("read %v next %d err %v", ds, next, err)
	}
	ds, next, err = s.ReadDelayed(a, 150, 250, 10)
	if err != nil || len(ds) != 1 || ds[0].Due != 200 || ds[0].Seq != 92 || next != 300 {
		t.Fatalf("read from 150: %v next %d err %v", ds, next, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	sums, dropped, err := s.RecoverDelayed([]byte{}, func(name []byte) bool { return string(name) != string(gone) })
	if err != nil || dropped != 2 {
		t.Fatalf("recover: dropped %d, %v", dropped, err)
	}
	if sa := sums[string(a)]; sa.Count != 3 || sa.Next != 100 {
		t.Fatalf("summary of a: %+v", sa)
	}
	if sab := sums[string(ab)]; sab.Count != 1 || sab.Next != 50 {
		t.Fatalf("summary of ab: %+v", sab)
	}
	if id := s.NewMessageID(); id <= 500 {
		t.Fatalf("message id %d not past the stored sequences", id)
	}
	if ds, _, _ := s.ReadDelayed(gone, 0, NoDue-1, 10); len(ds) != 0 {
		t.Fatalf("dropped exchange's messages left: %v", ds)
	}
	b = &Batch{}
	b.DropDelayed(a)
	b.DeleteDelayed(ab, 50, 93)
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	for _, name := range [][]byte{a, ab} {
		if ds, _, _ := s.ReadDelayed(name, 0, NoDue-1, 10); len(ds) != 0 {
			t.Fatalf("%q: left %v", name, ds)
		}
	}
}
