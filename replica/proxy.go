package replica

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// --- this node's side -------------------------------------------------------

// peerLink is this node's link to a home node. Its goroutine (run) dials
// it and owns it: frames sent meanwhile wait in pending and go out, in
// order, once it is up; when it goes down (or the dial fails), what
// waited fails and the consumers over it are cancelled.
type peerLink struct {
	m    *Manager
	home string
	brk  breaker

	mu      sync.Mutex
	conn    *cluster.Conn  // nil until the link is up
	pending []pendingFrame // sent before it was up
	next    uint64         // the last consumer or get id handed out
	cons    map[uint64]*proxyCons
	dead    bool
}

// pendingFrame is a frame sent to a link not yet up.
type pendingFrame struct {
	kind byte
	body []byte
	done func(st byte, r *cluster.Dec) // nil: one-way
}

// link returns the link to home, whose dial (on the link's own
// goroutine) it starts if there is none: it never waits for the network,
// so it may be called under a queue's exec (a dead-lettered message
// published to a classic queue homed elsewhere). No link is made once
// Close has begun.
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
	l := &peerLink{m: m, home: home, brk: newBreaker(), cons: map[uint64]*proxyCons{}}
	m.links[home] = l
	m.wg.Add(1)
	go func(layer cluster.Link) {
		defer m.wg.Done()
		l.run(layer, addr)
	}(m.layer)
	return l, nil
}

// run dials the link, serves it until it goes down (or is asked to
// break, or Close) and closes it; then the link fails.
func (l *peerLink) run(layer cluster.Link, addr string) {
	if nc, err := layer.Dial(addr, linkDialTimeout); err == nil {
		conn := cluster.NewConn(nc, l.m.linkConfig(l.handle))
		l.serve(conn)
		_ = conn.Close()
	}
	l.fail()
}

// serve puts the link to use: what waited goes out, in order, before
// anything sent after; then it waits for the link's end.
func (l *peerLink) serve(conn *cluster.Conn) {
	l.mu.Lock()
	l.conn = conn
	pending := l.pending
	l.pending = nil
	var refused []pendingFrame
	var err error
	for _, f := range pending {
		if e := post(conn, f.kind, f.body, f.done); e != nil {
			refused, err = append(refused, f), e
		}
	}
	l.mu.Unlock()
	l.m.count(-pendingBytes(pending))
	for _, f := range refused {
		if f.done != nil {
			f.done(stDown, &cluster.Dec{})
		}
	}
	sendFailed(l.brk, err)
	select {
	case <-conn.Done():
	case err := <-l.brk:
		conn.Break(err)
	case <-l.m.quit:
	}
}

func pendingBytes(fs []pendingFrame) int {
	n := 0
	for _, f := range fs {
		n += len(f.body)
	}
	return n
}

// post sends a frame on conn: a request whose answer goes to done, or a
// one-way frame. An error means it was not sent (and done is not called).
func post(conn *cluster.Conn, kind byte, body []byte, done func(byte, *cluster.Dec)) error {
	if done == nil {
		return conn.Send(kind, body)
	}
	return conn.Call(kind, body, func(p []byte, err error) {
		if err != nil {
			done(stDown, &cluster.Dec{})
			return
		}
		r := cluster.NewDec(p)
		st := r.U8()
		if r.Err() != nil {
			st = stError
		}
		done(st, &r)
	})
}

func (l *peerLink) id() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return l.next
}

// call sends a request whose answer goes to done (stDown if the link
// breaks first, or cannot be made), or with done nil a one-way frame.
// It never waits for the network: the frame is appended to the link's
// buffer, or waits in pending while the link is dialled.
func (l *peerLink) call(kind byte, body []byte, done func(st byte, r *cluster.Dec)) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		if done != nil {
			done(stDown, &cluster.Dec{})
		}
		return
	}
	conn := l.conn
	if conn == nil {
		l.pending = append(l.pending, pendingFrame{kind, body, done})
		l.m.count(len(body))
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if err := post(conn, kind, body, done); err != nil {
		if done != nil {
			done(stDown, &cluster.Dec{})
		}
		sendFailed(l.brk, err)
	}
}

// buffered is how many bytes sent to the link wait to be written: those
// in the link's buffer, or those waiting for the link to come up.
func (l *peerLink) buffered() int {
	l.mu.Lock()
	conn, n := l.conn, 0
	if conn == nil {
		n = pendingBytes(l.pending)
	}
	l.mu.Unlock()
	if conn != nil {
		return conn.Buffered()
	}
	return n
}

// wait is call, waiting for the answer; one that takes over
// linkAnswerTimeout breaks the link.
func (l *peerLink) wait(kind byte, body []byte) (byte, *cluster.Dec) {
	ch := make(chan struct{})
	var st byte
	var r *cluster.Dec
	l.call(kind, body, func(s byte, rr *cluster.Dec) {
		st, r = s, rr
		close(ch)
	})
	t := time.NewTimer(linkAnswerTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		l.brk.request(errNoAnswer)
		<-ch
	}
	return st, r
}

// handle takes the home's deliveries and cancellations, on the link's
// reader; an error (a malformed frame) breaks the link.
func (l *peerLink) handle(_ *cluster.Conn, f cluster.Frame) error {
	r := cluster.NewDec(f.Body)
	switch f.Kind {
	case lkDeliver:
		cid := r.Uvarint()
		d, ok := readDelivery(&r)
		if !ok || r.End() != nil {
			return errLinkFrame
		}
		l.mu.Lock()
		pc := l.cons[cid]
		l.mu.Unlock()
		if pc == nil {
			// Cancelled here meanwhile: back it goes, as it was.
			l.call(lkSettle, appendSeqs(cluster.Enc(nil).Uvarint(cid).U8(settleReturn), []queue.Delivery{d}), nil)
			return nil
		}
		pc.p.delivered(pc, d)
	case lkCancelled:
		cid := r.Uvarint()
		if r.End() != nil {
			return errLinkFrame
		}
		l.mu.Lock()
		pc := l.cons[cid]
		l.mu.Unlock()
		if pc != nil {
			pc.p.dropConsumer(pc, true)
		}
	default:
		return errLinkFrame
	}
	return nil
}

// fail ends the link (down, or never made): what waited for it or for an
// answer over it gets its error (those sent on it had theirs from the
// link itself), and the consumers over it are cancelled.
func (l *peerLink) fail() {
	l.mu.Lock()
	l.dead = true
	pending, cons := l.pending, l.cons
	l.pending, l.cons = nil, nil
	l.mu.Unlock()
	l.m.count(-pendingBytes(pending))
	l.m.linkMu.Lock()
	if l.m.links[l.home] == l {
		delete(l.m.links, l.home)
	}
	l.m.linkMu.Unlock()
	for _, f := range pending {
		if f.done != nil {
			f.done(stDown, &cluster.Dec{})
		}
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

// body is a request's start: the queue's vhost and name.
func (p *classicProxy) body() cluster.Enc { return cluster.Enc(nil).Str(p.vhost).Str(p.name) }

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
	var done func(byte, *cluster.Dec)
	if conf != nil {
		done = func(st byte, r *cluster.Dec) {
			err := answerError(st, r)
			if errors.Is(err, queue.ErrDeleted) {
				err = nil // deleted meanwhile: as if not routed there
			}
			conf.Done(err)
		}
	}
	l.call(lkPublish, p.body().Bytes(rec), done)
	return true
}

// Flow control for publishers to a queue homed elsewhere
// (queue.Throttled): while more than linkFlowHigh bytes wait to be
// written to the home's link (the home, or the network, takes them more
// slowly than they come), publishers into the queue wait until no more
// than linkFlowLow do. Without it the link's buffer would grow until the
// cap breaks the link; the link was once written on the publisher's own
// goroutine, which TCP slowed.
const (
	linkFlowHigh = 4 << 20
	linkFlowLow  = 2 << 20
)

// Behind reports whether the link to the home holds more than
// linkFlowHigh bytes waiting (queue.Throttled).
func (p *classicProxy) Behind() bool { return p.waiting() > linkFlowHigh }

// CaughtUp reports whether the link to the home holds no more than
// linkFlowLow bytes waiting (queue.Throttled).
func (p *classicProxy) CaughtUp() bool { return p.waiting() <= linkFlowLow }

// waiting is the bytes waiting on the link to the home; 0 with no link.
func (p *classicProxy) waiting() int {
	p.m.linkMu.Lock()
	l := p.m.links[p.home]
	p.m.linkMu.Unlock()
	if l == nil {
		return 0
	}
	return l.buffered()
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
	st, r := l.wait(lkConsume, cluster.Enc(nil).Uvarint(pc.id).Str(p.vhost).Str(p.name).Str(c.Tag).U8(flags).
		Uvarint(uint64(c.Prefetch)).Varint(int64(c.Priority)))
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
		pc.l.call(lkSettle, appendSeqs(cluster.Enc(nil).Uvarint(pc.id).U8(settleReturn), []queue.Delivery{d}), nil)
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
		pc.l.call(lkCredit, cluster.Enc(nil).Uvarint(pc.id).Uvarint(uint64(n)), nil)
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
	pc.l.call(lkCancel, cluster.Enc(nil).Uvarint(pc.id), nil)
	if len(back) > 0 {
		pc.l.call(lkSettle, appendSeqs(cluster.Enc(nil).Uvarint(pc.id).U8(settleReturn), back), nil)
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
		ref.l.call(lkSettle, appendSeqs(cluster.Enc(nil).Uvarint(ref.cid).U8(op), ds), nil)
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
	st, r := l.wait(lkGet, cluster.Enc(nil).Uvarint(cid).Str(p.vhost).Str(p.name).U8(flags))
	if err := answerError(st, r); err != nil {
		return queue.Delivery{}, false, 0, p.homeDown(err)
	}
	got, remaining := r.Bool(), int(r.Uvarint())
	if !got {
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
func (p *classicProxy) request(kind byte, extra ...byte) (byte, *cluster.Dec, error) {
	l, err := p.m.link(p.home)
	if err != nil {
		return 0, nil, p.homeDown(err)
	}
	st, r := l.wait(kind, p.body().Raw(extra))
	return st, r, p.homeDown(answerError(st, r))
}

func (p *classicProxy) Purge() (int, error) {
	_, r, err := p.request(lkPurge)
	if err != nil {
		return 0, err
	}
	return int(r.Uvarint()), nil
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
	return int(r.Uvarint()), nil
}

func (p *classicProxy) Stats() (messages, consumers int, err error) {
	_, r, err := p.request(lkStats)
	if err != nil {
		return 0, 0, err
	}
	messages, consumers = int(r.Uvarint()), int(r.Uvarint())
	unacked, rb, ub, head := int64(r.Uvarint()), int64(r.Uvarint()), int64(r.Uvarint()), int64(r.Uvarint())
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
