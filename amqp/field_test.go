package amqp

import (
	"bytes"
	"testing"
)

func TestHeaderFieldAndKey(t *testing.T) {
	h := AppendTable(nil, Table{
		"a": "x", "x-deduplication-header": int32(42), "n": Table{"x-deduplication-header": "inner"},
		"x-cache-ttl": int64(500), "s": int16(42), "str": "42",
	})[4:]
	var b1, b2, b3 [9]byte
	v, ok := HeaderField(h, "x-deduplication-header")
	if !ok || v[0] != 'I' {
		t.Fatalf("field %q %v", v, ok)
	}
	s, _ := HeaderField(h, "s")
	str, _ := HeaderField(h, "str")
	if !bytes.Equal(FieldKey(v, &b1), FieldKey(s, &b2)) {
		t.Fatal("int32 42 and int16 42 differ")
	}
	if bytes.Equal(FieldKey(v, &b1), FieldKey(str, &b3)) {
		t.Fatal(`"42" is the integer 42`)
	}
	if ttl, ok := HeaderField(h, "x-cache-ttl"); !ok {
		t.Fatal("no ttl")
	} else if n, ok := FieldInt(ttl); !ok || n != 500 {
		t.Fatalf("ttl %d %v", n, ok)
	}
	if _, ok := HeaderField(h, "missing"); ok {
		t.Fatal("found a missing field")
	}
	for _, bad := range [][]byte{nil, {5, 'a'}, {1, 'a', 'S', 0, 0, 0, 9}} {
		if _, ok := HeaderField(bad, "a"); ok {
			t.Fatalf("found a field in %q", bad)
		}
	}
	for _, w := range []struct {
		v Table
		n int64
	}{{Table{"k": int8(-3)}, -3}, {Table{"k": uint8(200)}, 200}, {Table{"k": uint16(65000)}, 65000},
		{Table{"k": uint32(4e9)}, 4e9}, {Table{"k": int64(-1 << 40)}, -1 << 40}} {
		f, _ := HeaderField(AppendTable(nil, w.v)[4:], "k")
		if n, ok := FieldInt(f); !ok || n != w.n {
			t.Fatalf("%v: %d %v", w.v, n, ok)
		}
	}
}

func TestPropsHeaders(t *testing.T) {
	h := Table{"x-deduplication-header": "id"}
	for _, p := range []Properties{
		{Flags: FlagHeaders, Headers: h},
		{Flags: FlagHeaders | FlagContentType, ContentType: "application/json", Headers: h},
		{Flags: FlagHeaders | FlagContentType | FlagContentEncoding | FlagDeliveryMode, ContentType: "a", ContentEncoding: "gzip", DeliveryMode: 2, Headers: h},
		{Flags: FlagContentType, ContentType: "x"},
	} {
		enc := p.Append(nil)
		v, err := ScanProperties(enc)
		if err != nil {
			t.Fatal(err)
		}
		if got := PropsHeaders(enc); !bytes.Equal(got, v.Headers) {
			t.Fatalf("%+v: %q, want %q", p, got, v.Headers)
		}
	}
	for _, bad := range [][]byte{nil, {0x20, 0}, {0xa0, 0, 5, 'a'}, {0x20, 0, 0, 0, 0, 9}} {
		if got := PropsHeaders(bad); got != nil {
			t.Fatalf("%q: %q", bad, got)
		}
	}
}
