package crypt

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func key(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

func TestParseKey(t *testing.T) {
	k32 := key(32, 7)
	for _, tc := range []struct {
		name string
		in   []byte
		want []byte
		err  string
	}{
		{"hex (openssl rand -hex 32)", []byte(hex.EncodeToString(k32) + "\n"), k32, ""},
		{"hex 16", []byte(hex.EncodeToString(key(16, 1))), key(16, 1), ""},
		{"base64 (openssl rand -base64 32)", []byte(base64.StdEncoding.EncodeToString(k32) + "\n"), k32, ""},
		{"raw 32", append([]byte{0xff, 0}, key(30, 0x80)...), append([]byte{0xff, 0}, key(30, 0x80)...), ""},
		{"raw 24", key(24, 0x90), key(24, 0x90), ""},
		{"empty", nil, nil, "0 bytes"},
		{"text of no key", []byte("hello\n"), nil, "neither a raw AES key"},
		{"hex of 20 bytes", []byte(hex.EncodeToString(key(20, 1))), nil, "neither a raw AES key"},
		{"raw 31", key(31, 0x90), nil, "31 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrKey) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %x, %v; want %x", got, err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	kf, of := filepath.Join(dir, "k"), filepath.Join(dir, "o")
	must(t, os.WriteFile(kf, []byte(hex.EncodeToString(key(32, 1))), 0o600))
	must(t, os.WriteFile(of, []byte(hex.EncodeToString(key(16, 2))), 0o600))
	if ks, err := Load("", nil); ks != nil || err != nil {
		t.Fatalf("no key file: %v %v, want no encryption", ks, err)
	}
	if _, err := Load("", []string{of}); err == nil {
		t.Fatal("an old key without a key: no error")
	}
	ks, err := Load(kf, []string{of})
	must(t, err)
	if !bytes.Equal(ks.Key, key(32, 1)) || len(ks.Old) != 1 || !bytes.Equal(ks.Old[0].Key, key(16, 2)) {
		t.Fatalf("loaded %+v", ks)
	}
	_, err = Load(filepath.Join(dir, "missing"), nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The file format: sizes of every block boundary round-trip, PlainSize
// is the plaintext's length, the plaintext is not in the file, and a
// wrong key, a cut, a flipped byte or a plain file are errors.
func TestFileRoundTrip(t *testing.T) {
	ks := &Keys{Key: key(32, 3)}
	for _, n := range []int{0, 1, blockSize - 1, blockSize, blockSize + 1, 3*blockSize + 17} {
		plain := bytes.Repeat([]byte("secret-"), n/7+1)[:n]
		var enc bytes.Buffer
		w, err := ks.NewWriter(&enc)
		must(t, err)
		// Written in odd pieces.
		for p := plain; len(p) > 0; {
			c := min(len(p), 1000)
			if _, err := w.Write(p[:c]); err != nil {
				t.Fatal(err)
			}
			p = p[c:]
		}
		must(t, w.Close())
		if n >= 7 && bytes.Contains(enc.Bytes(), []byte("secret-")) {
			t.Fatalf("%d bytes: plaintext in the file", n)
		}
		if got := PlainSize(int64(enc.Len())); got != int64(n) {
			t.Fatalf("PlainSize(%d) = %d, want %d", enc.Len(), got, n)
		}
		if !ks.Current(enc.Bytes()) {
			t.Fatal("not Current under its key")
		}
		r, err := ks.NewReader(bytes.NewReader(enc.Bytes()))
		must(t, err)
		back, err := io.ReadAll(r)
		must(t, err)
		if !bytes.Equal(back, plain) {
			t.Fatalf("%d bytes: read back %d bytes, different", n, len(back))
		}
		// An old key still reads it; a rotation's Keys have it as Old.
		rot := &Keys{Key: key(32, 9), Old: []OldKey{{Key: key(32, 3)}}}
		if rot.Current(enc.Bytes()) {
			t.Fatal("Current under the new key")
		}
		r, err = rot.NewReader(bytes.NewReader(enc.Bytes()))
		must(t, err)
		if back, err := io.ReadAll(r); err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("old key: %v", err)
		}
		if _, err := (&Keys{Key: key(32, 4)}).NewReader(bytes.NewReader(enc.Bytes())); !errors.Is(err, ErrWrongKey) {
			t.Fatalf("wrong key: %v", err)
		}
		if n > 0 {
			cut := enc.Bytes()[:enc.Len()-1]
			if _, err := readAll(ks, cut); !errors.Is(err, ErrAuth) {
				t.Fatalf("%d bytes cut by one: %v", n, err)
			}
			flip := bytes.Clone(enc.Bytes())
			flip[fileHeader+4+n/2] ^= 1
			if _, err := readAll(ks, flip); !errors.Is(err, ErrAuth) {
				t.Fatalf("%d bytes, a byte flipped: %v", n, err)
			}
		}
	}
	if _, err := ks.NewReader(strings.NewReader("a plain snapshot of some length")); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("plain: %v", err)
	}
}

// A file cut at a block boundary (a whole block gone) fails too: only
// the last block carries the last flag.
func TestFileCutAtBlock(t *testing.T) {
	ks := &Keys{Key: key(16, 3)}
	var enc bytes.Buffer
	w, err := ks.NewWriter(&enc)
	must(t, err)
	_, err = w.Write(make([]byte, 2*blockSize+5))
	must(t, err)
	must(t, w.Close())
	cut := enc.Bytes()[:fileHeader+2*(4+blockSize+16)]
	if _, err := readAll(ks, cut); !errors.Is(err, ErrAuth) {
		t.Fatalf("cut at a block: %v", err)
	}
}

func readAll(ks *Keys, b []byte) ([]byte, error) {
	r, err := ks.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestSealer(t *testing.T) {
	old := &Keys{Key: key(24, 5)}
	so, err := old.Sealer()
	must(t, err)
	b := so.Seal([]byte("hdr:secret record"), 4, []byte("ad"))
	if len(b) != len("hdr:secret record")+Overhead || bytes.Contains(b, []byte("secret")) || string(b[:4]) != "hdr:" {
		t.Fatalf("sealed %q", b)
	}
	p, err := so.Open(bytes.Clone(b[4:]), []byte("ad"))
	if err != nil || string(p) != "secret record" {
		t.Fatalf("open: %q %v", p, err)
	}
	if _, err := so.Open(bytes.Clone(b[4:]), []byte("other ad")); !errors.Is(err, ErrAuth) {
		t.Fatalf("other ad: %v", err)
	}
	rot, err := (&Keys{Key: key(32, 6), Old: []OldKey{{Key: key(24, 5)}}}).Sealer()
	must(t, err)
	if rot.Current(b[4:]) || !so.Current(b[4:]) {
		t.Fatal("Current")
	}
	if p, err := rot.Open(bytes.Clone(b[4:]), []byte("ad")); err != nil || string(p) != "secret record" {
		t.Fatalf("old key: %q %v", p, err)
	}
	other, err := (&Keys{Key: key(32, 7)}).Sealer()
	must(t, err)
	if _, err := other.Open(bytes.Clone(b[4:]), []byte("ad")); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("wrong key: %v", err)
	}
}

// Badger: a store under key A opens under A; B alone is the wrong key;
// no key, or a key on a plain store, are errors saying so; B with A as
// old rotates the master key (the data stays), after which B alone
// opens it.
func TestBadger(t *testing.T) {
	dir := t.TempDir()
	a := &Keys{Key: key(32, 1), KeyFile: "a"}
	b := &Keys{Key: key(32, 2), KeyFile: "b"}
	open := func(ks *Keys, d string) (*badger.DB, bool, error) {
		bo, rotated, err := ks.Badger(badger.DefaultOptions(d).WithLogger(nil))
		if err != nil {
			return nil, rotated, err
		}
		db, err := badger.Open(bo)
		return db, rotated, err
	}
	db, _, err := open(a, dir)
	must(t, err)
	must(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte("secret value")) }))
	must(t, db.Close())
	if _, _, err := open(b, dir); !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "key files: b") {
		t.Fatalf("wrong key: %v", err)
	}
	if _, _, err := open(nil, dir); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no key: %v", err)
	}
	plain := t.TempDir()
	db, _, err = open(nil, plain)
	must(t, err)
	must(t, db.Close())
	if _, _, err := open(a, plain); !errors.Is(err, ErrPlainStore) {
		t.Fatalf("key on a plain store: %v", err)
	}
	rot := &Keys{Key: b.Key, KeyFile: "b", Old: []OldKey{{Key: a.Key, File: "a"}}}
	db, rotated, err := open(rot, dir)
	must(t, err)
	if !rotated {
		t.Fatal("not rotated")
	}
	must(t, db.Close())
	db, rotated, err = open(b, dir)
	must(t, err)
	if rotated {
		t.Fatal("rotated twice")
	}
	must(t, db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte("k"))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if string(v) != "secret value" {
				t.Errorf("read %q", v)
			}
			return nil
		})
	}))
	must(t, db.Close())
	if _, _, err := open(a, dir); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("the old key after the rotation: %v", err)
	}
}

// DataKeyRotation reaches Badger: with a short one every file Badger
// starts gets a new data key; with the default, one key serves them all.
func TestDataKeyRotation(t *testing.T) {
	count := func(rotation time.Duration) int {
		dir := t.TempDir()
		ks := &Keys{Key: key(32, 1), DataKeyRotation: rotation}
		bo, _, err := ks.Badger(badger.DefaultOptions(dir).WithLogger(nil).
			WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).WithValueThreshold(64))
		must(t, err)
		db, err := badger.Open(bo)
		must(t, err)
		for i := range 8 {
			must(t, db.Update(func(txn *badger.Txn) error {
				for j := range 300 {
					if err := txn.Set([]byte(fmt.Sprintf("k%d-%d", i, j)), make([]byte, 4<<10)); err != nil {
						return err
					}
				}
				return nil
			}))
		}
		must(t, db.Close())
		kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true, EncryptionKey: ks.Key})
		must(t, err)
		defer kr.Close()
		n := 0
		for id := uint64(1); ; id++ {
			if k, err := kr.DataKey(id); err != nil || k == nil {
				return n
			}
			n++
		}
	}
	if n := count(0); n != 1 {
		t.Errorf("default rotation: %d data keys, want 1", n)
	}
	if n := count(time.Millisecond); n < 2 {
		t.Errorf("rotation of 1ms: %d data keys, want several", n)
	}
}
