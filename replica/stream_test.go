package replica

import (
	"bytes"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/stream"
)

func TestStreamRecordRoundTrip(t *testing.T) {
	props := (&amqp.Properties{Flags: amqp.FlagHeaders | amqp.FlagDeliveryMode, DeliveryMode: 2,
		Headers: amqp.Table{"x-stream-filter-value": "eu", "nested": amqp.Table{"a": []any{int32(1)}}}}).Append(nil)
	for _, m := range []*queue.Message{
		{Exchange: "", RoutingKey: "q", Props: []byte{0, 0}, Body: nil},
		{Exchange: "amq.topic", RoutingKey: "a.b.c", Props: props, Body: bytes.Repeat([]byte("x"), 70000)},
	} {
		r, err := decodeRecord(encodeRecord(m))
		if err != nil {
			t.Fatal(err)
		}
		if string(r.exchange) != m.Exchange || string(r.key) != m.RoutingKey || !bytes.Equal(r.props, m.Props) || !bytes.Equal(r.body, m.Body) {
			t.Fatalf("round trip of %+v gave %+v", m, r)
		}
	}
	if got := filterValue(props); got != "eu" {
		t.Fatalf("filterValue = %q, want eu", got)
	}
	if got := filterValue([]byte{0, 0}); got != "" {
		t.Fatalf("filterValue of no headers = %q", got)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(&queue.Message{Exchange: "x", RoutingKey: "k", Props: []byte{0, 0}, Body: []byte("b")}))
	f.Add([]byte{})
	f.Add([]byte{5, 'a'})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decodeRecord(p)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		again := encodeRecord(&queue.Message{Exchange: string(r.exchange), RoutingKey: string(r.key), Props: r.props, Body: r.body})
		if !bytes.Equal(again, p) {
			t.Fatalf("decode/encode changed the record")
		}
	})
}

func TestOffsetSpec(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		want stream.Spec
		ok   bool
	}{
		{"first", stream.Spec{Kind: stream.First}, true},
		{"last", stream.Spec{Kind: stream.Last}, true},
		{"next", stream.Spec{Kind: stream.Next}, true},
		{int64(42), stream.Spec{Kind: stream.Offset, Offset: 42}, true},
		{int8(7), stream.Spec{Kind: stream.Offset, Offset: 7}, true},
		{int32(-5), stream.Spec{Kind: stream.Offset, Offset: 0}, true},
		{"1h", stream.Spec{Kind: stream.Timestamp, Timestamp: now.Add(-time.Hour).UnixMilli()}, true},
		{"7D", stream.Spec{Kind: stream.Timestamp, Timestamp: now.Add(-7 * 24 * time.Hour).UnixMilli()}, true},
		{time.Unix(1700000000, 0), stream.Spec{Kind: stream.Timestamp, Timestamp: 1700000000000}, true},
		{"2026-12-06T10:00:00.250Z", stream.Spec{Kind: stream.Timestamp, Timestamp: time.Date(2026, 12, 6, 10, 0, 0, 250e6, time.UTC).UnixMilli()}, true},
		{"FIRST", stream.Spec{}, false},
		{"0s", stream.Spec{}, false},
		{"", stream.Spec{}, false},
		{1.5, stream.Spec{}, false},
		{true, stream.Spec{}, false},
	} {
		got, ok := offsetSpec(tc.v, now)
		if ok != tc.ok || got != tc.want {
			t.Errorf("offsetSpec(%#v) = %+v, %v; want %+v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestStreamFilterArgs(t *testing.T) {
	if f := streamFilter(amqp.Table{}); f != nil {
		t.Fatalf("no x-stream-filter: %+v", f)
	}
	f := streamFilter(amqp.Table{"x-stream-filter": []any{"a", int32(3), "b"}, "x-stream-match-unfiltered": true})
	if f == nil || len(f.Values) != 2 || f.Values[0] != "a" || f.Values[1] != "b" || !f.MatchUnfiltered {
		t.Fatalf("array filter: %+v", f)
	}
	f = streamFilter(amqp.Table{"x-stream-filter": "eu"})
	if f == nil || len(f.Values) != 1 || f.MatchUnfiltered {
		t.Fatalf("string filter: %+v", f)
	}
}

// TestTrackedWindowBounded: a tracked consumer that leaves its first
// delivery unacked and acks every later one keeps a window about the size
// of what it has not settled, not one entry per delivery ever made, and
// its stored offset stays at the unacked one.
func TestTrackedWindowBounded(t *testing.T) {
	lg, err := stream.Open(t.TempDir(), stream.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lg.Close() }()
	sc := &streamConsumer{sq: &streamQueue{log: lg}, track: "t"}
	const n = 100_000
	sc.window = append(sc.window, unackedOffset{off: 0})
	for off := uint64(1); off < n; off++ {
		sc.window = append(sc.window, unackedOffset{off: off})
		sc.offset.Store(off + 1) // as pump records what it delivered
		sc.out.Add(1)
		sc.settled([]queue.Delivery{{Seq: off}}, false)
	}
	if live := len(sc.window) - sc.head; live > 2100 {
		t.Fatalf("window holds %d entries for 1 unsettled delivery", live)
	}
	if off, ok := lg.TrackedOffset("t"); !ok || off != 0 {
		t.Fatalf("stored offset %d (%v), want 0", off, ok)
	}
	sc.settled([]queue.Delivery{{Seq: 0}}, false)
	if off, _ := lg.TrackedOffset("t"); off != n {
		t.Fatalf("stored offset %d once everything was acked, want %d", off, n)
	}
}
