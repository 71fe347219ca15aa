package cluster

import "testing"

// BenchmarkFifoReturnCycle: one message returned and redelivered, the
// state machine's cost of a requeue (a return, the checkout it makes),
// with the default delivery limit; 1,000 other messages wait behind it.
func BenchmarkFifoReturnCycle(b *testing.B) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	for i := 0; i < 1001; i++ {
		f.Apply(Enqueue(1, Message{Body: make([]byte, 16)}))
	}
	id := f.Apply(Checkout("c", 1)).Deliveries[0].ID
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := f.Apply(Return("c", id))
		if len(e.Deliveries) != 1 {
			b.Fatalf("%+v", e)
		}
		id = e.Deliveries[0].ID
	}
}
