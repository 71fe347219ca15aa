package cluster

import (
	"encoding/binary"
	"errors"
)

// The one binary codec of the cluster package: what its link carries
// (forwarded metadata writes, quorum queue rounds and their answers, the
// replicated queues' frames) and the fixed-width records it persists
// (a quorum queue's Raft commands, a Raft log entry in the log store).
//
// Enc appends to a byte slice, the caller's to reuse (b = b[:0]); Dec
// reads a byte slice and records the first error: a short or invalid
// input reads as zero values from then on and Err reports it, so that a
// decoder reads every field and checks once. Neither reflects, formats
// or allocates (but Dec.Str, which makes a string).
//
// Two families of fields, never mixed up for one field:
//   - variable width, for the wire: Uvarint, Varint, Str, Bytes (a
//     uvarint length, then the bytes), Count;
//   - fixed width, big-endian, for the persisted formats: U32, U64,
//     Bytes32 (a 4-byte length, then the bytes), Count32. Their bytes
//     are those the quorum queue log and the log store have always
//     written (codec_test.go holds them).
//
// And for both: U8, Bool, Raw (bytes with no length; Dec.Take, Dec.Rest).

// ErrMalformed is an encoding that does not decode: too short, a uvarint
// that overflows, a count larger than what follows could hold, or bytes
// left over.
var ErrMalformed = errors.New("cluster: malformed encoding")

// Enc is an append-style encoder: each method appends one field and
// returns the longer slice, as append does.
type Enc []byte

// U8 appends a byte.
func (b Enc) U8(v byte) Enc { return append(b, v) }

// Bool appends 1 for true, 0 for false.
func (b Enc) Bool(v bool) Enc {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// Uvarint appends v as a uvarint (1 to 10 bytes).
func (b Enc) Uvarint(v uint64) Enc { return binary.AppendUvarint(b, v) }

// Varint appends v zig-zag encoded (small negative numbers stay short).
func (b Enc) Varint(v int64) Enc { return binary.AppendVarint(b, v) }

// Str appends s: its length as a uvarint, then its bytes.
func (b Enc) Str(s string) Enc { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }

// Bytes appends p: its length as a uvarint, then the bytes.
func (b Enc) Bytes(p []byte) Enc { return append(binary.AppendUvarint(b, uint64(len(p))), p...) }

// Raw appends p as it is (the last field, or one whose length is known).
func (b Enc) Raw(p []byte) Enc { return append(b, p...) }

// U32 appends v big-endian in 4 bytes.
func (b Enc) U32(v uint32) Enc { return binary.BigEndian.AppendUint32(b, v) }

// U64 appends v big-endian in 8 bytes.
func (b Enc) U64(v uint64) Enc { return binary.BigEndian.AppendUint64(b, v) }

// Bytes32 appends p: its length in 4 bytes, big-endian, then the bytes.
func (b Enc) Bytes32(p []byte) Enc {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(p))), p...)
}

// Str32 appends s as Bytes32 does.
func (b Enc) Str32(s string) Enc {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// Dec decodes a byte slice. The zero Dec has nothing to read; NewDec
// reads p. Byte fields (Take, Bytes, Bytes32, Rest) share p's memory.
type Dec struct {
	p   []byte
	err error
}

// NewDec returns a decoder of p.
func NewDec(p []byte) Dec { return Dec{p: p} }

// Err is the first error, nil while everything decoded.
func (d *Dec) Err() error { return d.err }

// Len is how many bytes are left.
func (d *Dec) Len() int { return len(d.p) }

// Fail records err (ErrMalformed when nil) as the decoder's error, if it
// has none yet: for a check of the caller's (a value out of range).
func (d *Dec) Fail(err error) {
	if err == nil {
		err = ErrMalformed
	}
	if d.err == nil {
		d.err = err
	}
	d.p = nil
}

// End is Err, but also an error if bytes are left over.
func (d *Dec) End() error {
	if d.err == nil && len(d.p) != 0 {
		d.Fail(ErrMalformed)
	}
	return d.err
}

// Take reads n bytes (capped: appending to them cannot overwrite what
// follows). Nil when it fails.
func (d *Dec) Take(n uint64) []byte {
	if d.err != nil || uint64(len(d.p)) < n {
		d.Fail(ErrMalformed)
		return nil
	}
	v := d.p[:n:n]
	d.p = d.p[n:]
	return v
}

// Rest reads every byte left.
func (d *Dec) Rest() []byte {
	v := d.p
	d.p = nil
	return v
}

// U8 reads a byte.
func (d *Dec) U8() byte {
	if d.err != nil || len(d.p) < 1 {
		d.Fail(ErrMalformed)
		return 0
	}
	v := d.p[0]
	d.p = d.p[1:]
	return v
}

// Bool reads a byte: anything but 0 is true.
func (d *Dec) Bool() bool { return d.U8() != 0 }

// Uvarint reads a uvarint.
func (d *Dec) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.Fail(ErrMalformed)
		return 0
	}
	d.p = d.p[n:]
	return v
}

// Varint reads what Enc.Varint wrote.
func (d *Dec) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.p)
	if n <= 0 {
		d.Fail(ErrMalformed)
		return 0
	}
	d.p = d.p[n:]
	return v
}

// Bytes reads what Enc.Bytes wrote; nil when empty.
func (d *Dec) Bytes() []byte {
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	return nilIfEmpty(d.Take(n))
}

// Str reads what Enc.Str wrote.
func (d *Dec) Str() string { return string(d.Bytes()) }

// Count reads a uvarint count of items each taking at least min bytes
// (min 1 or more), and fails it if what is left could not hold them: a
// decoder allocates for a count only after this check.
func (d *Dec) Count(min int) int {
	n := d.Uvarint()
	if d.err == nil && (min < 1 || n > uint64(len(d.p))/uint64(min)) {
		d.Fail(ErrMalformed)
		return 0
	}
	return int(n)
}

// U32 reads 4 bytes, big-endian.
func (d *Dec) U32() uint32 {
	if v := d.Take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

// U64 reads 8 bytes, big-endian.
func (d *Dec) U64() uint64 {
	if v := d.Take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// Bytes32 reads what Enc.Bytes32 wrote; nil when empty.
func (d *Dec) Bytes32() []byte {
	n := d.U32()
	if d.err != nil {
		return nil
	}
	return nilIfEmpty(d.Take(uint64(n)))
}

// Str32 reads what Enc.Str32 wrote.
func (d *Dec) Str32() string { return string(d.Bytes32()) }

// Count32 is Count for a 4-byte count.
func (d *Dec) Count32(min int) int {
	n := d.U32()
	if d.err == nil && (min < 1 || uint64(n) > uint64(len(d.p))/uint64(min)) {
		d.Fail(ErrMalformed)
		return 0
	}
	return int(n)
}

func nilIfEmpty(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v
}
