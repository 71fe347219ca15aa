package cluster

import (
	"fmt"
	"testing"
)

// BenchmarkFifoGroups: the state machine's cost per message on a queue
// of 10,000 groups with a backlog of 100,000 ready messages and 8
// consumers of prefetch 10 (each holding up to 10 groups), a message
// enqueued and one settled (which makes room for the next delivery),
// against the same on a plain queue. The group id is the props here
// (a test key; replica's reads the header, queue.GroupKey).
func BenchmarkFifoGroups(b *testing.B) {
	const backlog, groups, consumers = 100_000, 10_000, 8
	body := make([]byte, 1024)
	keys := make([][]byte, groups)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("tenant-", i))
	}
	for _, grouped := range []bool{false, true} {
		b.Run(fmt.Sprintf("grouped=%v", grouped), func(b *testing.B) {
			f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
			if grouped {
				f.setGroupKey(grpKey)
			}
			for i := 0; i < backlog; i++ {
				f.Apply(Enqueue(int64(i), Message{RoutingKey: "q", Props: keys[i%groups], Body: body}))
			}
			var out [][]uint64
			tags, index := make([]string, consumers), map[string]int{}
			for c := range consumers {
				tag := fmt.Sprint("c", c)
				tags[c], index[tag] = tag, c
				var ids []uint64
				for _, d := range f.Apply(Checkout(tag, 10)).Deliveries {
					ids = append(ids, d.ID)
				}
				out = append(out, ids)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Apply(Enqueue(int64(i), Message{RoutingKey: "q", Props: keys[i%groups], Body: body}))
				c := i % consumers
				e := f.Apply(Settle(tags[c], out[c][0]))
				out[c] = out[c][1:]
				for _, d := range e.Deliveries {
					out[index[d.Consumer]] = append(out[index[d.Consumer]], d.ID)
				}
			}
		})
	}
}
