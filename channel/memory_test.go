package channel

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// memChannel opens channel 1 in a vhost whose queues count into the same
// counter as the channel, as the broker wires them, with a transient
// queue "q" declared.
func memChannel(t *testing.T) (*Channel, *sink, *atomic.Int64) {
	t.Helper()
	mem := new(atomic.Int64)
	vh := vhost.New("/", mem, nil, nil, 0, 0)
	s := &sink{}
	c := New(Config{Number: 1, Sink: s, VHost: vh, MaxMessageSize: 128 << 20, Memory: mem})
	t.Cleanup(func() {
		c.Close()
		vh.Close()
	})
	if err := c.HandleMethod(&amqp.QueueDeclare{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	s.take()
	return c, s, mem
}

// header is a content header frame declaring size body bytes, whatever
// follows it.
func header(size uint64, props []byte) amqp.Frame {
	p := binary.BigEndian.AppendUint16(nil, amqp.ClassBasic)
	p = append(p, 0, 0) // weight
	p = binary.BigEndian.AppendUint64(p, size)
	if len(props) == 0 {
		props = []byte{0, 0}
	}
	return amqp.Frame{Type: amqp.FrameHeader, Channel: 1, Payload: append(p, props...)}
}

func bodyFrame(n int) amqp.Frame {
	return amqp.Frame{Type: amqp.FrameBody, Channel: 1, Payload: make([]byte, n)}
}

// startPublish sends basic.publish to the default exchange with key.
func startPublish(t *testing.T, c *Channel, key string) {
	t.Helper()
	if err := c.HandleMethod(&amqp.BasicPublish{RoutingKey: key}); err != nil {
		t.Fatal(err)
	}
}

func handle(t *testing.T, c *Channel, fs ...amqp.Frame) {
	t.Helper()
	for _, f := range fs {
		if err := c.HandleContent(f); err != nil {
			t.Fatal(err)
		}
	}
}

// publishBody publishes n bytes to key in frames of at most 128 KiB.
func publishBody(t *testing.T, c *Channel, key string, n int) {
	t.Helper()
	startPublish(t, c, key)
	handle(t, c, contentFrames(t, nil, make([]byte, n))...)
}

func method(t *testing.T, c *Channel, m amqp.Method) {
	t.Helper()
	if err := c.HandleMethod(m); err != nil {
		t.Fatalf("%s: %v", m.Name(), err)
	}
}

// drainAcked takes every message of q with basic.get and acks them all.
func drainAcked(t *testing.T, c *Channel, s *sink, n int) {
	t.Helper()
	s.take()
	for range n {
		method(t, c, &amqp.BasicGet{Queue: "q"})
	}
	for _, m := range s.take() {
		if _, ok := m.(*amqp.BasicGetOk); !ok {
			t.Fatalf("basic.get answered %#v", m)
		}
	}
	method(t, c, &amqp.BasicAck{Multiple: true}) // tag 0, multiple: all
}

func settles(t *testing.T, mem *atomic.Int64, want int64, what string) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, func() bool { return mem.Load() == want }, "%s: counter %d, want %d", what, mem.Load(), want)
}

// A header's declared size reserves nothing: the buffer grows with the
// body frames, to at most twice what arrived and never past the declared
// size, and ends exactly the size of the body. The counter follows it.
func TestBodyBufferGrowsWithFrames(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared uint64
		frames   []int
	}{
		{"128 MiB declared, 10 bytes sent", 128 << 20, []int{10}},
		{"one frame", 1000, []int{1000}},
		{"two frames", 1000, []int{600, 400}},
		{"many small frames", 1000, []int{1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 488}},
		{"frame_max frames", 1 << 20, []int{131064, 131064, 131064, 131064, 131064, 131064, 131064, 131064, 64}},
		{"doubling overshoots the declared size", 300, []int{100, 100, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, mem := memChannel(t)
			method(t, c, &amqp.TxSelect{}) // the message stays in the channel, to be looked at
			startPublish(t, c, "q")
			handle(t, c, header(tc.declared, nil))
			if c.buf != nil || mem.Load() != 0 {
				t.Fatalf("after the header: %d bytes buffered, counter %d", cap(c.buf), mem.Load())
			}
			var got uint64
			for i, n := range tc.frames {
				handle(t, c, bodyFrame(n))
				got += uint64(n)
				if got == tc.declared {
					break
				}
				held := uint64(cap(c.buf) - c.plen)
				if held > 2*got || held > tc.declared {
					t.Fatalf("after frame %d (%d of %d bytes): the body's buffer holds %d", i, got, tc.declared, held)
				}
				if int64(cap(c.buf)) != mem.Load() {
					t.Fatalf("after frame %d: buffer %d bytes, counter %d", i, cap(c.buf), mem.Load())
				}
			}
			if got < tc.declared {
				c.Close()
				if mem.Load() != 0 || c.buf != nil {
					t.Fatalf("closed mid-body: counter %d, %d bytes buffered", mem.Load(), cap(c.buf))
				}
				return
			}
			if len(c.txOps) != 1 {
				t.Fatalf("%d ops deferred", len(c.txOps))
			}
			body := c.txOps[0].msg.Body
			if uint64(len(body)) != tc.declared || cap(body) != len(body) {
				t.Fatalf("body: len %d cap %d, want both %d", len(body), cap(body), tc.declared)
			}
		})
	}
}

// A body that arrives in one frame is allocated once, with its
// properties: the message and its buffer are all a publish allocates.
func TestSingleFrameBodyAllocatesOnce(t *testing.T) {
	c, _, _ := memChannel(t)
	fs := contentFrames(t, []byte{0x10, 0, 2}, make([]byte, 1000)) // delivery-mode 2
	pub := &amqp.BasicPublish{Exchange: "amq.direct", RoutingKey: "nowhere"}
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.HandleMethod(pub); err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if err := c.HandleContent(f); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs > 2 {
		t.Fatalf("%.1f allocations per publish, want 2 (buffer and message)", allocs)
	}
}

// queued is what a queue counts for a message of n body bytes without
// properties published to the default exchange with key.
func queued(n int, key string) int64 {
	return (&queue.Message{RoutingKey: key, Props: (&amqp.Properties{}).Append(nil), Body: make([]byte, n)}).MemSize()
}

// What a channel holds for its client is counted in the broker's memory
// counter, and given back exactly once: the counter returns to where it
// was after each path a message can take.
func TestMemoryAccounting(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64)
	}{
		{"routed, consumed and acked", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			startPublish(t, c, "q")
			handle(t, c, header(mib, nil), bodyFrame(100<<10))
			if used := mem.Load(); used < 100<<10 || used > 200<<10+16 {
				t.Fatalf("mid-body: counter %d, want the buffer's 100-200 KiB and the properties", used)
			}
			handle(t, c, bodyFrame(mib-100<<10))
			if used, want := mem.Load(), queued(mib, "q"); used != want {
				t.Fatalf("routed: counter %d, want the queue's %d", used, want)
			}
			drainAcked(t, c, s, 1)
		}},
		{"unroutable", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			publishBody(t, c, "nowhere", mib)
		}},
		{"unroutable and mandatory: returned", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.BasicPublish{RoutingKey: "nowhere", Mandatory: true})
			handle(t, c, contentFrames(t, nil, make([]byte, mib))...)
		}},
		{"refused: bad expiration", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			startPublish(t, c, "q")
			props := (&amqp.Properties{Flags: amqp.FlagExpiration, Expiration: "soon"}).Append(nil)
			fs := contentFrames(t, props, make([]byte, mib))
			handle(t, c, fs[:len(fs)-1]...)
			var e *amqp.Error
			if err := c.HandleContent(fs[len(fs)-1]); !errors.As(err, &e) || e.Code != amqp.PreconditionFailed {
				t.Fatalf("got %v, want 406", err)
			}
		}},
		{"tx: committed, consumed and acked", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.TxSelect{})
			for range 3 {
				publishBody(t, c, "q", mib)
			}
			if used := mem.Load(); used < 3*mib {
				t.Fatalf("uncommitted: counter %d, want at least %d", used, 3*mib)
			}
			method(t, c, &amqp.TxCommit{})
			if used, want := mem.Load(), 3*queued(mib, "q"); used != want {
				t.Fatalf("committed: counter %d, want the queue's %d", used, want)
			}
			drainAcked(t, c, s, 3)
			method(t, c, &amqp.TxCommit{}) // the ack, deferred too
		}},
		{"tx: rolled back", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.TxSelect{})
			for range 3 {
				publishBody(t, c, "q", mib)
			}
			method(t, c, &amqp.BasicAck{DeliveryTag: 7}) // deferred too, and counted
			method(t, c, &amqp.TxRollback{})
			if c.txOps != nil {
				t.Fatalf("%d ops kept (cap %d) after the rollback", len(c.txOps), cap(c.txOps))
			}
		}},
		{"tx: commit fails half way", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.TxSelect{})
			publishBody(t, c, "q", mib)
			method(t, c, &amqp.BasicPublish{Exchange: "missing"})
			handle(t, c, contentFrames(t, nil, make([]byte, mib))...)
			publishBody(t, c, "q", mib)
			var e *amqp.Error
			if err := c.HandleMethod(&amqp.TxCommit{}); !errors.As(err, &e) || e.Code != amqp.NotFound {
				t.Fatalf("got %v, want 404", err)
			}
			if used, want := mem.Load(), queued(mib, "q"); used != want {
				t.Fatalf("after the failed commit: counter %d, want the queue's %d", used, want)
			}
			drainAcked(t, c, s, 1)
			method(t, c, &amqp.TxCommit{})
		}},
		{"tx: acks only, rolled back", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.TxSelect{})
			for tag := range uint64(1000) {
				method(t, c, &amqp.BasicNack{DeliveryTag: tag + 1})
			}
			if mem.Load() < 1000*txOpSize {
				t.Fatalf("1000 deferred acks counted %d bytes", mem.Load())
			}
			method(t, c, &amqp.TxRollback{})
		}},
		{"closed mid-body", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			startPublish(t, c, "q")
			handle(t, c, header(128<<20, nil), bodyFrame(mib))
			if mem.Load() == 0 {
				t.Fatal("the body being assembled is not counted")
			}
			c.Close()
		}},
		{"closed after the header", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			startPublish(t, c, "q")
			handle(t, c, header(128<<20, nil))
			c.Close()
		}},
		{"closed after a header with large properties", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			startPublish(t, c, "q")
			props := (&amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"big": string(make([]byte, 100<<10))}}).Append(nil)
			handle(t, c, header(mib, props))
			if mem.Load() < 100<<10 {
				t.Fatalf("100 KiB of properties counted %d bytes", mem.Load())
			}
			c.Close()
		}},
		{"closed mid-transaction", func(t *testing.T, c *Channel, s *sink, mem *atomic.Int64) {
			method(t, c, &amqp.TxSelect{})
			for range 3 {
				publishBody(t, c, "q", mib)
			}
			startPublish(t, c, "q")
			handle(t, c, header(mib, nil), bodyFrame(1000))
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, mem := memChannel(t)
			tc.run(t, c, s, mem)
			settles(t, mem, 0, tc.name)
			if c.asmHeld != 0 || c.txHeld != 0 {
				t.Fatalf("the channel still counts %d (assembly) and %d (transaction)", c.asmHeld, c.txHeld)
			}
		})
	}
}
