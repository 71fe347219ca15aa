package cluster

import (
	"fmt"
	"testing"
)

// s3Round is a round of S3's workload as Group.loop gathers one: 1 KiB
// publishes and, among them, a consumer's settles of 50 ids.
func s3Round(n int) []submitItem {
	body := make([]byte, 1024)
	props := []byte{0x10, 0x00, 0x02}
	items := make([]submitItem, 0, n)
	for i := 0; i < n; i++ {
		c := Enqueue(1, Message{Exchange: "perf-x", RoutingKey: "perf-q-1", Props: props, Body: body})
		if i%80 == 79 {
			ids := make([]uint64, 50)
			for j := range ids {
				ids[j] = uint64(i*50 + j)
			}
			c = Settle("node/abc/c1.", ids...)
		}
		items = append(items, submitItem{c: c})
	}
	return items
}

func encodeRound(id string, items []submitItem) []byte {
	cs := make([]Command, len(items))
	for i := range items {
		cs[i] = items[i].c
	}
	c := Batch(cs)
	return c.Encode(make(Enc, 0, roundSize(id, items)).Str(id))
}

// TestRoundSizeCoversEncoding: a round is encoded into the buffer
// roundSize sized, never grown (Group.send).
func TestRoundSizeCoversEncoding(t *testing.T) {
	id := "QvWDb-PCXIfzFPU0xhV2cg"
	for _, n := range []int{1, 2, 80, 512} {
		items := s3Round(n)
		enc := encodeRound(id, items)
		if size := roundSize(id, items); len(enc) > size {
			t.Errorf("%d commands: encoded %d bytes, roundSize %d", n, len(enc), size)
		}
	}
	items := []submitItem{{c: Down("node/", "node/abc/")}, {c: Checkout("node/abc/c1.", 600)}, {c: Tick(5)}}
	if enc := encodeRound(id, items); len(enc) > roundSize(id, items) {
		t.Errorf("encoded %d bytes, roundSize %d", len(enc), roundSize(id, items))
	}
}

// BenchmarkRoundEncode: what encoding one round costs Group.send.
func BenchmarkRoundEncode(b *testing.B) {
	for _, n := range []int{16, 160, 512} {
		items := s3Round(n)
		b.Run(fmt.Sprintf("cmds=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(encodeRound("q", items))))
			for i := 0; i < b.N; i++ {
				encodeRound("QvWDb-PCXIfzFPU0xhV2cg", items)
			}
		})
	}
}
