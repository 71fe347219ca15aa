package channel

import (
	"testing"

	"github.com/railmq/railmq/amqp"
)

func TestLeaseTag(t *testing.T) {
	for _, c := range []struct {
		key string
		tag uint64
		ok  bool
	}{
		{"1", 1, true}, {"18446744073709551615", 1<<64 - 1, true}, {"42", 42, true},
		{"0", 0, false}, {"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {" 1", 0, false},
		{"1.0", 0, false}, {"abc", 0, false}, {"18446744073709551616", 0, false}, {"0x10", 0, false},
	} {
		tag, err := leaseTag(c.key)
		if (err == nil) != c.ok || tag != c.tag {
			t.Errorf("leaseTag(%q) = %d, %v; want %d, ok %v", c.key, tag, err, c.tag, c.ok)
		}
	}
}

func TestHeaderMillis(t *testing.T) {
	hdr := func(v any) []byte {
		tb := amqp.AppendTable(nil, amqp.Table{"x-lease-ms": v})
		return tb[4:] // the table's body
	}
	for _, c := range []struct {
		name  string
		h     []byte
		ms    int64
		given bool
		ok    bool
	}{
		{"absent", nil, 0, false, true},
		{"int8", hdr(int8(5)), 5, true, true},
		{"int16", hdr(int16(300)), 300, true, true},
		{"int32", hdr(int32(60000)), 60000, true, true},
		{"int64", hdr(int64(315_360_000_000)), 315_360_000_000, true, true},
		{"string", hdr("2500"), 2500, true, true},
		{"zero", hdr(int32(0)), 0, true, true},
		{"negative", hdr(int32(-1)), 0, true, false},
		{"too large", hdr(int64(315_360_000_001)), 0, true, false},
		{"string junk", hdr("soon"), 0, true, false},
		{"string negative", hdr("-5"), 0, true, false},
		{"float", hdr(1.5), 0, true, false},
		{"bool", hdr(true), 0, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms, given, err := headerMillis(c.h, "x-lease-ms")
			if ms != c.ms || given != c.given || (err == nil) != c.ok {
				t.Fatalf("got %d, given %v, err %v; want %d, %v, ok %v", ms, given, err, c.ms, c.given, c.ok)
			}
		})
	}
}
