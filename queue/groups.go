package queue

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// Message groups (x-message-group-header, policy message-group-header):
// the header named there carries a message's group id. On such a queue
// the messages of one group are delivered in publish order and never to
// two consumers at once, while different groups go to competing
// consumers in parallel:
//
//   - A group is held by the consumer that has its unacked messages (it
//     may receive more of them, within its prefetch) and released when
//     the last of them is settled: acked, rejected or nacked (requeued
//     ones go back to their place, ahead of the group's later ones), or
//     returned when the consumer's channel or connection goes. A
//     cancelled consumer's deliveries still belong to its channel (AMQP
//     lets it ack them), so its groups are released as those are settled
//     or returned; no other consumer gets them meanwhile. A message got
//     with basic.get holds its group the same way; a message delivered
//     without acknowledgement (no-ack) is settled as it goes and holds
//     nothing.
//   - A message without the header is in no group: it goes to any
//     consumer with room, in queue order among such messages.
//   - The dispatcher serves groups in a rotation, one message per turn,
//     not the queue's head: a group with a long backlog cannot starve a
//     group with one message.
//   - The state is per group with ready, unacked or held-back messages
//     only: a group is forgotten when it has none.
//
// Ready messages live in their group's list, not in the lanes; a grouped
// queue has one lane, which it uses only while its recovered backlog is
// read back at start-up (land passes what it reads to grpLanded, which
// files each message under its group). Beyond the memory window a
// message's bytes wait in the store, as in any paging queue, and its
// group keeps an index entry (its sequence and store ids); the group's
// head is read back (one entry, grpRead) when its turn comes, or ahead of
// it, right after the group's previous message went out.
//
// Priorities (x-max-priority) are not applied on a grouped queue, and
// messages expire (TTL) when they reach their group's head.

// maxGroupReads bounds the paged group heads being read back at once.
const maxGroupReads = 64

// groups is a grouped queue's state. exec held for all of it.
type groups struct {
	header string
	byKey  map[string]*group
	peak   int    // len(byKey) at most since it was last made: a Go map never shrinks
	none   *group // the messages without the header: in no group
	ring   groupRing
	loaded int    // ready messages in memory (counted in Queue.held)
	paged  int    // ready messages whose bytes wait in the store
	reads  int    // paged heads being read
	gen    uint64 // bumped by a purge or delete: reads begun before land void
	// retryAt: after a failed read, no new one before this (unix nanos).
	retryAt int64
	// ahead: reads under way cover the entries from a head up to about
	// this sequence; read-ahead leaves the heads below it to them.
	ahead uint64
}

// group is one group's ready messages (in sequence order from head) and
// who holds it.
type group struct {
	key   string
	free  bool // groups.none: never held
	ready []gEntry
	head  int
	// owner is the consumer holding the group's unacked messages; nil with
	// unacked > 0 while they are with no consumer (got, or their consumer
	// cancelled): the group then waits for them to be settled.
	owner   *Consumer
	unacked int
	held    int // returned messages held back for a retry delay
	inRing  bool
	reading bool
}

// gEntry is a ready message; paged: its bytes wait in the store, and d.Msg
// keeps only what its entry needs (pagedMsg).
type gEntry struct {
	d     Delivery
	paged bool
}

func newGroups(header string) *groups {
	return &groups{header: header, byKey: map[string]*group{}, none: &group{free: true}}
}

func (g *group) len() int       { return len(g.ready) - g.head }
func (g *group) front() *gEntry { return &g.ready[g.head] }

func (g *group) popFront() gEntry {
	e := g.ready[g.head]
	g.ready[g.head] = gEntry{}
	g.head++
	if g.head == len(g.ready) {
		g.head = 0
		if cap(g.ready) > 64 {
			g.ready = nil // give a drained backlog's memory back
		} else {
			g.ready = g.ready[:0]
		}
	} else if g.head >= 64 && g.head*2 >= len(g.ready) {
		n := copy(g.ready, g.ready[g.head:])
		clear(g.ready[n:])
		g.ready, g.head = g.ready[:n], 0
	}
	return e
}

// insert puts e at its place by sequence: a returned message goes ahead
// of the group's later ones.
func (g *group) insert(e gEntry) {
	s := g.ready[g.head:]
	i, _ := slices.BinarySearchFunc(s, e.d.Seq, func(x gEntry, seq uint64) int {
		switch {
		case x.d.Seq < seq:
			return -1
		case x.d.Seq > seq:
			return 1
		}
		return 0
	})
	if i == 0 && g.head > 0 {
		g.head--
		g.ready[g.head] = e
		return
	}
	g.ready = slices.Insert(g.ready, g.head+i, e)
}

// groupRing is the rotation of groups with ready messages: a ring buffer
// growing by doubling.
type groupRing struct {
	buf  []*group
	head int
	n    int
}

func (r *groupRing) len() int { return r.n }

func (r *groupRing) grow() {
	nb := make([]*group, max(16, 2*len(r.buf)))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

func (r *groupRing) pushBack(g *group) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = g
	r.n++
}

func (r *groupRing) pushFront(g *group) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = g
	r.n++
}

func (r *groupRing) popFront() *group {
	g := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > 1024 {
			r.buf = nil
		}
	}
	return g
}

// GroupKey returns the group id of a message (amqp.FieldKey of its
// header's value), if it has the header. buf is scratch space.
func GroupKey(props []byte, header string, buf *[9]byte) ([]byte, bool) {
	h := amqp.PropsHeaders(props)
	if len(h) == 0 {
		return nil, false
	}
	val, ok := amqp.HeaderField(h, header)
	if !ok {
		return nil, false
	}
	return amqp.FieldKey(val, buf), true
}

// grpOf is m's group (groups.none without the header); with create false,
// nil when the group is not known.
func (q *Queue) grpOf(m *Message, create bool) *group {
	gs := q.grp
	var buf [9]byte
	k, ok := GroupKey(m.Props, gs.header, &buf)
	if !ok {
		return gs.none
	}
	if g := gs.byKey[string(k)]; g != nil || !create {
		return g
	}
	g := &group{key: string(k)}
	gs.byKey[g.key] = g
	gs.peak = max(gs.peak, len(gs.byKey))
	return g
}

// Groups is the count of groups the queue keeps state for (with ready,
// unacked or held-back messages), ordered after every op already posted;
// 0 for a queue without groups.
func (q *Queue) Groups() int {
	if q.grp == nil || q.cfg.Replica != nil {
		return 0
	}
	return q.call(op{kind: opStats}).groups
}

// grpReady puts g in the rotation if it can be served.
func (q *Queue) grpReady(g *group) {
	if !g.inRing && g.held == 0 && g.len() > 0 {
		g.inRing = true
		q.grp.ring.pushBack(g)
	}
}

// grpForget drops g's state once it has nothing.
func (q *Queue) grpForget(g *group) {
	gs := q.grp
	if !g.free && g.len() == 0 && g.unacked == 0 && g.held == 0 && !g.reading && !g.inRing {
		delete(gs.byKey, g.key)
		if gs.peak > 1024 && len(gs.byKey) < gs.peak/4 {
			// Made anew, so that the groups gone give their memory back
			// (amortized: a quarter of the peak is copied).
			m := make(map[string]*group, len(gs.byKey))
			for k, x := range gs.byKey {
				m[k] = x
			}
			gs.byKey, gs.peak = m, len(m)
		}
	}
}

// grpPublish files a new message under its group: in memory within the
// window, else its bytes in the store (written here unless durable: its
// entry is written already) and an index entry in the group.
func (q *Queue) grpPublish(d Delivery, durable bool, mem int64) {
	gs := q.grp
	g := q.grpOf(d.Msg, true)
	e := gEntry{d: d}
	win, winBytes := q.window()
	if q.cfg.Store != nil && (gs.loaded >= win || q.held-q.unackedBytes+mem > winBytes) {
		stub := q.pagedMsg(d.Msg)
		if !durable {
			id := q.cfg.Store.NewMessageID()
			q.w.add(StoreWrite{Kind: PutEntry, Queue: q.storeID(d.Lane), Seq: d.Seq, Msg: id, Transient: true, Inline: true, Record: EncodeMessage(d.Msg)})
			stub.ID, stub.Shared, stub.Inline = id, false, true
			e.d.Transient = true
		}
		e.d.Msg, e.paged = stub, true
		gs.paged++
		q.cfg.Memory.Add(-mem) // counted by Publish, not held
	} else {
		gs.loaded++
		q.held += mem // Memory was counted by Publish
	}
	g.ready = append(g.ready, e)
	q.grpReady(g)
}

// grpEnable makes a running queue grouped when a policy names a header
// and it has none (not a priority queue): its ready messages are filed by
// group, in order; what it pages is filed as it is read back. Deliveries
// made before hold no group. A header removed or changed by a policy
// applies from the queue's next start. It returns the header in force.
// exec held.
func (q *Queue) grpEnable(header string) string {
	if q.grp != nil || header == "" || len(q.lanes) != 1 || q.cfg.Replica != nil {
		return q.pol.GroupHeader
	}
	q.grp = newGroups(header)
	l := &q.lanes[0]
	for l.len() > 0 {
		d := l.pop() // in sequence order: returned ones at their places
		g := q.grpOf(d.Msg, true)
		g.ready = append(g.ready, gEntry{d: d})
		q.grp.loaded++
		q.grpReady(g)
	}
	return header
}

// grpSpills reports whether a new message of mem bytes goes to the lane's
// page file: a non-durable queue pages to its page files, which are read
// back once and in order (persist.Spill), so its groups' index cannot
// point into them: its overflow is read back in order as the groups'
// messages in memory go out, and only the groups in memory are served in
// turn.
func (q *Queue) grpSpills(mem int64) bool {
	if q.cfg.Store == nil || q.cfg.Durable {
		return false
	}
	win, winBytes := q.window()
	return q.grp.loaded >= win || q.held-q.unackedBytes+mem > winBytes
}

// grpInMem is what refill weighs against the window for a grouped queue:
// the ready messages in memory, twice; a durable queue's lane pages only
// a recovered backlog, which is read back at once (0: its messages are
// filed by group, paged again past the window).
func (q *Queue) grpInMem() (int, int) {
	if q.cfg.Durable {
		return 0, 0
	}
	return q.grp.loaded, q.grp.loaded
}

// grpLanded files a message the lane read back (counted in held by land)
// under its group: a durable queue's recovered backlog, or a non-durable
// queue's overflow.
func (q *Queue) grpLanded(d Delivery) {
	gs := q.grp
	g := q.grpOf(d.Msg, true)
	e := gEntry{d: d}
	win, winBytes := q.window()
	if q.cfg.Durable && (gs.loaded >= win || q.held-q.unackedBytes > winBytes) {
		q.account(-d.Msg.MemSize())
		e.d.Msg, e.paged = q.pagedMsg(d.Msg), true
		gs.paged++
	} else {
		gs.loaded++
	}
	g.insert(e) // a returned message may be filed already
	q.grpReady(g)
}

// grpReturn puts a delivery back in its group, ahead of the later ones,
// and releases the group when it was its last unacked message.
func (q *Queue) grpReturn(d Delivery) {
	g := q.grpOf(d.Msg, true)
	g.insert(gEntry{d: d})
	q.grp.loaded++
	q.readyBytes += int64(len(d.Msg.Body))
	q.grpRelease(g, false)
}

// grpDone releases d's group: d was acked, discarded or dead-lettered;
// held: d is held back for a retry delay instead (its group waits for it).
func (q *Queue) grpDone(d *Delivery, held bool) {
	g := q.grpOf(d.Msg, held)
	if g == nil {
		return
	}
	if held && !g.free {
		g.held++
	}
	q.grpRelease(g, true)
}

// grpRelease counts one unacked message of g settled.
func (q *Queue) grpRelease(g *group, forget bool) {
	if g.free {
		return
	}
	if g.unacked > 0 {
		g.unacked--
	}
	if g.unacked == 0 {
		g.owner = nil
	}
	q.grpReady(g)
	if forget {
		q.grpForget(g)
	}
}

// grpUnheld ends a retry hold of d: ready again at its place, or gone
// (expired, dropped).
func (q *Queue) grpUnheld(d *Delivery, ready bool) {
	g := q.grpOf(d.Msg, true)
	if !g.free && g.held > 0 {
		g.held--
	}
	if ready {
		g.insert(gEntry{d: *d})
		q.grp.loaded++
		q.readyBytes += int64(len(d.Msg.Body))
	}
	q.grpReady(g)
	q.grpForget(g)
}

// grpHoldGone ends a retry hold whose message is gone (purged, lost).
func (q *Queue) grpHoldGone(d *Delivery) {
	if q.grp != nil {
		q.grpUnheld(d, false)
	}
}

// grpCancel releases c's groups to wait for their unacked messages
// without an owner: c gets no more.
func (q *Queue) grpCancel(c *Consumer) {
	for _, g := range q.grp.byKey {
		if g.owner == c {
			g.owner = nil
		}
	}
}

// anyRoom reports whether some consumer may take a delivery.
func (q *Queue) anyRoom() bool {
	if q.pol.SingleActive {
		return len(q.order) > 0 && !q.order[0].blocked
	}
	for _, c := range q.consumers {
		if !c.blocked {
			return true
		}
	}
	return false
}

// grpDispatch hands ready messages to consumers, a group at a time in the
// rotation: a free group to the next consumer with room, a held group to
// its owner only. A group whose owner is full keeps its place in the
// rotation; one waiting for a read, a retry hold or a consumer gone
// leaves it until that is over.
func (q *Queue) grpDispatch() {
	gs := q.grp
	if q.diskCount > 0 {
		q.refill() // the recovered backlog is read back
	}
	var now int64 // read when a message can expire
	for skipped := 0; gs.ring.len() > 0 && skipped < gs.ring.len(); {
		if !q.anyRoom() {
			if len(q.consumers) > 0 && q.limitedSince.Load() == 0 {
				q.limitedSince.Store(Now())
			}
			return
		}
		g := gs.ring.popFront()
		g.inRing = false
		var c *Consumer
		switch {
		case g.len() == 0 || g.held > 0:
			q.grpForget(g)
			continue
		case g.free || g.unacked == 0:
			c = q.nextConsumer()
		case g.owner == nil:
			continue // back when its unacked messages are settled
		case !g.owner.blocked:
			c = g.owner
		}
		if c == nil {
			g.inRing = true
			gs.ring.pushBack(g)
			skipped++
			continue
		}
		if g.front().paged {
			g.inRing = true
			if g.reading || q.grpRead(g) {
				// Its turn waits for the read (its landing drains the
				// queue again): the rotation holds, so that the groups
				// whose heads are in memory do not take the turns of those
				// being read. The next groups' heads are read meanwhile.
				gs.ring.pushFront(g)
				q.grpReadAhead(maxGroupReads)
				return
			}
			gs.ring.pushBack(g)
			skipped++
			continue
		}
		d := g.popFront().d
		gs.loaded--
		q.readyBytes -= int64(len(d.Msg.Body))
		if exp := q.expiry(&d); exp != 0 {
			if now == 0 {
				now = Now()
			}
			if exp <= now {
				q.deadLetter(d, ReasonExpired)
				q.grpReady(g)
				q.grpForget(g)
				continue
			}
		}
		if !q.deliver(c, d) {
			g.insert(gEntry{d: d})
			gs.loaded++
			q.readyBytes += int64(len(d.Msg.Body))
			g.inRing = true
			gs.ring.pushFront(g) // its turn is not used
			continue
		}
		skipped = 0
		if !c.NoAck && !g.free {
			g.owner = c
			g.unacked++
		}
		q.grpReady(g)
		q.grpForget(g)
		q.grpReadAhead(4)
	}
}

// grpReadAhead begins reading the paged heads of the next n groups in the
// rotation, so that they are in memory when their turns come.
func (q *Queue) grpReadAhead(n int) {
	r := &q.grp.ring
	for i := 0; i < min(n, r.len()); i++ {
		g := r.buf[(r.head+i)%len(r.buf)]
		if g.len() == 0 || !g.front().paged || g.reading || (q.grp.reads > 0 && g.front().d.Seq < q.grp.ahead) {
			continue
		}
		if !q.grpRead(g) {
			return
		}
	}
}

// grpGet takes a message for basic.get: the head of the next group in the
// rotation that no one holds; a group whose head is paged is read first
// (the get then waits: stalled). noAck: the message is settled at once.
func (q *Queue) grpGet(noAck bool) (d Delivery, ok, wait bool) {
	gs := q.grp
	for i, n := 0, gs.ring.len(); i < n; i++ {
		g := gs.ring.popFront()
		g.inRing = false
		if g.len() == 0 || g.held > 0 || g.reading || (!g.free && g.unacked > 0) {
			q.grpReady(g)
			q.grpForget(g)
			continue
		}
		if g.front().paged {
			if q.grpRead(g) {
				return d, false, true
			}
			q.grpReady(g)
			continue
		}
		d = g.popFront().d
		gs.loaded--
		q.readyBytes -= int64(len(d.Msg.Body))
		if !noAck && !g.free {
			g.unacked++
		}
		q.grpReady(g)
		q.grpForget(g)
		return d, true, false
	}
	return d, false, gs.reads > 0
}

// grpRead begins reading g's paged head back from the store, with the
// entries after it (grpReadBatch): the groups are served in turn, so the
// entries after a head are mostly the heads of the next groups, and one
// read fills them all (grpLand). False when too many reads are under way
// (or one failed a moment ago).
func (q *Queue) grpRead(g *group) bool {
	gs := q.grp
	if gs.reads >= maxGroupReads || (gs.retryAt != 0 && Now() < gs.retryAt) {
		return false
	}
	gs.retryAt = 0
	g.reading = true
	gs.reads++
	e := g.front()
	gs.ahead = max(gs.ahead, e.d.Seq+grpReadBatch)
	q.commit() // our own page-outs first: the read sees every earlier commit
	ld := landing{grp: g, gen: gs.gen, seq: e.d.Seq}
	q.cfg.Store.LoadEntries(q.storeID(e.d.Lane), e.d.Seq-1, grpReadBatch, grpReadBytes, func(ents []StoredEntry, err error) {
		ld.ents, ld.err = ents, err
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.landed = append(q.landed, ld)
		q.mu.Unlock()
		q.signal()
	})
	return true
}

// A group head's read takes up to grpReadBatch entries from it on, and
// stops past grpReadBytes of records (the first is always read).
const (
	grpReadBatch = 256
	grpReadBytes = 1 << 20
)

// grpLand takes in a read of paged entries: each that is a paged ready
// message of a group is filled in (the others, unacked or loaded since,
// are passed over); the group the read was for learns whether its head
// was there.
func (q *Queue) grpLand(ld *landing) {
	gs := q.grp
	if ld.gen != gs.gen {
		return // purged or deleted since
	}
	q.stalled = false
	g := ld.grp
	g.reading = false
	gs.reads--
	defer func() {
		q.grpReady(g)
		q.grpForget(g)
	}()
	if ld.err != nil {
		q.cfg.Logger.Error("reading queue from store", zap.String("queue", q.cfg.Name), zap.Error(ld.err))
		gs.retryAt = Now() + int64(time.Second)
		time.AfterFunc(time.Second, q.signal)
		return
	}
	found := false
	for i := range ld.ents {
		se := &ld.ents[i]
		m, err := DecodeMessage(se.Record)
		if err != nil {
			continue // a corrupt head is dealt with below, once it is the one asked for
		}
		owner := g
		if se.Seq != ld.seq {
			if owner = q.grpOf(m, false); owner == nil {
				continue
			}
		}
		e := owner.find(se.Seq)
		if e == nil || !e.paged {
			continue
		}
		found = found || se.Seq == ld.seq
		m.ID, m.Shared, m.Inline = se.Msg, se.Shared, se.Inline
		e.d.Msg, e.paged = m, false
		gs.paged--
		gs.loaded++
		q.account(m.MemSize())
	}
	if e := g.find(ld.seq); !found && e != nil && e.paged {
		q.cfg.Logger.Error("message missing or corrupt in store", zap.String("queue", q.cfg.Name), zap.Uint64("seq", ld.seq))
		d := e.d
		q.grpRemove(g, e)
		gs.paged--
		q.deleteEntry(&d)
	}
}

// find is g's ready message at seq, or nil.
func (g *group) find(seq uint64) *gEntry {
	s := g.ready[g.head:]
	i, ok := slices.BinarySearchFunc(s, seq, func(x gEntry, seq uint64) int {
		switch {
		case x.d.Seq < seq:
			return -1
		case x.d.Seq > seq:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return &s[i]
}

// grpRemove takes e out of g's ready list.
func (q *Queue) grpRemove(g *group, e *gEntry) {
	i := g.head
	for &g.ready[i] != e {
		i++
	}
	if i == g.head {
		g.popFront()
		return
	}
	g.ready = slices.Delete(g.ready, i, i+1)
}

// grpPopOldest takes the oldest ready message in memory at a group's head
// (a length limit's drop-head).
func (q *Queue) grpPopOldest() (Delivery, bool) {
	gs := q.grp
	var best *group
	consider := func(g *group) {
		if g.len() > 0 && !g.front().paged && (best == nil || g.front().d.Seq < best.front().d.Seq) {
			best = g
		}
	}
	consider(gs.none)
	for _, g := range gs.byKey {
		consider(g)
	}
	if best == nil {
		return Delivery{}, false
	}
	d := best.popFront().d
	gs.loaded--
	q.readyBytes -= int64(len(d.Msg.Body))
	q.grpForget(best)
	return d, true
}

// grpPurge drops every ready message of the groups (purge).
func (q *Queue) grpPurge() {
	gs := q.grp
	drop := func(g *group) {
		for g.len() > 0 {
			e := g.popFront()
			if !e.paged {
				q.account(-e.d.Msg.MemSize())
			}
			q.deleteEntry(&e.d)
		}
		g.reading, g.inRing = false, false
	}
	drop(gs.none)
	for _, g := range gs.byKey {
		drop(g)
		q.grpForget(g)
	}
	gs.ring = groupRing{}
	gs.loaded, gs.paged, gs.reads = 0, 0, 0
	gs.gen++
	for _, g := range gs.byKey {
		q.grpReady(g) // none is ready: kept for their unacked messages
	}
}

// grpDrop forgets every group (the queue is deleted).
func (q *Queue) grpDrop() {
	gen := q.grp.gen + 1
	q.grp = newGroups(q.grp.header)
	q.grp.gen = gen
}
