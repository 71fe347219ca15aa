package replica

import (
	"strings"
	"testing"

	"github.com/railmq/railmq/stream"
)

// TestStreamItemRoundTrip: a record travels through a stream's Raft log
// as an item and comes back as it was (a filter value as long as the
// log keeps one, an empty one, empty data); a truncated item is refused.
func TestStreamItemRoundTrip(t *testing.T) {
	for _, rec := range []stream.Record{
		{Timestamp: 1733500000123, Filter: "eu", Data: []byte("payload")},
		{Timestamp: -1, Filter: "", Data: nil},
		{Timestamp: 42, Filter: strings.Repeat("f", 70000), Data: []byte{0, 1, 2}},
	} {
		got, err := decodeItem(encodeItem(&rec))
		if err != nil {
			t.Fatal(err)
		}
		wantFilter := rec.Filter[:min(len(rec.Filter), 65535)]
		if got.Timestamp != rec.Timestamp || got.Filter != wantFilter || string(got.Data) != string(rec.Data) {
			t.Fatalf("round trip: %d %d %q, want %d %d %q", got.Timestamp, len(got.Filter), got.Data, rec.Timestamp, len(wantFilter), rec.Data)
		}
	}
	it := encodeItem(&stream.Record{Timestamp: 1, Filter: "abc", Data: []byte("x")})
	for n := range 12 {
		if _, err := decodeItem(it[:n]); err == nil {
			t.Fatalf("an item cut to %d bytes decoded", n)
		}
	}
}
