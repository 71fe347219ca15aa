package replica

import (
	"bufio"
	"errors"
	"net"
	"sync"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// --- the home's side ------------------------------------------------------

// serveLinks accepts other nodes' links to the queues homed here, until
// the link layer is closed (Close).
func (m *Manager) serveLinks(l cluster.Link) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		if !m.accept(conn) {
			return
		}
	}
}

// accept serves another node's link on conn, on a goroutine of its own;
// false (conn closed) once Close has begun.
func (m *Manager) accept(conn net.Conn) bool {
	sess := &linkSession{m: m, w: newLinkWriter(conn, m.mem), cons: map[uint64]*homeCons{}}
	m.linkMu.Lock()
	if m.closed {
		m.linkMu.Unlock()
		sess.w.close()
		return false
	}
	m.sessions[sess] = struct{}{}
	m.wg.Add(1)
	m.linkMu.Unlock()
	go func() {
		defer m.wg.Done()
		sess.serve(conn)
	}()
	return true
}

// linkSession is another node's link, on the home: its consumers and
// gets, by the ids that node gave them.
type linkSession struct {
	m    *Manager
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
	s.m.linkMu.Lock()
	delete(s.m.sessions, s)
	s.m.linkMu.Unlock()
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
	v := s.m.host.VHost(vh)
	if v == nil {
		return nil, nil
	}
	q, err := v.Queue(0, name)
	if err != nil || q.Replicated() {
		return v, nil
	}
	return v, q
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
		s.m.spawn(func() { s.manage(kind, req, flags, v, q, name) })
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
