package queue

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/internal/poll"
)

func groupPolicy() *Policy {
	p := NoPolicy
	p.GroupHeader = "g"
	return &p
}

func groupMessage(g string, body string) *Message {
	p := amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"g": g}}
	return &Message{Props: p.Append(nil), Body: []byte(body)}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A grouped queue keeps state only for the groups with messages: after
// 100,000 groups of one message each are delivered and acked, it keeps
// none, and the memory they took is given back. The bytes per active
// group (beyond its message) are reported.
func TestGroupsStateDropsAfterDrain(t *testing.T) {
	const n = 100_000
	msgs := make([]*Message, n)
	for i := range msgs {
		msgs[i] = groupMessage(fmt.Sprintf("group-%06d", i), "")
	}
	q := newQueue(t, Config{Name: "groups", Policy: groupPolicy()})
	before := heapInUse()
	for _, m := range msgs {
		q.Publish(m)
	}
	if g := q.Groups(); g != n {
		t.Fatalf("%d groups active, want %d", g, n)
	}
	active := heapInUse()
	perGroup := (active - before) / n
	t.Logf("%d bytes per active group with one ready message (message shared, not counted)", perGroup)
	rec := newRecorder(0)
	c := &Consumer{Tag: "c", Sink: rec}
	if err := q.Consume(c); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() bool { return len(rec.bodies(c)) == n }, "all delivered")
	rec.mu.Lock()
	ds := rec.got[c]
	rec.got[c] = nil
	rec.mu.Unlock()
	for i := 0; i < len(ds); i += 1000 {
		q.Ack(ds[i:min(i+1000, len(ds))], nil)
	}
	ds = nil
	if g := q.Groups(); g != 0 {
		t.Fatalf("%d groups still kept after the drain, want 0", g)
	}
	after := heapInUse()
	if left := (after - before) / n; left > perGroup/10 {
		t.Fatalf("%d bytes per drained group still held (%d per active group)", left, perGroup)
	}
	runtime.KeepAlive(msgs)
}

// A group's messages go to one consumer at a time and in order; another
// consumer gets the other groups meanwhile, and the group once released.
func TestGroupsOwnership(t *testing.T) {
	q := newQueue(t, Config{Name: "groups", Policy: groupPolicy()})
	rec := newRecorder(2)
	a, b := &Consumer{Tag: "a", Sink: rec}, &Consumer{Tag: "b", Sink: rec}
	for _, c := range []*Consumer{a, b} {
		if err := q.Consume(c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		q.Publish(groupMessage("x", fmt.Sprintf("x%d", i)))
	}
	q.Publish(groupMessage("y", "y0"))
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(a))+len(rec.bodies(b)) == 3 }, "three delivered")
	holder, other := a, b
	if len(rec.bodies(b)) == 2 {
		holder, other = b, a
	}
	if got := fmt.Sprint(rec.bodies(holder)); got != "[x0 x1]" {
		t.Fatalf("holder got %s", got)
	}
	if got := fmt.Sprint(rec.bodies(other)); got != "[y0]" {
		t.Fatalf("other got %s", got)
	}
	rec.mu.Lock()
	x0 := rec.got[holder][0]
	rec.mu.Unlock()
	q.Requeue([]Delivery{x0}, nil) // x0 back ahead of x2; x1 still held
	q.Kick(other, nil)
	if n, _, _ := q.Stats(); n != 3 {
		t.Fatalf("%d ready, want 3", n)
	}
	if got := fmt.Sprint(rec.bodies(other)); got != "[y0]" {
		t.Fatalf("other got %s while the group is held", got)
	}
}

// BenchmarkGroupsPublishDeliverAck is BenchmarkPublishDeliverAck on a
// grouped queue: 10,000 groups in turn.
func BenchmarkGroupsPublishDeliverAck(b *testing.B) {
	s := &lastSink{}
	q := New(Config{Name: "bench", Policy: groupPolicy()})
	defer func() { _, _ = q.Delete(false, false); <-q.Done() }()
	c := &Consumer{Tag: "c", Sink: s, Out: &outlet{}}
	_ = q.Consume(c)
	props := make([][]byte, 10000)
	for i := range props {
		p := amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"g": fmt.Sprint(i)}}
		props[i] = p.Append(nil)
	}
	var fl Flushes
	ds := make([]Delivery, 1)
	b.ReportAllocs()
	b.SetBytes(1024)
	i := 0
	for b.Loop() {
		q.PublishConfirm(&Message{Props: props[i%len(props)], Body: make([]byte, 1024)}, nil, &fl)
		i++
		ds[0] = s.last
		q.Ack(ds, &fl)
		fl.Flush()
	}
}

// A policy naming a header makes a running queue grouped: the messages it
// holds are filed by group, in order.
func TestGroupsEnabledByPolicy(t *testing.T) {
	q := newQueue(t, Config{Name: "late"})
	for i := range 3 {
		q.Publish(groupMessage("y", fmt.Sprintf("y%d", i)))
	}
	if err := q.SetPolicy(*groupPolicy()); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	a, b := &Consumer{Tag: "a", Sink: rec}, &Consumer{Tag: "b", Sink: rec}
	for _, c := range []*Consumer{a, b} {
		if err := q.Consume(c); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 5*time.Second, func() bool { return len(rec.bodies(a))+len(rec.bodies(b)) == 1 }, "one delivered")
	if n, _, _ := q.Stats(); n != 2 {
		t.Fatalf("%d ready, want 2: the group is held by one consumer", n)
	}
	if q.Groups() != 1 {
		t.Fatalf("%d groups, want 1", q.Groups())
	}
}
