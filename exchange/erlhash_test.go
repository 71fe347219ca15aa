package exchange

import (
	"encoding/binary"
	"math"
	"testing"
)

// The expected values are erl's (OTP 25, erts 13.1.5): run
// testdata/chash_vectors.erl with escript to print them again.

func TestPhash2Binary(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint32
	}{
		{"", 13708901},
		{"\x61", 112802447},
		{"\x61\x62", 127597802},
		{"\x61\x62\x63", 98228475},
		{"\x6f\x72\x64\x65\x72\x2d\x31\x37", 76707170},
		{"\x30\x31\x32\x33\x34\x35\x36\x37\x38\x39\x61", 73708536},
		{"\x30\x31\x32\x33\x34\x35\x36\x37\x38\x39\x61\x62", 115360506},
		{"\x30\x31\x32\x33\x34\x35\x36\x37\x38\x39\x61\x62\x63", 67923675},
		{"\x63\x75\x73\x74\x6f\x6d\x65\x72\x2d\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x2d\x65\x75\x2d\x77\x65\x73\x74", 103295669},
		{"\x68\xc3\xa9\x6c\x6c\x6f", 65360587},
		{"\xff\x00\x80", 70739353},
	} {
		if got := hashBinary(tt.in); got != tt.want {
			t.Errorf("phash2(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	if got := phash2(atomUndefined); got != 45914356 {
		t.Errorf("phash2(undefined) = %d", got)
	}
}

// Field values as encoded on the wire, tag first.
func raw(tag byte, p ...byte) []byte { return append([]byte{tag}, p...) }
func long(tag byte, p []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{tag}, uint32(len(p))), p...)
}
func S(s string) []byte               { return long('S', []byte(s)) }
func x(s string) []byte               { return long('x', []byte(s)) }
func I(v int32) []byte                { return binary.BigEndian.AppendUint32([]byte{'I'}, uint32(v)) }
func l(v int64) []byte                { return binary.BigEndian.AppendUint64([]byte{'l'}, uint64(v)) }
func T(v uint64) []byte               { return binary.BigEndian.AppendUint64([]byte{'T'}, v) }
func d(v float64) []byte              { return binary.BigEndian.AppendUint64([]byte{'d'}, math.Float64bits(v)) }
func f(v float32) []byte              { return binary.BigEndian.AppendUint32([]byte{'f'}, math.Float32bits(v)) }
func named(n string, v []byte) []byte { return append(append([]byte{byte(len(n))}, n...), v...) }
func F(fs ...[]byte) []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, f...)
	}
	return long('F', b)
}
func A(vs ...[]byte) []byte {
	var b []byte
	for _, v := range vs {
		b = append(b, v...)
	}
	return long('A', b)
}

// TestPhash2Field checks phash2({Type, Value}), the term the plugin hashes
// for a hash-header, for every field type.
func TestPhash2Field(t *testing.T) {
	for _, tt := range []struct {
		term string
		wire []byte
		want uint32
	}{
		{`{longstr,<<"abc">>}`, S("abc"), 101716503},
		{`{signedint,5}`, I(5), 40839585},
		{`{signedint,-5}`, I(-5), 39932925},
		{`{signedint,134217727}`, I(134217727), 17240753},
		{`{signedint,-134217728}`, I(-134217728), 65405468},
		{`{signedint,-134217729}`, I(-134217729), 11977661},
		{`{long,1 bsl 40}`, l(1 << 40), 93748608},
		{`{long,-(1 bsl 40)}`, l(-(1 << 40)), 32506873},
		{`{long,-(1 bsl 63)}`, l(math.MinInt64), 112631110},
		{`{long,(1 bsl 63)-1}`, l(math.MaxInt64), 120433834},
		{`{timestamp,2^64-1}`, T(math.MaxUint64), 132064098},
		{`{timestamp,1700000000}`, T(1700000000), 59280699},
		{`{double,1.5}`, d(1.5), 115320697},
		{`{double,-0.0}`, d(math.Copysign(0, -1)), 28702447},
		{`{double,0.0}`, d(0), 28702447},
		{`{float,0.25}`, f(0.25), 9720941},
		{`{bool,true}`, raw('t', 1), 32030443},
		{`{bool,false}`, raw('t', 0), 54145719},
		{`{void,undefined}`, raw('V'), 27077197},
		{`{decimal,{2,12345}}`, raw('D', 2, 0, 0, 0x30, 0x39), 108016153},
		{`{decimal,{0,4294967295}}`, raw('D', 0, 0xff, 0xff, 0xff, 0xff), 14257328},
		{`{table,[{<<"a">>,longstr,<<"x">>},{<<"b">>,signedint,1}]}`, F(named("a", S("x")), named("b", I(1))), 44061748},
		{`{table,[]}`, F(), 80606520},
		{`{array,[{longstr,<<"x">>},{bool,false}]}`, A(S("x"), raw('t', 0)), 19400604},
		{`{array,[]}`, A(), 86211673},
		{`{binary,<<1,2,3>>}`, x("\x01\x02\x03"), 108323328},
		{`{unsignedbyte,200}`, raw('B', 200), 88973546},
		{`{byte,-1}`, raw('b', 0xff), 63183907},
		{`{short,-300}`, raw('s', 0xfe, 0xd4), 38839696},
		{`{unsignedshort,65535}`, raw('u', 0xff, 0xff), 74347635},
		{`{unsignedint,4294967295}`, raw('i', 0xff, 0xff, 0xff, 0xff), 24982162},
	} {
		var h termHash
		rest, ok := h.hashField(tt.wire)
		if !ok || len(rest) != 0 {
			t.Errorf("%s: hashField ok=%v rest=%d", tt.term, ok, len(rest))
			continue
		}
		if got := phash2(h.h); got != tt.want {
			t.Errorf("phash2(%s) = %d, want %d", tt.term, got, tt.want)
		}
	}
}

// TestJumpBucket checks the bucket picked for a routing key against the
// plugin's jump_consistent_hash, over ring sizes from 2 to a million.
func TestJumpBucket(t *testing.T) {
	for _, tt := range []struct {
		key     string
		buckets int64
		want    int64
	}{
		{"k0", 2, 1},
		{"k0", 3, 1},
		{"k0", 5, 1},
		{"k0", 16, 7},
		{"k0", 100, 7},
		{"k0", 1000, 828},
		{"k0", 1000000, 490323},
		{"k1", 2, 0},
		{"k1", 3, 0},
		{"k1", 5, 3},
		{"k1", 16, 7},
		{"k1", 100, 83},
		{"k1", 1000, 913},
		{"k1", 1000000, 151141},
		{"k2", 2, 1},
		{"k2", 3, 1},
		{"k2", 5, 1},
		{"k2", 16, 5},
		{"k2", 100, 5},
		{"k2", 1000, 431},
		{"k2", 1000000, 204667},
		{"k3", 2, 1},
		{"k3", 3, 1},
		{"k3", 5, 1},
		{"k3", 16, 9},
		{"k3", 100, 91},
		{"k3", 1000, 91},
		{"k3", 1000000, 314509},
		{"k4", 2, 0},
		{"k4", 3, 2},
		{"k4", 5, 2},
		{"k4", 16, 2},
		{"k4", 100, 2},
		{"k4", 1000, 2},
		{"k4", 1000000, 435511},
		{"k5", 2, 1},
		{"k5", 3, 1},
		{"k5", 5, 4},
		{"k5", 16, 4},
		{"k5", 100, 19},
		{"k5", 1000, 871},
		{"k5", 1000000, 300239},
		{"k6", 2, 1},
		{"k6", 3, 1},
		{"k6", 5, 1},
		{"k6", 16, 1},
		{"k6", 100, 85},
		{"k6", 1000, 503},
		{"k6", 1000000, 890409},
		{"k7", 2, 0},
		{"k7", 3, 0},
		{"k7", 5, 3},
		{"k7", 16, 9},
		{"k7", 100, 48},
		{"k7", 1000, 152},
		{"k7", 1000000, 596025},
		{"k8", 2, 1},
		{"k8", 3, 2},
		{"k8", 5, 3},
		{"k8", 16, 14},
		{"k8", 100, 91},
		{"k8", 1000, 693},
		{"k8", 1000000, 356150},
		{"k9", 2, 1},
		{"k9", 3, 2},
		{"k9", 5, 2},
		{"k9", 16, 9},
		{"k9", 100, 36},
		{"k9", 1000, 338},
		{"k9", 1000000, 408129},
		{"k10", 2, 1},
		{"k10", 3, 1},
		{"k10", 5, 4},
		{"k10", 16, 8},
		{"k10", 100, 89},
		{"k10", 1000, 718},
		{"k10", 1000000, 579925},
		{"k11", 2, 1},
		{"k11", 3, 1},
		{"k11", 5, 4},
		{"k11", 16, 10},
		{"k11", 100, 10},
		{"k11", 1000, 163},
		{"k11", 1000000, 905657},
		{"k12", 2, 1},
		{"k12", 3, 2},
		{"k12", 5, 2},
		{"k12", 16, 2},
		{"k12", 100, 53},
		{"k12", 1000, 647},
		{"k12", 1000000, 458092},
		{"k13", 2, 1},
		{"k13", 3, 2},
		{"k13", 5, 2},
		{"k13", 16, 12},
		{"k13", 100, 12},
		{"k13", 1000, 384},
		{"k13", 1000000, 618874},
		{"k14", 2, 1},
		{"k14", 3, 1},
		{"k14", 5, 1},
		{"k14", 16, 1},
		{"k14", 100, 52},
		{"k14", 1000, 927},
		{"k14", 1000000, 864660},
		{"k15", 2, 0},
		{"k15", 3, 0},
		{"k15", 5, 0},
		{"k15", 16, 12},
		{"k15", 100, 85},
		{"k15", 1000, 199},
		{"k15", 1000000, 57754},
		{"k16", 2, 0},
		{"k16", 3, 0},
		{"k16", 5, 0},
		{"k16", 16, 8},
		{"k16", 100, 8},
		{"k16", 1000, 765},
		{"k16", 1000000, 476109},
		{"k17", 2, 0},
		{"k17", 3, 0},
		{"k17", 5, 0},
		{"k17", 16, 14},
		{"k17", 100, 81},
		{"k17", 1000, 199},
		{"k17", 1000000, 224771},
		{"k18", 2, 0},
		{"k18", 3, 0},
		{"k18", 5, 0},
		{"k18", 16, 0},
		{"k18", 100, 48},
		{"k18", 1000, 124},
		{"k18", 1000000, 483314},
		{"k19", 2, 1},
		{"k19", 3, 1},
		{"k19", 5, 1},
		{"k19", 16, 1},
		{"k19", 100, 91},
		{"k19", 1000, 181},
		{"k19", 1000000, 499378},
	} {
		if got := jumpBucket(hashBinary(tt.key), tt.buckets); got != tt.want {
			t.Errorf("bucket(%q, %d) = %d, want %d", tt.key, tt.buckets, got, tt.want)
		}
	}
	if got := jumpBucket(12345, 1); got != 0 {
		t.Errorf("one bucket: %d", got)
	}
}

// TestExs1024 checks the generator against rand:seed_s(exs1024, {7,7,7})
// and its first two rand:uniform_s floats.
func TestExs1024(t *testing.T) {
	st := seedExs1024(7)
	if st.s[0] != 4356584333155659769 || st.s[15] != 18314733143918856853 {
		t.Fatalf("seed: %d .. %d", st.s[0], st.s[15])
	}
	if a, b := st.uniform(), st.uniform(); a != 0.37838308512588215 || b != 0.988503089017669 {
		t.Fatalf("uniform: %v %v", a, b)
	}
}
