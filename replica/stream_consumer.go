package replica

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/stream"
	"github.com/railmq/railmq/vhost"
)

// A stream's consumer: a reader of the log at its own offset, pushing to
// its channel on its own goroutine (run). See stream.go for the locks.

type streamConsumer struct {
	sq    *streamQueue
	c     *queue.Consumer
	id    uint16 // queue.Delivery.Reader of its deliveries
	r     *stream.Reader
	track string // the name its offset is stored under, or ""

	wake     chan struct{} // one slot: Kick
	quit     chan struct{}
	done     chan struct{}
	haltOnce sync.Once

	// run's own.
	held       bool
	from       uint64 // records below this offset are skipped
	pending    queue.Delivery
	hasPending bool
	lastEx     string        // the last exchange and routing key seen: most
	lastKey    string        // records share them, and they are not allocated again
	buf        []byte        // the delivery being made (delivery)
	msg        queue.Message // its Message

	offset atomic.Uint64 // the next offset it reads
	out    atomic.Int32  // delivered, not settled

	mem int64 // counted in the node's memory figure: its reader and its buffer

	mu     sync.Mutex
	window []unackedOffset // a tracked consumer's deliveries not settled, ascending; from head
	head   int
	nDone  int  // entries of window[head:] settled
	orphan bool // failed: taken out of the maps, so its run closes the reader
	// barrier: the lowest offset it requeued (hasBarrier), which its
	// stored offset does not pass.
	barrier    uint64
	hasBarrier bool
}

// streamBufKeep is the largest delivery buffer a consumer keeps between
// deliveries.
const streamBufKeep = 1 << 20

type unackedOffset struct {
	off     uint64
	settled bool
}

// Consume starts a consumer at the offset its arguments ask for, after
// RabbitMQ's checks (rabbit_stream_queue.erl v3.10.8 consume: a prefetch
// is required, automatic acknowledgement refused).
func (sq *streamQueue) Consume(c *queue.Consumer) error {
	// The channel's checks of the consumer's arguments come first
	// (rabbit_amqqueue:check_consume_arguments): those of other queue
	// types are refused, x-stream-offset is checked.
	for _, k := range []string{"x-priority", "x-cancel-on-ha-failover"} {
		if _, ok := c.Args[k]; ok {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s of queue type rabbit_stream_queue", k, sq.rs())
		}
	}
	spec, track, err := sq.startSpec(c)
	if err != nil {
		return err
	}
	if c.Prefetch == 0 {
		return amqp.Errorf(amqp.PreconditionFailed, "consumer prefetch count is not set for '%s'", sq.rs())
	}
	if c.NoAck {
		return amqp.Errorf(amqp.NotImplemented, "automatic acknowledgement not supported by stream queues %s", sq.rs())
	}
	r, err := sq.log.NewReader(spec, streamFilter(c.Args))
	if err != nil {
		return fmt.Errorf("stream %q: %w", sq.q.Name(), err)
	}
	sc := &streamConsumer{sq: sq, c: c, r: r, track: track, held: true,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if spec.Kind == stream.Offset {
		// An offset not written yet: the reader waits at the end, and
		// what comes before the offset is skipped (as RabbitMQ 3.10.8
		// skips it).
		sc.from = spec.Offset
	}
	sc.offset.Store(r.Offset())
	sq.mu.Lock()
	if sq.gone.Load() {
		sq.mu.Unlock()
		_ = r.Close()
		return queue.ErrDeleted
	}
	id, ok := sq.freeID()
	if !ok {
		sq.mu.Unlock()
		_ = r.Close()
		return amqp.Errorf(amqp.ResourceError, "too many consumers on %s", sq.rs())
	}
	sc.id = id
	sq.readers[id], sq.byCons[c] = sc, sc
	sq.mu.Unlock()
	sc.account(stream.ReaderMemory)
	go sc.run()
	return nil
}

// freeID picks an unused reader id, after the last one given (so that a
// settle of a cancelled consumer's delivery rarely finds a new one).
// sq.mu held.
func (sq *streamQueue) freeID() (uint16, bool) {
	if len(sq.readers) >= 1<<16 {
		return 0, false
	}
	for {
		sq.nextID++
		if _, used := sq.readers[sq.nextID]; !used {
			return sq.nextID, true
		}
	}
}

// startSpec is where a consumer starts: x-stream-offset when it gives
// one; else, for a tracked consumer, the offset stored under its name;
// else next (RabbitMQ's default). An explicit offset wins so that a
// tracked consumer can still choose to replay (LavinMQ combines its
// automatic tracking with any x-stream-offset so).
func (sq *streamQueue) startSpec(c *queue.Consumer) (stream.Spec, string, error) {
	v, given := c.Args["x-stream-offset"]
	track := trackingName(c)
	if given && v == nil && track == "" {
		// LavinMQ: x-stream-offset null tracks by consumer tag, reading
		// from the start the first time.
		track = c.Tag
	}
	if track != "" && (!given || v == nil) {
		if off, ok := sq.log.TrackedOffset(track); ok {
			return stream.Spec{Kind: stream.Offset, Offset: off}, track, nil
		}
	}
	if given && v == nil {
		return stream.Spec{Kind: stream.First}, track, nil
	}
	if !given {
		return stream.Spec{Kind: stream.Next}, track, nil
	}
	spec, ok := offsetSpec(v, time.Now())
	if !ok {
		return spec, "", amqp.Errorf(amqp.PreconditionFailed, "invalid arg 'x-stream-offset' for %s: {invalid_stream_offset_arg,{%s,%s}}",
			sq.rs(), amqp.TypeName(v), erlValue(v))
	}
	return spec, track, nil
}

// trackingName is the name a consumer's offset is stored under: railmq's
// x-stream-offset-tracking (a name, or true for the consumer tag), or
// LavinMQ's x-stream-automatic-offset-tracking (true: the consumer tag).
func trackingName(c *queue.Consumer) string {
	switch v := c.Args["x-stream-offset-tracking"].(type) {
	case string:
		if v != "" {
			return v
		}
	case bool:
		if v {
			return c.Tag
		}
	}
	if v, _ := c.Args["x-stream-automatic-offset-tracking"].(bool); v {
		return c.Tag
	}
	if v, _ := c.Args["x-stream-automatic-offset-tracking"].(string); v == "true" {
		return c.Tag
	}
	return ""
}

// offsetSpec reads x-stream-offset as RabbitMQ does
// (rabbit_stream_queue.erl v3.10.8 parse_offset_arg): "first", "last",
// "next"; an AMQP timestamp (seconds); an interval back from now ("1h",
// x-max-age's format); any integer, an absolute offset. railmq also
// takes an RFC 3339 time with a fraction of a second ("2026-12-06T10:
// 00:00.250Z"): a timestamp to the millisecond.
func offsetSpec(v any, now time.Time) (stream.Spec, bool) {
	switch x := v.(type) {
	case string:
		switch x {
		case "first":
			return stream.Spec{Kind: stream.First}, true
		case "last":
			return stream.Spec{Kind: stream.Last}, true
		case "next":
			return stream.Spec{Kind: stream.Next}, true
		}
		if d, ok := vhost.ParseMaxAge(x); ok {
			return stream.Spec{Kind: stream.Timestamp, Timestamp: now.Add(-d).UnixMilli()}, true
		}
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return stream.Spec{Kind: stream.Timestamp, Timestamp: t.UnixMilli()}, true
		}
		return stream.Spec{}, false
	case time.Time:
		return stream.Spec{Kind: stream.Timestamp, Timestamp: x.Unix() * 1000}, true
	}
	if n, ok := amqp.Int(v); ok {
		return stream.Spec{Kind: stream.Offset, Offset: uint64(max(n, 0))}, true
	}
	return stream.Spec{}, false
}

// erlValue renders an argument as RabbitMQ's ~p does inside a tuple.
func erlValue(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("<<%q>>", s)
	}
	return fmt.Sprint(v)
}

// streamFilter reads x-stream-filter (a string or an array of them) and
// x-stream-match-unfiltered (RabbitMQ 3.13+: rabbit_stream_queue.erl
// v4.3.5 filter_spec: other element types are skipped, and without a
// filter x-stream-match-unfiltered means nothing).
func streamFilter(args amqp.Table) *stream.Filter {
	var vals []string
	switch x := args["x-stream-filter"].(type) {
	case string:
		vals = []string{x}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				vals = append(vals, s)
			}
		}
		if vals == nil {
			vals = []string{}
		}
	default:
		return nil
	}
	mu, _ := args["x-stream-match-unfiltered"].(bool)
	return &stream.Filter{Values: vals, MatchUnfiltered: mu}
}

// Cancel stops the consumer; what it delivered stays with its channel
// (acks after basic.cancel are credit to nobody).
func (sq *streamQueue) Cancel(c *queue.Consumer) {
	sq.mu.Lock()
	sc := sq.byCons[c]
	if sc != nil {
		delete(sq.byCons, c)
		delete(sq.readers, sc.id)
	}
	sq.mu.Unlock()
	if sc != nil {
		sc.halt()
		sc.storeOffset()
	}
}

// account adds n bytes to what the consumer holds and to the node's
// memory figure (a client's consumers are a client's memory: the alarm
// sees them).
func (sc *streamConsumer) account(n int64) {
	sc.mem += n
	sc.sq.mem.Add(n)
}

func (sc *streamConsumer) kick() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// halt stops run and closes the reader.
func (sc *streamConsumer) halt() {
	sc.haltOnce.Do(func() {
		close(sc.quit)
		<-sc.done
		sc.release()
	})
}

// release closes the reader and uncounts what the consumer held (run
// has returned).
func (sc *streamConsumer) release() {
	_ = sc.r.Close()
	sc.account(-sc.mem)
	sc.buf = nil
}

// run delivers from the log whenever the channel has room and the log
// has records, until halted.
func (sc *streamConsumer) run() {
	defer close(sc.done)
	for {
		changed := sc.sq.log.Changed()
		if !sc.held && !sc.pump() {
			sc.mu.Lock()
			orphan := sc.orphan
			sc.mu.Unlock()
			if orphan { // nobody else can reach it to halt it
				sc.release()
			}
			return
		}
		select {
		case <-sc.wake:
			sc.held = false
		case <-changed:
		case <-sc.quit:
			return
		}
	}
}

// pump delivers until the channel refuses or the log has no more; false
// if the log failed (the consumer is then cancelled).
func (sc *streamConsumer) pump() bool {
	n := 0
	defer func() {
		if n > 0 && sc.c.Out != nil {
			sc.c.Out.Wake()
		}
	}()
	for {
		if !sc.hasPending {
			e, ok, err := sc.r.Next()
			if err != nil {
				sc.failed(err)
				return false
			}
			if !ok {
				sc.offset.Store(max(sc.r.Offset(), sc.from))
				return true
			}
			if e.Offset < sc.from {
				continue
			}
			d, err := sc.delivery(e)
			if err != nil {
				sc.failed(err)
				return false
			}
			sc.pending, sc.hasPending = d, true
		}
		if sc.track != "" {
			sc.mu.Lock()
			sc.window = append(sc.window, unackedOffset{off: sc.pending.Seq})
			sc.mu.Unlock()
		}
		sc.out.Add(1)
		if !sc.c.Sink.Deliver(sc.c, sc.sq.q, sc.pending) {
			sc.out.Add(-1)
			if sc.track != "" {
				sc.mu.Lock()
				sc.window = sc.window[:len(sc.window)-1]
				sc.mu.Unlock()
			}
			return true
		}
		sc.hasPending = false
		sc.offset.Store(sc.pending.Seq + 1)
		sc.sq.delivered.Add(1)
		n++
		if n%256 == 0 && sc.c.Out != nil {
			sc.c.Out.Wake() // a long replay streams out as it is read
		}
	}
}

// delivery makes a record a delivery: its properties with x-stream-offset
// added (as RabbitMQ adds it: a long), then the body, in the consumer's
// own buffer and Message, reused for every delivery: the channel copies
// a delivery's bytes into its connection's outbound buffer as it takes
// it (Channel.Deliver, conn.AppendContent), and a stream's settles read
// only a delivery's Seq and Reader, so nothing reads the Message after
// the next one is made. A reader's memory is then its buffer, whatever
// its prefetch and the stream's size, and a delivery allocates nothing.
func (sc *streamConsumer) delivery(e stream.Entry) (queue.Delivery, error) {
	rec, err := decodeRecord(e.Data)
	if err != nil {
		return queue.Delivery{}, fmt.Errorf("offset %d: %w", e.Offset, err)
	}
	buf := amqp.AppendLongHeader(sc.buf[:0], rec.props, "x-stream-offset", int64(e.Offset))
	np := len(buf)
	buf = append(buf, rec.body...)
	if string(rec.exchange) != sc.lastEx {
		sc.lastEx = string(rec.exchange)
	}
	if string(rec.key) != sc.lastKey {
		sc.lastKey = string(rec.key)
	}
	if cap(buf) > streamBufKeep {
		buf = buf[:0:0] // not kept after a large message
	}
	sc.account(int64(cap(buf) - cap(sc.buf)))
	sc.buf = buf
	sc.msg = queue.Message{Exchange: sc.lastEx, RoutingKey: sc.lastKey, Props: buf[:np:np], Body: buf[np:],
		Enqueued: e.Timestamp * int64(time.Millisecond)}
	return queue.Delivery{Msg: &sc.msg, Seq: e.Offset, Reader: sc.id}, nil
}

// failed cancels a consumer whose reading failed (a corrupt record).
func (sc *streamConsumer) failed(err error) {
	sq := sc.sq
	sq.m.log.Error("stream consumer stopped: reading the stream failed", zap.String("queue", sq.q.Name()),
		zap.String("consumer", sc.c.Tag), zap.Error(err))
	sq.mu.Lock()
	mine := sq.byCons[sc.c] == sc
	if mine {
		delete(sq.byCons, sc.c)
		delete(sq.readers, sc.id)
	}
	sq.mu.Unlock()
	sc.mu.Lock()
	sc.orphan = mine
	sc.mu.Unlock()
	sc.c.Sink.Cancelled(sc.c)
}

// settled takes the consumer's settled deliveries: a tracked consumer's
// stored offset moves to its first delivery not settled.
func (sc *streamConsumer) settled(ds []queue.Delivery, requeued bool) {
	sc.out.Add(-int32(len(ds)))
	if sc.track == "" {
		return
	}
	sc.mu.Lock()
	w := sc.window[sc.head:]
	for _, d := range ds {
		if requeued && (!sc.hasBarrier || d.Seq < sc.barrier) {
			sc.barrier, sc.hasBarrier = d.Seq, true
		}
		i := sort.Search(len(w), func(i int) bool { return w[i].off >= d.Seq })
		if i < len(w) && w[i].off == d.Seq && !w[i].settled {
			w[i].settled = true
			sc.nDone++
		}
	}
	for sc.head < len(sc.window) && sc.window[sc.head].settled {
		sc.head++
		sc.nDone--
	}
	sc.compact()
	sc.mu.Unlock()
	sc.storeOffset()
}

// compact keeps the window about the size of what is not settled (at
// most the channel's prefetch): the settled entries before the head go,
// and so do those after it once they are most of the window, as when
// one early delivery stays unacked while the rest are acked. sc.mu held.
func (sc *streamConsumer) compact() {
	live := len(sc.window) - sc.head
	switch {
	case sc.nDone > 1024 && sc.nDone*2 > live:
		w := sc.window[:0]
		for _, u := range sc.window[sc.head:] {
			if !u.settled {
				w = append(w, u)
			}
		}
		clear(sc.window[len(w):])
		sc.window, sc.head, sc.nDone = w, 0, 0
	case sc.head > 1024 && sc.head*2 > len(sc.window):
		sc.window = append(sc.window[:0], sc.window[sc.head:]...)
		sc.head = 0
	}
}

// storeOffset stores a tracked consumer's resume point: its first
// delivery not settled, or what it reads next, and never past a delivery
// it requeued.
func (sc *streamConsumer) storeOffset() {
	if sc.track == "" {
		return
	}
	sc.mu.Lock()
	off := sc.offset.Load()
	if sc.head < len(sc.window) {
		off = sc.window[sc.head].off
	}
	if sc.hasBarrier && sc.barrier < off {
		off = sc.barrier
	}
	sc.mu.Unlock()
	sc.sq.log.StoreOffset(sc.track, off)
}

func (sc *streamConsumer) unackedCount() int { return int(max(sc.out.Load(), 0)) }
