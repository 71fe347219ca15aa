package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Keys are the data encryption keys of a node: the key it writes with
// and the older keys it still reads (a rotation in progress). A nil
// *Keys means no encryption.
type Keys struct {
	Key     []byte // AES-128, -192 or -256: 16, 24 or 32 bytes
	KeyFile string // where Key came from, for messages
	Old     []OldKey
	// DataKeyRotation is how often Badger makes a new data key (0: its
	// default, 10 days).
	DataKeyRotation time.Duration
}

// OldKey is a key still accepted for reading.
type OldKey struct {
	Key  []byte
	File string
}

// ErrKey is wrapped by every key-file error.
var ErrKey = errors.New("data encryption key")

// ParseKey reads a key file's content: 16, 24 or 32 raw bytes, or the
// hex or standard base64 text of such a key (surrounding white space
// ignored), as `openssl rand -hex 32` writes it.
func ParseKey(b []byte) ([]byte, error) {
	if t := strings.TrimSpace(string(b)); t != "" && isText(b) {
		if k, err := hex.DecodeString(t); err == nil && validLen(len(k)) {
			return k, nil
		}
		if k, err := base64.StdEncoding.DecodeString(t); err == nil && validLen(len(k)) {
			return k, nil
		}
	}
	if validLen(len(b)) {
		return append([]byte(nil), b...), nil
	}
	return nil, fmt.Errorf("%w: %d bytes, neither a raw AES key (16, 24 or 32 bytes) nor the hex or base64 text of one", ErrKey, len(b))
}

// isText reports whether b looks like hex or base64 text, not raw key
// bytes (a raw key of 32 random bytes is almost never all printable).
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			if c != '\n' && c != '\r' && c != '\t' {
				return false
			}
		}
	}
	return true
}

func validLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// ReadKeyFile reads and parses a key file; its errors name the file and
// what is wrong with it.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w file %s: %w", ErrKey, path, err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w file %s: %w", ErrKey, path, err)
	}
	return k, nil
}

// Load reads the key file and the old key files (each may be empty:
// none). No key file and no old key files is no encryption (nil, nil).
func Load(keyFile string, oldFiles []string) (*Keys, error) {
	if keyFile == "" {
		if len(oldFiles) > 0 {
			return nil, fmt.Errorf("%w: old key files need --data-encryption-key-file (the key the data is rewritten with)", ErrKey)
		}
		return nil, nil
	}
	k, err := ReadKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	ks := &Keys{Key: k, KeyFile: keyFile}
	for _, f := range oldFiles {
		if f == "" {
			continue
		}
		o, err := ReadKeyFile(f)
		if err != nil {
			return nil, err
		}
		ks.Old = append(ks.Old, OldKey{Key: o, File: f})
	}
	return ks, nil
}

// ID is a key's fingerprint, written in the headers of railmq's own
// encrypted files so that a wrong key is told from a corrupt file: the
// first 8 bytes of HMAC-SHA256(key, "railmq key id"). It reveals nothing
// of the key.
func ID(key []byte) [8]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("railmq key id"))
	var id [8]byte
	copy(id[:], m.Sum(nil))
	return id
}

// AEAD is AES-GCM under key.
func AEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	return cipher.NewGCM(b)
}

// lookup finds the key (current or old) whose ID is id.
func (ks *Keys) lookup(id [8]byte) []byte {
	if ID(ks.Key) == id {
		return ks.Key
	}
	for _, o := range ks.Old {
		if ID(o.Key) == id {
			return o.Key
		}
	}
	return nil
}

// Describe names the key files, for errors.
func (ks *Keys) Describe() string {
	s := ks.KeyFile
	for _, o := range ks.Old {
		s += ", " + o.File
	}
	return s
}
