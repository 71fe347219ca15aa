package queue

// # Who owns a queue
//
// A queue's state (its messages, consumers, unacked count, paging and
// timers: every field of Queue below exec) belongs to whoever holds
// q.exec. Other goroutines reach it only by posting an op to the inbox
// (q.mu guards the inbox, the reads landed from the store and closed;
// posting never waits on exec). Two kinds of goroutine hold exec:
//
//   - The queue's goroutine (run), woken by a one-slot signal, takes exec
//     with a blocking Lock while holding no other lock, and applies
//     everything in the inbox.
//   - A poster of an asynchronous op (publish, ack, requeue, discard,
//     kick: postInline) takes exec with TryLock when no one holds it, and
//     applies the inbox itself, the way a commit leader in pebble's
//     commit.go applies the batches queued behind its own. That spares
//     two goroutine hand-offs per message. Posters are a connection's
//     reader (publishes, acks, kicks), a connection's writer (kicks once
//     its outbound buffer drains, under conn.wmu) and a queue holding its
//     own exec while dead-lettering into another (TryLock never waits, so
//     two queues cannot deadlock). A poster that finds exec held signals
//     the goroutine instead: the holder may be past its look at the inbox.
//
// A poster applies the inbox only up to its first call (consume, cancel,
// get, purge, delete, stats: a caller waits for the reply) or timer tick;
// it hands that op and the rest back to the front of the inbox, in order,
// and signals the goroutine (goroutineOnly). So the callbacks that reach
// back into the registry run on the queue's goroutine only, holding exec
// and nothing else: Config.OnEmptyOfConsumers (an auto-delete queue's
// last consumer cancelled), Policy.OnExpire (x-expires) and
// Sink.Cancelled (the queue deleted). The registry calls the synchronous
// ops while holding none of its locks (LOCKS.md), so these cannot wait on
// each other.
//
// The other callbacks run under exec on any holder's goroutine and must
// not block: Sink.Deliver (takes channel.mu, then conn.outMu), Outlet.Wake,
// Confirmer.Done when nothing is to be stored (channel.cmu), Policy
// .DeadLetter (routing under vhost.mu's read lock, then publishes into
// other queues, inline by TryLock), Store.Commit (appends to the
// committer's pending list) and TxPart.Prepared (the last one of a
// transaction submits its atomic store write: tx.go). Outlet.Flush, which may write a socket, runs
// after exec is released (Flushes).
//
// No disk I/O happens under exec. Writes are submitted to the group
// commit (commit) and confirmed by the committer. Reads of a durable
// queue's paged backlog (refill) are queued on the committer too, behind
// the writes submitted before them; the committer hands what it read back
// through q.landed and the signal, and the next holder of exec takes it in
// (land). An op that needs messages still in the store (a get on an empty
// memory, a drop-head trim whose oldest messages are paged) stalls the
// inbox: it and everything after it wait, in order, until the read lands.
//
// Timers (message TTL, x-expires) post an op and never touch the state.

// Flushes collects the outlets that inline drains appended deliveries
// to, for one goroutine (a connection's reader) to flush when it is done
// with its batch of work. Not safe for concurrent use; nil is allowed and
// wakes each outlet at the end of the drain.
type Flushes struct {
	outs []Outlet
	// At is when the goroutine last read its input (unix nanoseconds; 0:
	// unknown, read the clock): what the work it posts is timed with, a
	// message's arrival (channel.Channel stamps it) and the deliveries it
	// makes (Queue.DeliveredAt), instead of a clock read each. A reader
	// sets it to 0 when it may have waited since the read (an alarm, flow
	// control, a method other than publish and ack).
	At int64
}

// Add collects o, to be flushed with the others (once).
func (f *Flushes) Add(o Outlet) {
	for _, x := range f.outs {
		if x == o {
			return
		}
	}
	f.outs = append(f.outs, o)
}

// Flush writes out what is pending on each collected outlet.
func (f *Flushes) Flush() {
	if f == nil || len(f.outs) == 0 {
		return
	}
	for i, o := range f.outs {
		o.Flush()
		f.outs[i] = nil
	}
	f.outs = f.outs[:0]
}

type opKind uint8

const (
	opPublish opKind = iota + 1
	opAck
	opRequeue
	opDiscard
	opKick
	opConsume
	opCancel
	opGet
	opPurge
	opDelete
	opStats
	opTick
	opTouch
	opPolicy
)

type op struct {
	kind     opKind
	flags    uint8
	msg      *Message
	conf     Confirmer
	ds       []Delivery
	consumer *Consumer
	pol      *Policy // opPolicy
	reply    chan result
	due      int64 // opRequeue with flagDue: unix nanos
}

const (
	flagIfUnused = 1 << iota
	flagIfEmpty
	flagNoAck
	flagUncounted // opRequeue: returned unchanged (Return)
	flagRetry     // opRequeue: a consumer's nack or reject, held when the queue has a retry delay (RequeueNacked)
	flagLook      // opGet: taken to be looked at or moved (Take), not delivered
	flagFailed    // opRequeue: a failed delivery (reject, a consumer gone: Retry.On)
	flagDue       // opRequeue: held until op.due, whatever the retry setting (RetryAfter)
)

type result struct {
	d        Delivery
	ok       bool
	n        int
	messages int
	groups   int
	err      error
}

// post appends an op to the inbox for the queue's goroutine. It reports
// false if the queue is gone.
func (q *Queue) post(o op) bool {
	if !q.enqueue(o) {
		return false
	}
	q.signal()
	return true
}

// postInline is post, but when no one is applying ops the caller applies
// the inbox itself; the outlets it delivers to are left in fl. Only for
// callers that hold no lock the queue's callbacks may take (vhost locks,
// a channel's lock, ...).
func (q *Queue) postInline(o op, fl *Flushes) bool {
	if !q.enqueue(o) {
		return false
	}
	if !q.exec.TryLock() {
		q.signal() // the holder may be past its look at the inbox
		return true
	}
	if !q.dead {
		q.drain(fl, true)
	}
	q.exec.Unlock()
	return true
}

func (q *Queue) enqueue(o op) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.inbox = append(q.inbox, o)
	q.inboxN.Store(int32(len(q.inbox)))
	q.mu.Unlock()
	return true
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// call posts an op and waits for its result.
func (q *Queue) call(o op) result {
	o.reply = make(chan result, 1)
	if !q.post(o) {
		return result{err: ErrDeleted}
	}
	return <-o.reply
}

func (q *Queue) run() {
	for range q.wake {
		q.exec.Lock()
		if !q.dead {
			q.drain(nil, false)
		}
		dead := q.dead
		q.exec.Unlock()
		if dead {
			return
		}
	}
}

// drain applies what the store read and the ops in the inbox, then
// delivers and commits what they changed. exec held; inline says the
// caller is a poster, not the queue's goroutine (see the top of the file).
func (q *Queue) drain(fl *Flushes, inline bool) {
	q.mu.Lock()
	landed := q.landed
	q.landed = nil
	q.mu.Unlock()
	for i := range landed {
		q.land(&landed[i])
	}
	if q.stalled && !q.loading {
		q.refill() // the read failed: try again (not before loadRetry)
	}
	var ops []op
	if !q.stalled {
		q.mu.Lock()
		ops = q.inbox
		q.inbox = q.spare[:0]
		q.inboxN.Store(0)
		q.mu.Unlock()
	}
	if len(ops) == 0 && len(landed) == 0 {
		q.spare = ops[:0]
		return
	}
	q.drainAt = 0
	if fl != nil {
		q.drainAt = fl.At
	}
	stop := false
apply:
	for i := range ops {
		o := &ops[i]
		switch {
		case stop:
			q.refuse(o)
			continue
		case q.tx != nil || o.kind >= opTxPrepare:
			// A transaction's op, or one that waits for a transaction
			// under way (tx.go).
			if q.stashTx(o) {
				continue
			}
			if q.applyTx(o) {
				q.giveBack(append(q.takeStash(), ops[i+1:]...))
				q.signal()
				break apply
			}
			continue
		case inline && o.goroutineOnly():
			q.giveBack(ops[i:]) // in order, ahead of what came since
			q.signal()
			break apply
		}
		switch q.apply(o) {
		case stopped:
			stop = true
		case retry:
			q.giveBack(ops[i:]) // o too: applied again once the read lands
			break apply
		}
		if q.stalled && !stop {
			q.giveBack(ops[i+1:])
			break
		}
	}
	clear(ops)
	q.spare = ops[:0]
	if stop {
		q.commit()
		q.shutdown()
		q.dead = true
		close(q.stopped)
		q.signal() // the goroutine exits
		return
	}
	q.refill()
	q.dispatch()
	for i, o := range q.touched {
		if fl != nil {
			fl.Add(o)
		} else {
			o.Wake()
		}
		q.touched[i] = nil
	}
	q.touched = q.touched[:0]
	q.armTimer()
	q.commit()
	q.publishCounts()
}

// DeliveredAt is the time to record a delivery being made with (a
// consumer timeout counts from it): the time the poster read what led to
// it (Flushes.At), else the clock's, read once a drain. Only from a
// Sink's Deliver, which runs in a drain (exec held). A Replica's
// deliveries come from its own goroutines, with no drain (a stream's
// consumers each deliver from their own): the clock's, read each time.
func (q *Queue) DeliveredAt() int64 {
	if q.cfg.Replica != nil {
		return Now()
	}
	if q.drainAt == 0 {
		q.drainAt = Now()
	}
	return q.drainAt
}

// giveBack returns ops not applied to the front of the inbox (copied:
// the caller reuses its slice).
func (q *Queue) giveBack(ops []op) {
	if len(ops) == 0 {
		return
	}
	q.mu.Lock()
	in := make([]op, 0, len(ops)+len(q.inbox))
	in = append(append(in, ops...), q.inbox...)
	q.inbox = in
	q.inboxN.Store(int32(len(in)))
	q.mu.Unlock()
}

// refuse answers an op that arrives after the queue stopped: a call gets
// ErrDeleted, a publisher its confirm (the message was routed; RabbitMQ
// confirms it too), and the memory its publish counted is given back.
func (q *Queue) refuse(o *op) {
	if o.reply != nil {
		o.reply <- result{err: ErrDeleted}
	}
	if o.kind == opTxPrepare {
		p := o.txPart()
		p.Gone = true
		if p.Prepared != nil {
			p.Prepared(p)
		}
	}
	if o.kind == opPublish {
		q.cfg.Memory.Add(-o.msg.MemSize())
		if o.conf != nil {
			o.conf.Done(nil)
		}
	}
}

// shutdown refuses what arrives after a delete.
func (q *Queue) shutdown() {
	if q.timer != nil {
		q.timer.Stop()
	}
	if q.expTimer != nil {
		q.expTimer.Stop()
	}
	q.mu.Lock()
	q.closed = true
	rest := q.inbox
	q.inbox = nil
	q.mu.Unlock()
	for i := range rest {
		q.refuse(&rest[i])
	}
}

// outcome is what applying an op leads to.
type outcome uint8

const (
	applied outcome = iota
	stopped         // the queue is gone: the ops after it are refused
	retry           // the op needs messages still in the store: applied again once they are read
)

// goroutineOnly reports whether only the queue's goroutine may apply o:
// calls (a caller waits for the reply, often under the registry's locks,
// and auto-delete calls back into the registry) and timer ticks (x-expires
// deletes the queue from the registry).
func (o *op) goroutineOnly() bool { return o.reply != nil || o.kind == opTick }
