package cluster

import (
	"math/bits"
	"sort"
)

// A quorum queue's ready messages in delivery order, as RabbitMQ 4.3's
// rabbit_fifo keeps them (deps/rabbit/src/rabbit_fifo.erl take_next_msg,
// rabbit_fifo_pq.erl at v4.3.5): the returned ones first (its returns
// queue), then the fresh ones by priority, strictly (every message of a
// higher level before any of a lower one), by arrival within a level.
// There are 32 levels, 0 to 31, whatever x-max-priority says (quorum
// queues refuse that argument): a message's priority property above 31
// counts as 31, and a message without one as 4 (msg_priority,
// ?DEFAULT_PRIORITY). RabbitMQ 4.0 to 4.2 had two levels (priority above
// 4 or not) served 2:1 (rabbit_fifo_q.erl); 3.x had one.

// Message priority levels (rabbit_fifo.erl ?MAX_PRIORITY, ?DEFAULT_PRIORITY).
const (
	maxMsgPriority     = 31
	defaultMsgPriority = 4
)

// readyQ holds a Fifo's ready messages.
type readyQ struct {
	ret  []*fifoMsg                     // returned: served first, by id
	lvl  [maxMsgPriority + 1][]*fifoMsg // fresh, by priority level, each by id
	bits uint32                         // the levels that hold messages
	n    int
	// g: the queue's message groups (fifo_groups.go), which then hold the
	// ready messages; nil without groups.
	g     *fifoGroups
	bytes int64 // body bytes (x-max-length-bytes counts the ready ones, as rabbit_fifo's msg_bytes_enqueue)
}

func (r *readyQ) len() int { return r.n }

// top is the highest level holding messages. r.bits != 0.
func (r *readyQ) top() int { return 31 - bits.LeadingZeros32(r.bits) }

// peek is the message served next, nil if none is ready.
func (r *readyQ) peek() *fifoMsg {
	if r.g != nil {
		return r.gPeek()
	}
	switch {
	case len(r.ret) > 0:
		return r.ret[0]
	case r.bits != 0:
		return r.lvl[r.top()][0]
	}
	return nil
}

// pop takes the message served next, nil if none is ready.
func (r *readyQ) pop() *fifoMsg {
	if r.g != nil {
		return r.gPopOldest()
	}
	var m *fifoMsg
	switch {
	case len(r.ret) > 0:
		m = r.ret[0]
		r.ret[0] = nil
		r.ret = r.ret[1:]
	case r.bits != 0:
		p := r.top()
		m = r.popLevel(p)
	default:
		return nil
	}
	r.n--
	r.bytes -= int64(len(m.Body))
	return m
}

// popLevel takes level p's head; the caller counts it out. The level
// holds messages.
func (r *readyQ) popLevel(p int) *fifoMsg {
	l := r.lvl[p]
	m := l[0]
	l[0] = nil
	if len(l) == 1 {
		r.lvl[p] = nil
		r.bits &^= 1 << p
	} else {
		r.lvl[p] = l[1:]
	}
	return m
}

// push adds a fresh message at its level, in id order (an enqueue's is
// the newest; a released one goes back where it was).
func (r *readyQ) push(m *fifoMsg) {
	if r.g != nil {
		r.gPush(m)
		return
	}
	p := int(m.Priority)
	l := r.lvl[p]
	r.lvl[p] = insertByID(l, m)
	r.bits |= 1 << p
	r.n++
	r.bytes += int64(len(m.Body))
}

// pushReturned adds returned messages among the returns, in id order (as
// rabbit_fifo returns a consumer's messages when its channel goes: oldest
// first, whatever order the channel's requeues and its cancel's come in).
func (r *readyQ) pushReturned(ms []*fifoMsg) {
	if r.g != nil {
		for _, m := range ms {
			r.gPush(m)
		}
		return
	}
	if len(ms) == 0 {
		return
	}
	for _, m := range ms {
		r.n++
		r.bytes += int64(len(m.Body))
	}
	rs := append(append(make([]*fifoMsg, 0, len(r.ret)+len(ms)), r.ret...), ms...)
	sort.Slice(rs, func(a, b int) bool { return rs[a].ID < rs[b].ID })
	r.ret = rs
}

// appendReturned adds the messages of one return after the returns
// still waiting, in id order among themselves (fifo.go toReturns).
func (r *readyQ) appendReturned(ms []*fifoMsg) {
	if r.g != nil {
		for _, m := range ms {
			r.gPush(m)
		}
		return
	}
	if len(ms) == 0 {
		return
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].ID < ms[b].ID })
	for _, m := range ms {
		r.n++
		r.bytes += int64(len(m.Body))
	}
	r.ret = append(r.ret, ms...)
}

// restoreReturned puts back a restored state's returns, in the order its
// image had them.
func (r *readyQ) restoreReturned(ms []*fifoMsg) {
	if r.g != nil {
		for _, m := range ms {
			r.gPush(m)
		}
		return
	}
	for _, m := range ms {
		r.n++
		r.bytes += int64(len(m.Body))
	}
	r.ret = append(r.ret, ms...)
}

// insertByID adds m to l, which is in id order.
func insertByID(l []*fifoMsg, m *fifoMsg) []*fifoMsg {
	if len(l) == 0 || l[len(l)-1].ID < m.ID {
		return append(l, m)
	}
	i := sort.Search(len(l), func(i int) bool { return l[i].ID > m.ID })
	l = append(l, nil)
	copy(l[i+1:], l[i:])
	l[i] = m
	return l
}

// each calls fn for every ready message in delivery order.
func (r *readyQ) each(fn func(m *fifoMsg)) {
	if r.g != nil {
		r.gEach(fn)
		return
	}
	for _, m := range r.ret {
		fn(m)
	}
	for p := maxMsgPriority; p >= 0; p-- {
		for _, m := range r.lvl[p] {
			fn(m)
		}
	}
}

// ids lists the ready messages' ids in delivery order.
func (r *readyQ) ids() []uint64 {
	out := make([]uint64, 0, r.n)
	r.each(func(m *fifoMsg) { out = append(out, m.ID) })
	return out
}

// clear empties it.
func (r *readyQ) clear() {
	if r.g != nil {
		r.gClear()
		return
	}
	*r = readyQ{}
}

// expired reports whether a message at the head of the returns or of a
// level has expired at now: rabbit_fifo expires those (expire_batch:
// the returns' head, then each priority's, take_while).
func (r *readyQ) expired(now int64) bool {
	if r.g != nil {
		return r.gExpired(now)
	}
	exp := func(m *fifoMsg) bool { return m.Expires != 0 && m.Expires <= now }
	if len(r.ret) > 0 && exp(r.ret[0]) {
		return true
	}
	for b := r.bits; b != 0; b &= b - 1 {
		if exp(r.lvl[bits.TrailingZeros32(b)][0]) {
			return true
		}
	}
	return false
}

// takeExpired takes the expired messages at the heads: the returns',
// then each level's from the highest, as rabbit_fifo's expire_batch.
func (r *readyQ) takeExpired(now int64) []*fifoMsg {
	if r.g != nil {
		return r.gTakeExpired(now)
	}
	exp := func(m *fifoMsg) bool { return m.Expires != 0 && m.Expires <= now }
	var out []*fifoMsg
	for len(r.ret) > 0 && exp(r.ret[0]) {
		out = append(out, r.ret[0])
		r.ret[0] = nil
		r.ret = r.ret[1:]
	}
	for p := maxMsgPriority; p >= 0; p-- {
		for r.bits&(1<<p) != 0 && exp(r.lvl[p][0]) {
			out = append(out, r.popLevel(p))
		}
	}
	for _, m := range out {
		r.n--
		r.bytes -= int64(len(m.Body))
	}
	return out
}

// msgPriority is the level of a message whose encoded properties are
// props (AMQP 0-9-1 basic properties, flags first, §4.2.6.1): its
// priority property capped at 31, or 4 without one (rabbit_fifo.erl
// msg_priority at v4.3.5). The state machine reads it from the
// properties, as rabbit_fifo does from the message container, so the log
// format needs no field for it.
func msgPriority(props []byte) uint8 {
	if len(props) < 2 {
		return defaultMsgPriority
	}
	flags := uint16(props[0])<<8 | uint16(props[1])
	p := props[2:]
	skipShort := func() bool {
		if len(p) < 1 || len(p) < 1+int(p[0]) {
			return false
		}
		p = p[1+int(p[0]):]
		return true
	}
	if flags&(1<<15) != 0 && !skipShort() { // content-type
		return defaultMsgPriority
	}
	if flags&(1<<14) != 0 && !skipShort() { // content-encoding
		return defaultMsgPriority
	}
	if flags&(1<<13) != 0 { // headers: a table, its byte length first
		if len(p) < 4 {
			return defaultMsgPriority
		}
		n := uint64(p[0])<<24 | uint64(p[1])<<16 | uint64(p[2])<<8 | uint64(p[3])
		if uint64(len(p)-4) < n {
			return defaultMsgPriority
		}
		p = p[4+n:]
	}
	if flags&(1<<12) != 0 { // delivery-mode
		if len(p) < 1 {
			return defaultMsgPriority
		}
		p = p[1:]
	}
	if flags&(1<<11) == 0 || len(p) < 1 {
		return defaultMsgPriority
	}
	return min(p[0], maxMsgPriority)
}
