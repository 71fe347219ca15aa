package crypt

import (
	"crypto/cipher"
	"crypto/rand"
	"fmt"
)

// Sealer encrypts records in place for formats railmq frames itself
// (stream chunks, page files): a sealed record is the AES-GCM ciphertext
// of the plaintext, its 16-byte tag, the 12-byte random nonce and the
// 8-byte ID of the key, Overhead bytes more than the plaintext. It is
// safe for concurrent use.
type Sealer struct {
	cur   cipher.AEAD
	curID [8]byte
	byID  map[[8]byte]cipher.AEAD
}

// Overhead is what sealing adds to a record.
const Overhead = 16 + 12 + 8

// Sealer returns a Sealer writing with the current key and reading with
// any of the keys.
func (ks *Keys) Sealer() (*Sealer, error) {
	s := &Sealer{byID: map[[8]byte]cipher.AEAD{}}
	add := func(k []byte) (cipher.AEAD, error) {
		a, err := AEAD(k)
		if err != nil {
			return nil, err
		}
		s.byID[ID(k)] = a
		return a, nil
	}
	for _, o := range ks.Old {
		if _, err := add(o.Key); err != nil {
			return nil, err
		}
	}
	a, err := add(ks.Key)
	if err != nil {
		return nil, err
	}
	s.cur, s.curID = a, ID(ks.Key)
	return s, nil
}

// Ephemeral returns a Sealer with a fresh random key that only this
// process knows: for files that do not outlive it (page files).
func Ephemeral() (*Sealer, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return (&Keys{Key: k}).Sealer()
}

// Seal encrypts b[at:] in place, ad authenticated with it, and returns b
// grown by Overhead.
func (s *Sealer) Seal(b []byte, at int, ad []byte) []byte {
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		panic("crypt: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	b = s.cur.Seal(b[:at], nonce[:], b[at:], ad)
	b = append(b, nonce[:]...)
	return append(b, s.curID[:]...)
}

// Open decrypts a sealed record in place and returns its plaintext (a
// prefix of b).
func (s *Sealer) Open(b, ad []byte) ([]byte, error) {
	if len(b) < Overhead {
		return nil, fmt.Errorf("crypt: %w: sealed record of %d bytes", ErrAuth, len(b))
	}
	var id [8]byte
	copy(id[:], b[len(b)-8:])
	a := s.byID[id]
	if a == nil {
		return nil, ErrWrongKey
	}
	nonce := b[len(b)-20 : len(b)-8]
	ct := b[:len(b)-20]
	p, err := a.Open(ct[:0], nonce, ct, ad)
	if err != nil {
		return nil, fmt.Errorf("crypt: %w", ErrAuth)
	}
	return p, nil
}

// Current reports whether a sealed record was sealed with the current
// key (false: an old key's, to be sealed again after a rotation).
func (s *Sealer) Current(b []byte) bool {
	return len(b) >= Overhead && [8]byte(b[len(b)-8:]) == s.curID
}
