package vhost

// Delayed messages: the x-delayed-message exchange type of
// rabbitmq-delayed-message-exchange (src/rabbit_exchange_type_delayed_message.erl,
// rabbit_delayed_message.erl, rabbit_delayed_message_utils.erl), built in.
//
// A message published to a delayed exchange with a positive x-delay header
// (ms) is not routed (Route notes the exchange in Scratch.Delayed); the
// publisher hands it to Delay, which writes it to the store under the
// exchange's key and its due time ('y' name due seq, persist/keys.go). It
// is confirmed once that write is durable (a persistent message on a
// durable exchange; anything else is not waited for). Nothing of it stays
// in memory: the store's index, ordered by due time, is the queue.
//
// Two goroutines per vhost (the delayer's router and reader) keep, per
// delayed exchange, the earliest due time it may hold, and one timer for
// the earliest of those. A little before an exchange's time comes
// (lookahead) the reader reads a batch of the messages due next straight
// from Badger, and when they are due the router routes
// each as the exchange's x-delayed-type would, with its x-delay header
// negated as the plugin does (so that it is not held back again through
// exchange-to-exchange bindings), and once
// the routed copies are durable (vhost.FanOut's confirms) deletes the
// batch from the store. Batches are pipelined: the next is read while
// earlier ones wait for their fsync, skipping the messages in flight (by
// sequence); a crash before a batch's delete routes it again on restart
// (at least once, never lost).
//
// What a read can miss: a write still pending on the committer. So an
// exchange's next due time is lowered by a delayed message's store write
// only once it is committed (its done), and a read starts from floor, the
// earliest due time not yet read, which such a write lowers too.
//
// Transient messages and those of non-durable exchanges are in the store
// too (memory stays bounded), flagged or keyed so that recovery drops
// them, as RabbitMQ drops transient state at a restart.
//
// Locking: delayer.mu guards the per-exchange state (next, floor, the
// messages in flight and read ahead); store.mu is taken under it (Delay
// submits its write under it, so that an exchange's deletion, which marks
// it gone under mu before committing the drop of its messages, cannot
// miss one). Nothing else is taken under it, and it is never held across
// a read or a route. The store's callbacks (writes committed, copies
// durable, deletes committed) take it, never wait, and wake the router.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// delayBatch is how many due messages of one exchange are read and routed
// at a time.
const delayBatch = 1024

// maxDelay is the largest delay the plugin holds a message back for
// (Erlang's largest timer, ERL_MAX_T in rabbit_exchange_type_delayed_message):
// a larger one routes at once.
const maxDelay = 4294967295

// delayOf reads a message's x-delay header as the plugin does
// (rabbit_delayed_message_utils:get_delay): integers of any width as they
// are, strings parsed as an integer, floats truncated; the message is held
// back when the delay is positive and at most maxDelay. Anything else (no
// header, another type, zero, negative, too large) routes at once. A
// string that is not an integer crashes the plugin's route; here it routes
// at once.
func delayOf(h amqp.Table) (int64, bool) {
	v, ok := h["x-delay"]
	if !ok {
		return 0, false
	}
	d, ok := amqp.Int(v)
	if !ok {
		switch x := v.(type) {
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			d, ok = n, err == nil
		case []byte:
			n, err := strconv.ParseInt(string(x), 10, 64)
			d, ok = n, err == nil
		case float64:
			d, ok = int64(math.Trunc(max(min(x, math.MaxInt64/2), math.MinInt64/2))), !math.IsNaN(x)
		case float32:
			d, ok = int64(math.Trunc(float64(max(min(x, math.MaxInt64/2), math.MinInt64/2)))), !math.IsNaN(float64(x))
		}
	}
	return d, ok && d > 0 && d <= maxDelay
}

// delayedKind checks a delayed exchange's x-delayed-type argument as the
// plugin's validate/1 does and returns the kind it names.
func delayedKind(args amqp.Table) (exchange.Kind, error) {
	var t string
	switch x := args["x-delayed-type"].(type) {
	case string:
		t = x
	case []byte:
		t = string(x)
	default:
		return 0, amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
	}
	if t == exchange.DelayedType {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
	}
	k, ok := exchange.ParseKind(t)
	if !ok {
		// rabbit_exchange:check_type
		return 0, amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", t)
	}
	return k, nil
}

// delayer is a vhost's delayed messages; see the top of the file.
type delayer struct {
	v *VHost

	mu         sync.Mutex
	xs         map[*exchange.Exchange]*delayedX // mu
	recovering bool                             // Recover has not started the vhost yet; mu
	running    bool                             // the router (and its reader) run; mu
	closed     bool                             // mu

	wake     chan struct{} // the router's; one slot
	readWake chan struct{} // the reader's; one slot
	stop     chan struct{}
	done     chan struct{}
	fl       queue.Flushes // the router's
}

// delayedX is one delayed exchange's state. All of it is d.mu's.
type delayedX struct {
	ex    *exchange.Exchange
	name  []byte // the store's key for it: DefName(vhost, exchange)
	next  int64  // the earliest due time (Unix ms) not read yet; persist.NoDue: none
	floor int64  // where the next read starts: no message due before it is unread
	// inflight are the sequences of messages read and routed whose delete
	// is not committed yet: a read skips them.
	inflight map[uint64]struct{}
	// ahead are messages read (in flight) before they are due, in due
	// order: the router routes them when they are.
	ahead []persist.Delayed
	gone  bool // deleted
}

// maxInflight bounds the messages of one exchange read but not yet
// deleted (their copies wait for an fsync).
const maxInflight = 32 * delayBatch

func newDelayer(v *VHost) *delayer {
	return &delayer{v: v, xs: map[*exchange.Exchange]*delayedX{}, wake: make(chan struct{}, 1),
		readWake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// add registers a new delayed exchange (declared or recovered).
func (d *delayer) add(ex *exchange.Exchange) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.xs[ex] = &delayedX{ex: ex, name: DefName(d.v.name, ex.Name), next: persist.NoDue, floor: persist.NoDue,
		inflight: map[uint64]struct{}{}}
	d.startLocked()
}

// startLocked starts the router (which starts the reader) once there is
// a delayed exchange and the vhost is recovered. d.mu held.
func (d *delayer) startLocked() {
	if d.running || d.recovering || d.closed || len(d.xs) == 0 || d.v.store == nil {
		return
	}
	d.running = true
	go d.run()
}

// remove forgets a deleted exchange and has dc drop its messages. Called
// with v.mu held, before dc is committed.
func (d *delayer) remove(ex *exchange.Exchange, dc *persist.Batch) {
	d.mu.Lock()
	x := d.xs[ex]
	delete(d.xs, ex)
	if x != nil {
		x.gone = true
	}
	d.mu.Unlock()
	if x != nil {
		dc.DropDelayed(x.name)
		ex.AddDelayed(-ex.MessagesDelayed())
	}
}

// recover reads what the store holds for the vhost's delayed exchanges
// (added just before) and drops the rest. Recovery only; the goroutine
// starts with start.
func (d *delayer) recover() error {
	d.mu.Lock()
	d.recovering = true
	byName := map[string]*delayedX{}
	for _, x := range d.xs {
		byName[string(x.name)] = x
	}
	d.mu.Unlock()
	sums, dropped, err := d.v.store.RecoverDelayed(DefName(d.v.name), func(name []byte) bool {
		return byName[string(name)] != nil
	})
	if err != nil {
		return err
	}
	n := 0
	d.mu.Lock()
	for name, s := range sums {
		x := byName[name]
		x.next, x.floor = s.Next, s.Next
		x.ex.AddDelayed(int64(s.Count))
		n += s.Count
	}
	d.mu.Unlock()
	if n > 0 || dropped > 0 {
		d.v.log.Info("delayed messages recovered", zap.Int("messages", n), zap.Int("dropped", dropped))
	}
	return nil
}

// start starts routing the recovered messages (the queues are started).
func (d *delayer) start() {
	d.mu.Lock()
	d.recovering = false
	d.startLocked()
	d.mu.Unlock()
}

// close stops the router and the reader and waits for them. Batches being made durable
// finish on the committer (their deletes are submitted as usual).
func (d *delayer) close() {
	d.mu.Lock()
	running := d.running && !d.closed
	d.closed = true
	d.mu.Unlock()
	if running {
		close(d.stop)
		<-d.done
	}
}

func (d *delayer) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// DelayWaits reports whether Delay will confirm msg only once it is
// durable: a persistent message on a durable exchange.
func (v *VHost) DelayWaits(ex *exchange.Exchange, msg *queue.Message) bool {
	return msg.Persistent && ex.Durable && v.store != nil
}

// Delay holds msg back in the delayed exchange ex (from Scratch.Delayed)
// for delay ms (Scratch.Delay); extra are its CC and BCC routing keys.
// When DelayWaits, conf (may be nil) gets one Done once the message is
// durable, or with the error that kept it from being so; else none. A
// message for an exchange deleted meanwhile is dropped.
func (v *VHost) Delay(ex *exchange.Exchange, msg *queue.Message, extra []string, delay int64, conf queue.Confirmer) {
	wait := v.DelayWaits(ex, msg)
	d := v.delays
	rec := encodeDelayed(msg, extra)
	// Rounded up to the millisecond: never routed before delay is over.
	due := (queue.Now() + delay*int64(time.Millisecond) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	seq := v.store.NewMessageID()
	b := &persist.Batch{}
	b.PutDelayed(DefName(v.name, ex.Name), due, seq, !msg.Persistent, rec)
	d.mu.Lock()
	x := d.xs[ex]
	if x == nil || x.gone {
		d.mu.Unlock()
		if wait && conf != nil {
			conf.Done(nil)
		}
		return
	}
	ex.AddDelayed(1)
	// Submitted under d.mu (see the top of the file), but a closed store
	// refuses it at once: that is answered once d.mu is released, as
	// LOCKS.md wants a confirm (channel locks, the connection's buffer).
	err := v.store.TryCommit(b, func(err error) {
		if err != nil {
			ex.AddDelayed(-1) // not stored (a full disk): nacked if confirmed
		} else {
			d.written(x, due)
		}
		if wait && conf != nil {
			conf.Done(err)
		}
	})
	d.mu.Unlock()
	if err != nil {
		ex.AddDelayed(-1)
		if wait && conf != nil {
			conf.Done(err)
		}
	}
}

// written notes a delayed message of x due at due committed (readable).
func (d *delayer) written(x *delayedX, due int64) {
	d.mu.Lock()
	x.floor = min(x.floor, due)
	lower := due < x.next
	x.next = min(x.next, due)
	d.mu.Unlock()
	if lower {
		d.signal()
	}
}

// encodeDelayed is a delayed message's record: the count of extra routing
// keys (4), each length-prefixed (4: CC and BCC entries are long
// strings), then the message record.
func encodeDelayed(msg *queue.Message, extra []string) []byte {
	rec := queue.EncodeMessage(msg)
	n := 4
	for _, k := range extra {
		n += 4 + len(k)
	}
	b := make([]byte, 0, n+len(rec))
	b = binary.BigEndian.AppendUint32(b, uint32(len(extra)))
	for _, k := range extra {
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
	}
	return append(b, rec...)
}

var errDelayedRecord = errors.New("corrupt delayed message record")

func decodeDelayed(b []byte) (*queue.Message, []string, error) {
	if len(b) < 4 {
		return nil, nil, errDelayedRecord
	}
	n := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	var extra []string
	for i := 0; i < n; i++ {
		if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) {
			return nil, nil, errDelayedRecord
		}
		l := int(binary.BigEndian.Uint32(b))
		extra = append(extra, string(b[4:4+l]))
		b = b[4+l:]
	}
	m, err := queue.DecodeMessage(b)
	return m, extra, err
}

// lookahead is how far ahead of their due time messages are read (ms):
// a read that meets pages the store has just given back to the kernel
// (persist's page-out, once a second) may take tens of milliseconds, so
// the messages due next are in memory, at most a couple of batches per
// exchange, by the time they are due.
const lookahead = 1000

// readDue reports whether x's next unread messages are within lookahead
// of now and there is room to read them. d.mu held.
func (x *delayedX) readDue(now int64) bool {
	return x.next != persist.NoDue && x.next-lookahead <= now && x.room()
}

// room: x may read more (ahead and in flight under their bounds). d.mu held.
func (x *delayedX) room() bool {
	return len(x.ahead) < delayBatch && len(x.inflight) < maxInflight
}

// run is the delayer's router: it routes each exchange's messages read
// ahead when they are due, and wakes the reader (its own goroutine, so
// that a read, milliseconds when Badger is busy, never holds back a
// message due meanwhile) when one is within lookahead of its time.
func (d *delayer) run() {
	defer close(d.done)
	readerDone := make(chan struct{})
	go d.reader(readerDone)
	defer func() { <-readerDone }()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var sc Scratch
	for {
		now := queue.Now() / int64(time.Millisecond)
		earliest := persist.NoDue
		var fire []*delayedX
		read := false
		d.mu.Lock()
		for _, x := range d.xs {
			if len(x.ahead) > 0 {
				if at := x.ahead[0].Due; at <= now {
					fire = append(fire, x)
				} else {
					earliest = min(earliest, at)
				}
			}
			if x.readDue(now) {
				read = true // the reader wakes us once it has read
			} else if x.next != persist.NoDue && x.room() {
				earliest = min(earliest, x.next-lookahead)
			}
		}
		d.mu.Unlock()
		if read {
			select {
			case d.readWake <- struct{}{}:
			default:
			}
		}
		for _, x := range fire {
			d.route(x, now, &sc)
		}
		if len(fire) > 0 {
			continue // when they are next due is known now
		}
		wait := time.Hour
		if earliest != persist.NoDue {
			wait = min(wait, time.Duration(earliest*int64(time.Millisecond)-queue.Now()))
		}
		t.Reset(wait)
		select {
		case <-d.stop:
			return
		case <-d.wake:
		case <-t.C:
		}
	}
}

// reader reads, for each exchange whose next messages are within
// lookahead, a batch of them into x.ahead, and wakes the router.
func (d *delayer) reader(done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-d.stop:
			return
		case <-d.readWake:
		}
		for {
			now := queue.Now() / int64(time.Millisecond)
			var x *delayedX
			var from int64
			d.mu.Lock()
			for _, y := range d.xs {
				if y.readDue(now) {
					x, from = y, y.floor
					// Lowered again by writes committed from now on
					// (written), and by the read.
					x.next, x.floor = persist.NoDue, persist.NoDue
					break
				}
			}
			d.mu.Unlock()
			if x == nil {
				break
			}
			d.readAhead(x, from, now+lookahead)
			d.signal()
		}
	}
}

// route routes x's messages read ahead and due by now, and has them
// deleted once their copies are durable.
func (d *delayer) route(x *delayedX, now int64, sc *Scratch) {
	d.mu.Lock()
	if x.gone {
		x.ahead = nil
		d.mu.Unlock()
		return // its messages were dropped with it
	}
	k := 0
	for k < len(x.ahead) && x.ahead[k].Due <= now {
		k++
	}
	ds := slices.Clone(x.ahead[:k])
	x.ahead = append(x.ahead[:0], x.ahead[k:]...)
	d.mu.Unlock()
	if len(ds) == 0 {
		return
	}
	bc := &batchConfirm{}
	bc.pending.Store(1)
	bc.done = func(failed bool) { d.settle(x, ds, failed) }
	newConf := func(n int) queue.Confirmer {
		bc.pending.Add(int64(n))
		return bc
	}
	late := d.v.store.Metrics().DelayedLate
	for _, e := range ds {
		d.routeOne(x, e, sc, newConf)
		late.Observe(max(queue.Now()/int64(time.Microsecond)-e.Due*1000, 0))
	}
	d.fl.Flush() // the deliveries of the batch go out together, as a reader's do
	bc.Done(nil)
}

// readAhead reads x's messages from floor from to until into x.ahead.
// The floor is normally past the messages in flight (it moves on with
// each read); those a read meets anyway (after a failed batch, or a
// write due earlier) are skipped, and the floor moves past them.
func (d *delayer) readAhead(x *delayedX, from, until int64) {
	ds, following, err := d.v.store.ReadDelayed(x.name, from, until, delayBatch)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.v.log.Error("reading delayed messages", zap.String("exchange", x.ex.Name), zap.Error(err))
		x.floor = min(x.floor, from)
		x.next = min(x.next, queue.Now()/int64(time.Millisecond)+lookahead+1000) // retried in a second
		return
	}
	if x.gone {
		return
	}
	// The read saw every committed message from floor on, up to the
	// first it did not return (following); what it returned goes ahead
	// but those in flight, up to two batches. The first message left
	// unread is where the next read starts, and when x is next due.
	unread := following
	n := len(x.ahead)
	for _, e := range ds {
		if _, ok := x.inflight[e.Seq]; ok {
			continue
		}
		if len(x.ahead) >= 2*delayBatch {
			unread = min(unread, e.Due)
			continue
		}
		x.inflight[e.Seq] = struct{}{}
		x.ahead = append(x.ahead, e)
	}
	if n > 0 && len(x.ahead) > n {
		// A write due earlier than some read before: keep due order.
		slices.SortFunc(x.ahead, func(a, b persist.Delayed) int {
			if a.Due != b.Due {
				return cmp.Compare(a.Due, b.Due)
			}
			return cmp.Compare(a.Seq, b.Seq)
		})
	}
	x.floor = min(x.floor, unread)
	x.next = min(x.next, unread)
}

// settle deletes a routed batch once its copies are durable; if one is
// not, the batch stays, to be routed again (at least once).
func (d *delayer) settle(x *delayedX, ds []persist.Delayed, failed bool) {
	release := func() {
		d.mu.Lock()
		for _, e := range ds {
			delete(x.inflight, e.Seq)
		}
		if failed {
			x.floor = min(x.floor, ds[0].Due)
			x.next = min(x.next, queue.Now()/int64(time.Millisecond)+lookahead+1000) // retried in a second
		}
		d.mu.Unlock()
		d.signal()
	}
	if failed {
		d.v.log.Error("routing delayed messages: a copy was not stored", zap.String("exchange", x.ex.Name))
		release()
		return
	}
	b := &persist.Batch{}
	for _, e := range ds {
		b.DeleteDelayed(x.name, e.Due, e.Seq)
	}
	x.ex.AddDelayed(-int64(len(ds)))
	// Out of flight once the delete is committed: a read before that
	// still sees the messages.
	d.v.store.Commit(b, func(error) { release() })
}

// batchConfirm calls done once every durable copy of a batch's messages
// is written (vhost.FanOut's waits, one per durable write), and the
// batch's own hold (released when all are routed) is given back.
type batchConfirm struct {
	pending atomic.Int64
	failed  atomic.Bool
	done    func(failed bool)
}

func (c *batchConfirm) Done(err error) {
	// A queue that refuses the copy (full with reject-publish, or a
	// duplicate of a message it holds) has answered: the plugin makes
	// one attempt, so only a copy the store could not write is retried.
	if err != nil && !errors.Is(err, queue.ErrRejected) && !errors.Is(err, queue.ErrDuplicate) {
		c.failed.Store(true)
	}
	if c.pending.Add(-1) == 0 {
		c.done(c.failed.Load())
	}
}

// routeOne routes one due message through x's exchange, as the plugin
// does: with x-delay negated (rabbit_delayed_message_utils:swap_delay_header,
// a signedint), its per-message TTL counted from now.
func (d *delayer) routeOne(x *delayedX, e persist.Delayed, sc *Scratch, newConf func(int) queue.Confirmer) {
	v := d.v
	m, extra, err := decodeDelayed(e.Data)
	if err != nil {
		v.log.Error("dropping a corrupt delayed message", zap.String("exchange", x.ex.Name), zap.Error(err))
		return
	}
	props, err := amqp.DecodeProperties(m.Props)
	if err != nil {
		v.log.Error("dropping a delayed message with corrupt properties", zap.String("exchange", x.ex.Name), zap.Error(err))
		return
	}
	h := make(amqp.Table, len(props.Headers))
	for k, val := range props.Headers {
		h[k] = val
	}
	if delay, ok := delayOf(h); ok {
		if delay <= math.MaxInt32 {
			h["x-delay"] = int32(-delay)
		} else {
			h["x-delay"] = -delay
		}
	}
	props.Headers = h
	props.Flags |= amqp.FlagHeaders
	m.Props = props.Append(nil)
	now := queue.Now()
	if m.Expires != 0 {
		m.Expires = now + (m.Expires - m.Enqueued)
	}
	m.Enqueued = now
	sc.Queues = sc.Queues[:0]
	sc.Delayed = sc.Delayed[:0]
	sc.decoded, sc.headers = true, h // what a headers exchange on the way matches
	// A consistent-hash exchange (hash-header, hash-property) and a
	// deduplication exchange on the way read the encoded headers and
	// properties.
	sc.RawHeaders, sc.Props = amqp.PropsHeaders(m.Props), m.Props
	sc.DedupWrote, sc.HoldDedup = false, true // new ids are stored after the message (dedup_held.go)
	sc.DedupHeld, sc.DupHeld = sc.DedupHeld[:0], sc.DupHeld[:0]
	sc.Extra = extra
	v.mu.RLock()
	if v.exchanges[x.ex.Name] != x.ex {
		v.mu.RUnlock()
		return // deleted meanwhile
	}
	v.routeFrom(x.ex, m.RoutingKey, sc)
	v.mu.RUnlock()
	sc.HoldDedup = false
	release := func() {}
	if len(sc.DedupHeld) > 0 {
		newConf, release = v.holdConf(sc, newConf)
	}
	qs := sc.Queues
	sc.ResetSeen()
	if len(qs) == 0 {
		release() // nothing to store first
		return    // the plugin makes one attempt (README, "Limitations")
	}
	if _, waited := FanOut(v.Store(), m, qs, false /* rejects */, newConf, &d.fl); !waited {
		release()
	}
}
