package queue

import "testing"

// BenchmarkRequeueRedeliver is a consumer that requeues every delivery
// (a nack with requeue, or a channel's close) on a queue without a retry
// delay: the message goes back and out again at once, inline.
func BenchmarkRequeueRedeliver(b *testing.B) {
	s := &lastSink{}
	q := New(Config{Name: "bench"})
	defer func() { _, _ = q.Delete(false, false); <-q.Done() }()
	c := &Consumer{Tag: "c", Sink: s, Out: &outlet{}}
	_ = q.Consume(c)
	var fl Flushes
	q.PublishConfirm(&Message{Body: make([]byte, 1024)}, nil, &fl)
	fl.Flush()
	ds := make([]Delivery, 1)
	b.ReportAllocs()
	for b.Loop() {
		ds[0] = s.last
		q.Requeue(ds, &fl)
		fl.Flush()
	}
}
