package exchange

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The consistent-hash exchange picks a bucket the way RabbitMQ's
// rabbitmq_consistent_hash_exchange plugin (3.10) does, so that a user
// moving from RabbitMQ keeps the same queue for the same key:
//
//	bucket = jump_consistent_hash(erlang:phash2(Term), Buckets)
//
// where the jump hash draws its floats from rand:uniform_s seeded with
// rand:seed_s(exs1024, {H, H, H}). This file reimplements, from their
// published descriptions, the two Erlang/OTP pieces that takes: phash2
// (erts make_hash2, Bob Jenkins' lookup2 mixing) for the few term shapes
// the plugin hashes, and the exs1024 generator (xorshift1024*). Both are
// stable across OTP releases; erlhash_test.go pins values that erl
// computed.

// HCONST and its multiples, as make_hash2 names them (HCONST_n is HCONST*n
// mod 2^32).
const (
	hConst   = 0x9e3779b9
	hConst2  = 0x3c6ef372
	hConst3  = 0xdaa66d2b
	hConst9  = 0x8ff34781
	hConst10 = 0x2e2ac13a
	hConst11 = 0xcc623af3
	hConst12 = 0x6a99b4ac
	hConst13 = 0x08d12e65
)

// nilHash is phash2's value for [] on its own; nilDef is the tagged word
// of [] that is mixed in when a list ends inside a term.
const (
	nilHash = 3468870702
	nilDef  = 2
)

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= b
	a -= c
	a ^= c >> 13
	b -= c
	b -= a
	b ^= a << 8
	c -= a
	c -= b
	c ^= b >> 13
	a -= b
	a -= c
	a ^= c >> 12
	b -= c
	b -= a
	b ^= a << 16
	c -= a
	c -= b
	c ^= b >> 5
	a -= b
	a -= c
	a ^= c >> 3
	b -= c
	b -= a
	b ^= a << 10
	c -= a
	c -= b
	c ^= b >> 15
	return a, b, c
}

// blockHash is erts' block_hash over a binary's bytes.
func blockHash[T string | []byte](k T, initval uint32) uint32 {
	a, b, c := uint32(hConst), uint32(hConst), initval
	n := len(k)
	i := 0
	for ; n-i >= 12; i += 12 {
		a += uint32(k[i]) | uint32(k[i+1])<<8 | uint32(k[i+2])<<16 | uint32(k[i+3])<<24
		b += uint32(k[i+4]) | uint32(k[i+5])<<8 | uint32(k[i+6])<<16 | uint32(k[i+7])<<24
		c += uint32(k[i+8]) | uint32(k[i+9])<<8 | uint32(k[i+10])<<16 | uint32(k[i+11])<<24
		a, b, c = mix(a, b, c)
	}
	c += uint32(n)
	r := k[i:]
	// The tail's bytes, as the C switch falls through; c's low byte is
	// the length.
	switch len(r) {
	case 11:
		c += uint32(r[10]) << 24
		fallthrough
	case 10:
		c += uint32(r[9]) << 16
		fallthrough
	case 9:
		c += uint32(r[8]) << 8
		fallthrough
	case 8:
		b += uint32(r[7]) << 24
		fallthrough
	case 7:
		b += uint32(r[6]) << 16
		fallthrough
	case 6:
		b += uint32(r[5]) << 8
		fallthrough
	case 5:
		b += uint32(r[4])
		fallthrough
	case 4:
		a += uint32(r[3]) << 24
		fallthrough
	case 3:
		a += uint32(r[2]) << 16
		fallthrough
	case 2:
		a += uint32(r[1]) << 8
		fallthrough
	case 1:
		a += uint32(r[0])
	}
	_, _, c = mix(a, b, c)
	return c
}

// termHash computes make_hash2 of a term fed to it depth first, in the
// order make_hash2 visits it: a tuple's arity then its elements, a list's
// elements then its end.
type termHash struct{ h uint32 }

func (t *termHash) pair(x, y, k uint32) {
	_, _, t.h = mix(k+x, k+y, t.h)
}

func (t *termHash) tuple(arity uint32) { t.pair(arity, 0, hConst9) }

func (t *termHash) atom(hv uint32) {
	if t.h == 0 {
		t.h = hv
		return
	}
	t.pair(hv, 0, hConst3)
}

// listEnd is the [] that ends a proper list.
func (t *termHash) listEnd() {
	if t.h == 0 {
		t.h = nilHash
		return
	}
	t.pair(nilDef, 0, hConst2)
}

// binary hashes a binary; an empty one is just the constant.
func (t *termHash) binary(p []byte) {
	if len(p) == 0 {
		t.h += hConst13
		return
	}
	t.h = blockHash(p, hConst13+t.h)
}

// hashBinary is phash2 of a binary (a routing key, a property).
func hashBinary[T string | []byte](k T) uint32 {
	if len(k) == 0 {
		return phash2(hConst13)
	}
	return phash2(blockHash(k, hConst13))
}

// integer hashes an integer of any size up to 64 bits of magnitude: small
// ones (28 bits) as a signed 32-bit word, others as their magnitude's two
// 32-bit halves with the sign in the constant, which is also what a bignum
// of one 64-bit digit gets.
func (t *termHash) integer(neg bool, mag uint64) {
	if !neg && mag < 1<<27 || neg && mag <= 1<<27 {
		y := int32(mag)
		if neg {
			y = -y
			t.pair(uint32(-y), 0, hConst) // negatives are mixed twice
		}
		t.pair(uint32(y), 0, hConst)
		return
	}
	k := uint32(hConst11)
	if neg {
		k = hConst10
	}
	t.pair(uint32(mag), uint32(mag>>32), k)
}

func (t *termHash) int64(v int64) {
	if v < 0 {
		t.integer(true, -uint64(v))
		return
	}
	t.integer(false, uint64(v))
}

func (t *termHash) float(f float64) {
	if f == 0 {
		f = 0 // -0.0 hashes as 0.0
	}
	b := math.Float64bits(f)
	t.pair(uint32(b>>32), uint32(b), hConst12)
}

// atomHash is the hash erts keeps for an atom (hashpjw over its name;
// the names used here are ASCII).
func atomHash(name string) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<4 + uint32(name[i])
		if g := h & 0xf0000000; g != 0 {
			h ^= g >> 24
			h ^= g
		}
	}
	return h
}

// The atoms the plugin's terms contain: undefined (what a missing header
// or property hashes as), booleans, and rabbit_binary_parser's type names
// for each field-value tag.
var (
	atomUndefined = atomHash("undefined")
	atomTrue      = atomHash("true")
	atomFalse     = atomHash("false")
	typeAtoms     = func() (a [256]uint32) {
		for tag, name := range map[byte]string{
			'S': "longstr", 'T': "timestamp", 'b': "byte", 'B': "unsignedbyte", 's': "short",
			'u': "unsignedshort", 'I': "signedint", 'i': "unsignedint", 'd': "double", 'f': "float",
			'l': "long", 'L': "long", 't': "bool", 'D': "decimal", 'F': "table", 'A': "array",
			'x': "binary", 'V': "void",
		} {
			a[tag] = atomHash(name)
		}
		return a
	}()
)

// phash2 is erlang:phash2/1's range: 0..2^27-1.
func phash2(h uint32) uint32 { return h & (1<<27 - 1) }

// hashField feeds {Type, Value} for the encoded field value p (tag first)
// as rabbit_binary_parser decodes it, and returns what follows it. ok is
// false for a value that is cut short or of an unknown type (the broker
// validated the table when it read it, so neither happens).
func (t *termHash) hashField(p []byte) (rest []byte, ok bool) {
	if len(p) == 0 || typeAtoms[p[0]] == 0 {
		return nil, false
	}
	tag := p[0]
	t.tuple(2)
	t.atom(typeAtoms[tag])
	return t.hashValue(tag, p[1:])
}

// hashValue feeds the decoded value of a field of type tag.
func (t *termHash) hashValue(tag byte, p []byte) (rest []byte, ok bool) {
	if len(p) < int(fixedSize[tag]) {
		return nil, false
	}
	switch tag {
	case 't':
		if p[0] != 0 {
			t.atom(atomTrue)
		} else {
			t.atom(atomFalse)
		}
		return p[1:], true
	case 'b':
		t.int64(int64(int8(p[0])))
		return p[1:], true
	case 'B':
		t.int64(int64(p[0]))
		return p[1:], true
	case 's':
		t.int64(int64(int16(binary.BigEndian.Uint16(p))))
		return p[2:], true
	case 'u':
		t.int64(int64(binary.BigEndian.Uint16(p)))
		return p[2:], true
	case 'I':
		t.int64(int64(int32(binary.BigEndian.Uint32(p))))
		return p[4:], true
	case 'i':
		t.int64(int64(binary.BigEndian.Uint32(p)))
		return p[4:], true
	case 'l', 'L':
		t.int64(int64(binary.BigEndian.Uint64(p)))
		return p[8:], true
	case 'T':
		t.integer(false, binary.BigEndian.Uint64(p))
		return p[8:], true
	case 'f':
		t.float(float64(math.Float32frombits(binary.BigEndian.Uint32(p))))
		return p[4:], true
	case 'd':
		t.float(math.Float64frombits(binary.BigEndian.Uint64(p)))
		return p[8:], true
	case 'D': // {Scale, Value}, both unsigned
		t.tuple(2)
		t.int64(int64(p[0]))
		t.int64(int64(binary.BigEndian.Uint32(p[1:])))
		return p[5:], true
	case 'V':
		t.atom(atomUndefined)
		return p, true
	}
	// S, x, F, A: a 32-bit length and that many bytes.
	if len(p) < 4 || uint64(len(p)-4) < uint64(binary.BigEndian.Uint32(p)) {
		return nil, false
	}
	n := binary.BigEndian.Uint32(p)
	body, rest := p[4:4+n], p[4+n:]
	switch tag {
	case 'S', 'x':
		t.binary(body)
	case 'F': // [{Name, Type, Value}]
		for len(body) > 0 {
			l := int(body[0])
			if len(body) < 2+l || typeAtoms[body[1+l]] == 0 {
				return nil, false
			}
			t.tuple(3)
			t.binary(body[1 : 1+l])
			tag := body[1+l]
			t.atom(typeAtoms[tag])
			var ok bool
			if body, ok = t.hashValue(tag, body[2+l:]); !ok {
				return nil, false
			}
		}
		t.listEnd()
	case 'A': // [{Type, Value}]
		for len(body) > 0 {
			var ok bool
			if body, ok = t.hashField(body); !ok {
				return nil, false
			}
		}
		t.listEnd()
	}
	return rest, true
}

// fixedSize is the encoded size of each fixed-size field value.
var fixedSize = [256]uint8{'t': 1, 'b': 1, 'B': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'f': 4, 'l': 8, 'L': 8, 'd': 8, 'T': 8, 'D': 5}

// exs1024 is OTP rand's xorshift1024* state: s[p] is the head of its
// list.
type exs1024 struct {
	s [16]uint64
	p int
}

func exs64Next(r uint64) (uint64, uint64) {
	r ^= r >> 12
	r ^= r << 25
	r ^= r >> 27
	return r * 2685821657736338717, r
}

// seedExs1024 is rand:seed_s(exs1024, {A, A, A}).
func seedExs1024(a uint32) (st exs1024) {
	const m21 = 1<<21 - 1
	b1 := (uint64(a)&m21 + 1) * 2097131 & m21
	b2 := (uint64(a)&m21 + 1) * 2097133 & m21
	b3 := (uint64(a)&m21 + 1) * 2097143 & m21
	r := b1<<43 | b2<<22 | b3<<1 | 1
	// exs1024_gen1024 conses each value onto the list: the last one
	// generated is the head.
	for i := 15; i >= 0; i-- {
		st.s[i], r = exs64Next(r)
	}
	return st
}

// next is exs1024_next: with the list [S0, S1 | L3] and the reversed
// tail RL, it returns the output for S0 and S1 and moves on to
// [NS1 | L3] with S0 pushed onto RL; as a ring of 16 words that is one
// step forward.
func (x *exs1024) next() uint64 {
	s0 := x.s[x.p]
	x.p = (x.p + 1) & 15
	s1 := x.s[x.p]
	s1 ^= s1 << 31
	s1 ^= s1 >> 11
	s0 ^= s0 >> 30
	ns1 := s0 ^ s1
	x.s[x.p] = ns1
	return ns1 * 1181783497276652981
}

// uniform is rand:uniform_s for exs1024, one of rand's legacy
// generators: the 64-bit output over 2^64, rounded to a float64 (so 0.0
// and 1.0 are both possible). Checked against 8,000 of erl's draws.
func (x *exs1024) uniform() float64 {
	return float64(x.next()) / (1 << 64)
}

// jumpBucket is the plugin's jump_consistent_hash: the bucket in
// [0, buckets) for phash2 value k.
func jumpBucket(k uint32, buckets int64) int64 {
	if buckets <= 1 {
		return 0
	}
	st := seedExs1024(k)
	b, j := int64(-1), int64(0)
	for j < buckets {
		b = j
		r := st.uniform()
		// Erlang would fail on r == 0 (a 2^-53 chance); any j past the
		// end ends the walk at b the same way a huge quotient does.
		q := float64(b+1) / r
		if r == 0 || q >= float64(buckets) {
			break
		}
		j = int64(q)
	}
	return b
}

// timestampText is integer_to_binary of a timestamp property: the plugin
// hashes the decimal text, not the number.
func timestampText(buf *[20]byte, v uint64) []byte { return strconv.AppendUint(buf[:0], v, 10) }
