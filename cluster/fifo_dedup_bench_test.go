package cluster

import (
	"strconv"
	"testing"
)

// BenchmarkFifoDedup: a quorum queue state's enqueue and no-ack get with
// deduplication off and on (unique ids, so none is refused), and on
// with every enqueue a duplicate of a held message. Off is the state
// machine of every quorum queue that does not ask for deduplication: its
// only added cost is a nil check per enqueue and per removal.
func BenchmarkFifoDedup(b *testing.B) {
	body := make([]byte, 1024)
	ids := make([][]byte, 4096)
	for i := range ids {
		ids[i] = []byte("order-" + strconv.Itoa(i))
	}
	for _, bc := range []struct {
		name    string
		dedup   bool
		dupOnly bool
	}{{"off", false, false}, {"on", true, false}, {"on/duplicates", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
			if bc.dedup {
				f.setDedupKey(idKey)
			}
			held := []byte("held")
			if bc.dupOnly {
				f.Apply(Enqueue(0, Message{RoutingKey: "q", Props: held, Body: body}))
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			i := 0
			for b.Loop() {
				if bc.dupOnly {
					if e := f.Apply(Enqueue(int64(i), Message{RoutingKey: "q", Props: held, Body: body})); !e.Duplicate {
						b.Fatal("not a duplicate")
					}
					continue
				}
				if e := f.Apply(Enqueue(int64(i), Message{RoutingKey: "q", Props: ids[i%len(ids)], Body: body})); !e.Accepted {
					b.Fatal("refused")
				}
				i++
				if e := f.Apply(Dequeue("g", true)); len(e.Deliveries) != 1 {
					b.Fatal("no message")
				}
			}
		})
	}
}
