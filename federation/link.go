package federation

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/railmq/railmq/shovel"
)

// State is a link's status as RabbitMQ's GET /api/federation-links shows
// it (rabbit_federation_status.erl).
type State string

// The states.
const (
	Starting State = "starting"
	Running  State = "running"
	Error    State = "error"
	Shutdown State = "shutdown"
)

// Status is a snapshot of a link, with what /api/federation-links shows
// of it besides the broker's own fields (node, local_connection,
// local_channel).
type Status struct {
	// Type is "exchange" or "queue".
	Type string
	// Vhost is the downstream vhost; Name the downstream exchange or
	// queue; UpstreamName its upstream counterpart (upstream_exchange or
	// upstream_queue); Upstream the upstream's parameter name.
	Vhost, Name, UpstreamName, Upstream string
	// ConsumerTag is a queue link's consumer tag upstream.
	ConsumerTag string
	// ID is 8 hex digits naming the link.
	ID    string
	State State
	// Error is why the link is in State Error (RabbitMQ's "error":
	// econnrefused, {auth_failure,"..."}, ...).
	Error string
	// LastError is the last session's failure, kept while it starts
	// again.
	LastError string
	// URI is the upstream URI without credentials (the last tried one).
	URI string
	// Timestamp is when State last changed.
	Timestamp time.Time
	// Forwarded counts messages republished downstream; Dropped those an
	// exchange link did not forward (max-hops, or already seen here).
	Forwarded, Dropped uint64
}

// JSON is the status as /api/federation-links writes it, without the
// broker's fields (node, local_connection, local_channel); timestamp in
// the node's local time, RabbitMQ's "YYYY-MM-DD H:MM:SS".
func (s Status) JSON() map[string]any {
	m := map[string]any{"type": s.Type, "vhost": s.Vhost, "upstream": s.Upstream, "id": s.ID,
		"status": string(s.State), "uri": s.URI, "timestamp": Timestamp(s.Timestamp)}
	if s.Type == "queue" {
		m["queue"], m["upstream_queue"], m["consumer_tag"] = s.Name, s.UpstreamName, s.ConsumerTag
	} else {
		m["exchange"], m["upstream_exchange"] = s.Name, s.UpstreamName
	}
	if s.State == Error {
		m["error"] = s.Error
	}
	return m
}

// Timestamp is t in the local time as rabbit_federation_mgmt.erl prints
// it (v3.10.8): "~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w", the hour not
// zero-padded.
func Timestamp(t time.Time) string {
	return fmt.Sprintf("%s %d:%s", t.Format("2006-01-02"), t.Hour(), t.Format("04:05"))
}

// linkID is the link's id: 8 hex digits of a hash of what names it.
func linkID(parts ...string) string {
	h := fnv.New32a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return fmt.Sprintf("%08x", h.Sum32())
}

// Options are what a link needs besides its upstream and downstream.
type Options struct {
	// ClusterName is the downstream's cluster name (RabbitMQ's
	// rabbit_nodes:cluster_name()), in the upstream queue's name,
	// x-bound-from and the loop check.
	ClusterName string
	// Vhost is the downstream vhost.
	Vhost string
	// Dialer opens upstream connections; nil is AMQPDialer{}.
	Dialer Dialer
	Logger *zap.Logger
}

// link is what both kinds share: the status, the goroutine, reconnects.
type link struct {
	up   Upstream
	opts Options
	log  *zap.Logger

	mu     sync.Mutex // guards st, cancel, done; a leaf (LOCKS.md)
	st     Status
	cancel context.CancelFunc
	done   chan struct{}
	next   int // the URI to try next

	sess func(ctx context.Context) error // one session: the kind's own
}

// Start runs the link on a goroutine of its own; a no-op if it runs.
func (l *link) Start() { l.start(l.sess) }

// Restart stops the link and starts it again at once (RabbitMQ's
// DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart).
func (l *link) Restart() {
	l.Stop()
	l.Start()
}

func (l *link) init(up Upstream, opts Options, st Status) {
	if opts.Dialer == nil {
		opts.Dialer = AMQPDialer{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	l.up, l.opts = up, opts
	l.log = opts.Logger.With(zap.String("federation_link", st.Type), zap.String("vhost", opts.Vhost),
		zap.String("name", st.Name), zap.String("upstream", up.Name))
	st.Vhost, st.Upstream, st.State, st.Timestamp = opts.Vhost, up.Name, Starting, time.Now()
	st.ID = linkID(st.Type, opts.Vhost, st.Name, up.Name)
	l.st = st
}

// Status is a snapshot of the link.
func (l *link) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

func (l *link) set(f func(*Status)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.st)
}

func (l *link) setState(s State, why string) {
	l.set(func(st *Status) {
		if st.State != s || st.Error != why {
			st.State, st.Error, st.Timestamp = s, why, time.Now()
		}
		if s == Error {
			st.LastError = why
		}
	})
}

// start runs session on a goroutine of its own, again after
// reconnect-delay each time it fails, until stop.
func (l *link) start(session func(ctx context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		select {
		case <-l.done:
		default:
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go l.run(ctx, l.done, session)
}

// Stop ends the link and waits for its goroutine; what it had consumed
// and not acked goes back to the upstream queue when its connection
// closes. Upstream resources stay (RabbitMQ removes them only when the
// link is removed for good: Cleanup).
func (l *link) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (l *link) run(ctx context.Context, done chan struct{}, session func(ctx context.Context) error) {
	defer close(done)
	for {
		l.setState(Starting, "")
		err := session(ctx)
		if ctx.Err() != nil {
			l.setState(Shutdown, "")
			return
		}
		why := reason(err)
		l.setState(Error, why)
		l.log.Warn("federation link failed", zap.String("reason", why), zap.Duration("reconnect_delay", l.up.ReconnectDelay))
		delay := l.up.ReconnectDelay
		if delay <= 0 {
			delay = time.Second
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			l.setState(Shutdown, "")
			return
		case <-t.C:
		}
	}
}

// dial connects to the next of the upstream's URIs.
func (l *link) dial(ctx context.Context, name string) (Conn, string, error) {
	if len(l.up.URIs) == 0 {
		return nil, "", errors.New("no upstream URI")
	}
	uri := l.up.URIs[l.next%len(l.up.URIs)]
	l.next++
	l.set(func(st *Status) { st.URI = shovel.Redact(uri) })
	c, err := l.opts.Dialer.Dial(ctx, uri, name)
	if err != nil {
		return nil, "", err
	}
	return c, uri, nil
}

// upstreamVhost is the vhost a URI names.
func upstreamVhost(uri string) string { return shovel.Vhost(uri) }

// watchClose closes c when ctx ends, so that blocking calls return.
func watchClose(ctx context.Context, c Conn) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			_ = c.Close()
		case <-done:
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// isCode says whether err is an AMQP exception with code.
func isCode(err error, code int) bool {
	var ae *rmq.Error
	return errors.As(err, &ae) && ae.Code == code
}

// prependTable puts t first in headers[key], an array of tables
// (rabbit_basic:prepend_table_header): a value that is not an array is
// replaced.
func prependTable(h rmq.Table, key string, t rmq.Table) rmq.Table {
	old, _ := h[key].([]any)
	arr := make([]any, 0, len(old)+1)
	arr = append(arr, t)
	arr = append(arr, old...)
	h[key] = arr
	return h
}

// copyHeaders is a shallow copy of h (nil gives an empty table).
func copyHeaders(h rmq.Table) rmq.Table {
	out := make(rmq.Table, len(h)+1)
	for k, v := range h {
		out[k] = v
	}
	return out
}

// publishing is the delivery as a message to republish.
func publishing(d rmq.Delivery, headers rmq.Table, trustUserID bool) rmq.Publishing {
	p := rmq.Publishing{Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		UserId: d.UserId, AppId: d.AppId, Body: d.Body}
	if !trustUserID {
		p.UserId = ""
	}
	return p
}

// republish hands a message to the downstream and settles its upstream
// delivery per ack-mode: on-publish acks before, no-ack never, on-confirm
// acks in the Publisher's done (or requeues what the downstream
// refused). An ack that fails because the upstream channel closed is
// left to the redelivery the close brings.
func republish(ctx context.Context, pub Publisher, ch Channel, up Upstream, exchange, key string, tag uint64,
	msg rmq.Publishing, fwd *atomic.Uint64, log *zap.Logger) error {
	if up.AckMode == OnPublish {
		if err := ch.Ack(tag, false); err != nil {
			return err
		}
	}
	return pub.Publish(ctx, exchange, key, msg, up.AckMode == OnConfirm, func(err error) {
		if err == nil {
			fwd.Add(1)
		} else {
			log.Warn("federation link: downstream refused a message", zap.Error(err))
		}
		if up.AckMode != OnConfirm {
			return
		}
		if err != nil {
			_ = ch.Nack(tag, false, true)
			return
		}
		_ = ch.Ack(tag, false)
	})
}

// settle acks (or, failed, requeues) an upstream delivery per ack-mode.
func settle(ch Channel, mode AckMode, tag uint64, err error) error {
	if mode == NoAck {
		return nil
	}
	if err != nil {
		return ch.Nack(tag, false, true)
	}
	return ch.Ack(tag, false)
}
