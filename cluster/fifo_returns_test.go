package cluster

import (
	"fmt"
	"reflect"
	"testing"
)

// TestFifoReturnsInReturnOrder: returned messages wait in the returns
// queue, ahead of the rest, in the order they came back (one command's
// several in id order). As rabbit_fifo (v4.3.5 deps/rabbit/src/
// rabbit_fifo.erl return_one/6 appends to the returns, lqueue:in;
// return_all/5 goes by message id), and as RabbitMQ 3.10.8 answered with
// a delivery limit set: basic.get m1, m2, m3, nack m1, m3, m2 one by one,
// then basic.get gives m1, m3, m2, m4, m5 (conformance TestRequeueOrder).
func TestFifoReturnsInReturnOrder(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	for i := 1; i <= 8; i++ {
		f.Apply(Enqueue(int64(i), msg(fmt.Sprintf("m%d", i))))
	}
	get := func(tag string) string {
		t.Helper()
		e := f.Apply(Dequeue(tag, false))
		if len(e.Deliveries) != 1 {
			t.Fatalf("dequeue %s: %+v", tag, e)
		}
		return string(e.Deliveries[0].Msg.Body)
	}
	for i := 1; i <= 5; i++ {
		get(fmt.Sprintf("g%d", i)) // m1..m5 checked out, one getter each
	}
	f.Apply(Return("g1", 1))
	f.Apply(Return("g3", 3))
	f.Apply(Return("g2", 2))
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, get(fmt.Sprintf("h%d", i)))
	}
	if want := []string{"m1", "m3", "m2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after nacks of m1, m3, m2: %v, want %v", got, want)
	}
	f.Apply(Return("g5", 5))
	f.Apply(Batch([]Command{Return("g4", 4)}))
	f.Apply(Return("h0", 1))
	got = got[:0]
	for i := 0; i < 6; i++ {
		got = append(got, get(fmt.Sprintf("k%d", i)))
	}
	if want := []string{"m5", "m4", "m1", "m6", "m7", "m8"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after returns of m5, m4, m1: %v, want %v", got, want)
	}
}
