package auth

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"hash"
)

// Password hashing algorithms, by RabbitMQ's names. A hash is a 4-byte
// salt followed by H(salt ++ password); the API shows it base64-encoded
// (rabbit_password:hash/2).
const (
	SHA256 = "rabbit_password_hashing_sha256" // RabbitMQ's default
	SHA512 = "rabbit_password_hashing_sha512"
	MD5    = "rabbit_password_hashing_md5" // older RabbitMQ's; accepted on import
)

func hasher(algo string) (func() hash.Hash, error) {
	switch algo {
	case SHA256, "":
		return sha256.New, nil
	case SHA512:
		return sha512.New, nil
	case MD5:
		return md5.New, nil
	}
	return nil, fmt.Errorf("unknown password hashing algorithm %q", algo)
}

// HashPassword hashes pass with a fresh salt.
func HashPassword(algo, pass string) ([]byte, error) {
	var salt [4]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, err
	}
	return hashWithSalt(algo, salt[:], pass)
}

func hashWithSalt(algo string, salt []byte, pass string) ([]byte, error) {
	h, err := hasher(algo)
	if err != nil {
		return nil, err
	}
	d := h()
	d.Write(salt)
	d.Write([]byte(pass))
	return d.Sum(append([]byte(nil), salt...)), nil
}

// checkPassword reports whether pass matches hash (salt ++ digest).
func checkPassword(algo string, hash []byte, pass string) bool {
	if len(hash) < 5 {
		return false // no password: the user cannot log in with one
	}
	got, err := hashWithSalt(algo, hash[:4], pass)
	return err == nil && subtle.ConstantTimeCompare(got, hash) == 1
}

// DecodeHash reads a password_hash as the API and definitions give it
// (base64), checking its length against the algorithm's digest.
func DecodeHash(algo, b64 string) ([]byte, error) {
	if b64 == "" {
		return nil, nil
	}
	h, err := hasher(algo)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("password_hash is not base64: %w", err)
	}
	if len(b) != 4+h().Size() {
		return nil, fmt.Errorf("password_hash is %d bytes, not a 4-byte salt and a %d-byte digest", len(b), h().Size())
	}
	return b, nil
}

// EncodeHash is the base64 form of a hash.
func EncodeHash(h []byte) string { return base64.StdEncoding.EncodeToString(h) }
