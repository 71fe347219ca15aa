package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

// linkWriter writes frames to a link; a goroutine flushes what was
// written since it last did, so frames written together go out together.
type linkWriter struct {
	mu   sync.Mutex
	conn net.Conn
	bw   *bufio.Writer
	err  error
	kick chan struct{}
	done chan struct{}
}

func newLinkWriter(conn net.Conn) *linkWriter {
	w := &linkWriter{conn: conn, bw: bufio.NewWriterSize(conn, 64<<10), kick: make(chan struct{}, 1), done: make(chan struct{})}
	go w.flusher()
	return w
}

func (w *linkWriter) write(kind byte, payload lbuf) error {
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(1+len(payload)))
	hdr[4] = kind
	w.mu.Lock()
	if w.err == nil {
		_ = w.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.bw.Write(hdr[:]); err != nil {
			w.err = err
		} else if _, err := w.bw.Write(payload); err != nil {
			w.err = err
		}
	}
	err := w.err
	w.mu.Unlock()
	if err != nil {
		w.conn.Close()
		return err
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

func (w *linkWriter) flusher() {
	for {
		select {
		case <-w.kick:
		case <-w.done:
			return
		}
		w.mu.Lock()
		if w.err == nil {
			if err := w.bw.Flush(); err != nil {
				w.err = err
				w.conn.Close()
			}
		}
		w.mu.Unlock()
	}
}

func (w *linkWriter) close() {
	w.mu.Lock()
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.mu.Unlock()
	w.conn.Close()
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
