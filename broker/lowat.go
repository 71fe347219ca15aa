package broker

import (
	"math"
	"syscall"
	"time"
	"unsafe"

	"github.com/railmq/railmq/amqp"
)

// Ack coalescing. A consumer that acks each delivery with a write of its
// own (amqp091-go, pika and amqplib all do) wakes the broker once for
// every ack or two at a light load: the reader sleeps in the poller, an
// ack wakes it, it handles one frame and sleeps again. On this kind of
// machine a sleep and a wake-up cost more than everything the ack does.
//
// So when a wake-up brought a consumer's connection nothing but a few
// acks (at most coalesceMaxAcks, or any number that a raised mark held
// back: the acks of what was delivered meanwhile, not a busy consumer's
// batch), and its consumers have at least half
// their prefetch free (no delivery waits for those acks) and consume from
// classic queues on this node (Channel.AckWait: a quorum queue's acks
// must reach its leader before a failover hands the messages out
// again; TestClusterFaults saw acked messages come back when they were
// held), the reader raises the socket's receive low-water mark
// (SO_RCVLOWAT) before it parks: past the acks of what is outstanding, or
// to maxLowat when nothing is (then past the acks of the next
// deliveries). The kernel does not report the socket readable for input
// below the mark. What it holds back is read
//   - at the delivery that uses up the room the raise left (its consumers
//     back at half their prefetch unacked, counting what was delivered
//     since): the goroutine that writes it (Flush, or the writer) lowers
//     the mark (poke), and the reader, woken in the same pass, handles
//     what was held and raises the mark past the acks of what is
//     outstanding then, if there is room again. So
//     no delivery waits for held acks, a multi-ack every 50 among them.
//     Poking at every delivery instead cost two setsockopt calls a
//     delivery write: S5 (bench/compare.sh AGAINST, 6 rounds) went from
//     2.11 to 1.43 system calls and from 11.9 to 10.9 µs of broker CPU a
//     message, p99 289 to 283 µs;
//   - at the latest when the wait (Options.AckCoalescingWait, 10 ms) has
//     passed since the mark was first raised: a read deadline, fixed
//     until it fires (moving a timer later still wakes the poller at its
//     old time), after which the mark stays down until the next wake-up
//     that brought only acks;
//   - at once when the input reaches the mark (more acks than outstanding,
//     or other frames after them).
//
// A connection that has published is never coalesced, so a publish is
// never held back, and a closing one neither. What may wait, up to the
// wait, is a small frame (a channel.close, a basic.cancel, a heartbeat)
// sent while the mark is up. Input held back is read even when
// the client resets the connection after it (the kernel keeps what it
// received). --coalesce-acks=false turns it off.
//
// Measured (S5, 5,000 msg/s, 1 KiB, amqp091-go, prefetch 300; side by
// side with the build before, 3 runs each, twice): the broker's sleeps
// from 2,413 to 1,631 a second, its CPU from 16.8 to 12.9 and from 13.9
// to 11.5 µs a message (medians), p99 from 424 to 354 µs
// (bench/RESULTS.md).
type ackCoalescer struct {
	acks      int   // ack, nack and reject frames since the reader last parked
	other     bool  // any other frame since then
	publisher bool  // the connection has published: never coalesced
	set       int   // the low-water mark the reader set last (≤ 1: the default)
	until     int64 // the latest the reader reads what the mark holds back (unix ns; 0: none)
}

const (
	// ackFrameSize is the bytes of a basic.ack, basic.nack or basic.reject
	// frame: 7 of header, 4 of method id, an 8-byte tag, the bits, the end.
	ackFrameSize = 7 + 4 + 8 + 1 + 1
	// coalesceMaxAcks: a wake-up that brought more acks than this is a
	// busy consumer, whose reads are already batched.
	coalesceMaxAcks = 8
	// maxLowat caps the mark, well below any receive buffer (setting a mark
	// above half of it would grow the buffer).
	maxLowat = 8 << 10
)

// note classifies a frame the reader is about to handle in push mode.
func (k *ackCoalescer) note(f amqp.Frame) {
	if f.Type == amqp.FrameMethod && len(f.Payload) >= 4 && f.Payload[0] == 0 && f.Payload[1] == amqp.ClassBasic && f.Payload[2] == 0 {
		switch f.Payload[3] {
		case 80, 90, 120: // ack, reject, nack
			k.acks++
			return
		case 40: // publish
			k.publisher = true
		}
	}
	k.other = true
}

// coalesceAcks sets the socket's low-water mark for the park the reader
// is about to make (see ackCoalescer). Inside the push-mode callback.
func (c *conn) coalesceAcks() {
	k := &c.coal
	acks, other := k.acks, k.other
	k.acks, k.other = 0, false
	if acks == 0 && !other {
		// Nothing read (the poller's readiness from a lowering whose
		// input was read already): the mark stays as it is.
		return
	}
	// held: the mark this reader raised was lowered since (a poke, or the
	// wait's deadline): this wake-up brought the acks it held back, as
	// many as were delivered meanwhile, not a busy consumer's.
	held := k.set > 1 && !c.lowatRaised.Load()
	want := 1
	if acks > 0 && (acks <= coalesceMaxAcks || held) && !other && !k.publisher && !c.srv.opts.NoAckCoalescing && !c.closing.Load() {
		if n, room, roomy := c.ackWait(); roomy {
			c.lowatRoom.Store(int64(room))
			// Past the acks still to come; with none outstanding, past
			// those of the next deliveries (whose flush reads them).
			want = maxLowat
			if n > 0 {
				want = min(n*ackFrameSize+1, maxLowat)
			}
		}
	}
	if want == 1 {
		if k.set > 1 {
			if c.lowatRaised.CompareAndSwap(true, false) {
				setLowat(c.push.fd, 1)
			}
			k.set = 1
		}
		// A deadline set stays: moving a timer later costs a wake-up at
		// its old time anyway. It lowers nothing when it fires now.
		return
	}
	if want != k.set || !c.lowatRaised.Load() {
		c.lowatGen.Add(1)
		setLowat(c.push.fd, want)
		k.set = want
		c.lowatRaised.Store(true)
	}
	if k.until == 0 {
		// Fixed until it fires, not moved at each park (see above).
		k.until = time.Now().Add(c.srv.opts.AckCoalescingWait).UnixNano()
	}
}

// ackWait sums the deliveries not yet settled over the connection's
// channels, and reports whether every consumer has half its prefetch
// free, and for how many more deliveries at least (Channel.AckWait).
func (c *conn) ackWait() (n, room int, roomy bool) {
	room = math.MaxInt32
	for _, ch := range c.channels {
		o, rm, r := ch.AckWait()
		if !r {
			return 0, 0, false
		}
		n += o
		room = min(room, rm)
	}
	return n, room, true
}

// lowerLowat puts the low-water mark back to 1 if the reader raised it
// (the reader, at the wait's deadline).
func (c *conn) lowerLowat() {
	if c.lowatRaised.Load() && c.lowatRaised.CompareAndSwap(true, false) && c.io.rc != nil {
		_ = c.io.rc.Control(lowatOne)
	}
}

// readHeldAcks has the reader read what the raised mark holds back: from
// a goroutine that just wrote deliveries to the connection. The reader
// then handles those acks in the wake-up under way and raises the mark
// again past the acks of what was just delivered. Only once the
// deliveries since the raise used up the room it left (lowatRoom), so
// that no delivery waits for held acks.
//
// gen is lowatGen as it was before the write took its bytes: a mark
// raised since then was raised by a reader that had counted these
// deliveries already (their acks even: the client may read them, ack
// and have the ack handled before the writer gets back from its write),
// so it stays. Lowering it then lost the raise on a loaded machine
// (TestAckCoalescingClose failed 4 runs in 10 beside a busy core).
func (c *conn) readHeldAcks(gen uint64) {
	if c.lowatRaised.Load() && c.lowatGen.Load() == gen && c.lowatRoom.Load() <= 0 && c.io.rc != nil {
		_ = c.io.rc.Control(c.pokeFn)
	}
}

// poke is readHeldAcks inside RawConn.Control.
func (c *conn) poke(fd uintptr) {
	if c.lowatRaised.CompareAndSwap(true, false) {
		setLowat(fd, 1)
	}
}

// setLowat sets fd's SO_RCVLOWAT, raw (see sockIO). An error leaves the
// mark as it was: the wait's deadline still bounds how long input waits.
func setLowat(fd uintptr, v int) {
	x := int32(v)
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, uintptr(unsafe.Pointer(&x)), 4, 0)
}

func lowatOne(fd uintptr) { setLowat(fd, 1) }
