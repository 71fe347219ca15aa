package amqp

import (
	"bufio"
	"bytes"
	"testing"
)

// loopReader replays the same bytes forever.
type loopReader struct {
	p   []byte
	off int
}

func (l *loopReader) Read(b []byte) (int, error) {
	n := copy(b, l.p[l.off:])
	l.off = (l.off + n) % len(l.p)
	return n, nil
}

// BenchmarkDecodePublish reads and decodes basic.publish + header + body
// as the connection's reader does: the body is left in the reader's buffer
// (the broker copies it into the message it keeps).
func BenchmarkDecodePublish(b *testing.B) {
	for _, size := range []int{16, 1024, 65536} {
		b.Run(byteSize(size), func(b *testing.B) {
			var s []byte
			s = AppendMethodFrame(s, 1, &BasicPublish{Exchange: "amq.direct", RoutingKey: "work"})
			props := (&Properties{Flags: FlagDeliveryMode | FlagContentType, DeliveryMode: 2, ContentType: "application/json"}).Append(nil)
			s = AppendContent(s, 1, ClassBasic, props, make([]byte, size), 131072)
			fr := NewFrameReader(bufio.NewReaderSize(&loopReader{p: s}, 1<<16))
			fr.Max = 131072
			var d Decoder
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				f, err := fr.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				m, err := d.Decode(f.Payload)
				if err != nil || m.(*BasicPublish).RoutingKey != "work" {
					b.Fatal(err)
				}
				f, _ = fr.ReadFrame()
				h, err := ParseContentHeader(f.Payload)
				if err != nil {
					b.Fatal(err)
				}
				for got := uint64(0); got < h.BodySize; {
					f, _ = fr.ReadFrame()
					got += uint64(len(f.Payload))
				}
			}
		})
	}
}

// BenchmarkEncodeDeliver appends basic.deliver + header + body into a
// reused outbound buffer, as a connection's writer path does.
func BenchmarkEncodeDeliver(b *testing.B) {
	for _, size := range []int{16, 1024, 65536} {
		b.Run(byteSize(size), func(b *testing.B) {
			props := (&Properties{Flags: FlagDeliveryMode, DeliveryMode: 2}).Append(nil)
			body := make([]byte, size)
			d := &BasicDeliver{ConsumerTag: "amq.ctag-abcdefghijklmnop", Exchange: "amq.direct", RoutingKey: "work"}
			var out []byte
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				d.DeliveryTag++
				out = AppendMethodFrame(out[:0], 1, d)
				out = AppendContent(out, 1, ClassBasic, props, body, 131072)
			}
			_ = bytes.MinRead
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1024 && n%1024 == 0:
		return itoa(n/1024) + "KiB"
	default:
		return itoa(n) + "B"
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// BenchmarkEncodeDeliverFresh is BenchmarkEncodeDeliver into a fresh
// buffer, as the writer's after a burst (it keeps none over 1 MiB): a
// large body must be copied once, into a buffer grown once, not through
// append's successive growths (a 20 MiB body copied about four times).
func BenchmarkEncodeDeliverFresh(b *testing.B) {
	for _, size := range []int{65536, 1 << 20, 20 << 20} {
		b.Run(byteSize(size), func(b *testing.B) {
			props := (&Properties{Flags: FlagDeliveryMode, DeliveryMode: 2}).Append(nil)
			body := make([]byte, size)
			d := &BasicDeliver{ConsumerTag: "amq.ctag-abcdefghijklmnop", Exchange: "amq.direct", RoutingKey: "work"}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				d.DeliveryTag++
				out := AppendMethodFrame(nil, 1, d)
				out = AppendContent(out, 1, ClassBasic, props, body, 131072)
				if len(out) < size {
					b.Fatal("short")
				}
			}
		})
	}
}
