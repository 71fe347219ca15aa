package queue

import "go.uber.org/zap"

// apply runs one op.
func (q *Queue) apply(o *op) outcome {
	switch o.kind {
	case opPublish:
		q.publish(o.msg, o.conf)
	case opAck:
		q.nAck.Add(int64(len(o.ds)))
		q.settled(o.ds)
		var n int64
		for i := range o.ds {
			n += o.ds[i].Msg.MemSize()
			q.deleteEntry(&o.ds[i])
			if q.grp != nil {
				q.grpDone(&o.ds[i], false)
			}
		}
		q.account(-n)
	case opDiscard:
		q.settled(o.ds)
		for _, d := range o.ds {
			q.deadLetter(d, ReasonRejected)
			if q.grp != nil {
				q.grpDone(&d, false)
			}
		}
	case opRequeue:
		q.settled(o.ds)
		if o.conf != nil {
			q.confs = append(q.confs, o.conf) // RetryAfter: once its holds are durable
		}
		var now int64 // read when a message is held
		for _, d := range o.ds {
			if o.flags&flagUncounted == 0 {
				d.Redelivered = true
				d.Count++
			}
			if q.pol.DeliveryLimit >= 0 && int64(d.Count) > q.pol.DeliveryLimit {
				q.deadLetter(d, ReasonDeliveryLimit)
				if q.grp != nil {
					q.grpDone(&d, false)
				}
				continue
			}
			if o.flags&flagDue != 0 {
				q.hold(d, o.due) // lease.go
				continue
			}
			if o.flags&flagUncounted == 0 && q.pol.Retry.Holds(o.flags&flagFailed != 0, o.flags&flagRetry != 0) {
				if now == 0 {
					now = Now()
				}
				q.hold(d, now+int64(q.pol.Retry.Hold(d.Count)))
				if q.grp != nil {
					q.grpDone(&d, true) // its group waits for it
				}
				continue
			}
			if q.stored(&d) {
				q.putEntry(UpdateEntry, &d)
			}
			if q.grp != nil {
				q.grpReturn(d)
				continue
			}
			q.laneOf(d.Msg).returned.push(d)
			q.readyBytes += int64(len(d.Msg.Body))
		}
	case opKick:
		o.consumer.blocked = false
	case opPolicy:
		q.setPolicy(*o.pol)
		o.reply <- result{}
	case opTouch:
		q.lastUsed = Now()
	case opTick:
		q.ticks.Add(1)
		now := Now()
		q.timerAt = 0
		if len(q.holds) > 0 {
			q.releaseHolds(now)
		}
		q.expireHeads(now)
		if e := q.pol.Expires; e > 0 && len(q.consumers) == 0 && now-q.lastUsed >= int64(e) {
			q.cfg.Logger.Info("queue expired (x-expires)", zap.String("queue", q.cfg.Name))
			if q.pol.OnExpire != nil {
				q.pol.OnExpire(q)
			}
			q.drop()
			return stopped
		}
		if q.expAt != 0 && q.expAt <= now {
			q.expAt = 0 // this was the x-expires timer (used since): arm anew
		}
		q.armExpires()
	case opConsume:
		err := q.addConsumer(o.consumer)
		if err == nil {
			q.lastUsed = Now()
			q.armExpires() // stops it: a consumer is attached
		}
		o.reply <- result{err: err}
	case opCancel:
		removed := q.removeConsumer(o.consumer)
		if q.grp != nil {
			q.grpCancel(o.consumer)
		}
		q.lastUsed = Now()
		q.armExpires() // the last consumer gone: unused from now
		if removed && len(q.consumers) == 0 && q.cfg.AutoDelete && q.cfg.OnEmptyOfConsumers != nil {
			// Deleted synchronously, before cancel-ok (RabbitMQ does too).
			q.cfg.OnEmptyOfConsumers(q)
			n := q.drop()
			o.reply <- result{n: n}
			return stopped
		}
		o.reply <- result{}
	case opGet:
		q.lastUsed = Now()
		var d Delivery
		var ok bool
		if q.grp != nil {
			var wait bool
			if d, ok, wait = q.grpGet(o.flags&flagNoAck != 0); !ok && (wait || q.diskCount > 0) {
				q.refill()
				q.stalled = true // a read lands first (grpRead, refill)
				return retry
			}
		} else if d, ok = q.pop(q.lastUsed); !ok && q.diskCount > 0 {
			q.stalled = true // pop began the read (refill)
			return retry
		}
		if ok && o.flags&flagNoAck == 0 {
			q.handedOut(&d)
			if o.flags&flagLook == 0 {
				q.noteDelivered(&d)
			}
		} else if ok {
			q.account(-d.Msg.MemSize())
			q.deleteEntry(&d)
		}
		if ok && o.flags&flagLook == 0 {
			q.counted(&d)
		}
		o.reply <- result{d: d, ok: ok, messages: q.readyLen()}
	case opPurge:
		n := q.readyLen()
		if len(q.holds)+len(q.fetching) > 0 {
			n += q.dropHolds()
		}
		for i := range q.lanes {
			l := &q.lanes[i]
			for l.len() > 0 {
				d := l.pop()
				q.account(-d.Msg.MemSize())
				q.deleteEntry(&d)
			}
		}
		if q.diskCount > 0 {
			for i := range q.lanes {
				if l := &q.lanes[i]; l.disk > 0 {
					q.w.add(StoreWrite{Kind: DropRange, Queue: q.storeID(uint8(i)), Seq: l.memTail + 1})
					l.disk = 0
				}
			}
			q.diskCount = 0
			q.voidReads()
		}
		if q.grp != nil {
			q.grpPurge()
		}
		q.readyBytes = 0
		if q.dedup != nil {
			clear(q.dedup) // the plugin flushes its cache on purge, unacked ids too
		}
		o.reply <- result{n: n}
	case opStats:
		r := result{messages: q.readyLen(), n: len(q.consumers)}
		if q.grp != nil {
			r.groups = len(q.grp.byKey)
		}
		o.reply <- r
	case opDelete:
		if o.flags&flagIfUnused != 0 && len(q.consumers) > 0 {
			o.reply <- result{err: ErrInUse}
			return applied
		}
		if o.flags&flagIfEmpty != 0 && q.readyLen()+len(q.holds)+len(q.fetching) > 0 {
			o.reply <- result{err: ErrNotEmpty}
			return applied
		}
		for _, c := range q.consumers {
			c.Sink.Cancelled(c)
		}
		q.consumers, q.order = nil, nil
		n := q.drop()
		o.reply <- result{n: n}
		return stopped
	}
	return applied
}

// publish takes a message in: refused when full with reject-publish,
// paged to the store beyond a durable queue's window, else ready.
func (q *Queue) publish(m *Message, conf Confirmer) {
	size, mem := int64(len(m.Body)), m.MemSize()
	if q.pol.MaxLength >= 0 || q.pol.MaxLengthBytes >= 0 {
		full := (q.pol.MaxLength >= 0 && int64(q.readyLen()) >= q.pol.MaxLength) ||
			(q.pol.MaxLengthBytes >= 0 && q.readyBytes+size > q.pol.MaxLengthBytes)
		if full && q.pol.Overflow != DropHead {
			q.cfg.Memory.Add(-mem) // counted by Publish, not kept
			if q.pol.Overflow == RejectPublishDLX && q.pol.DeadLetter != nil {
				q.pol.DeadLetter(q, Delivery{Msg: m}, ReasonMaxLen, nil)
			}
			if conf != nil {
				conf.Done(ErrRejected)
			}
			return
		}
	}
	if q.dedup != nil && !q.dedupAdmit(m) {
		q.cfg.Memory.Add(-mem) // counted by Publish, not kept
		q.duplicate(m, conf)   // dedup_confirm.go
		return
	}
	q.nPublish.Add(1)
	seq := q.nextSeq
	q.nextSeq++
	ln := q.laneIdx(m)
	durable := q.Durable() && m.ID != 0
	if durable {
		q.putEntry(PutEntry, &Delivery{Msg: m, Seq: seq, Lane: uint8(ln)})
	}
	if conf != nil {
		q.confs = append(q.confs, conf) // confirmed at commit: at once, or once durable
	}
	if q.grp != nil && q.diskCount == 0 && !q.grpSpills(mem) {
		// Filed under its group (groups.go); behind what the lane pages
		// (a recovered backlog, a non-durable queue's overflow), and
		// filed as that is read.
		q.readyBytes += size
		q.grpPublish(Delivery{Msg: m, Seq: seq, Lane: uint8(ln)}, durable, mem)
		q.trim()
		return
	}
	if q.grp == nil && ((m.Expires != 0 && m.Expires <= m.Enqueued) || q.pol.MessageTTL == 0) {
		if q.publishNow(Delivery{Msg: m, Seq: seq, Lane: uint8(ln)}, ReasonExpired) {
			return
		}
	}
	if q.grp == nil && q.pol.Overflow == DropHead && (q.pol.MaxLength == 0 || (q.pol.MaxLengthBytes >= 0 && size > q.pol.MaxLengthBytes)) {
		// It cannot wait in the queue even alone: as RabbitMQ, a
		// consumer with room gets it first, else it is dropped as the head.
		if q.publishNow(Delivery{Msg: m, Seq: seq, Lane: uint8(ln)}, ReasonMaxLen) {
			return
		}
	}
	q.readyBytes += size
	l := &q.lanes[ln]
	if win, winBytes := q.window(); q.cfg.Store != nil && (l.disk > 0 || l.ready.len() >= q.laneWindow(win) || q.held-q.unackedBytes+mem > winBytes || q.grp != nil) {
		// Beyond the window: the message waits in the store, behind
		// those of its lane already there.
		if !durable {
			id := q.cfg.Store.NewMessageID()
			q.w.add(StoreWrite{Kind: PutEntry, Queue: q.storeID(uint8(ln)), Seq: seq, Msg: id, Transient: true, Inline: true, Record: EncodeMessage(m)})
		}
		l.disk++
		q.diskCount++
		q.cfg.Memory.Add(-mem) // counted by Publish, not held
	} else {
		l.ready.pushBack(Delivery{Msg: m, Seq: seq, Lane: uint8(ln)})
		l.memTail = seq
		q.held += mem // Memory was counted by Publish
	}
	q.trim()
}

// trim dead-letters the oldest messages while the queue is over its
// length limit (drop-head). When the oldest are still in the store, the
// queue stalls until they are read: no op sees it over its limit.
func (q *Queue) trim() {
	for (q.pol.MaxLength >= 0 && int64(q.readyLen()) > q.pol.MaxLength) ||
		(q.pol.MaxLengthBytes >= 0 && q.readyBytes > q.pol.MaxLengthBytes && q.readyLen() > 0) {
		d, ok := q.popAny()
		if !ok && q.grp != nil {
			d, ok = q.grpPopOldest()
		}
		if !ok {
			if q.diskCount > 0 { // popAny began the read
				q.trimDue, q.stalled = true, true
			}
			return
		}
		q.deadLetter(d, ReasonMaxLen)
	}
}

// publishNow takes in a message that cannot wait in the queue (a TTL of
// 0, the queue's or its own; or a length limit it exceeds alone), as
// RabbitMQ's deliver_or_enqueue does: into an empty queue it goes to a
// consumer that has room now, or leaves at once for reason (it would be
// the head). Behind other messages it is queued, and goes when it reaches
// the head. It reports false when the message is to be queued.
func (q *Queue) publishNow(d Delivery, reason string) bool {
	if q.readyLen() > 0 {
		q.dispatch() // ops of this batch may have given consumers room
		if q.readyLen() > 0 {
			return false
		}
	}
	// Nothing is paged, so a later refill reads after it; Memory was
	// counted by Publish.
	q.lanes[d.Lane].memTail = d.Seq
	q.held += d.Msg.MemSize()
	for c := q.nextConsumer(); c != nil; c = q.nextConsumer() {
		if q.deliver(c, d) {
			return true
		}
	}
	q.deadLetter(d, reason)
	return true
}

// drop releases every message the queue holds; it returns the ready count.
// A non-durable queue's page-outs are removed with it (a durable queue's
// entries go with its definition, see vhost).
func (q *Queue) drop() int {
	n := q.readyLen() + len(q.holds) + len(q.fetching)
	q.holds, q.fetching = nil, nil
	q.holdBytes, q.holdsInMem = 0, 0
	q.holdGen++
	q.heldN.Store(0)
	if q.cfg.Store != nil && !q.cfg.Durable {
		q.w.Ops = q.w.Ops[:0]
		for _, id := range q.StoreIDs() {
			q.w.add(StoreWrite{Kind: DropQueue, Queue: id})
		}
		q.commit()
	}
	q.diskCount = 0
	q.voidReads()
	q.account(-q.held) // unacked ones too: their acks will find the queue gone
	for i := range q.lanes {
		q.lanes[i] = lane{}
	}
	if q.grp != nil {
		q.grpDrop()
	}
	q.readyBytes = 0
	q.readyN.Store(0)
	q.consumerN.Store(0)
	q.headAt.Store(0)
	return n
}

func (q *Queue) account(n int64) {
	if n != 0 {
		q.held += n
		q.cfg.Memory.Add(n)
	}
}

// counted counts a delivery (to a consumer, or got).
func (q *Queue) counted(d *Delivery) {
	q.nDeliverGet.Add(1)
	if d.Redelivered {
		q.nRedeliver.Add(1)
	}
}

// handedOut counts d as delivered and unacked.
func (q *Queue) handedOut(d *Delivery) {
	q.unacked++
	q.unackedBytes += d.Msg.MemSize()
	q.unackedBody += int64(len(d.Msg.Body))
}

// settled uncounts deliveries acked, rejected or returned.
func (q *Queue) settled(ds []Delivery) {
	q.unacked -= len(ds)
	for i := range ds {
		q.unackedBytes -= ds[i].Msg.MemSize()
		q.unackedBody -= int64(len(ds[i].Msg.Body))
	}
}
