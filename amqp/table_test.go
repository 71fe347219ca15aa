package amqp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestTableRoundTrip(t *testing.T) {
	tab := randomTable(rand.New(rand.NewPCG(3, 4)))
	enc := AppendTable(nil, tab)
	got, err := DecodeTable(enc[4:])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tab) {
		t.Fatalf("got %#v\nwant %#v", got, tab)
	}
	if err := validateTable(enc[4:], 0); err != nil {
		t.Fatal(err)
	}
}

func TestTableTags(t *testing.T) {
	for _, tc := range []struct {
		v    any
		wire []byte
	}{
		{true, []byte{'t', 1}},
		{int8(-1), []byte{'b', 0xff}},
		{uint8(1), []byte{'B', 1}},
		{int16(-2), []byte{'s', 0xff, 0xfe}},
		{uint16(2), []byte{'u', 0, 2}},
		{int32(3), []byte{'I', 0, 0, 0, 3}},
		{uint32(3), []byte{'i', 0, 0, 0, 3}},
		{int64(4), []byte{'l', 0, 0, 0, 0, 0, 0, 0, 4}},
		{Decimal{1, 5}, []byte{'D', 1, 0, 0, 0, 5}},
		{"s", []byte{'S', 0, 0, 0, 1, 's'}},
		{[]byte("x"), []byte{'x', 0, 0, 0, 1, 'x'}},
		{[]any{uint8(1)}, []byte{'A', 0, 0, 0, 2, 'B', 1}},
		{nil, []byte{'V'}},
	} {
		got := appendFieldValue(nil, tc.v)
		if !bytes.Equal(got, tc.wire) {
			t.Errorf("%#v: % x", tc.v, got)
		}
		v, rest, err := decodeFieldValue(got, 0)
		if err != nil || len(rest) != 0 || !reflect.DeepEqual(v, tc.v) {
			t.Errorf("%#v: decoded %#v %v", tc.v, v, err)
		}
	}
}

func TestTableMalformed(t *testing.T) {
	for name, p := range map[string][]byte{
		"name overrun":   {5, 'a'},
		"unknown tag":    {1, 'a', 'Z'},
		"missing value":  {1, 'a'},
		"short int":      {1, 'a', 'I', 0, 0},
		"string overrun": {1, 'a', 'S', 0xff, 0xff, 0xff, 0xff, 'x'},
		"array overrun":  {1, 'a', 'A', 0, 0, 0, 9, 'V'},
	} {
		if _, err := DecodeTable(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: DecodeTable %v", name, err)
		}
		if err := validateTable(p, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: validateTable %v", name, err)
		}
	}
	// Nesting deeper than maxNesting is refused, not a stack overflow.
	deep := []byte{}
	for range 200 {
		inner := append([]byte{1, 'a', 'F'}, 0, 0, 0, 0)
		inner = append(inner, deep...)
		putLen(inner[3:], len(deep))
		deep = inner
	}
	if _, err := DecodeTable(deep); !errors.Is(err, ErrMalformed) {
		t.Errorf("deep: %v", err)
	}
	// Arrays: validating (at the door) and decoding (dead-lettering,
	// headers bindings) draw the same line, at maxNesting.
	for _, tc := range []struct {
		levels int
		ok     bool
	}{{maxNesting, true}, {maxNesting + 1, false}, {200, false}} {
		v := any("x")
		for range tc.levels {
			v = []any{v}
		}
		body := AppendTable(nil, Table{"a": v})[4:]
		_, derr := DecodeTable(body)
		verr := validateTable(body, 0)
		if (derr == nil) != tc.ok || (verr == nil) != tc.ok {
			t.Errorf("%d nested arrays: decode %v, validate %v, want ok=%v", tc.levels, derr, verr, tc.ok)
		}
	}
}

func putLen(b []byte, n int) { b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n) }
