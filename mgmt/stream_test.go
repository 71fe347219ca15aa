package mgmt

import (
	"encoding/json"
	"testing"

	"github.com/railmq/railmq/queue"
)

// fakeStream is a stream's Replica that reports given figures: the
// renderer's input, nothing else of a stream.
type fakeStream struct {
	queue.Replica // nil: no operation is called
	st            queue.StreamStats
}

func (f *fakeStream) StreamStats() queue.StreamStats { return f.st }

// render is m as JSON, decoded back (numbers as float64).
func render(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDescribeStream: a stream's object gets RabbitMQ's stream keys
// (type, members, online, leader, readers: 3.10.8's answer for a stream
// on one node; segments, first_timestamp: 4.3.5's
// rabbit_osiris_metrics.erl STATISTICS_KEYS) and railmq's own under
// railmq_stream; keys replication set are kept; a queue that is no
// stream is left as it was.
func TestDescribeStream(t *testing.T) {
	st := queue.StreamStats{First: 10, Next: 60, Segments: 4, Bytes: 123456, FirstTimestamp: 1700000000123, LastTimestamp: 1700000009999,
		Published: 50, SegmentsDeleted: 1, Consumers: []queue.StreamConsumer{{Tag: "a", Offset: 10, Lag: 50}, {Tag: "b", Offset: 60}}}
	q := queue.New(queue.Config{Name: "s", Durable: true, Replica: &fakeStream{st: st}})
	m := render(t, func() map[string]any { m := map[string]any{"type": "classic"}; describeStream(m, q, "n1"); return m }())
	want := `{"first_timestamp":1700000000123,"leader":"n1","members":["n1"],"messages":50,"messages_ready":50,"online":["n1"],` +
		`"railmq_stream":{"consumers":2,"disk_bytes":123456,"first_offset":10,"first_timestamp":1700000000123,"last_offset":59,` +
		`"last_timestamp":1700000009999,"next_offset":60,"published":50,"segments":4,"segments_deleted":1},` +
		`"readers":{"n1":2},"segments":4,"type":"stream"}`
	if b, _ := json.Marshal(m); string(b) != want {
		t.Errorf("stream:\n got %s\nwant %s", b, want)
	}

	// Empty: no last offset.
	q = queue.New(queue.Config{Name: "e", Durable: true, Replica: &fakeStream{st: queue.StreamStats{First: 5, Next: 5, Segments: 1}}})
	m = map[string]any{"members": []string{"n1", "n2", "n3"}, "leader": "n2"}
	describeStream(m, q, "n1")
	m = render(t, m)
	if so := m["railmq_stream"].(map[string]any); so["last_offset"] != nil || so["first_offset"] != 5.0 || so["next_offset"] != 5.0 {
		t.Errorf("empty stream: %v", so)
	}
	if m["leader"] != "n2" || len(m["members"].([]any)) != 3 {
		t.Errorf("replication's keys not kept: %v", m)
	}

	other := queue.New(queue.Config{Name: "c", Replica: struct{ queue.Replica }{}})
	m = map[string]any{"type": "quorum"}
	describeStream(m, other, "n1")
	if len(m) != 1 || m["type"] != "quorum" {
		t.Errorf("a queue that is no stream changed: %v", m)
	}
}

// TestDescribeStreamConsumer: a stream consumer's offset and lag under
// RabbitMQ's stream-protocol names (offset, offset_lag:
// rabbit_stream_metrics.erl, 4.3.5), its tracking name only if it has
// one.
func TestDescribeStreamConsumer(t *testing.T) {
	m := map[string]any{}
	describeStreamConsumer(m, queue.StreamConsumer{Tag: "a", Offset: 7, Lag: 3, Tracking: "svc"})
	if b, _ := json.Marshal(m); string(b) != `{"offset":7,"offset_lag":3,"railmq_offset_tracking":"svc"}` {
		t.Errorf("tracked: %s", b)
	}
	m = map[string]any{}
	describeStreamConsumer(m, queue.StreamConsumer{Tag: "a", Offset: 0, Lag: 0})
	if b, _ := json.Marshal(m); string(b) != `{"offset":0,"offset_lag":0}` {
		t.Errorf("untracked: %s", b)
	}
}
