package channel

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzLeaseInput: any routing key and any encoded headers of a publish to
// amq.railmq.lease or amq.railmq.retry give a tag or an error, and
// milliseconds in range or an error, never a panic.
func FuzzLeaseInput(f *testing.F) {
	f.Add("42", []byte{})
	f.Add("0", []byte("\x0ax-lease-msI\x00\x00\x03\xe8"))
	f.Add("18446744073709551616", []byte("\x07x-delayS\x00\x00\x00\x0212"))
	f.Add("-1", []byte("\x07x-delayS\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, key string, h []byte) {
		tag, err := leaseTag(key)
		if err == nil {
			if tag == 0 || strconv.FormatUint(tag, 10) != strings.TrimLeft(key, "0") {
				t.Fatalf("key %q read as tag %d", key, tag)
			}
		}
		for _, name := range []string{"x-lease-ms", "x-delay"} {
			ms, ok, err := headerMillis(h, name)
			if err == nil && ok && (ms < 0 || ms > int64(maxLease)) {
				t.Fatalf("%s: %d ms out of range", name, ms)
			}
		}
	})
}
