package queue

// lane holds the ready messages of one priority: new ones in order, and
// returned ones waiting to go out again ahead of later ones. Beyond the
// window, a lane pages (paging.go): disk ready messages wait in the store,
// under the lane's own store id (LaneStoreID), after memTail, the highest
// sequence of the lane read into memory. Each priority pages on its own,
// so a high-priority message in the store is never behind low ones.
type lane struct {
	ready    deque
	returned seqHeap
	disk     int
	memTail  uint64
}

func (l *lane) len() int { return l.ready.len() + len(l.returned) }

// head is the lane's next message, without removing it.
func (l *lane) head() *Delivery {
	hasR, hasN := len(l.returned) > 0, l.ready.len() > 0
	switch {
	case hasR && (!hasN || l.returned[0].Seq < l.ready.front().Seq):
		return &l.returned[0]
	case hasN:
		return l.ready.front()
	}
	return nil
}

func (l *lane) pop() Delivery {
	if len(l.returned) > 0 && (l.ready.len() == 0 || l.returned[0].Seq < l.ready.front().Seq) {
		return l.returned.pop()
	}
	return l.ready.popFront()
}

func (q *Queue) memLen() int {
	n := 0
	for i := range q.lanes {
		n += q.lanes[i].len()
	}
	if q.grp != nil {
		n += q.grp.loaded + q.grp.paged
	}
	return n
}

func (q *Queue) readyLen() int { return q.memLen() + q.diskCount }

func (q *Queue) laneOf(m *Message) *lane { return &q.lanes[q.laneIdx(m)] }

// laneIdx is the lane of m's priority (the highest for priorities above
// x-max-priority, as RabbitMQ).
func (q *Queue) laneIdx(m *Message) int {
	return min(int(m.Priority), len(q.lanes)-1)
}

// LaneStoreID is the store id of a queue's lane: the queue's id for lane
// 0 (every queue that is not a priority queue), the lane in the top byte
// otherwise. Queue ids stay below 1<<56.
func LaneStoreID(id uint64, lane int) uint64 {
	if lane == 0 {
		return id
	}
	return id | uint64(lane)<<56
}

// StoreIDs are the store ids the queue's entries may be under, one per
// lane. Any goroutine may ask: the lanes are fixed when the queue is made.
func (q *Queue) StoreIDs() []uint64 {
	ids := make([]uint64, len(q.lanes))
	for i := range ids {
		ids[i] = LaneStoreID(q.cfg.ID, i)
	}
	return ids
}

func (q *Queue) storeID(lane uint8) uint64 { return LaneStoreID(q.cfg.ID, int(lane)) }

func (q *Queue) addConsumer(c *Consumer) error {
	for _, o := range q.consumers {
		if o.Exclusive || c.Exclusive {
			return ErrExclusiveConsumer
		}
	}
	// Keep consumers ordered by priority, highest first, then by arrival.
	i := len(q.consumers)
	for i > 0 && q.consumers[i-1].Priority < c.Priority {
		i--
	}
	q.consumers = append(q.consumers, nil)
	copy(q.consumers[i+1:], q.consumers[i:])
	q.consumers[i] = c
	q.order = append(q.order, c)
	q.hadConsumer = true
	return nil
}

func (q *Queue) removeConsumer(c *Consumer) bool {
	for i, o := range q.order {
		if o == c {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
	for i, o := range q.consumers {
		if o == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			if q.rr > i {
				q.rr--
			}
			return true
		}
	}
	return false
}

// popAny takes the next ready message regardless of expiry: highest
// priority first, then queue order.
func (q *Queue) popAny() (Delivery, bool) {
	for i := len(q.lanes) - 1; i >= 0; i-- {
		if l := &q.lanes[i]; l.len() == 0 && l.disk > 0 {
			// Its next messages are in the store: nothing of a lower
			// priority may go before them.
			q.refill()
			return Delivery{}, false
		}
		if q.lanes[i].len() > 0 {
			d := q.lanes[i].pop()
			q.readyBytes -= int64(len(d.Msg.Body))
			return d, true
		}
	}
	return Delivery{}, false
}

// pop takes the next ready message that has not expired; expired ones met
// on the way are dead-lettered (RabbitMQ expires messages at the head).
// now is the time to expire against, or 0 to read the clock only if a
// message can expire (the clock costs more than the rest of a pop).
func (q *Queue) pop(now int64) (Delivery, bool) {
	for {
		d, ok := q.popAny()
		if !ok {
			return d, false
		}
		exp := q.expiry(&d)
		if exp != 0 && now == 0 {
			now = Now()
		}
		if exp != 0 && exp <= now {
			q.deadLetter(d, ReasonExpired)
			continue
		}
		return d, true
	}
}

// unpop puts back a message that could not be delivered.
func (q *Queue) unpop(d Delivery) {
	l := q.laneOf(d.Msg)
	if d.Redelivered {
		l.returned.push(d)
	} else {
		l.ready.pushFront(d)
	}
	q.readyBytes += int64(len(d.Msg.Body))
}

// dispatch hands ready messages to consumers with room: the highest
// priority first, round-robin among consumers of equal priority (or only
// the single active consumer).
func (q *Queue) dispatch() {
	if q.grp != nil {
		q.grpDispatch()
		return
	}
	var now int64 // read when a message can expire
	for q.readyLen() > 0 {
		c := q.nextConsumer()
		if c == nil {
			if len(q.consumers) > 0 && q.limitedSince.Load() == 0 {
				q.limitedSince.Store(Now()) // consumers all full: utilisation drops
			}
			return
		}
		d, ok := q.pop(now)
		if !ok {
			return
		}
		if !q.deliver(c, d) {
			q.unpop(d)
			continue
		}
		if q.diskCount > 0 {
			q.refill()
		}
	}
}

// deliver hands d to c; when c has no room it reports false and c waits
// for a Kick.
func (q *Queue) deliver(c *Consumer, d Delivery) bool {
	if !c.Sink.Deliver(c, q, d) {
		c.blocked = true
		return false
	}
	if c.Out != nil {
		q.touch(c.Out)
	}
	if since := q.limitedSince.Load(); since != 0 {
		q.limitedTotal.Add(Now() - since)
		q.limitedSince.Store(0)
	}
	q.counted(&d)
	if c.NoAck {
		q.account(-d.Msg.MemSize())
		q.deleteEntry(&d)
	} else {
		q.handedOut(&d)
		q.noteDelivered(&d)
	}
	return true
}

func (q *Queue) touch(o Outlet) {
	for _, x := range q.touched {
		if x == o {
			return
		}
	}
	q.touched = append(q.touched, o)
}

// nextConsumer picks the next unblocked consumer: within the highest
// priority that has one, the one after the last served.
func (q *Queue) nextConsumer() *Consumer {
	if q.pol.SingleActive {
		if len(q.order) == 0 || q.order[0].blocked {
			return nil
		}
		return q.order[0]
	}
	cs := q.consumers
	for start := 0; start < len(cs); {
		end := start + 1
		for end < len(cs) && cs[end].Priority == cs[start].Priority {
			end++
		}
		n := end - start
		off := 0
		if q.rr >= start && q.rr < end {
			off = q.rr - start
		}
		for i := 0; i < n; i++ {
			idx := start + (off+i)%n
			if !cs[idx].blocked {
				q.rr = start + (idx-start+1)%n
				return cs[idx]
			}
		}
		start = end
	}
	return nil
}
