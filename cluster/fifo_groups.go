package cluster

import "sort"

// Message groups in a quorum queue's state (x-message-group-header on a
// quorum queue, with GroupConfig.GroupKey), the rule a classic queue
// applies (queue/groups.go): the GroupKey of a message's properties is
// its group; the messages of one group are delivered in id (publish)
// order and never to two consumers at once, different groups go to
// competing consumers in parallel:
//
//   - A group is held by the tag its messages are checked out to (a
//     consumer, a getter, a cancelled consumer) while any is, and
//     released when the last of them leaves it: settled, returned,
//     released, dead-lettered, or returned because its consumer went
//     (Down). A returned message goes back to its group at its place by
//     id, ahead of the group's later ones.
//   - A message without the header is in the free group: never held,
//     served in turn with the others, in id order among such messages.
//   - The ready messages are served a group at a time in a rotation, one
//     message per turn, so a group with a backlog cannot starve a group
//     with one message. A held group goes to its holder only; one whose
//     holder is full, or is no consumer, passes its turn.
//   - A message held for a delayed retry keeps its group waiting: the
//     group is out of the rotation until the message is ready again.
//   - State is kept per group with ready, checked-out or held messages
//     only: a group is forgotten when it has none.
//
// It is part of the replicated state and a pure function of it: every
// member files the same messages under the same groups and rotates them
// alike. The group ids are not in the log nor the snapshot: they are read
// from the messages (as fifo_dedup.go's ids), and a restored state files
// its ready messages again in the snapshot's order with the rotation the
// image names (fifoImage.Groups: a field an image of before groups does
// not have, which gob leaves empty). Ready messages live in their groups,
// not in readyQ's lists; readyQ's methods turn here when readyQ.g is set,
// so a queue without groups pays a nil check. Priorities are not applied
// on a grouped queue (as on a classic one).

// fifoGroups is a grouped queue's ready messages and group holders.
type fifoGroups struct {
	key  func(props []byte) ([]byte, bool)
	by   map[string]*fifoGroup
	peak int        // len(by) at most since it was made: a Go map never shrinks
	none *fifoGroup // messages without the header
	ring fgRing     // groups in turn; a group in it may have emptied since (dropped when its turn comes)
	ttl  int        // ready messages with an expiry: 0 skips the head scans
}

// fifoGroup is one group: its ready messages by id from head, and who holds
// it.
type fifoGroup struct {
	key    string
	free   bool
	ready  []*fifoMsg
	head   int
	owner  string // the tag its checked-out messages are with ("" when out == 0)
	out    int    // its messages checked out
	held   int    // its messages held for a delayed retry
	inRing bool
}

func newFifoGroups(key func(props []byte) ([]byte, bool)) *fifoGroups {
	return &fifoGroups{key: key, by: map[string]*fifoGroup{}, none: &fifoGroup{free: true}}
}

func (g *fifoGroup) len() int        { return len(g.ready) - g.head }
func (g *fifoGroup) front() *fifoMsg { return g.ready[g.head] }

// popFront takes the group's head; the caller counts it out of readyQ.
func (g *fifoGroup) popFront() *fifoMsg {
	m := g.ready[g.head]
	g.ready[g.head] = nil
	g.head++
	if g.head == len(g.ready) {
		g.ready, g.head = nil, 0
	} else if g.head >= 32 && g.head*2 >= len(g.ready) {
		n := copy(g.ready, g.ready[g.head:])
		clear(g.ready[n:])
		g.ready, g.head = g.ready[:n], 0
	}
	return m
}

// insert files m at its place by id.
func (g *fifoGroup) insert(m *fifoMsg) {
	if g.head > 0 && m.ID < g.ready[g.head].ID {
		g.head--
		g.ready[g.head] = m
		return
	}
	s := insertByID(g.ready[g.head:], m)
	if g.head == 0 {
		g.ready = s
		return
	}
	g.ready = append(g.ready[:g.head], s...)
}

// sortGroups orders groups by their heads' ids.
func sortGroups(gs []*fifoGroup) {
	sort.Slice(gs, func(i, j int) bool { return gs[i].front().ID < gs[j].front().ID })
}

func sortIDs(ids []uint64) { sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] }) }

// of is the group of a message with props; create false: nil when it
// is not known.
func (gs *fifoGroups) of(props []byte, create bool) *fifoGroup {
	k, ok := gs.key(props)
	if !ok || len(k) == 0 {
		return gs.none
	}
	if g := gs.by[string(k)]; g != nil || !create {
		return g
	}
	g := &fifoGroup{key: string(k)}
	gs.by[g.key] = g
	gs.peak = max(gs.peak, len(gs.by))
	return g
}

// ready puts g in the rotation if it can be served.
func (gs *fifoGroups) ready(g *fifoGroup) {
	if !g.inRing && g.held == 0 && g.len() > 0 {
		g.inRing = true
		gs.ring.pushBack(g)
	}
}

// forget drops g's state once it has nothing.
func (gs *fifoGroups) forget(g *fifoGroup) {
	if g.free || g.len() > 0 || g.out > 0 || g.held > 0 || g.inRing {
		return
	}
	delete(gs.by, g.key)
	if gs.peak > 1024 && len(gs.by) < gs.peak/4 {
		// Made anew, so that the groups gone give their memory back
		// (amortized: a quarter of the peak is copied).
		m := make(map[string]*fifoGroup, len(gs.by))
		for k, x := range gs.by {
			m[k] = x
		}
		gs.by, gs.peak = m, len(m)
	}
}

// --- readyQ's grouped side --------------------------------------------------

// gPush files a ready message under its group.
func (r *readyQ) gPush(m *fifoMsg) {
	gs := r.g
	g := gs.of(m.Props, true)
	g.insert(m)
	r.n++
	r.bytes += int64(len(m.Body))
	if m.Expires != 0 {
		gs.ttl++
	}
	gs.ready(g)
}

// gTake counts m, taken from its group, out of the ready messages.
func (r *readyQ) gTake(m *fifoMsg) {
	r.n--
	r.bytes -= int64(len(m.Body))
	if m.Expires != 0 {
		r.g.ttl--
	}
}

// gEach calls fn for every ready message: the groups in the rotation in
// turn, then those out of it (held for a retry), each group from its
// head.
func (r *readyQ) gEach(fn func(m *fifoMsg)) {
	gs := r.g
	gs.ring.each(func(g *fifoGroup) {
		for _, m := range g.ready[g.head:] {
			fn(m)
		}
	})
	var others []*fifoGroup
	if !gs.none.inRing && gs.none.len() > 0 {
		others = append(others, gs.none)
	}
	for _, g := range gs.by {
		if !g.inRing && g.len() > 0 {
			others = append(others, g)
		}
	}
	// By head id, so that every member lists them alike.
	sortGroups(others)
	for _, g := range others {
		for _, m := range g.ready[g.head:] {
			fn(m)
		}
	}
}

// gPeek is the head of the group whose turn is next.
func (r *readyQ) gPeek() *fifoMsg {
	ring := &r.g.ring
	for i := 0; i < ring.n; i++ {
		if g := ring.at(i); g.len() > 0 && g.held == 0 {
			return g.front()
		}
	}
	return nil
}

// gPopOldest takes the oldest message at a group's head (a length
// limit's drop-head), nil if none is ready.
func (r *readyQ) gPopOldest() *fifoMsg {
	gs := r.g
	best := gs.none
	if best.len() == 0 {
		best = nil
	}
	for _, g := range gs.by {
		if g.len() > 0 && (best == nil || g.front().ID < best.front().ID) {
			best = g
		}
	}
	if best == nil {
		return nil
	}
	m := best.popFront()
	r.gTake(m)
	gs.forget(best)
	return m
}

// gClear empties every group's ready messages (a purge); the groups
// keep their holders.
func (r *readyQ) gClear() {
	gs := r.g
	gs.ring.each(func(g *fifoGroup) { g.inRing = false })
	gs.ring = fgRing{}
	gs.none.ready, gs.none.head = nil, 0
	for _, g := range gs.by {
		g.ready, g.head = nil, 0
		gs.forget(g)
	}
	r.n, r.bytes, gs.ttl = 0, 0, 0
}

// gExpired reports whether a group head in the rotation has expired at
// now.
func (r *readyQ) gExpired(now int64) bool {
	if r.g.ttl == 0 {
		return false
	}
	ring := &r.g.ring
	for i := 0; i < ring.n; i++ {
		if g := ring.at(i); g.held == 0 && g.len() > 0 {
			if m := g.front(); m.Expires != 0 && m.Expires <= now {
				return true
			}
		}
	}
	return false
}

// gTakeExpired takes the expired messages at the heads of the groups in
// the rotation, in its order (a message expires when it reaches its
// group's head, as on a classic queue).
func (r *readyQ) gTakeExpired(now int64) []*fifoMsg {
	gs := r.g
	if gs.ttl == 0 {
		return nil
	}
	var out []*fifoMsg
	gs.ring.each(func(g *fifoGroup) {
		for g.held == 0 && g.len() > 0 && g.front().Expires != 0 && g.front().Expires <= now {
			m := g.popFront()
			out = append(out, m)
		}
	})
	for _, m := range out {
		r.gTake(m)
	}
	return out
}

// --- the Fifo's grouped side ------------------------------------------------

// grpCheckout hands ready messages to consumers with room, a group at a
// time in the rotation: a free group to the next consumer (fifo_
// consumers.go nextConsumer), a held one to its holder only.
func (f *Fifo) grpCheckout(e *Effects) {
	r := &f.ready
	gs := r.g
	for skipped := 0; gs.ring.n > 0 && skipped < gs.ring.n && f.anyRoom(); {
		g := gs.ring.popFront()
		g.inRing = false
		if g.len() == 0 || g.held > 0 {
			gs.forget(g)
			continue
		}
		var k *fifoCons
		if g.free || g.out == 0 {
			k = f.nextConsumer()
		} else {
			k = f.holderWithRoom(g)
		}
		if k == nil {
			g.inRing = true
			gs.ring.pushBack(g)
			skipped++
			continue
		}
		skipped = 0
		m := g.popFront()
		r.gTake(m)
		m.Consumer = k.Tag
		k.Out++
		if !g.free {
			g.owner = k.Tag
			g.out++
		}
		gs.ready(g)
		e.Deliveries = append(e.Deliveries, Delivery{Consumer: k.Tag, ID: m.ID, Msg: m.message(), Redelivered: m.Returned, Count: m.Deliveries, Acquired: m.Acquired})
	}
}

// anyRoom reports whether some consumer may take a message now.
func (f *Fifo) anyRoom() bool {
	if f.cfg.SingleActive {
		k := f.cons[f.active]
		return k != nil && k.hasRoom() && !f.quiescing(k)
	}
	for _, t := range f.order {
		if f.cons[t].hasRoom() {
			return true
		}
	}
	return false
}

// holderWithRoom is the consumer holding g if it may take another
// message, nil otherwise (full, or the holder is no consumer: a getter,
// a cancelled consumer).
func (f *Fifo) holderWithRoom(g *fifoGroup) *fifoCons {
	k := f.cons[g.owner]
	if k == nil || !k.hasRoom() {
		return nil
	}
	if f.cfg.SingleActive && (k.Tag != f.active || f.quiescing(k)) {
		return nil
	}
	return k
}

// nextReady takes the ready message a basic.get (tag) gets: the head of
// the queue, or on a grouped queue the head of the next group in the
// rotation that nothing holds; noAck: it holds nothing.
func (f *Fifo) nextReady(tag string, noAck bool) *fifoMsg {
	r := &f.ready
	gs := r.g
	if gs == nil {
		return r.pop()
	}
	for i, n := 0, gs.ring.n; i < n; i++ {
		g := gs.ring.popFront()
		g.inRing = false
		if g.len() == 0 || g.held > 0 {
			gs.forget(g)
			continue
		}
		if !g.free && g.out > 0 {
			g.inRing = true
			gs.ring.pushBack(g)
			continue
		}
		m := g.popFront()
		r.gTake(m)
		if !noAck && !g.free {
			g.owner = tag
			g.out++
		}
		gs.ready(g)
		gs.forget(g)
		return m
	}
	return nil
}

// unhold counts a checked-out message leaving its holder: settled,
// returned, released or dead-lettered. No-op on a queue without groups.
func (f *Fifo) unhold(m *fifoMsg) {
	gs := f.ready.g
	if gs == nil {
		return
	}
	g := gs.of(m.Props, false)
	if g == nil || g.free {
		return
	}
	if g.out > 0 {
		g.out--
	}
	if g.out == 0 {
		g.owner = ""
	}
	gs.forget(g)
}

// grpHeld counts a message of m's group held for a delayed retry (d 1)
// or no longer (d -1): the group waits out of the rotation meanwhile.
func (f *Fifo) grpHeld(m *fifoMsg, d int) {
	gs := f.ready.g
	if gs == nil {
		return
	}
	g := gs.of(m.Props, true)
	if g.free {
		return
	}
	g.held = max(g.held+d, 0)
	gs.ready(g)
	gs.forget(g)
}

// Groups is the count of groups the queue keeps state for (with ready,
// checked-out or held messages); 0 without groups.
func (f *Fifo) Groups() int {
	if f.ready.g == nil {
		return 0
	}
	return len(f.ready.g.by)
}

// Grouped reports whether the queue has message groups.
func (f *Fifo) Grouped() bool { return f.ready.g != nil }

// GroupHolder is the tag holding the group of a message with props ("" when
// none does, or the queue has no groups).
func (f *Fifo) GroupHolder(props []byte) string {
	if f.ready.g == nil {
		return ""
	}
	if g := f.ready.g.of(props, false); g != nil {
		return g.owner
	}
	return ""
}

// setGroupKey makes a state group its messages by key (nil: no groups):
// a new state, or one restored from a snapshot (RestoreFifo kept the
// image's ready order and rotation in f.restored), whose groups are
// rebuilt from its messages.
func (f *Fifo) setGroupKey(key func(props []byte) ([]byte, bool)) {
	rs := f.restored
	f.restored = nil
	if key == nil {
		return
	}
	order := f.ready.ids()
	var ring []string
	if rs != nil {
		order, ring = rs.ready, rs.groups
	}
	gs := newFifoGroups(key)
	f.ready = readyQ{g: gs}
	// The holders and the retry holds first, so that only the groups
	// that can be served enter the rotation.
	ids := make([]uint64, 0, len(f.msgs))
	for id := range f.msgs {
		ids = append(ids, id)
	}
	sortIDs(ids)
	for _, id := range ids {
		m := f.msgs[id]
		switch {
		case m.Reason != "":
		case m.Consumer != "":
			if g := gs.of(m.Props, true); !g.free {
				g.owner = m.Consumer
				g.out++
			}
		case m.ReadyAt != 0:
			if g := gs.of(m.Props, true); !g.free {
				g.held++
			}
		}
	}
	// The rotation as the image had it (an image without one: the groups
	// in the order of their first ready message).
	for _, k := range ring {
		g := gs.none
		if k != "" {
			g = gs.by[k]
			if g == nil {
				g = &fifoGroup{key: k}
				gs.by[k] = g
			}
		}
		if !g.inRing {
			g.inRing = true
			gs.ring.pushBack(g)
		}
	}
	for _, id := range order {
		if m := f.msgs[id]; m != nil && m.Consumer == "" && m.Reason == "" && m.ReadyAt == 0 {
			f.ready.gPush(m)
		}
	}
	gs.peak = len(gs.by)
}

// ringKeys lists the rotation's groups by key ("" for the free group), as
// a snapshot keeps it; nil without groups.
func (f *Fifo) ringKeys() []string {
	gs := f.ready.g
	if gs == nil {
		return nil
	}
	out := make([]string, 0, gs.ring.n)
	gs.ring.each(func(g *fifoGroup) { out = append(out, g.key) })
	return out
}

// restoredOrder is what RestoreFifo keeps of an image for setGroupKey.
type restoredOrder struct {
	ready  []uint64
	groups []string
}

// SetGroupKey makes the queue group its messages by the ids key finds
// (GroupConfig.GroupKey, nil: none), and by the header a GroupHeader
// command names with keyFor (GroupConfig.GroupKeyFor), before the group
// applies anything.
func (q *QueueFSM) SetGroupKey(key func(props []byte) ([]byte, bool), keyFor func(header string) func(props []byte) ([]byte, bool)) {
	q.mu.Lock()
	q.f.grp.arg, q.f.grp.keyFor = key, keyFor
	q.f.setGroupKey(key)
	q.mu.Unlock()
}

// groupSource is where a queue's group key comes from: its argument
// (arg, fixed for the queue's life), else the header a policy names,
// which GroupHeader commands set in log order (header, in snapshots),
// keyFor making its key. Not in the log: arg and keyFor.
type groupSource struct {
	arg    func(props []byte) ([]byte, bool)
	keyFor func(header string) func(props []byte) ([]byte, bool)
	header string
}

// GroupHeader sets the message group header a policy gives a quorum
// queue without the argument ("": none): applied in log order, it files
// the ready messages by the new header's groups (or back in one list),
// on every member alike. Unacked messages hold their groups under the
// new header. A queue with the argument ignores it.
func GroupHeader(header string) Command { return Command{Kind: cmdGroupHeader, Consumer: header} }

// PolicyGroupHeader is the policy's header the log has set ("" : none).
func (f *Fifo) PolicyGroupHeader() string { return f.grp.header }

// setGroupHeader applies GroupHeader.
func (f *Fifo) setGroupHeader(h string) {
	if f.grp.arg != nil || h == f.grp.header {
		return
	}
	f.grp.header = h
	if h == "" || f.grp.keyFor == nil {
		f.ungroup()
		return
	}
	f.setGroupKey(f.grp.keyFor(h))
}

// ungroup puts the ready messages back in readyQ's lists: the returned
// ones first, by id, then the fresh by level.
func (f *Fifo) ungroup() {
	if f.ready.g == nil {
		return
	}
	ids := f.ready.ids()
	f.ready = readyQ{}
	var ret []*fifoMsg
	for _, id := range ids {
		if m := f.msgs[id]; m.Returned {
			ret = append(ret, m)
		} else {
			f.ready.push(m)
		}
	}
	f.ready.pushReturned(ret)
}

// restoreGroups gives a state restored from a snapshot its member's group
// source and rebuilds its groups (QueueFSM.Restore).
func (f *Fifo) restoreGroups(src groupSource) {
	f.grp.arg, f.grp.keyFor = src.arg, src.keyFor
	switch {
	case src.arg != nil:
		f.setGroupKey(src.arg)
	case f.grp.header != "" && src.keyFor != nil:
		f.setGroupKey(src.keyFor(f.grp.header))
	default:
		f.restored = nil
	}
}

// fgRing is the rotation of groups: a ring buffer growing by doubling.
type fgRing struct {
	buf  []*fifoGroup
	head int
	n    int
}

func (r *fgRing) grow() {
	nb := make([]*fifoGroup, max(16, 2*len(r.buf)))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

func (r *fgRing) pushBack(g *fifoGroup) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = g
	r.n++
}

func (r *fgRing) popFront() *fifoGroup {
	g := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > 1024 {
			r.buf = nil // give a drained rotation's memory back
		}
	}
	return g
}

func (r *fgRing) at(i int) *fifoGroup { return r.buf[(r.head+i)%len(r.buf)] }

func (r *fgRing) each(fn func(g *fifoGroup)) {
	for i := 0; i < r.n; i++ {
		fn(r.buf[(r.head+i)%len(r.buf)])
	}
}
