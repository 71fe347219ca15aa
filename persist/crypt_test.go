package persist

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/railmq/railmq/crypt"
)

// An encrypted spill reads back what it paged, in order and whole, while
// its files hold none of the records' bytes; a plain one (the control)
// holds them.
func TestEncryptedSpill(t *testing.T) {
	for _, enc := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "spill")
		open := OpenSpill
		if enc {
			open = OpenEncryptedSpill
		}
		s, err := open(dir, 0, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.segMax = 64 << 10
		rec := func(seq uint64) []byte {
			size := 500
			if seq == 150 {
				size = 2 << 20 // larger than a read's chunk
			}
			r := spillRecord(seq, size)
			copy(r[8:], "spill-secret")
			return r
		}
		var ps []SpillEntry
		for seq := uint64(1); seq <= 300; seq++ {
			ps = append(ps, SpillEntry{Seq: seq, Msg: seq + 1000, Redelivered: seq%2 == 0, Count: uint32(seq % 3), Record: rec(seq)})
		}
		spillWrite(t, s, 3, ps, false, false)
		clear := 0
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte("spill-secret")) {
				clear++
			}
		}
		if enc && clear > 0 || !enc && clear == 0 {
			t.Fatalf("encrypted %v: %d of %d page files hold records in the clear", enc, clear, len(es))
		}
		next := uint64(1)
		for next <= 300 {
			got := spillRead(t, s, 3, next-1, 70, 0)
			if len(got) == 0 {
				t.Fatalf("nothing read at %d", next)
			}
			for _, e := range got {
				if e.Seq != next || e.Msg != next+1000 || e.Redelivered != (e.Seq%2 == 0) || e.Count != uint32(e.Seq%3) || !bytes.Equal(e.Data, rec(e.Seq)) {
					t.Fatalf("encrypted %v: entry %d (want %d) read back wrong", enc, e.Seq, next)
				}
				next++
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A page file altered on disk is a read error, not other bytes.
func TestEncryptedSpillTampered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	s, err := OpenEncryptedSpill(dir, 0, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spillWrite(t, s, 3, []SpillEntry{{Seq: 1, Msg: 1, Record: []byte("a record of some bytes")}}, false, false)
	es, _ := os.ReadDir(dir)
	if len(es) != 1 {
		t.Fatalf("%d files", len(es))
	}
	p := filepath.Join(dir, es[0].Name())
	b, _ := os.ReadFile(p)
	b[len(b)-30] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	s.Read(3, 0, 10, 0, func(_ []Entry, err error) { ch <- err })
	if err := <-ch; err == nil || !strings.Contains(err.Error(), crypt.ErrAuth.Error()) {
		t.Fatalf("read of an altered page file: %v", err)
	}
}

// The store under a key: what it stores reads back after a reopen; the
// files hold none of it; the wrong key is an error naming the store.
func TestEncryptedStore(t *testing.T) {
	dir := t.TempDir()
	ks := &crypt.Keys{Key: bytes.Repeat([]byte{1}, 32), KeyFile: "k"}
	s, err := Open(Options{Dir: dir, Keys: ks, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	secret := bytes.Repeat([]byte("store-secret "), 100)
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte{0xfe, 1}, secret) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("store-secret")) {
				t.Errorf("%s holds the value in the clear", p)
			}
		}
		return nil
	})
	_, err = Open(Options{Dir: dir, Keys: &crypt.Keys{Key: bytes.Repeat([]byte{2}, 32), KeyFile: "other"}, GCInterval: -1})
	if err == nil || !strings.Contains(err.Error(), "other") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("wrong key: %v", err)
	}
	s, err = Open(Options{Dir: dir, Keys: ks, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte{0xfe, 1})
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if !bytes.Equal(v, secret) {
			t.Errorf("read back %d bytes", len(v))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
