package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// Classic queues homed on another node (vhost/classic.go): this node's
// handle of one is a queue.Queue whose Replica is a classicProxy, which
// forwards every operation over the cluster link ("cq-rpc") to the home
// node, where a linkSession carries it out on the real queue. A consumer
// here is a consumer there whose Sink sends the deliveries back; it may
// have as many in flight as its channel's prefetch (or, with no-ack or no
// prefetch, a window that this node's writes give back), so a slow
// client here holds no more than RabbitMQ's credit flow would let it.
// When the link breaks, the home requeues what this node's consumers and
// gets had unacked (flagged redelivered) and this node cancels its
// consumers (basic.cancel, as RabbitMQ does when a queue's node goes
// down) and fails what waited for an answer.

// Frame kinds on the link: requests (this node to the home) and what the
// home sends back. Every frame is a 4-byte length, the kind, the payload.
const (
	lkPublish   byte = iota + 1 // req, vhost, queue, message record
	lkConsume                   // req, cid, vhost, queue, tag, flags, prefetch
	lkCancel                    // cid
	lkSettle                    // cid, op, seqs
	lkCredit                    // cid, n
	lkGet                       // req, cid, vhost, queue, flags
	lkPurge                     // req, vhost, queue
	lkDelete                    // req, vhost, queue, flags
	lkStats                     // req, vhost, queue
	lkAnswer                    // req, status, payload
	lkDeliver                   // cid, seq, flags, count, message record
	lkCancelled                 // cid: the queue is gone
)

// Settle ops.
const (
	settleAck byte = iota
	settleRequeue
	settleReturn
	settleDiscard
	settleRetry // a consumer's nack or reject with requeue: held when the queue has x-retry-delay
)

// Answer statuses.
const (
	stOK byte = iota
	stAMQP
	stError
	stRejected
	stExclusive
	stGone
	stInUse
	stNotEmpty
	stDown // never sent: the link broke before the answer came
)

// linkWindow is how many deliveries a consumer without a prefetch (or
// with no-ack) has on their way to this node at once.
const linkWindow = 256

var errHomeDown = errors.New("the queue's home node cannot be reached")

// --- framing ------------------------------------------------------------

type lbuf []byte

func (b lbuf) u8(v byte) lbuf     { return append(b, v) }
func (b lbuf) u64(v uint64) lbuf  { return binary.AppendUvarint(b, v) }
func (b lbuf) str(s string) lbuf  { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
func (b lbuf) blob(p []byte) lbuf { return append(binary.AppendUvarint(b, uint64(len(p))), p...) }

type lread struct {
	p   []byte
	bad bool
}

func (r *lread) u8() byte {
	if len(r.p) < 1 {
		r.bad = true
		return 0
	}
	v := r.p[0]
	r.p = r.p[1:]
	return v
}

func (r *lread) u64() uint64 {
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.p = r.p[n:]
	return v
}

func (r *lread) blob() []byte {
	n := r.u64()
	if r.bad || n > uint64(len(r.p)) {
		r.bad = true
		return nil
	}
	v := r.p[:n]
	r.p = r.p[n:]
	return v
}

func (r *lread) str() string { return string(r.blob()) }

const maxLinkFrame = 256 << 20

// linkWriter is a link's outbound side, as a connection's is (broker's
// writer.go): write appends a frame to the outbound buffer under mu and
// signals the writer goroutine through a one-slot channel; the writer
// swaps the buffer out under mu and writes it to the socket with no lock
// held. Whoever writes a frame thus never waits for the socket, nor for
// another writer that does: a queue delivering to another node's
// consumer under its exec (homeCons.Deliver, homeCons.Cancelled), a
// channel acking or publishing, raft's FSM goroutine handing out a
// delivery (queue/exec.go: no socket is written under a queue's exec).
//
// What waits in the buffer is bounded by what may be in flight on the
// link. The home's deliveries are credit-limited: a consumer of the
// other node has at most its prefetch, or linkWindow, on their way
// (homeCons.Deliver refuses the rest, which stay in the queue until
// credit comes back); answers are one per request. Requests (publishes
// above all) are as many as the other node's clients send: their bytes
// count in the node's memory figure (Options.Memory) while they wait, so
// that a home that falls behind raises the memory alarm, which stops the
// publishers, rather than growing unseen. And a peer that takes nothing
// for linkWriteTimeout fails the link, which drops what waits.
type linkWriter struct {
	conn net.Conn
	mem  *atomic.Int64 // nil: not counted

	mu  sync.Mutex
	out []byte // frames not yet taken by the writer goroutine
	err error  // the link failed or was closed: writes are refused

	kick   chan struct{} // one slot: there is something to write
	done   chan struct{} // closed by close: the writer goroutine returns
	exited chan struct{} // closed when it has
	once   sync.Once
}

// linkWriteTimeout is how long the writer waits for the peer to take a
// chunk (linkChunk) before it fails the link.
const linkWriteTimeout = 30 * time.Second

// linkChunk is the most the writer hands the socket in one write, with
// one deadline: a peer that reads slowly but steadily keeps the link.
const linkChunk = 256 << 10

// linkKeep is the largest buffer the writer keeps for reuse after
// writing it.
const linkKeep = 1 << 20

var errLinkClosed = errors.New("cluster link closed")

func newLinkWriter(conn net.Conn, mem *atomic.Int64) *linkWriter {
	w := &linkWriter{conn: conn, mem: mem, kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go w.run()
	return w
}

// write queues a frame and wakes the writer; it never waits for the
// socket. An error means the link is failed or closed.
func (w *linkWriter) write(kind byte, payload lbuf) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	n := len(w.out)
	w.out = binary.BigEndian.AppendUint32(w.out, uint32(1+len(payload)))
	w.out = append(w.out, kind)
	w.out = append(w.out, payload...)
	if w.mem != nil {
		w.mem.Add(int64(len(w.out) - n))
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// run is the writer goroutine: it writes what was queued since it last
// took the buffer, until the link fails or close.
func (w *linkWriter) run() {
	defer close(w.exited)
	var buf []byte
	for {
		select {
		case <-w.kick:
		case <-w.done:
			w.stop(errLinkClosed)
			return
		}
		w.mu.Lock()
		buf, w.out = w.out, buf[:0]
		w.mu.Unlock()
		for off := 0; off < len(buf); {
			_ = w.conn.SetWriteDeadline(time.Now().Add(linkWriteTimeout))
			n, err := w.conn.Write(buf[off:min(off+linkChunk, len(buf))])
			off += n
			if w.mem != nil {
				w.mem.Add(-int64(n))
			}
			if err != nil {
				if w.mem != nil {
					w.mem.Add(-int64(len(buf) - off))
				}
				w.stop(err)
				// The link's reader sees the socket closed, and fails it.
				w.conn.Close()
				return
			}
		}
		if cap(buf) > linkKeep {
			buf = nil
		}
	}
}

// stop refuses further writes and drops what waits. On the writer
// goroutine.
func (w *linkWriter) stop(err error) {
	w.mu.Lock()
	w.err = err
	if w.mem != nil {
		w.mem.Add(-int64(len(w.out)))
	}
	w.out = nil
	w.mu.Unlock()
}

// close closes the link's socket and waits for the writer goroutine to
// return; what was not written is dropped. Not on the writer goroutine.
func (w *linkWriter) close() {
	w.once.Do(func() { close(w.done) })
	w.conn.Close()
	<-w.exited
}

func readLinkFrame(br *bufio.Reader) (byte, []byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n < 1 || n > maxLinkFrame {
		return 0, nil, errors.New("cluster link: bad frame length")
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, nil, err
	}
	return p[0], p[1:], nil
}

// --- what the frames carry ---------------------------------------------------

func appendDelivery(b lbuf, d queue.Delivery) lbuf {
	var f byte
	if d.Redelivered {
		f = 1
	}
	return b.u64(d.Seq).u8(f).u64(uint64(d.Count)).blob(queue.EncodeMessage(d.Msg))
}

func readDelivery(r *lread) (queue.Delivery, bool) {
	seq, f, count, rec := r.u64(), r.u8(), r.u64(), r.blob()
	if r.bad {
		return queue.Delivery{}, false
	}
	m, err := queue.DecodeMessage(append([]byte(nil), rec...))
	if err != nil {
		return queue.Delivery{}, false
	}
	m.ID, m.Shared, m.Inline = 0, false, false
	return queue.Delivery{Msg: m, Seq: seq, Redelivered: f&1 != 0, Count: uint32(count)}, true
}

// readSettle reads a settle frame: the link id, the op, the seqs.
func readSettle(r *lread) (cid uint64, op byte, seqs []uint64, ok bool) {
	cid, op, n := r.u64(), r.u8(), r.u64()
	if r.bad || n > uint64(len(r.p)) { // a seq takes a byte at least
		return 0, 0, nil, false
	}
	seqs = make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		seqs = append(seqs, r.u64())
	}
	return cid, op, seqs, !r.bad && op <= settleRetry
}

func appendSeqs(b lbuf, ds []queue.Delivery) lbuf {
	b = b.u64(uint64(len(ds)))
	for _, d := range ds {
		b = b.u64(d.Seq)
	}
	return b
}

// answerError turns an answer's status into the error the queue
// package's callers expect.
func answerError(st byte, r *lread) error {
	switch st {
	case stOK:
		return nil
	case stAMQP:
		code, text := r.u64(), r.str()
		return &amqp.Error{Code: uint16(code), Text: text}
	case stRejected:
		return queue.ErrRejected
	case stExclusive:
		return queue.ErrExclusiveConsumer
	case stGone:
		return queue.ErrDeleted
	case stInUse:
		return queue.ErrInUse
	case stNotEmpty:
		return queue.ErrNotEmpty
	case stDown:
		return errHomeDown
	default:
		return fmt.Errorf("classic queue's home: %s", r.str())
	}
}
