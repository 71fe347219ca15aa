package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
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

// --- the home's side ------------------------------------------------------

// serveLinks accepts other nodes' links to the queues homed here.
func (s *Server) serveLinks(l cluster.Link) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		sess := &linkSession{s: s, w: newLinkWriter(conn), cons: map[uint64]*homeCons{}}
		s.linkMu.Lock()
		s.sessions[sess] = struct{}{}
		s.linkMu.Unlock()
		go sess.serve(conn)
	}
}

// closeLinks ends every link, both ways (at shutdown).
func (s *Server) closeLinks() {
	if s.linkLayer != nil {
		_ = s.linkLayer.Close()
	}
	s.linkMu.Lock()
	links := make([]*peerLink, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	sessions := make([]*linkSession, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.linkMu.Unlock()
	for _, l := range links {
		l.fail()
	}
	for _, sess := range sessions {
		sess.w.close()
	}
}

// linkSession is another node's link, on the home: its consumers and
// gets, by the ids that node gave them.
type linkSession struct {
	s    *Server
	w    *linkWriter
	mu   sync.Mutex
	cons map[uint64]*homeCons
}

// homeCons is a consumer (or a get) of the other node, here: a local
// consumer whose Sink sends its deliveries over the link, and what it
// has unacked.
type homeCons struct {
	sess *linkSession
	id   uint64
	q    *queue.Queue
	c    *queue.Consumer // nil for a get

	mu       sync.Mutex
	out      map[uint64]queue.Delivery
	inflight int // deliveries the other node has not given credit back for
	limit    int
	onWrite  bool // credit comes back as the other node writes (no-ack, no prefetch)
	needKick bool
	done     bool // cancelled (or a get): forgotten once nothing is out
}

// forget drops h from its session once it is done and has nothing out.
func (h *homeCons) forget() {
	h.mu.Lock()
	gone := h.done && len(h.out) == 0
	h.mu.Unlock()
	if gone {
		h.sess.mu.Lock()
		if h.sess.cons[h.id] == h {
			delete(h.sess.cons, h.id)
		}
		h.sess.mu.Unlock()
	}
}

func (s *linkSession) serve(conn net.Conn) {
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		kind, p, err := readLinkFrame(br)
		if err != nil {
			break
		}
		if !s.handle(kind, &lread{p: p}) {
			break
		}
	}
	s.w.close()
	s.s.linkMu.Lock()
	delete(s.s.sessions, s)
	s.s.linkMu.Unlock()
	// The other node is gone, or its link: what its consumers and gets
	// had unacked returns to the queues, flagged redelivered.
	s.mu.Lock()
	cons := s.cons
	s.cons = nil
	s.mu.Unlock()
	for _, h := range cons {
		if h.c != nil {
			h.q.Cancel(h.c)
		}
		h.mu.Lock()
		ds := make([]queue.Delivery, 0, len(h.out))
		for _, d := range h.out {
			ds = append(ds, d)
		}
		h.out = nil
		h.mu.Unlock()
		if len(ds) > 0 {
			h.q.Requeue(ds, nil)
		}
	}
}

func (s *linkSession) answer(req uint64, st byte, payload lbuf) {
	if req == 0 {
		return
	}
	_ = s.w.write(lkAnswer, append(lbuf(nil).u64(req).u8(st), payload...))
}

func (s *linkSession) answerErr(req uint64, err error) {
	var ae *amqp.Error
	switch {
	case err == nil:
		s.answer(req, stOK, nil)
	case errors.As(err, &ae):
		s.answer(req, stAMQP, lbuf(nil).u64(uint64(ae.Code)).str(ae.Text))
	case errors.Is(err, queue.ErrRejected):
		s.answer(req, stRejected, nil)
	case errors.Is(err, queue.ErrExclusiveConsumer):
		s.answer(req, stExclusive, nil)
	case errors.Is(err, queue.ErrDeleted):
		s.answer(req, stGone, nil)
	case errors.Is(err, queue.ErrInUse):
		s.answer(req, stInUse, nil)
	case errors.Is(err, queue.ErrNotEmpty):
		s.answer(req, stNotEmpty, nil)
	default:
		s.answer(req, stError, lbuf(nil).str(err.Error()))
	}
}

// lookup finds a queue homed here.
func (s *linkSession) lookup(vh, name string) (*vhost.VHost, *queue.Queue) {
	st := s.s.vhostByName(vh)
	if st == nil {
		return nil, nil
	}
	q, err := st.v.Queue(0, name)
	if err != nil || q.Replicated() {
		return st.v, nil
	}
	return st.v, q
}

func (s *linkSession) handle(kind byte, r *lread) bool {
	switch kind {
	case lkPublish:
		req, vh, name, rec := r.u64(), r.str(), r.str(), r.blob()
		if r.bad {
			return false
		}
		m, err := queue.DecodeMessage(append([]byte(nil), rec...))
		if err != nil {
			return false
		}
		v, q := s.lookup(vh, name)
		if q == nil {
			s.answer(req, stGone, nil)
			return true
		}
		s.publish(req, v, q, m)
	case lkConsume:
		req, cid, vh, name, tag, flags, prefetch := r.u64(), r.u64(), r.str(), r.str(), r.str(), r.u8(), r.u64()
		if r.bad {
			return false
		}
		_, q := s.lookup(vh, name)
		if q == nil {
			s.answer(req, stGone, nil)
			return true
		}
		h := &homeCons{sess: s, id: cid, q: q, out: map[uint64]queue.Delivery{}, limit: int(prefetch)}
		h.c = &queue.Consumer{Tag: tag, NoAck: flags&1 != 0, Exclusive: flags&2 != 0, Priority: int32(r.u64()), Sink: h}
		if h.c.NoAck || h.limit == 0 {
			h.onWrite, h.limit = true, linkWindow
		}
		s.mu.Lock()
		if s.cons == nil {
			s.mu.Unlock()
			return false
		}
		s.cons[cid] = h
		s.mu.Unlock()
		if err := q.Consume(h.c); err != nil {
			s.mu.Lock()
			delete(s.cons, cid)
			s.mu.Unlock()
			s.answerErr(req, err)
			return true
		}
		s.answer(req, stOK, nil)
		q.Kick(h.c, nil) // the queue delivers to a consumer once kicked
	case lkCancel:
		cid := r.u64()
		if h := s.consumer(cid); h != nil && h.c != nil {
			h.q.Cancel(h.c) // what it had out stays, for acks after the cancel
			h.mu.Lock()
			h.done = true
			h.mu.Unlock()
			h.forget()
		}
	case lkSettle:
		cid, op, seqs, ok := readSettle(r)
		if !ok {
			return false
		}
		if h := s.consumer(cid); h != nil {
			h.settle(op, seqs)
		}
	case lkCredit:
		cid, n := r.u64(), r.u64()
		if h := s.consumer(cid); h != nil {
			h.credit(int(n))
		}
	case lkGet:
		req, cid, vh, name, flags := r.u64(), r.u64(), r.str(), r.str(), r.u8()
		if r.bad {
			return false
		}
		_, q := s.lookup(vh, name)
		if q == nil {
			s.answer(req, stGone, nil)
			return true
		}
		noAck := flags&1 != 0
		d, ok, remaining, err := q.Get(noAck)
		if err != nil {
			s.answerErr(req, err)
			return true
		}
		if !ok {
			s.answer(req, stOK, lbuf(nil).u8(0).u64(uint64(remaining)))
			return true
		}
		if !noAck {
			h := &homeCons{sess: s, id: cid, q: q, out: map[uint64]queue.Delivery{d.Seq: d}, done: true}
			s.mu.Lock()
			if s.cons != nil {
				s.cons[cid] = h
			}
			s.mu.Unlock()
		}
		s.answer(req, stOK, appendDelivery(lbuf(nil).u8(1).u64(uint64(remaining)), d))
	case lkPurge, lkDelete, lkStats:
		req, vh, name := r.u64(), r.str(), r.str()
		var flags byte
		if kind == lkDelete {
			flags = r.u8()
		}
		if r.bad {
			return false
		}
		v, q := s.lookup(vh, name)
		if q == nil {
			s.answer(req, stGone, nil)
			return true
		}
		// Off the link's reader: a delete is a write through Raft, and
		// the other node's acks and publishes must not wait for it.
		go s.manage(kind, req, flags, v, q, name)
	default:
		return false
	}
	return true
}

// manage carries out a purge, delete or stats request and answers it.
func (s *linkSession) manage(kind byte, req uint64, flags byte, v *vhost.VHost, q *queue.Queue, name string) {
	switch kind {
	case lkPurge:
		n, err := q.Purge()
		if err != nil {
			s.answerErr(req, err)
		} else {
			s.answer(req, stOK, lbuf(nil).u64(uint64(n)))
		}
	case lkDelete:
		n, err := v.DeleteQueue(0, name, flags&1 != 0, flags&2 != 0)
		if err != nil {
			s.answerErr(req, err)
		} else {
			s.answer(req, stOK, lbuf(nil).u64(uint64(n)))
		}
	default:
		messages, consumers, err := q.Stats()
		if err != nil {
			s.answerErr(req, err)
			return
		}
		rb, ub := q.Bytes()
		s.answer(req, stOK, lbuf(nil).u64(uint64(messages)).u64(uint64(consumers)).
			u64(uint64(q.Unacked())).u64(uint64(rb)).u64(uint64(ub)).u64(uint64(q.HeadEnqueuedAt())))
	}
}

func (s *linkSession) consumer(cid uint64) *homeCons {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cons[cid]
}

// publish enqueues a message from the other node as a channel here would
// (the record stored inside the queue's entry when it is persistent and
// the queue durable) and answers once the queue took it.
func (s *linkSession) publish(req uint64, v *vhost.VHost, q *queue.Queue, m *queue.Message) {
	c := &linkConfirm{s: s, req: req}
	routed, waited := vhost.FanOut(v.Store(), m, []*queue.Queue{q}, req != 0, func(n int) queue.Confirmer {
		c.n = n
		return c
	}, nil)
	if !waited {
		if routed {
			s.answer(req, stOK, nil)
		} else {
			s.answer(req, stGone, nil)
		}
	}
}

// linkConfirm answers a publish once its n takes are done.
type linkConfirm struct {
	s   *linkSession
	req uint64
	mu  sync.Mutex
	n   int
	err error
}

func (c *linkConfirm) Done(err error) {
	c.mu.Lock()
	if err != nil && c.err == nil {
		c.err = err
	}
	c.n--
	last, e := c.n == 0, c.err
	c.mu.Unlock()
	if last {
		c.s.answerErr(c.req, e)
	}
}

// Deliver is the local queue handing the other node's consumer a
// message: sent over the link, within the consumer's credit.
func (h *homeCons) Deliver(_ *queue.Consumer, _ *queue.Queue, d queue.Delivery) bool {
	h.mu.Lock()
	if h.out == nil || h.inflight >= h.limit {
		h.needKick = h.out != nil
		h.mu.Unlock()
		return false
	}
	h.inflight++
	if !h.c.NoAck {
		h.out[d.Seq] = d
	}
	h.mu.Unlock()
	_ = h.sess.w.write(lkDeliver, appendDelivery(lbuf(nil).u64(h.id), d))
	return true
}

// Cancelled: the queue is gone; the other node cancels its consumer.
func (h *homeCons) Cancelled(*queue.Consumer) {
	_ = h.sess.w.write(lkCancelled, lbuf(nil).u64(h.id))
}

func (h *homeCons) settle(op byte, seqs []uint64) {
	h.mu.Lock()
	ds := make([]queue.Delivery, 0, len(seqs))
	for _, seq := range seqs {
		if d, ok := h.out[seq]; ok {
			ds = append(ds, d)
			delete(h.out, seq)
		}
	}
	if !h.onWrite {
		h.inflight -= len(ds)
	}
	kick := h.needKick && h.inflight < h.limit
	if kick {
		h.needKick = false
	}
	h.mu.Unlock()
	if len(ds) > 0 {
		switch op {
		case settleAck:
			h.q.Ack(ds, nil)
		case settleRequeue:
			h.q.Requeue(ds, nil)
		case settleReturn:
			h.q.Return(ds)
		case settleRetry:
			h.q.RequeueNacked(ds, nil)
		default:
			h.q.Discard(ds, nil)
		}
	}
	if kick && h.c != nil {
		h.q.Kick(h.c, nil)
	}
	h.forget()
}

func (h *homeCons) credit(n int) {
	h.mu.Lock()
	h.inflight = max(h.inflight-n, 0)
	kick := h.needKick && h.inflight < h.limit
	if kick {
		h.needKick = false
	}
	h.mu.Unlock()
	if kick && h.c != nil {
		h.q.Kick(h.c, nil)
	}
}

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

// --- this node's side -------------------------------------------------------

// peerLink is this node's link to a home node: the answers it waits for
// and the consumers whose deliveries come over it.
type peerLink struct {
	s    *Server
	home string
	w    *linkWriter

	mu   sync.Mutex
	next uint64
	reqs map[uint64]func(st byte, r *lread)
	cons map[uint64]*proxyCons
	dead bool
}

// link returns the link to home, dialled if there is none.
func (s *Server) link(home string) (*peerLink, error) {
	s.linkMu.Lock()
	defer s.linkMu.Unlock()
	if l := s.links[home]; l != nil {
		return l, nil
	}
	addr := s.node.Addrs()[home]
	if addr == "" || s.linkLayer == nil {
		return nil, errHomeDown
	}
	conn, err := s.linkLayer.Dial(addr, 2*time.Second)
	if err != nil {
		return nil, errHomeDown
	}
	l := &peerLink{s: s, home: home, w: newLinkWriter(conn), reqs: map[uint64]func(byte, *lread){}, cons: map[uint64]*proxyCons{}}
	s.links[home] = l
	go l.read(conn)
	return l, nil
}

func (l *peerLink) id() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return l.next
}

// call sends a request and runs done with its answer (or stDown if the
// link breaks first).
func (l *peerLink) call(kind byte, body func(req uint64) lbuf, done func(st byte, r *lread)) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		if done != nil {
			done(stDown, &lread{})
		}
		return
	}
	l.next++
	req := l.next
	if done != nil {
		l.reqs[req] = done
	}
	l.mu.Unlock()
	if done == nil {
		req = 0
	}
	if err := l.w.write(kind, body(req)); err != nil {
		l.fail()
	}
}

// wait is call, waiting for the answer.
func (l *peerLink) wait(kind byte, body func(req uint64) lbuf) (byte, *lread) {
	ch := make(chan struct{})
	var st byte
	var r *lread
	l.call(kind, body, func(s byte, rr *lread) {
		st, r = s, &lread{p: append([]byte(nil), rr.p...)}
		close(ch)
	})
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		l.fail()
		<-ch
	}
	return st, r
}

func (l *peerLink) read(conn net.Conn) {
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		kind, p, err := readLinkFrame(br)
		if err != nil {
			break
		}
		r := &lread{p: p}
		switch kind {
		case lkAnswer:
			req, st := r.u64(), r.u8()
			l.mu.Lock()
			done := l.reqs[req]
			delete(l.reqs, req)
			l.mu.Unlock()
			if done != nil {
				done(st, r)
			}
		case lkDeliver:
			cid := r.u64()
			d, ok := readDelivery(r)
			if !ok {
				break
			}
			l.mu.Lock()
			pc := l.cons[cid]
			l.mu.Unlock()
			if pc == nil {
				// Cancelled here meanwhile: back it goes, as it was.
				l.call(lkSettle, func(uint64) lbuf { return lbuf(nil).u64(cid).u8(settleReturn).u64(1).u64(d.Seq) }, nil)
				continue
			}
			pc.p.delivered(pc, d)
		case lkCancelled:
			cid := r.u64()
			l.mu.Lock()
			pc := l.cons[cid]
			l.mu.Unlock()
			if pc != nil {
				pc.p.dropConsumer(pc, true)
			}
		}
		if r.bad {
			break
		}
	}
	l.fail()
}

// fail ends the link: waiting requests get their error, consumers over
// it are cancelled.
func (l *peerLink) fail() {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return
	}
	l.dead = true
	reqs, cons := l.reqs, l.cons
	l.reqs, l.cons = nil, nil
	l.mu.Unlock()
	l.w.close()
	l.s.linkMu.Lock()
	if l.s.links[l.home] == l {
		delete(l.s.links, l.home)
	}
	l.s.linkMu.Unlock()
	for _, done := range reqs {
		done(stDown, &lread{})
	}
	for _, pc := range cons {
		pc.p.dropConsumer(pc, true)
	}
	// What was delivered over it, the home requeued: a late ack of it
	// must not settle its redelivery over another link.
	l.s.linkMu.Lock()
	ps := make([]*classicProxy, 0, len(l.s.proxies))
	for p := range l.s.proxies {
		ps = append(ps, p)
	}
	l.s.linkMu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		for seq, ref := range p.out {
			if ref.l == l {
				delete(p.out, seq)
			}
		}
		p.mu.Unlock()
	}
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

// classicProxy is this node's handle of a classic queue homed elsewhere.
type classicProxy struct {
	s           *Server
	q           *queue.Queue
	home        string
	vhost, name string

	mu   sync.Mutex
	cons map[*queue.Consumer]*proxyCons
	// out: the link id each delivery handed out here (consumer or get)
	// is to be settled under, by seq.
	out  map[uint64]outRef
	gone bool
}

type outRef struct {
	l   *peerLink
	cid uint64
}

type proxyCons struct {
	p       *classicProxy
	l       *peerLink
	c       *queue.Consumer
	id      uint64
	onWrite bool
	held    bool
	pending []queue.Delivery
}

// Proxy makes this node's handle of a classic queue homed on home.
func (m quorumMaker) Proxy(cfg queue.Config, home string) *queue.Queue {
	p := &classicProxy{s: m.s, home: home, vhost: cfg.VHost, name: cfg.Name,
		cons: map[*queue.Consumer]*proxyCons{}, out: map[uint64]outRef{}}
	cfg.Replica = p
	p.q = queue.New(cfg)
	m.s.linkMu.Lock()
	m.s.proxies[p] = struct{}{}
	m.s.linkMu.Unlock()
	return p.q
}

// Self is this node's name.
func (m quorumMaker) Self() string { return m.s.node.Name() }

func (p *classicProxy) stop() {
	p.s.linkMu.Lock()
	delete(p.s.proxies, p)
	p.s.linkMu.Unlock()
	p.mu.Lock()
	p.gone = true
	cons := make([]*proxyCons, 0, len(p.cons))
	for _, pc := range p.cons {
		cons = append(cons, pc)
	}
	p.mu.Unlock()
	for _, pc := range cons {
		p.dropConsumer(pc, true)
	}
	p.q.Stop()
}

// homeDown is RabbitMQ's 404 for a queue whose home node is down.
func (p *classicProxy) homeDown(err error) error {
	if errors.Is(err, errHomeDown) {
		return amqp.Errorf(amqp.NotFound, "home node '%s' of durable queue '%s' in vhost '%s' is down or inaccessible", p.home, p.name, p.vhost)
	}
	return err
}

func (p *classicProxy) body(req uint64) lbuf { return lbuf(nil).u64(req).str(p.vhost).str(p.name) }

func (p *classicProxy) Publish(m *queue.Message, conf queue.Confirmer) bool {
	p.mu.Lock()
	gone := p.gone
	p.mu.Unlock()
	if gone {
		return false
	}
	l, err := p.s.link(p.home)
	if err != nil {
		if conf != nil {
			conf.Done(err)
		}
		return true // routed here; lost with its home, as RabbitMQ's would be
	}
	rec := queue.EncodeMessage(m)
	var done func(byte, *lread)
	if conf != nil {
		done = func(st byte, r *lread) {
			err := answerError(st, r)
			if errors.Is(err, queue.ErrDeleted) {
				err = nil // deleted meanwhile: as if not routed there
			}
			conf.Done(err)
		}
	}
	l.call(lkPublish, func(req uint64) lbuf { return p.body(req).blob(rec) }, done)
	return true
}

func (p *classicProxy) Consume(c *queue.Consumer) error {
	p.mu.Lock()
	gone := p.gone
	p.mu.Unlock()
	if gone {
		return queue.ErrDeleted
	}
	l, err := p.s.link(p.home)
	if err != nil {
		return p.homeDown(err)
	}
	pc := &proxyCons{p: p, l: l, c: c, id: l.id(), onWrite: c.NoAck || c.Prefetch == 0, held: true}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return p.homeDown(errHomeDown)
	}
	l.cons[pc.id] = pc
	l.mu.Unlock()
	p.mu.Lock()
	p.cons[c] = pc
	p.mu.Unlock()
	var flags byte
	if c.NoAck {
		flags |= 1
	}
	if c.Exclusive {
		flags |= 2
	}
	st, r := l.wait(lkConsume, func(req uint64) lbuf {
		return lbuf(nil).u64(req).u64(pc.id).str(p.vhost).str(p.name).str(c.Tag).u8(flags).u64(uint64(c.Prefetch)).u64(uint64(int64(c.Priority)))
	})
	if err := answerError(st, r); err != nil {
		p.mu.Lock()
		delete(p.cons, c)
		p.mu.Unlock()
		l.mu.Lock()
		if l.cons != nil {
			delete(l.cons, pc.id)
		}
		l.mu.Unlock()
		return p.homeDown(err)
	}
	return nil
}

// delivered takes a delivery for pc from the link.
func (p *classicProxy) delivered(pc *proxyCons, d queue.Delivery) {
	p.mu.Lock()
	if p.cons[pc.c] != pc {
		p.mu.Unlock()
		pc.l.call(lkSettle, func(uint64) lbuf { return lbuf(nil).u64(pc.id).u8(settleReturn).u64(1).u64(d.Seq) }, nil)
		return
	}
	pc.pending = append(pc.pending, d)
	n := p.deliverLocked(pc)
	p.mu.Unlock()
	p.afterDeliver(pc, n)
}

// deliverLocked writes pc's pending deliveries until its channel refuses
// one, and returns how many it wrote. p.mu held.
func (p *classicProxy) deliverLocked(pc *proxyCons) int {
	i := 0
	for ; i < len(pc.pending) && !pc.held; i++ {
		d := pc.pending[i]
		if !pc.c.Sink.Deliver(pc.c, p.q, d) {
			break
		}
		if !pc.c.NoAck {
			p.out[d.Seq] = outRef{pc.l, pc.id}
		}
	}
	pc.pending = pc.pending[i:]
	if len(pc.pending) == 0 {
		pc.pending = nil
	}
	return i
}

func (p *classicProxy) afterDeliver(pc *proxyCons, n int) {
	if n == 0 {
		return
	}
	if pc.c.Out != nil {
		pc.c.Out.Wake()
	}
	if pc.onWrite {
		pc.l.call(lkCredit, func(uint64) lbuf { return lbuf(nil).u64(pc.id).u64(uint64(n)) }, nil)
	}
}

func (p *classicProxy) Kick(c *queue.Consumer) {
	p.mu.Lock()
	pc := p.cons[c]
	n := 0
	if pc != nil {
		pc.held = false
		n = p.deliverLocked(pc)
	}
	p.mu.Unlock()
	if pc != nil {
		p.afterDeliver(pc, n)
	}
}

func (p *classicProxy) Cancel(c *queue.Consumer) {
	p.mu.Lock()
	pc := p.cons[c]
	p.mu.Unlock()
	if pc != nil {
		p.dropConsumer(pc, false)
	}
}

// dropConsumer forgets pc here, cancels it on the home (unless the link
// or the queue is gone) and gives back what it had not written; notify
// tells its channel (basic.cancel).
func (p *classicProxy) dropConsumer(pc *proxyCons, notify bool) {
	p.mu.Lock()
	if p.cons[pc.c] != pc {
		p.mu.Unlock()
		return
	}
	delete(p.cons, pc.c)
	back := pc.pending
	pc.pending = nil
	p.mu.Unlock()
	pc.l.mu.Lock()
	if pc.l.cons != nil {
		delete(pc.l.cons, pc.id)
	}
	pc.l.mu.Unlock()
	pc.l.call(lkCancel, func(uint64) lbuf { return lbuf(nil).u64(pc.id) }, nil)
	if len(back) > 0 {
		pc.l.call(lkSettle, func(uint64) lbuf { return appendSeqs(lbuf(nil).u64(pc.id).u8(settleReturn), back) }, nil)
	}
	if notify {
		pc.c.Sink.Cancelled(pc.c)
	}
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

// settle sends settlements to the home, by the link id each delivery
// came under.
func (p *classicProxy) settle(ds []queue.Delivery, op byte) {
	p.mu.Lock()
	by := map[outRef][]queue.Delivery{}
	for _, d := range ds {
		if ref, ok := p.out[d.Seq]; ok {
			by[ref] = append(by[ref], d)
			delete(p.out, d.Seq)
		}
	}
	p.mu.Unlock()
	for ref, ds := range by {
		ref.l.call(lkSettle, func(uint64) lbuf { return appendSeqs(lbuf(nil).u64(ref.cid).u8(op), ds) }, nil)
	}
}

// CountsDeliveries: a classic queue's redeliveries carry no
// x-delivery-count (unless its delivery limit says so, which its handle's
// policy knows).
func (p *classicProxy) CountsDeliveries() bool { return false }

func (p *classicProxy) Ack(ds []queue.Delivery) { p.settle(ds, settleAck) }

func (p *classicProxy) Requeue(ds []queue.Delivery, counted bool) {
	if counted {
		p.settle(ds, settleRequeue)
	} else {
		p.settle(ds, settleReturn)
	}
}

func (p *classicProxy) Discard(ds []queue.Delivery) { p.settle(ds, settleDiscard) }

// RequeueNacked forwards a consumer's nack or reject with requeue, so
// that the queue's home holds it for its retry delay (queue.NackRequeuer).
func (p *classicProxy) RequeueNacked(ds []queue.Delivery) { p.settle(ds, settleRetry) }

func (p *classicProxy) Get(noAck bool) (queue.Delivery, bool, int, error) {
	l, err := p.s.link(p.home)
	if err != nil {
		return queue.Delivery{}, false, 0, p.homeDown(err)
	}
	cid := l.id()
	var flags byte
	if noAck {
		flags = 1
	}
	st, r := l.wait(lkGet, func(req uint64) lbuf { return lbuf(nil).u64(req).u64(cid).str(p.vhost).str(p.name).u8(flags) })
	if err := answerError(st, r); err != nil {
		return queue.Delivery{}, false, 0, p.homeDown(err)
	}
	got, remaining := r.u8(), int(r.u64())
	if got == 0 {
		return queue.Delivery{}, false, remaining, nil
	}
	d, ok := readDelivery(r)
	if !ok {
		return queue.Delivery{}, false, 0, errors.New("classic queue's home: a corrupt get answer")
	}
	if !noAck {
		p.mu.Lock()
		p.out[d.Seq] = outRef{l, cid}
		p.mu.Unlock()
	}
	return d, true, remaining, nil
}

// request sends a request without a payload of its own and waits.
func (p *classicProxy) request(kind byte, extra ...byte) (byte, *lread, error) {
	l, err := p.s.link(p.home)
	if err != nil {
		return 0, nil, p.homeDown(err)
	}
	st, r := l.wait(kind, func(req uint64) lbuf { return append(p.body(req), extra...) })
	return st, r, p.homeDown(answerError(st, r))
}

func (p *classicProxy) Purge() (int, error) {
	_, r, err := p.request(lkPurge)
	if err != nil {
		return 0, err
	}
	return int(r.u64()), nil
}

func (p *classicProxy) Delete(ifUnused, ifEmpty bool) (int, error) {
	var flags byte
	if ifUnused {
		flags |= 1
	}
	if ifEmpty {
		flags |= 2
	}
	_, r, err := p.request(lkDelete, flags)
	if err != nil {
		return 0, err
	}
	return int(r.u64()), nil
}

func (p *classicProxy) Stats() (messages, consumers int, err error) {
	_, r, err := p.request(lkStats)
	if err != nil {
		return 0, 0, err
	}
	messages, consumers = int(r.u64()), int(r.u64())
	unacked, rb, ub, head := int64(r.u64()), int64(r.u64()), int64(r.u64()), int64(r.u64())
	p.q.SetCounts(queue.ReplicaCounts{Ready: int64(messages), Unacked: unacked, ReadyBytes: rb, UnackedBytes: ub,
		Consumers: int32(consumers), Head: head})
	return messages, consumers, nil
}

// tickProxies refreshes the counts of the queues homed elsewhere, for
// the management API (once a second, from sweep).
func (s *Server) tickProxies() {
	s.linkMu.Lock()
	ps := make([]*classicProxy, 0, len(s.proxies))
	for p := range s.proxies {
		ps = append(ps, p)
	}
	s.linkMu.Unlock()
	for _, p := range ps {
		go func() {
			if _, _, err := p.Stats(); err != nil {
				s.log.Debug("classic queue's counts not refreshed", zap.String("queue", p.name), zap.Error(err))
			}
		}()
	}
}
