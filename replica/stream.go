package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/stream"
)

// Streams (x-queue-type stream) on this node: each is a queue.Queue
// handle whose Replica is a streamQueue over the stream's log
// (stream.Log) in its own directory under Options.StreamDir. A publish
// appends a record (confirmed once fsynced); every consumer reads the
// log from its own offset with its own reader, on its own goroutine
// (streamConsumer.run), pushing deliveries to its channel until the
// channel refuses one (its prefetch is the consumer's credit), then
// waiting for the channel's Kick or for the log to grow. Acks, nacks and
// rejects only give credit back (the channel counts it) and move a
// tracked consumer's stored offset: nothing leaves a stream but by its
// retention.
//
// streamQueue.mu guards the consumers map and gone; it is never held
// while a consumer delivers. A streamConsumer's reader and pending
// delivery belong to its goroutine; its unacked offsets to its own mu,
// taken by the channels' goroutines (Ack) and by run (a delivery made).
// Channel.Deliver is called from run with no lock of this package held.

// streamAppender is how a stream's records reach its log: straight into
// it on a standalone node (the log itself), through the stream's Raft
// group when replicated.
type streamAppender interface {
	Append(recs []stream.Record, done func(first uint64, err error))
}

type streamQueue struct {
	m   *Manager
	q   *queue.Queue
	log *stream.Log
	app streamAppender
	dir string

	mu      sync.Mutex
	readers map[uint16]*streamConsumer
	byCons  map[*queue.Consumer]*streamConsumer
	nextID  uint16
	gone    atomic.Bool // stopped: set under mu, read without it (Publish)

	published atomic.Int64
	pending   atomic.Int64  // bytes appended, not yet written (Behind)
	mem       *atomic.Int64 // the node's memory figure: pending counts in it
	delivered atomic.Int64
	acked     atomic.Int64
}

// StartStream makes this node's handle of a stream (vhost.StreamStarter):
// its log opened (recovered) in StreamDir/id.
func (m *Manager) StartStream(cfg queue.Config, voters []string, id string) (*queue.Queue, error) {
	m.quorumMu.Lock()
	mine := m.creating[id] // NewGroup's mark: this node bootstraps the group
	delete(m.creating, id)
	m.quorumMu.Unlock()
	if m.streamDir == "" {
		return nil, errors.New("this node keeps no streams (no stream directory)")
	}
	dir := filepath.Join(m.streamDir, id)
	pol := queue.NoPolicy
	if cfg.Policy != nil {
		pol = *cfg.Policy
	}
	so := streamOptions(cfg.Args, pol, m.log.With(zap.String("stream", cfg.Name), zap.String("vhost", cfg.VHost)))
	so.Seal = m.streamSeal
	lg, err := stream.Open(dir, so)
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", cfg.Name, err)
	}
	sq := &streamQueue{m: m, log: lg, app: lg, dir: dir, readers: map[uint16]*streamConsumer{}, byCons: map[*queue.Consumer]*streamConsumer{}}
	cfg.Replica = sq
	cfg.Store = nil
	sq.q = queue.New(cfg)
	sq.mem = sq.q.Config().Memory
	if m.node != nil && !m.node.Local() { // in a cluster: through its Raft group (stream_repl.go)
		if err := m.replicate(sq, voters, id, mine); err != nil {
			return nil, errors.Join(fmt.Errorf("stream %q: %w", cfg.Name, err), lg.Close())
		}
	}
	m.quorumMu.Lock()
	m.streams[sq] = struct{}{}
	m.quorumMu.Unlock()
	return sq.q, nil
}

// streamOptions are a stream's log's options from its arguments and
// policy (the policy's retention merged into pol by the vhost).
func streamOptions(args amqp.Table, pol queue.Policy, log *zap.Logger) stream.Options {
	o := stream.Options{Log: log, MaxAge: pol.MaxAge, MaxSegmentBytes: pol.MaxSegmentBytes}
	if pol.MaxLengthBytes > 0 {
		o.MaxBytes = pol.MaxLengthBytes
	}
	if n, ok := amqp.Int(args["x-stream-filter-size-bytes"]); ok {
		o.FilterSize = int(n)
	}
	return o
}

// SetPolicy applies a policy's retention to the log (queue.PolicySetter).
func (sq *streamQueue) SetPolicy(p queue.Policy) {
	maxBytes := p.MaxLengthBytes
	if maxBytes < 0 {
		maxBytes = 0
	}
	sq.log.SetRetention(maxBytes, p.MaxAge)
}

// stop stops this node's handle of the stream (deleted): its consumers
// here are cancelled (consumer_cancel_notify) and its files removed.
func (sq *streamQueue) stop() {
	m := sq.m
	m.quorumMu.Lock()
	delete(m.streams, sq)
	m.quorumMu.Unlock()
	cons := sq.takeAll()
	for _, sc := range cons {
		sc.halt()
		sc.c.Sink.Cancelled(sc.c)
	}
	closeRepl(sq, true /* remove */)
	if err := sq.log.Delete(); err != nil {
		m.log.Warn("stream files not removed", zap.String("queue", sq.q.Name()), zap.Error(err))
	}
	sq.q.Stop()
}

// close closes the stream's log at shutdown (its files stay).
func (sq *streamQueue) close() {
	for _, sc := range sq.takeAll() {
		sc.halt()
	}
	closeRepl(sq, false /* remove */)
	if err := sq.log.Close(); err != nil {
		sq.m.log.Warn("stream not closed", zap.String("queue", sq.q.Name()), zap.Error(err))
	}
}

func (sq *streamQueue) takeAll() []*streamConsumer {
	sq.mu.Lock()
	defer sq.mu.Unlock()
	sq.gone.Store(true)
	out := make([]*streamConsumer, 0, len(sq.readers))
	for _, sc := range sq.readers {
		out = append(out, sc)
	}
	sq.readers, sq.byCons = map[uint16]*streamConsumer{}, map[*queue.Consumer]*streamConsumer{}
	return out
}

// Publish appends the message to the log: confirmed once fsynced.
func (sq *streamQueue) Publish(m *queue.Message, conf queue.Confirmer) bool {
	if sq.gone.Load() {
		return false
	}
	rec := stream.Record{Timestamp: time.Now().UnixMilli(), Filter: filterValue(m.Props), Data: encodeRecord(m)}
	sq.published.Add(1)
	n := int64(len(rec.Data))
	sq.pending.Add(n)
	mem := sq.mem
	mem.Add(n)
	sq.app.Append([]stream.Record{rec}, func(_ uint64, err error) {
		sq.pending.Add(-n)
		mem.Add(-n)
		if conf != nil {
			conf.Done(err)
		}
	})
	return true
}

// A stream's intake waits for its disk: publishers into it are held (the
// connection's flow control) while more than streamBehind bytes wait to
// be written, until streamCaughtUp (queue.Throttled).
const (
	streamBehind   = 64 << 20
	streamCaughtUp = 16 << 20
)

// Behind reports whether the stream's writer is behind its publishers.
func (sq *streamQueue) Behind() bool { return sq.pending.Load() > streamBehind }

// CaughtUp reports whether it caught up.
func (sq *streamQueue) CaughtUp() bool { return sq.pending.Load() < streamCaughtUp }

// filterValue is a message's x-stream-filter-value header (a string), or
// "" (RabbitMQ 3.13+: rabbit_stream_queue.erl v4.3.5 deliver reads it
// from the message's headers).
func filterValue(props []byte) string {
	h := amqp.PropsHeaders(props)
	if len(h) == 0 {
		return ""
	}
	v, ok := amqp.HeaderField(h, "x-stream-filter-value")
	if !ok || len(v) < 5 || v[0] != 'S' {
		return ""
	}
	n := binary.BigEndian.Uint32(v[1:])
	if int(n) > len(v)-5 {
		return ""
	}
	return string(v[5 : 5+n])
}

// encodeRecord is a message as a stream keeps it: exchange and routing
// key (short strings), the properties exactly as published (a 32-bit
// length first: headers of every type are kept), then the body.
func encodeRecord(m *queue.Message) []byte {
	b := make([]byte, 0, 2+len(m.Exchange)+len(m.RoutingKey)+4+len(m.Props)+len(m.Body))
	b = append(b, byte(len(m.Exchange)))
	b = append(b, m.Exchange...)
	b = append(b, byte(len(m.RoutingKey)))
	b = append(b, m.RoutingKey...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Props)))
	b = append(b, m.Props...)
	return append(b, m.Body...)
}

// record is a decoded record; its slices alias the data.
type record struct {
	exchange, key, props, body []byte
}

var errCorruptRecord = errors.New("stream record: corrupt")

func decodeRecord(p []byte) (record, error) {
	var r record
	for _, f := range []*[]byte{&r.exchange, &r.key} {
		if len(p) < 1 || len(p) < 1+int(p[0]) {
			return r, errCorruptRecord
		}
		*f, p = p[1:1+int(p[0])], p[1+int(p[0]):]
	}
	if len(p) < 4 {
		return r, errCorruptRecord
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return r, errCorruptRecord
	}
	r.props, r.body = p[4:4+n], p[4+n:]
	return r, nil
}

// Get: basic.get is refused (rabbit_stream_queue.erl v3.10.8 dequeue:
// 540 closes the connection).
func (sq *streamQueue) Get(bool) (queue.Delivery, bool, int, error) {
	return queue.Delivery{}, false, 0, amqp.Errorf(amqp.NotImplemented, "basic.get not supported by stream queues %s", sq.rs())
}

// Purge is refused: a stream loses records only by its retention
// (rabbit_stream_queue.erl v3.10.8 purge: {error, not_supported}).
func (sq *streamQueue) Purge() (int, error) {
	return 0, amqp.Errorf(amqp.NotImplemented, "queue.purge not supported by stream queues %s", sq.rs())
}

func (sq *streamQueue) rs() string {
	return fmt.Sprintf("queue '%s' in vhost '%s'", sq.q.Name(), sq.q.Config().VHost)
}

// Stats: the records kept, and the consumers here.
func (sq *streamQueue) Stats() (messages, consumers int, err error) {
	first, next := sq.log.Bounds()
	sq.mu.Lock()
	consumers = len(sq.readers)
	sq.mu.Unlock()
	return int(next - first), consumers, nil
}

// Delete deletes the stream everywhere: its definition and bindings
// (the host), then every node's handle (Stop). RabbitMQ ignores
// if-unused and if-empty for streams and answers delete-ok with
// message_count 0 (rabbit_stream_queue.erl v3.10.8 delete; checked).
func (sq *streamQueue) Delete(_, _ bool) (int, error) {
	cfg := sq.q.Config()
	if err := sq.m.host.DropQueue(cfg.VHost, cfg.Name); err != nil {
		return 0, quorumError(err)
	}
	return 0, nil
}

// CountsDeliveries: a stream's deliveries carry no delivery count.
func (sq *streamQueue) CountsDeliveries() bool { return false }

// Ack, Requeue and Discard all settle: credit back to the consumer (the
// channel counts it) and, for a tracked consumer, its stored offset
// moves (RabbitMQ 4.x: "all settle reasons will give credit to the
// stream queue", rabbit_stream_queue.erl v4.3.5 settle).
//
// A requeue (a nack or reject asking for one, a channel closed with the
// delivery unacked) is credit too, but a tracked consumer's stored offset
// does not pass it: the consumer did not process it, and resumes there.
func (sq *streamQueue) Ack(ds []queue.Delivery) {
	sq.acked.Add(int64(len(ds)))
	sq.settle(ds, false)
}

func (sq *streamQueue) Requeue(ds []queue.Delivery, _ bool) { sq.settle(ds, true) }

func (sq *streamQueue) Discard(ds []queue.Delivery) { sq.settle(ds, false) }

func (sq *streamQueue) settle(ds []queue.Delivery, requeued bool) {
	for i := 0; i < len(ds); {
		j := i + 1
		for j < len(ds) && ds[j].Reader == ds[i].Reader {
			j++
		}
		sq.mu.Lock()
		sc := sq.readers[ds[i].Reader]
		sq.mu.Unlock()
		if sc != nil {
			sc.settled(ds[i:j], requeued)
		}
		i = j
	}
}

// Kick: the consumer's channel has room again (or sent consume-ok).
func (sq *streamQueue) Kick(c *queue.Consumer) {
	sq.mu.Lock()
	sc := sq.byCons[c]
	sq.mu.Unlock()
	if sc != nil {
		sc.kick()
	}
}

// StreamStats describe the stream here (queue.StreamStater).
func (sq *streamQueue) StreamStats() queue.StreamStats {
	st := sq.log.Stats()
	out := queue.StreamStats{First: st.First, Next: st.Next, Segments: st.Segments, Bytes: st.Bytes,
		FirstTimestamp: st.FirstTimestamp, LastTimestamp: st.LastTimestamp,
		Published: sq.published.Load(), SegmentsDeleted: int64(st.SegmentsDeleted)}
	sq.mu.Lock()
	cons := make([]*streamConsumer, 0, len(sq.readers))
	for _, sc := range sq.readers {
		cons = append(cons, sc)
	}
	sq.mu.Unlock()
	for _, sc := range cons {
		off := sc.offset.Load()
		var lag uint64
		if st.Next > off {
			lag = st.Next - off
		}
		out.Consumers = append(out.Consumers, queue.StreamConsumer{Tag: sc.c.Tag, Offset: off, Lag: lag,
			Tracking: sc.track, Unacked: sc.unackedCount(), Prefetch: sc.c.Prefetch})
	}
	return out
}

// publishCounts publishes the stream's counts for the queue's metrics:
// every record kept counts as ready, none as unacknowledged (RabbitMQ
// shows a stream's length as its messages and messages_ready, and
// messages_unacknowledged 0 however many deliveries are unacked:
// rabbit_osiris_metrics.erl; conformance/stream_mgmt_test.go). The
// consumers' unacked deliveries are their channels'.
func (sq *streamQueue) publishCounts() {
	st := sq.log.Stats()
	sq.mu.Lock()
	n := len(sq.readers)
	sq.mu.Unlock()
	var head int64
	if st.FirstTimestamp > 0 {
		head = st.FirstTimestamp * int64(time.Millisecond)
	}
	sq.q.SetCounts(queue.ReplicaCounts{Ready: int64(st.Next - st.First), ReadyBytes: st.Bytes,
		Consumers: int32(n), Head: head, Published: sq.published.Load(), Delivered: sq.delivered.Load(), Acked: sq.acked.Load()})
}

// streamList is this node's streams; drop forgets them too.
func (m *Manager) streamList(drop bool) []*streamQueue {
	m.quorumMu.Lock()
	defer m.quorumMu.Unlock()
	ss := make([]*streamQueue, 0, len(m.streams))
	for sq := range m.streams {
		ss = append(ss, sq)
	}
	if drop {
		m.streams = map[*streamQueue]struct{}{}
	}
	return ss
}

// tickStreams refreshes every stream's counts (Manager.Tick).
func (m *Manager) tickStreams() {
	for _, sq := range m.streamList(false) {
		sq.publishCounts()
		if r := streamRepl(sq); r != nil {
			r.tick()
		}
	}
}

// closeStreams closes every stream's log (Manager.Close).
func (m *Manager) closeStreams() {
	for _, sq := range m.streamList(true) {
		sq.close()
	}
}
