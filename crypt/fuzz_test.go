package crypt

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzParseKey: any key file's content is a key of a valid AES length or
// an ErrKey, never a panic.
func FuzzParseKey(f *testing.F) {
	f.Add([]byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"))
	f.Add([]byte("ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8="))
	f.Add(key(16, 7))
	f.Add([]byte(""))
	f.Add([]byte("  \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKey(b)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("error %v is not an ErrKey", err)
			}
			return
		}
		if !validLen(len(k)) {
			t.Fatalf("key of %d bytes", len(k))
		}
	})
}

// FuzzFileReader: a file of any bytes read as an encrypted file gives an
// error or the plaintext, never a panic; what NewWriter writes reads back
// the same, and a flipped byte is refused.
func FuzzFileReader(f *testing.F) {
	ks := &Keys{Key: key(32, 1)}
	var sealed bytes.Buffer
	w, err := ks.NewWriter(&sealed)
	if err != nil {
		f.Fatal(err)
	}
	_, _ = w.Write([]byte("a stream segment"))
	_ = w.Close()
	f.Add(sealed.Bytes(), []byte("plain"), uint16(0))
	f.Add([]byte("RMQCRYPT"), []byte{}, uint16(3))
	f.Fuzz(func(t *testing.T, file, plain []byte, flip uint16) {
		if r, err := ks.NewReader(bytes.NewReader(file)); err == nil {
			_, _ = io.ReadAll(io.LimitReader(r, 1<<20))
		}
		var buf bytes.Buffer
		w, err := ks.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(plain); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := ks.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("read back %q, %v; wrote %q", got, err, plain)
		}
		b := buf.Bytes()
		b[int(flip)%len(b)] ^= 0x55
		if r, err := ks.NewReader(bytes.NewReader(b)); err == nil {
			if got, err := io.ReadAll(r); err == nil && !bytes.Equal(got, plain) {
				t.Fatalf("a flipped byte read back as %q without an error", got)
			}
		}
	})
}

// FuzzSealerOpen: a sealed record of any bytes opens with an error or
// not at all, never a panic; Seal then Open gives the plaintext back.
func FuzzSealerOpen(f *testing.F) {
	s, err := (&Keys{Key: key(16, 2)}).Sealer()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("a page file record"), []byte("ad"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, b, ad []byte) {
		_, _ = s.Open(append([]byte(nil), b...), ad)
		sealed := s.Seal(append([]byte(nil), b...), 0, ad)
		got, err := s.Open(sealed, ad)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("opened %q, %v; sealed %q", got, err, b)
		}
	})
}
