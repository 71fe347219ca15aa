package replica

import (
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

// accept serves another node's link on nc as a cluster.Conn, whose
// session goroutine (run) Close waits for; false (nc closed) once Close
// has begun.
func (m *Manager) accept(nc net.Conn) bool {
	sess := &linkSession{m: m, brk: newBreaker(), cons: map[uint64]*homeCons{}}
	m.linkMu.Lock()
	if m.closed {
		m.linkMu.Unlock()
		_ = nc.Close()
		return false
	}
	m.sessions[sess] = struct{}{}
	m.wg.Add(1)
	m.linkMu.Unlock()
	conn := cluster.NewConn(nc, m.linkConfig(sess.handle))
	go func() {
		defer m.wg.Done()
		sess.run(conn)
	}()
	return true
}

// linkSession is another node's link, on the home: its consumers and
// gets, by the ids that node gave them. Its frames are handled on the
// link's reader (handle), which answers each request on the Conn it
// came on.
type linkSession struct {
	m    *Manager
	brk  breaker
	mu   sync.Mutex
	cons map[uint64]*homeCons
}

// homeCons is a consumer (or a get) of the other node, here: a local
// consumer whose Sink sends its deliveries over the link, and what it
// has unacked.
type homeCons struct {
	sess *linkSession
	conn *cluster.Conn
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

// run owns the session's link: it waits for the link to go down (or to
// be asked to break it, or Close), closes it and then gives back what
// the other node's consumers and gets had unacked.
func (s *linkSession) run(conn *cluster.Conn) {
	select {
	case <-conn.Done():
	case err := <-s.brk:
		conn.Break(err)
	case <-s.m.quit:
	}
	_ = conn.Close()
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

// answer answers request id (none for a one-way frame: id 0) with a
// status and what follows it.
func (s *linkSession) answer(c *cluster.Conn, id uint64, st byte, payload cluster.Enc) {
	if id == 0 {
		return
	}
	sendFailed(s.brk, c.Answer(id, append(cluster.Enc(nil).U8(st), payload...)))
}

func (s *linkSession) answerErr(c *cluster.Conn, id uint64, err error) {
	var ae *amqp.Error
	switch {
	case err == nil:
		s.answer(c, id, stOK, nil)
	case errors.As(err, &ae):
		s.answer(c, id, stAMQP, cluster.Enc(nil).Uvarint(uint64(ae.Code)).Str(ae.Text))
	case errors.Is(err, queue.ErrRejected):
		s.answer(c, id, stRejected, nil)
	case errors.Is(err, queue.ErrExclusiveConsumer):
		s.answer(c, id, stExclusive, nil)
	case errors.Is(err, queue.ErrDeleted):
		s.answer(c, id, stGone, nil)
	case errors.Is(err, queue.ErrInUse):
		s.answer(c, id, stInUse, nil)
	case errors.Is(err, queue.ErrNotEmpty):
		s.answer(c, id, stNotEmpty, nil)
	default:
		s.answer(c, id, stError, cluster.Enc(nil).Str(err.Error()))
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

// handle carries out a frame of the other node's, on the link's reader;
// an error (a malformed frame, an unknown kind) breaks the link.
func (s *linkSession) handle(c *cluster.Conn, f cluster.Frame) error {
	r := cluster.NewDec(f.Body)
	id := f.ID
	switch f.Kind {
	case lkPublish:
		vh, name, rec := r.Str(), r.Str(), r.Bytes()
		if r.End() != nil {
			return errLinkFrame
		}
		m, err := queue.DecodeMessage(rec)
		if err != nil {
			return errLinkFrame
		}
		v, q := s.lookup(vh, name)
		if q == nil {
			s.answer(c, id, stGone, nil)
			return nil
		}
		s.publish(c, id, v, q, m)
	case lkConsume:
		cid, vh, name, tag, flags, prefetch, priority := r.Uvarint(), r.Str(), r.Str(), r.Str(), r.U8(), r.Uvarint(), r.Varint()
		if r.End() != nil {
			return errLinkFrame
		}
		_, q := s.lookup(vh, name)
		if q == nil {
			s.answer(c, id, stGone, nil)
			return nil
		}
		h := &homeCons{sess: s, conn: c, id: cid, q: q, out: map[uint64]queue.Delivery{}, limit: int(prefetch)}
		h.c = &queue.Consumer{Tag: tag, NoAck: flags&1 != 0, Exclusive: flags&2 != 0, Priority: int32(priority), Sink: h}
		if h.c.NoAck || h.limit == 0 {
			h.onWrite, h.limit = true, linkWindow
		}
		s.mu.Lock()
		if s.cons == nil {
			s.mu.Unlock()
			return cluster.ErrClosed // the session is over
		}
		s.cons[cid] = h
		s.mu.Unlock()
		if err := q.Consume(h.c); err != nil {
			s.mu.Lock()
			delete(s.cons, cid)
			s.mu.Unlock()
			s.answerErr(c, id, err)
			return nil
		}
		s.answer(c, id, stOK, nil)
		q.Kick(h.c, nil) // the queue delivers to a consumer once kicked
	case lkCancel:
		cid := r.Uvarint()
		if r.End() != nil {
			return errLinkFrame
		}
		if h := s.consumer(cid); h != nil && h.c != nil {
			h.q.Cancel(h.c) // what it had out stays, for acks after the cancel
			h.mu.Lock()
			h.done = true
			h.mu.Unlock()
			h.forget()
		}
	case lkSettle:
		cid, op, seqs, ok := readSettle(&r)
		if !ok {
			return errLinkFrame
		}
		if h := s.consumer(cid); h != nil {
			h.settle(op, seqs)
		}
	case lkCredit:
		cid, n := r.Uvarint(), r.Uvarint()
		if r.End() != nil {
			return errLinkFrame
		}
		if h := s.consumer(cid); h != nil {
			h.credit(int(min(n, 1<<31)))
		}
	case lkGet:
		cid, vh, name, flags := r.Uvarint(), r.Str(), r.Str(), r.U8()
		if r.End() != nil {
			return errLinkFrame
		}
		_, q := s.lookup(vh, name)
		if q == nil {
			s.answer(c, id, stGone, nil)
			return nil
		}
		noAck := flags&1 != 0
		d, ok, remaining, err := q.Get(noAck)
		if err != nil {
			s.answerErr(c, id, err)
			return nil
		}
		if !ok {
			s.answer(c, id, stOK, cluster.Enc(nil).Bool(false).Uvarint(uint64(remaining)))
			return nil
		}
		if !noAck {
			h := &homeCons{sess: s, conn: c, id: cid, q: q, out: map[uint64]queue.Delivery{d.Seq: d}, done: true}
			s.mu.Lock()
			if s.cons != nil {
				s.cons[cid] = h
			}
			s.mu.Unlock()
		}
		s.answer(c, id, stOK, appendDelivery(cluster.Enc(nil).Bool(true).Uvarint(uint64(remaining)), d))
	case lkPurge, lkDelete, lkStats:
		vh, name := r.Str(), r.Str()
		var flags byte
		if f.Kind == lkDelete {
			flags = r.U8()
		}
		if r.End() != nil {
			return errLinkFrame
		}
		v, q := s.lookup(vh, name)
		if q == nil {
			s.answer(c, id, stGone, nil)
			return nil
		}
		// Off the link's reader: a delete is a write through Raft, and
		// the other node's acks and publishes must not wait for it.
		kind := f.Kind
		s.m.spawn(func() { s.manage(c, kind, id, flags, v, q, name) })
	default:
		return errLinkFrame
	}
	return nil
}

// manage carries out a purge, delete or stats request and answers it.
func (s *linkSession) manage(c *cluster.Conn, kind byte, id uint64, flags byte, v *vhost.VHost, q *queue.Queue, name string) {
	switch kind {
	case lkPurge:
		n, err := q.Purge()
		if err != nil {
			s.answerErr(c, id, err)
		} else {
			s.answer(c, id, stOK, cluster.Enc(nil).Uvarint(uint64(n)))
		}
	case lkDelete:
		n, err := v.DeleteQueue(0, name, flags&1 != 0, flags&2 != 0)
		if err != nil {
			s.answerErr(c, id, err)
		} else {
			s.answer(c, id, stOK, cluster.Enc(nil).Uvarint(uint64(n)))
		}
	default:
		messages, consumers, err := q.Stats()
		if err != nil {
			s.answerErr(c, id, err)
			return
		}
		rb, ub := q.Bytes()
		s.answer(c, id, stOK, cluster.Enc(nil).Uvarint(uint64(messages)).Uvarint(uint64(consumers)).
			Uvarint(uint64(q.Unacked())).Uvarint(uint64(rb)).Uvarint(uint64(ub)).Uvarint(uint64(q.HeadEnqueuedAt())))
	}
}

func (s *linkSession) consumer(cid uint64) *homeCons {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cons[cid]
}

// publish enqueues a message from the other node as a channel here would
// (the record stored inside the queue's entry when it is persistent and
// the queue durable) and answers request id (a confirmed publish; 0:
// none) once the queue took it.
func (s *linkSession) publish(c *cluster.Conn, id uint64, v *vhost.VHost, q *queue.Queue, m *queue.Message) {
	lc := &linkConfirm{s: s, c: c, id: id}
	routed, waited := vhost.FanOut(v.Store(), m, []*queue.Queue{q}, id != 0, func(n int) queue.Confirmer {
		lc.n = n
		return lc
	}, nil)
	if !waited {
		if routed {
			s.answer(c, id, stOK, nil)
		} else {
			s.answer(c, id, stGone, nil)
		}
	}
}

// linkConfirm answers a publish once its n takes are done.
type linkConfirm struct {
	s   *linkSession
	c   *cluster.Conn
	id  uint64
	mu  sync.Mutex
	n   int
	err error
}

func (lc *linkConfirm) Done(err error) {
	lc.mu.Lock()
	if err != nil && lc.err == nil {
		lc.err = err
	}
	lc.n--
	last, e := lc.n == 0, lc.err
	lc.mu.Unlock()
	if last {
		lc.s.answerErr(lc.c, lc.id, e)
	}
}

// Deliver is the local queue handing the other node's consumer a
// message: sent over the link (appended to its buffer: this runs under
// the queue's exec), within the consumer's credit.
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
	sendFailed(h.sess.brk, h.conn.Send(lkDeliver, appendDelivery(cluster.Enc(nil).Uvarint(h.id), d)))
	return true
}

// Cancelled: the queue is gone; the other node cancels its consumer.
func (h *homeCons) Cancelled(*queue.Consumer) {
	sendFailed(h.sess.brk, h.conn.Send(lkCancelled, cluster.Enc(nil).Uvarint(h.id)))
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
