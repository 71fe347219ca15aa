package cluster

import (
	"fmt"
	"testing"
)

// benchPriorityProps are basic properties with only a priority set.
func benchPriorityProps(p byte) []byte { return []byte{0x08, 0x00, p} }

// BenchmarkFifoApply: the state machine's cost per message with a
// backlog of 100,000 ready: an enqueue and a basic.get (no ack) each, or
// an enqueue delivered to a consumer and settled; plain messages, or
// priorities 0-9 mixed.
func BenchmarkFifoApply(b *testing.B) {
	const backlog = 100_000
	body := make([]byte, 1024)
	for _, prio := range []bool{false, true} {
		mk := func(i int) Message {
			m := Message{RoutingKey: "q", Body: body}
			if prio {
				m.Props = benchPriorityProps(byte(i * 7 % 10))
			}
			return m
		}
		fill := func() *Fifo {
			f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
			for i := 0; i < backlog; i++ {
				f.Apply(Enqueue(int64(i), mk(i)))
			}
			return f
		}
		b.Run(fmt.Sprintf("get/priorities=%v", prio), func(b *testing.B) {
			f := fill()
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Apply(Enqueue(int64(i), mk(i)))
				if e := f.Apply(Dequeue("g", true)); len(e.Deliveries) != 1 {
					b.Fatal("no message")
				}
			}
		})
		b.Run(fmt.Sprintf("consume/priorities=%v", prio), func(b *testing.B) {
			f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
			f.Apply(Checkout("c", 1))
			for i := 0; i < backlog; i++ {
				f.Apply(Enqueue(int64(i), mk(i)))
			}
			next := f.CheckedOut("c")[0].ID
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Apply(Enqueue(int64(i), mk(i)))
				e := f.Apply(Settle("c", next))
				if len(e.Deliveries) != 1 {
					b.Fatal("no delivery")
				}
				next = e.Deliveries[0].ID
			}
		})
	}
}

// BenchmarkFifoManyConsumers: an enqueue delivered to one of 200
// consumers of equal priority with room (round robin), then settled:
// the consumer choice is what it measures.
func BenchmarkFifoManyConsumers(b *testing.B) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	for i := range 200 {
		f.Apply(Checkout(fmt.Sprint("c", i), 1000))
	}
	body := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := f.Apply(Enqueue(int64(i), Message{RoutingKey: "q", Body: body}))
		if len(e.Deliveries) != 1 {
			b.Fatal("no delivery")
		}
		d := e.Deliveries[0]
		f.Apply(Settle(d.Consumer, d.ID))
	}
}
