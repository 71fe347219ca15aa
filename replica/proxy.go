package replica

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// --- this node's side -------------------------------------------------------

// peerLink is this node's link to a home node: the answers it waits for
// and the consumers whose deliveries come over it.
type peerLink struct {
	m    *Manager
	home string
	w    *linkWriter

	mu   sync.Mutex
	next uint64
	reqs map[uint64]func(st byte, r *lread)
	cons map[uint64]*proxyCons
	dead bool
}

// link returns the link to home, dialled if there is none.
// No link is made once Close has begun.
func (m *Manager) link(home string) (*peerLink, error) {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	if l := m.links[home]; l != nil {
		return l, nil
	}
	if m.closed || m.layer == nil {
		return nil, errHomeDown
	}
	addr := m.node.Addrs()[home]
	if addr == "" {
		return nil, errHomeDown
	}
	conn, err := m.layer.Dial(addr, 2*time.Second)
	if err != nil {
		return nil, errHomeDown
	}
	l := &peerLink{m: m, home: home, w: newLinkWriter(conn, m.mem), reqs: map[uint64]func(byte, *lread){}, cons: map[uint64]*proxyCons{}}
	m.links[home] = l
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		l.read(conn)
	}()
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
	l.m.linkMu.Lock()
	if l.m.links[l.home] == l {
		delete(l.m.links, l.home)
	}
	l.m.linkMu.Unlock()
	for _, done := range reqs {
		done(stDown, &lread{})
	}
	for _, pc := range cons {
		pc.p.dropConsumer(pc, true)
	}
	// What was delivered over it, the home requeued: a late ack of it
	// must not settle its redelivery over another link.
	l.m.linkMu.Lock()
	ps := make([]*classicProxy, 0, len(l.m.proxies))
	for p := range l.m.proxies {
		ps = append(ps, p)
	}
	l.m.linkMu.Unlock()
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

// classicProxy is this node's handle of a classic queue homed elsewhere.
type classicProxy struct {
	m           *Manager
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

// proxyCons is a consumer here of a classic queue homed elsewhere: its
// deliveries from the home (local), the link they come over and its id
// there.
type proxyCons struct {
	local
	p       *classicProxy
	l       *peerLink
	id      uint64
	onWrite bool // credit goes back as the channel takes deliveries (no-ack, no prefetch)
}

// Proxy makes this node's handle of a classic queue homed on home.
func (m *Manager) Proxy(cfg queue.Config, home string) *queue.Queue {
	p := &classicProxy{m: m, home: home, vhost: cfg.VHost, name: cfg.Name,
		cons: map[*queue.Consumer]*proxyCons{}, out: map[uint64]outRef{}}
	cfg.Replica = p
	p.q = queue.New(cfg)
	m.linkMu.Lock()
	m.proxies[p] = struct{}{}
	m.linkMu.Unlock()
	return p.q
}

func (p *classicProxy) stop() {
	p.m.linkMu.Lock()
	delete(p.m.proxies, p)
	p.m.linkMu.Unlock()
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
	l, err := p.m.link(p.home)
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
	l, err := p.m.link(p.home)
	if err != nil {
		return p.homeDown(err)
	}
	pc := &proxyCons{local: local{c: c, held: true}, p: p, l: l, id: l.id(), onWrite: c.NoAck || c.Prefetch == 0}
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
	return p.took(pc, pc.deliver(p.q))
}

// took records the deliveries pc's channel took, to be settled under
// the link id they came under, and returns how many. p.mu held.
func (p *classicProxy) took(pc *proxyCons, ds []queue.Delivery) int {
	if !pc.c.NoAck {
		for _, d := range ds {
			p.out[d.Seq] = outRef{pc.l, pc.id}
		}
	}
	return len(ds)
}

// afterDeliver has the connection write what deliverLocked appended (n
// deliveries) and gives the home their credit back when it comes back
// as they are written. p.mu released.
func (p *classicProxy) afterDeliver(pc *proxyCons, n int) {
	if n == 0 {
		return
	}
	pc.wake(n)
	if pc.onWrite {
		pc.l.call(lkCredit, func(uint64) lbuf { return lbuf(nil).u64(pc.id).u64(uint64(n)) }, nil)
	}
}

func (p *classicProxy) Kick(c *queue.Consumer) {
	p.mu.Lock()
	pc := p.cons[c]
	n := 0
	if pc != nil {
		n = p.took(pc, pc.kick(p.q, true))
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
	l, err := p.m.link(p.home)
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
	l, err := p.m.link(p.home)
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
// the management API (once a second: Tick).
func (m *Manager) tickProxies() {
	m.linkMu.Lock()
	ps := make([]*classicProxy, 0, len(m.proxies))
	for p := range m.proxies {
		ps = append(ps, p)
	}
	m.linkMu.Unlock()
	for _, p := range ps {
		m.spawn(func() {
			if _, _, err := p.Stats(); err != nil {
				m.log.Debug("classic queue's counts not refreshed", zap.String("queue", p.name), zap.Error(err))
			}
		})
	}
}
