package crypt

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The format of a file railmq encrypts as a whole (a raft snapshot):
//
//	header: magic "RMQCRYPT" (8), version u8 = 1, key id (8, see ID),
//	        nonce prefix (7 random bytes)
//	blocks: length u32 (high bit: the last block), then that many bytes
//	        of AES-GCM ciphertext and its 16-byte tag
//
// Each block's plaintext is at most blockSize bytes; its nonce is the
// prefix followed by the block's number (u32, then a byte 1 on the last
// block, 0 otherwise), and the header is its additional data. A file cut
// short (no last block), blocks reordered or altered, or a header
// changed all fail authentication; a key id matching no key given is
// ErrWrongKey.
const (
	fileMagic   = "RMQCRYPT"
	fileVersion = 1
	fileHeader  = 8 + 1 + 8 + 7
	blockSize   = 64 << 10
	lastBit     = 1 << 31
)

// ErrWrongKey is returned for data encrypted with a key not given.
var ErrWrongKey = errors.New("encrypted with a key that is not among those given")

// ErrNotEncrypted is returned when encrypted data was expected.
var ErrNotEncrypted = errors.New("not encrypted")

// ErrAuth is returned when data fails authentication (corrupt, or
// altered).
var ErrAuth = errors.New("failed authentication (corrupt or altered)")

// IsEncryptedHeader reports whether b starts like a file written by
// NewWriter.
func IsEncryptedHeader(b []byte) bool {
	return len(b) >= len(fileMagic) && string(b[:len(fileMagic)]) == fileMagic
}

type writer struct {
	w      io.Writer
	aead   cipher.AEAD
	hdr    [fileHeader]byte
	nonce  [12]byte
	n      uint32
	buf    []byte
	out    []byte
	err    error
	closed bool
}

// NewWriter encrypts what is written to it onto w with the current key;
// Close writes the last block (it does not close w).
func (ks *Keys) NewWriter(w io.Writer) (io.WriteCloser, error) {
	a, err := AEAD(ks.Key)
	if err != nil {
		return nil, err
	}
	wr := &writer{w: w, aead: a, buf: make([]byte, 0, blockSize)}
	copy(wr.hdr[:], fileMagic)
	wr.hdr[8] = fileVersion
	id := ID(ks.Key)
	copy(wr.hdr[9:], id[:])
	if _, err := rand.Read(wr.hdr[17:]); err != nil {
		return nil, err
	}
	copy(wr.nonce[:7], wr.hdr[17:])
	if _, err := w.Write(wr.hdr[:]); err != nil {
		return nil, err
	}
	return wr, nil
}

func (w *writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		c := min(len(p), blockSize-len(w.buf))
		w.buf = append(w.buf, p[:c]...)
		p, n = p[c:], n+c
		if len(w.buf) == blockSize && len(p) > 0 {
			if w.err = w.flush(false); w.err != nil {
				return n, w.err
			}
		}
	}
	return n, nil
}

func (w *writer) flush(last bool) error {
	binary.BigEndian.PutUint32(w.nonce[7:], w.n)
	w.nonce[11] = 0
	if last {
		w.nonce[11] = 1
	}
	if w.n == ^uint32(0) {
		return errors.New("crypt: file too large")
	}
	w.n++
	w.out = append(w.out[:0], 0, 0, 0, 0)
	w.out = w.aead.Seal(w.out, w.nonce[:], w.buf, w.hdr[:])
	l := uint32(len(w.out) - 4)
	if last {
		l |= lastBit
	}
	binary.BigEndian.PutUint32(w.out, l)
	w.buf = w.buf[:0]
	_, err := w.w.Write(w.out)
	return err
}

func (w *writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	w.err = w.flush(true)
	return w.err
}

type reader struct {
	r     io.Reader
	aead  cipher.AEAD
	hdr   [fileHeader]byte
	nonce [12]byte
	n     uint32
	plain []byte
	buf   []byte
	done  bool
	err   error
}

// NewReader decrypts a file written by NewWriter with whichever of the
// keys wrote it.
func (ks *Keys) NewReader(r io.Reader) (io.Reader, error) {
	rd := &reader{r: r}
	if _, err := io.ReadFull(r, rd.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrNotEncrypted
		}
		return nil, err
	}
	if !IsEncryptedHeader(rd.hdr[:]) {
		return nil, ErrNotEncrypted
	}
	if rd.hdr[8] != fileVersion {
		return nil, fmt.Errorf("crypt: unknown format version %d", rd.hdr[8])
	}
	var id [8]byte
	copy(id[:], rd.hdr[9:])
	key := ks.lookup(id)
	if key == nil {
		return nil, ErrWrongKey
	}
	a, err := AEAD(key)
	if err != nil {
		return nil, err
	}
	rd.aead = a
	copy(rd.nonce[:7], rd.hdr[17:])
	return rd, nil
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.plain) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		r.err = r.next()
	}
	n := copy(p, r.plain)
	r.plain = r.plain[n:]
	return n, nil
}

func (r *reader) next() error {
	var lb [4]byte
	if _, err := io.ReadFull(r.r, lb[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("crypt: %w: the file ends before its last block", ErrAuth)
		}
		return err
	}
	l := binary.BigEndian.Uint32(lb[:])
	last := l&lastBit != 0
	l &^= lastBit
	if l < 16 || l > blockSize+16 {
		return fmt.Errorf("crypt: %w: block length %d", ErrAuth, l)
	}
	if cap(r.buf) < int(l) {
		r.buf = make([]byte, l)
	}
	r.buf = r.buf[:l]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return fmt.Errorf("crypt: %w: %w", ErrAuth, err)
	}
	binary.BigEndian.PutUint32(r.nonce[7:], r.n)
	r.nonce[11] = 0
	if last {
		r.nonce[11] = 1
	}
	r.n++
	pl, err := r.aead.Open(r.buf[:0], r.nonce[:], r.buf, r.hdr[:])
	if err != nil {
		return fmt.Errorf("crypt: %w", ErrAuth)
	}
	r.plain, r.done = pl, last
	return nil
}

// PlainSize is the plaintext length of a file of size bytes written by
// NewWriter: every block but the last holds blockSize bytes, and each
// adds its length and tag.
func PlainSize(size int64) int64 {
	c := size - fileHeader
	if c <= 0 {
		return 0
	}
	const full = blockSize + 4 + 16
	n := (c + full - 1) / full
	return c - n*20
}

// HeaderSize is the length of a file's header (NewWriter).
const HeaderSize = fileHeader

// Current reports whether hdr, a file's first HeaderSize bytes, is that
// of a file written with the current key.
func (ks *Keys) Current(hdr []byte) bool {
	return len(hdr) >= fileHeader && IsEncryptedHeader(hdr) && [8]byte(hdr[9:17]) == ID(ks.Key)
}
