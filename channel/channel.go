// Package channel is the per-channel state machine: content assembly,
// publishing (routing, returns, confirms, transactions), consumers,
// prefetch, acknowledgements and requeueing. It imports vhost, queue,
// exchange and amqp, and writes through the FrameSink its connection
// provides.
package channel

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// FrameSink is where a channel writes its frames: the connection's
// outbound buffer. Implementations are safe for concurrent use.
type FrameSink interface {
	SendMethod(ch uint16, m amqp.Method)
	// SendContent reports whether the outbound buffer is now over its cap.
	SendContent(ch uint16, m amqp.Method, props, body []byte) (full bool)
	// AppendContent is SendContent for a delivery: the bytes wait for the
	// queue to have them written (the sink is its consumers' Outlet).
	AppendContent(ch uint16, m amqp.Method, props, body []byte) (full bool)
	queue.Outlet
	// NotifyWritable calls fn once, from the writer, when the outbound
	// buffer has drained below its cap.
	NotifyWritable(fn func())
	// Schedule calls fn from the writer before its next write (confirms
	// that became due on another goroutine go out in one frame).
	Schedule(fn func())
}

// Config describes a channel's place in its connection and broker.
type Config struct {
	Number          uint16
	Sink            FrameSink
	VHost           *vhost.VHost
	ConnID          uint64
	User            string
	MaxMessageSize  uint64
	ConsumerTimeout time.Duration // broker default; negative disables
	// CancelNotify is the client's consumer_cancel_notify capability.
	CancelNotify bool
	Replies      *ReplyRegistry
	Logger       *zap.Logger
	// Flushes collects what the reader's publishes and acks delivered
	// (to any connection) for it to flush after its read batch.
	Flushes *queue.Flushes
}

// Channel is one AMQP channel. HandleMethod, HandleContent, Flush and
// Close are called only from the connection's reader goroutine, which owns
// the fields above mu. Deliver and Cancelled are called from queue
// goroutines and take mu.
type Channel struct {
	cfg Config

	// Content assembly.
	pub       *amqp.BasicPublish // the publish awaiting content (points at pubBuf)
	pubBuf    amqp.BasicPublish
	pubHeader amqp.PropertiesView
	props     []byte
	body      []byte
	bodySize  uint64
	assembly  uint8 // 0 idle, 1 expecting header, 2 expecting body

	// Publishing.
	confirm   bool
	published uint64 // publish sequence number in confirm mode
	tx        bool
	txOps     []txOp
	scratch   vhost.Scratch
	lastQueue string
	prefetch  int // for consumers created from now on (global=false)

	store queue.Store // nil when nothing is durable

	// Confirms in flight. cmu guards cstate (the outcome of each publish
	// from tag cbase on), readyUpTo (confirms due but not yet sent) and
	// ackedUpTo (the highest tag sent); cdirty says a Flush is due.
	cmu       sync.Mutex
	cstate    []byte
	cbase     uint64
	readyUpTo uint64
	ackedUpTo uint64
	cclosed   bool // the channel is closed: nothing more is sent
	cdirty    atomic.Bool

	// mu guards everything below; lock order: mu, then the sink's lock.
	mu             sync.Mutex
	closed         bool
	consumers      map[string]*consumer
	nextTag        uint64
	unacked        []unacked // in delivery tag order; settled ones until compacted
	outstanding    int       // entries of unacked not yet settled
	globalPrefetch int
	globalUnacked  int
	minTimeout     time.Duration
	waitingWrite   bool
	sinkFull       bool              // the connection's outbound buffer was over its cap at our last delivery
	kickDue        bool              // some consumer's NeedKick may be set
	deliver        amqp.BasicDeliver // reused: one per delivery would allocate
	replyTag       string            // direct reply-to consumer tag
	replyToken     string
}

type consumer struct {
	*queue.Consumer
	q *queue.Queue
}

type unacked struct {
	tag     uint64
	q       *queue.Queue
	c       *queue.Consumer // nil for basic.get
	d       queue.Delivery
	at      int64         // delivered, unix nanos
	timeout time.Duration // consumer timeout for this delivery; 0 = none
	done    bool
}

// txOp is a publish or acknowledgement deferred to tx.commit.
type txOp struct {
	msg      *queue.Message
	exchange string
	key      string
	mand     bool
	extra    []string    // CC and BCC routing keys
	ack      amqp.Method // *BasicAck, *BasicNack or *BasicReject
}

// New opens a channel.
func New(cfg Config) *Channel {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Channel{
		cfg:       cfg,
		consumers: make(map[string]*consumer),
	}
	if cfg.VHost != nil {
		c.store = cfg.VHost.Store()
	}
	return c
}

func withMethod(err error, m amqp.Method) error {
	if err == nil {
		return nil
	}
	var e *amqp.Error
	if errors.As(err, &e) && e.ClassID == 0 && e.MethodID == 0 {
		e.ClassID, e.MethodID = m.Index()
	}
	return err
}

func precondition(format string, args ...any) *amqp.Error {
	return amqp.Errorf(amqp.PreconditionFailed, format, args...)
}

func (c *Channel) send(m amqp.Method) { c.cfg.Sink.SendMethod(c.cfg.Number, m) }

// HandleMethod handles a method other than channel.open/close/close-ok
// (the connection handles those). It returns an *amqp.Error for an
// exception; its class decides whether the channel or the connection
// closes.
func (c *Channel) HandleMethod(m amqp.Method) error {
	if c.assembly != 0 {
		return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
			ClassID: amqp.ClassBasic, MethodID: 40}
	}
	return withMethod(c.handle(m), m)
}

func (c *Channel) handle(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.BasicPublish:
		if m.Immediate {
			return amqp.Errorf(amqp.NotImplemented, "immediate=true")
		}
		c.pubBuf = *m // the decoder reuses m
		c.pub = &c.pubBuf
		c.assembly = 1
		return nil
	case *amqp.BasicAck:
		return c.ack(m, m.DeliveryTag, m.Multiple, ackAck, false)
	case *amqp.BasicNack:
		return c.ack(m, m.DeliveryTag, m.Multiple, ackReject, m.Requeue)
	case *amqp.BasicReject:
		return c.ack(m, m.DeliveryTag, false, ackReject, m.Requeue)
	case *amqp.BasicQos:
		return c.qos(m)
	case *amqp.BasicConsume:
		return c.consume(m)
	case *amqp.BasicCancel:
		return c.cancel(m)
	case *amqp.BasicGet:
		return c.get(m)
	case *amqp.BasicRecover:
		if !m.Requeue {
			return amqp.Errorf(amqp.NotImplemented, "requeue=false")
		}
		c.requeueAll()
		c.send(&amqp.BasicRecoverOk{})
		return nil
	case *amqp.BasicRecoverAsync:
		if !m.Requeue {
			return amqp.Errorf(amqp.NotImplemented, "requeue=false")
		}
		c.requeueAll()
		return nil
	case *amqp.ChannelFlow:
		if !m.Active {
			return amqp.Errorf(amqp.NotImplemented, "active=false")
		}
		c.send(&amqp.ChannelFlowOk{Active: true})
		return nil
	case *amqp.ChannelFlowOk:
		return nil
	case *amqp.ExchangeDeclare:
		return c.exchangeDeclare(m)
	case *amqp.ExchangeDelete:
		return c.answer(c.cfg.VHost.DeleteExchange(m.Exchange, m.IfUnused), m.NoWait, &amqp.ExchangeDeleteOk{})
	case *amqp.ExchangeBind:
		return c.answer(c.cfg.VHost.Bind(c.cfg.ConnID, m.Destination, true, m.Source, m.RoutingKey, m.Arguments), m.NoWait, &amqp.ExchangeBindOk{})
	case *amqp.ExchangeUnbind:
		return c.answer(c.cfg.VHost.Unbind(c.cfg.ConnID, m.Destination, true, m.Source, m.RoutingKey, m.Arguments), m.NoWait, &amqp.ExchangeUnbindOk{})
	case *amqp.QueueDeclare:
		return c.queueDeclare(m)
	case *amqp.QueueBind:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Bind(c.cfg.ConnID, name, false, m.Exchange, m.RoutingKey, m.Arguments), m.NoWait, &amqp.QueueBindOk{})
	case *amqp.QueueUnbind:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Unbind(c.cfg.ConnID, name, false, m.Exchange, m.RoutingKey, m.Arguments), false, &amqp.QueueUnbindOk{})
	case *amqp.QueuePurge:
		q, name, err := c.lookupQueue(m.Queue)
		if err != nil {
			return err
		}
		n, err := q.Purge()
		if err != nil {
			return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, c.cfg.VHost.Name())
		}
		return c.answer(nil, m.NoWait, &amqp.QueuePurgeOk{MessageCount: uint32(n)})
	case *amqp.QueueDelete:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		n, err := c.cfg.VHost.DeleteQueue(c.cfg.ConnID, name, m.IfUnused, m.IfEmpty)
		if err != nil {
			return err
		}
		if !m.NoWait {
			c.send(&amqp.QueueDeleteOk{MessageCount: uint32(n)})
		}
		return nil
	case *amqp.TxSelect:
		if c.confirm {
			return precondition("cannot switch from confirm to tx mode")
		}
		c.tx = true
		c.send(&amqp.TxSelectOk{})
		return nil
	case *amqp.TxCommit:
		if !c.tx {
			return precondition("channel is not transactional")
		}
		if err := c.commit(); err != nil {
			return err
		}
		c.send(&amqp.TxCommitOk{})
		return nil
	case *amqp.TxRollback:
		if !c.tx {
			return precondition("channel is not transactional")
		}
		c.txOps = c.txOps[:0]
		c.send(&amqp.TxRollbackOk{})
		return nil
	case *amqp.ConfirmSelect:
		if c.tx {
			return precondition("cannot switch from tx to confirm mode")
		}
		c.confirm = true
		if !m.Nowait {
			c.send(&amqp.ConfirmSelectOk{})
		}
		return nil
	}
	return amqp.Errorf(amqp.NotImplemented, "%s", m.Name())
}

// answer replies ok to a synchronous method that succeeded, unless the
// client asked for no reply.
func (c *Channel) answer(err error, noWait bool, ok amqp.Method) error {
	if err != nil {
		return err
	}
	if !noWait {
		c.send(ok)
	}
	return nil
}

// lookupQueue finds the queue a method names (the empty name meaning the
// last declared one): 404 if missing, 405 if another connection owns it.
func (c *Channel) lookupQueue(name string) (*queue.Queue, string, error) {
	name, err := c.queueName(name)
	if err != nil {
		return nil, "", err
	}
	q, err := c.cfg.VHost.Queue(c.cfg.ConnID, name)
	return q, name, err
}

// queueName expands the empty name to the channel's last declared queue
// (§1.7.2.x "queue name shortcut").
func (c *Channel) queueName(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	if c.lastQueue == "" {
		return "", amqp.Errorf(amqp.NotFound, "no previously declared queue")
	}
	return c.lastQueue, nil
}

func (c *Channel) exchangeDeclare(m *amqp.ExchangeDeclare) error {
	err := c.cfg.VHost.DeclareExchange(vhost.ExchangeDecl{
		Name: m.Exchange, Type: m.Type, Passive: m.Passive, Durable: m.Durable,
		AutoDelete: m.AutoDelete, Internal: m.Internal, Args: m.Arguments,
	})
	if err != nil {
		return err
	}
	if !m.NoWait {
		c.send(&amqp.ExchangeDeclareOk{})
	}
	return nil
}

func (c *Channel) queueDeclare(m *amqp.QueueDeclare) error {
	name := m.Queue
	if name == "" && m.Passive {
		var err error
		if name, err = c.queueName(""); err != nil {
			return err
		}
	}
	q, msgs, cons, err := c.cfg.VHost.DeclareQueue(vhost.QueueDecl{
		Name: name, Passive: m.Passive, Durable: m.Durable, Exclusive: m.Exclusive,
		AutoDelete: m.AutoDelete, Args: m.Arguments, Owner: c.cfg.ConnID,
	}, queue.Config{})
	if err != nil {
		return err
	}
	c.lastQueue = q.Name()
	if !m.NoWait {
		c.send(&amqp.QueueDeclareOk{Queue: q.Name(), MessageCount: uint32(msgs), ConsumerCount: uint32(cons)})
	}
	return nil
}

// --- content assembly and publishing -------------------------------------

// HandleContent handles a content header or body frame.
func (c *Channel) HandleContent(f amqp.Frame) error {
	switch c.assembly {
	case 0:
		return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected method frame, got non method frame instead"}
	case 1:
		if f.Type != amqp.FrameHeader {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		if len(f.Payload) >= 2 {
			if class := uint16(f.Payload[0])<<8 | uint16(f.Payload[1]); class != amqp.ClassBasic {
				return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected content header for class 60, got one for class " + itoa(uint64(class)) + " instead",
					ClassID: amqp.ClassBasic, MethodID: 40}
			}
		}
		h, err := amqp.ParseContentHeader(f.Payload)
		if err != nil {
			return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - type 2, all octets = <<>>: malformed content header",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		if h.BodySize > c.cfg.MaxMessageSize {
			c.assembly = 0
			return withMethod(precondition("message size %d is larger than configured max size %d", h.BodySize, c.cfg.MaxMessageSize), c.pub)
		}
		// One allocation holds the properties and the body.
		buf := make([]byte, len(h.Props), len(h.Props)+int(h.BodySize))
		copy(buf, h.Props)
		c.props = buf
		c.body = buf[len(buf):]
		c.bodySize = h.BodySize
		c.pubHeader, _ = amqp.ScanProperties(c.props) // validated by ParseContentHeader
		if h.BodySize == 0 {
			return c.complete()
		}
		c.assembly = 2
		return nil
	default:
		if f.Type != amqp.FrameBody {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		if uint64(len(c.body))+uint64(len(f.Payload)) > c.bodySize {
			return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - content body larger than the size its header declared",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		c.body = append(c.body, f.Payload...)
		if uint64(len(c.body)) == c.bodySize {
			return c.complete()
		}
		return nil
	}
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// complete publishes the assembled message.
func (c *Channel) complete() error {
	p := c.pub
	c.assembly = 0
	c.pub = nil
	msg := &queue.Message{
		Exchange:   p.Exchange,
		RoutingKey: p.RoutingKey,
		Props:      c.props,
		Body:       c.body,
		Persistent: c.pubHeader.DeliveryMode == 2,
		Priority:   c.pubHeader.Priority,
		Enqueued:   time.Now().UnixNano(),
	}
	c.props, c.body = nil, nil
	if exp := c.pubHeader.Expiration; c.pubHeader.Flags&amqp.FlagExpiration != 0 {
		ms, err := parseExpiration(exp)
		if err != nil {
			return withMethod(err, p)
		}
		msg.Expires = msg.Enqueued + ms*int64(time.Millisecond)
		if ms == 0 {
			msg.Expires = msg.Enqueued // expires unless delivered at once
		}
	}
	err := c.publish(msg, p.Mandatory, c.pubHeader)
	return withMethod(err, p)
}

// parseExpiration reads the expiration property: a string of
// milliseconds, as RabbitMQ parses it.
func parseExpiration(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, precondition("invalid expiration '%s': no_integer", b)
	}
	var n int64
	neg := false
	s := b
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, precondition("invalid expiration '%s': no_integer", b)
	}
	for _, ch := range s {
		if ch < '0' || ch > '9' || n > (1<<62)/10 {
			return 0, precondition("invalid expiration '%s': no_integer", b)
		}
		n = n*10 + int64(ch-'0')
	}
	if neg {
		return 0, precondition("invalid expiration '%s': {value_negative,-%d}", b, n)
	}
	if n > maxTTL {
		return 0, precondition("invalid expiration '%s': {value_too_large,%d}", b, n)
	}
	return n, nil
}

// maxTTL is the largest TTL RabbitMQ takes, in ms: 10 years
// (rabbit_misc:check_expiry).
const maxTTL = 315_360_000_000

// withDeliveryCount returns props with the x-delivery-count header set to
// n, as RabbitMQ's quorum queues add it to redeliveries; railmq adds it on
// queues with a delivery limit only (queue.CountsDeliveries).
func withDeliveryCount(props []byte, n uint32) []byte {
	p, err := amqp.DecodeProperties(props)
	if err != nil {
		return props
	}
	h := make(amqp.Table, len(p.Headers)+1)
	for k, v := range p.Headers {
		h[k] = v
	}
	h["x-delivery-count"] = int64(n)
	p.Headers = h
	p.Flags |= amqp.FlagHeaders
	return p.Append(nil)
}

const replyToQueue = "amq.rabbitmq.reply-to"

func (c *Channel) publish(msg *queue.Message, mandatory bool, v amqp.PropertiesView) error {
	if v.UserID != nil && string(v.UserID) != c.cfg.User {
		return precondition("user_id property set to '%s' but authenticated user was '%s'", v.UserID, c.cfg.User)
	}
	if string(v.ReplyTo) == replyToQueue {
		if err := c.rewriteReplyTo(msg); err != nil {
			return err
		}
	}
	var extra []string
	if len(v.Headers) > 0 {
		r, err := amqp.ScanSenderRoutes(v.Headers)
		if err != nil {
			return err
		}
		extra = r.Keys
		if r.HasBCC {
			// BCC is for routing only: no queue, consumer or return
			// sees it (RabbitMQ's strip_header).
			msg.Props = amqp.WithoutHeaderField(msg.Props, v.Headers, r.BCC)
			v, _ = amqp.ScanProperties(msg.Props)
		}
	}
	if c.tx {
		c.txOps = append(c.txOps, txOp{msg: msg, exchange: msg.Exchange, key: msg.RoutingKey, mand: mandatory, extra: extra})
		return nil
	}
	return c.route(msg, mandatory, v.Headers, extra)
}

// route delivers msg to the queues its exchange routes it to, returns it
// when mandatory and unroutable, and confirms it: at once when nothing of
// it needs to be durable, else once the store has fsynced its record and
// every durable queue's entry for it.
func (c *Channel) route(msg *queue.Message, mandatory bool, headers []byte, extra []string) error {
	if msg.Exchange == "" && strings.HasPrefix(msg.RoutingKey, replyToQueue+".") {
		if !c.cfg.Replies.deliver(msg) && mandatory {
			c.returnMsg(msg)
		}
		c.confirmNow()
		return nil
	}
	c.scratch.RawHeaders = headers
	c.scratch.Extra = extra
	qs, err := c.cfg.VHost.Route(msg.Exchange, msg.RoutingKey, &c.scratch)
	if err != nil {
		return err
	}
	// A queue's confirm is awaited when it writes the message to the store
	// or may refuse it (x-overflow reject-publish).
	durable, waits := 0, 0
	for _, q := range qs {
		d := msg.Persistent && c.store != nil && q.Durable()
		if d {
			durable++
		}
		if d || (c.confirm && q.MayReject()) {
			waits++
		}
	}
	routed := false
	if waits == 0 {
		for _, q := range qs {
			if q.PublishConfirm(msg, nil, c.cfg.Flushes) {
				routed = true
			}
		}
		c.scratch.ResetSeen()
		if !routed && mandatory {
			c.returnMsg(msg)
		}
		c.confirmNow()
		return nil
	}
	var conf *pubConfirm
	if c.confirm {
		c.published++
		conf = &pubConfirm{c: c, tag: c.published}
		n := waits
		if durable > 1 {
			n++ // the shared record
		}
		conf.pending.Store(int32(n))
		c.trackConfirm(conf.tag)
	}
	if durable == 1 {
		// One durable queue: the record goes inside its entry, written by
		// the queue (one key per message instead of two).
		msg.ID = c.store.NewMessageID()
		msg.Inline = true
	}
	if durable > 1 {
		msg.ID = c.store.NewMessageID()
		msg.Shared = true
		w := &queue.Writes{}
		w.PutMessage(msg.ID, queue.EncodeMessage(msg))
		if conf != nil {
			c.store.Commit(w, conf.Done) // the record first: entries follow it
		} else {
			c.store.Commit(w, nil)
		}
	}
	for _, q := range qs {
		wait := (msg.Persistent && c.store != nil && q.Durable()) || (c.confirm && q.MayReject())
		if !wait || conf == nil {
			routed = q.PublishConfirm(msg, nil, c.cfg.Flushes) || routed
			continue
		}
		if q.PublishConfirm(msg, conf, c.cfg.Flushes) {
			routed = true
		} else {
			conf.Done(nil) // deleted meanwhile: as if not routed there
		}
	}
	c.scratch.ResetSeen()
	if !routed && mandatory {
		c.returnMsg(msg)
	}
	return nil
}

func (c *Channel) returnMsg(msg *queue.Message) {
	c.cfg.Sink.SendContent(c.cfg.Number, &amqp.BasicReturn{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE",
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}, msg.Props, msg.Body)
}

// --- publisher confirms ------------------------------------------------------

// pubConfirm waits for the store writes of one publish: its record and
// each durable queue's entry.
type pubConfirm struct {
	c       *Channel
	tag     uint64
	pending atomic.Int32
	failed  atomic.Bool
}

// Done is called (on the store's committer) as each write is durable.
func (p *pubConfirm) Done(err error) {
	if err != nil {
		p.failed.Store(true)
	}
	if p.pending.Add(-1) == 0 {
		p.c.settleConfirm(p.tag, !p.failed.Load())
	}
}

const (
	confPending byte = iota
	confAck
	confNack
)

// trackConfirm registers publish tag as awaiting its confirm.
func (c *Channel) trackConfirm(tag uint64) {
	c.cmu.Lock()
	if len(c.cstate) == 0 {
		c.cbase = tag
	}
	c.cstate = append(c.cstate, confPending)
	c.cmu.Unlock()
}

// confirmNow confirms the latest publish (nothing of it needed the store).
func (c *Channel) confirmNow() {
	if !c.confirm {
		return
	}
	c.published++
	c.cmu.Lock()
	if len(c.cstate) == 0 {
		// Nothing outstanding: due at once.
		c.cbase = c.published + 1
		c.readyUpTo = c.published
	} else {
		c.cstate = append(c.cstate, confAck)
	}
	c.cmu.Unlock()
	c.confirmsDue()
}

// confirmsDue has Flush run on the connection's writer before its next
// write, once for all the confirms that become due until it runs. This is
// the one way confirms go out, whether they became due on the reader
// (nothing to store) or on the store's committer (durable): the writer
// coalesces what is due when it gets to it into one basic.ack.
func (c *Channel) confirmsDue() {
	if !c.cdirty.Swap(true) {
		c.cfg.Sink.Schedule(c.Flush)
	}
}

// settleConfirm records the outcome of an asynchronous confirm and has it
// sent with the next write.
func (c *Channel) settleConfirm(tag uint64, ok bool) {
	c.cmu.Lock()
	if i := tag - c.cbase; tag >= c.cbase && i < uint64(len(c.cstate)) {
		if ok {
			c.cstate[i] = confAck
		} else {
			c.cstate[i] = confNack
		}
	}
	c.cmu.Unlock()
	c.confirmsDue()
}

// Flush sends the confirms that are due, in tag order: a run of acks as
// one basic.ack (multiple when it covers several), a failed publish as
// basic.nack. Safe from any goroutine: the writer runs it (confirmsDue),
// and the reader before it closes the channel, so that the confirms
// already earned go out before the close.
func (c *Channel) Flush() {
	if !c.cdirty.Swap(false) {
		return
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.cclosed {
		return // a hook that ran after Close: the number may be reused
	}
	upTo := c.readyUpTo
	i := 0
	for ; i < len(c.cstate) && c.cstate[i] != confPending; i++ {
		tag := c.cbase + uint64(i)
		if c.cstate[i] == confNack {
			c.sendAcks(upTo)
			c.send(&amqp.BasicNack{DeliveryTag: tag})
			c.ackedUpTo = tag
			upTo = tag
			continue
		}
		upTo = tag
	}
	c.cstate = c.cstate[:copy(c.cstate, c.cstate[i:])]
	c.cbase += uint64(i)
	c.readyUpTo = upTo
	c.sendAcks(upTo)
}

// sendAcks acknowledges every publish up to tag not yet acknowledged.
// c.cmu held.
func (c *Channel) sendAcks(tag uint64) {
	if tag <= c.ackedUpTo {
		return
	}
	c.send(&amqp.BasicAck{DeliveryTag: tag, Multiple: tag-c.ackedUpTo > 1})
	c.ackedUpTo = tag
}

func (c *Channel) commit() error {
	ops := c.txOps
	c.txOps = nil
	for _, op := range ops {
		if op.ack != nil {
			var err error
			switch a := op.ack.(type) {
			case *amqp.BasicAck:
				err = c.settle(a.DeliveryTag, a.Multiple, ackAck, false)
			case *amqp.BasicNack:
				err = c.settle(a.DeliveryTag, a.Multiple, ackReject, a.Requeue)
			case *amqp.BasicReject:
				err = c.settle(a.DeliveryTag, false, ackReject, a.Requeue)
			}
			if err != nil {
				return withMethod(err, op.ack)
			}
			continue
		}
		v, _ := amqp.ScanProperties(op.msg.Props)
		if err := c.route(op.msg, op.mand, v.Headers, op.extra); err != nil {
			return err
		}
	}
	return nil
}

// --- consumers -----------------------------------------------------------

func (c *Channel) qos(m *amqp.BasicQos) error {
	if m.PrefetchSize != 0 {
		return amqp.Errorf(amqp.NotImplemented, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	if m.Global {
		c.mu.Lock()
		c.globalPrefetch = int(m.PrefetchCount)
		kicks := c.kicksLocked()
		c.mu.Unlock()
		kick(kicks, c.cfg.Flushes)
	} else {
		c.prefetch = int(m.PrefetchCount)
	}
	c.send(&amqp.BasicQosOk{})
	return nil
}

func (c *Channel) consume(m *amqp.BasicConsume) error {
	if m.Queue == replyToQueue {
		return c.consumeReplies(m)
	}
	q, name, err := c.lookupQueue(m.Queue)
	if err != nil {
		return err
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = vhost.GenerateName("amq.ctag-")
	}
	c.mu.Lock()
	_, dup := c.consumers[tag]
	c.mu.Unlock()
	if dup || tag == c.replyTag && tag != "" {
		return amqp.Errorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
	}
	prio, err := consumerPriority(m.Arguments)
	if err != nil {
		return err
	}
	timeout, err := consumerTimeout(m.Arguments)
	if err != nil {
		return err
	}
	qc := &queue.Consumer{
		Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Priority: prio, Timeout: timeout,
		Sink: c, Out: c.cfg.Sink, Prefetch: c.prefetch,
	}
	qc.Hold() // consume-ok must reach the client before any delivery
	if err := q.Consume(qc); err != nil {
		if errors.Is(err, queue.ErrExclusiveConsumer) {
			return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", name, c.cfg.VHost.Name())
		}
		return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, c.cfg.VHost.Name())
	}
	c.mu.Lock()
	c.consumers[tag] = &consumer{Consumer: qc, q: q}
	c.mu.Unlock()
	if !m.NoWait {
		c.send(&amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	q.Kick(qc, c.cfg.Flushes)
	return nil
}

func consumerPriority(args amqp.Table) (int32, error) {
	v, ok := args["x-priority"]
	if !ok {
		return 0, nil
	}
	if n, ok := amqp.Int(v); ok {
		return int32(n), nil
	}
	return 0, precondition("invalid arg 'x-priority' for consumer: expected integer")
}

// consumerTimeout reads basic.consume's x-consumer-timeout (ms), which
// overrides the queue's and the broker's for this consumer's deliveries,
// as in RabbitMQ (rabbit_queue_type:consume).
func consumerTimeout(args amqp.Table) (time.Duration, error) {
	v, ok := args["x-consumer-timeout"]
	if !ok {
		return 0, nil
	}
	n, ok := amqp.Int(v)
	if !ok {
		return 0, precondition("invalid arg 'x-consumer-timeout' for consumer: expected integer")
	}
	if n < 0 {
		return 0, precondition("invalid arg 'x-consumer-timeout' for consumer: {value_negative,%d}", n)
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (c *Channel) cancel(m *amqp.BasicCancel) error {
	c.mu.Lock()
	cons := c.consumers[m.ConsumerTag]
	delete(c.consumers, m.ConsumerTag)
	isReply := m.ConsumerTag != "" && m.ConsumerTag == c.replyTag
	if isReply {
		c.replyTag = ""
	}
	c.mu.Unlock()
	if isReply {
		c.cfg.Replies.unregister(c.replyToken)
	}
	if cons != nil {
		cons.q.Cancel(cons.Consumer)
	}
	if !m.NoWait {
		c.send(&amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

// Deliver hands a message to one of this channel's consumers (called on
// the queue's goroutine). It refuses when the consumer or the channel is
// at its prefetch limit or the connection's outbound buffer is full.
func (c *Channel) Deliver(qc *queue.Consumer, q *queue.Queue, d queue.Delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if !qc.NoAck && ((qc.Prefetch > 0 && qc.Unacked >= qc.Prefetch) ||
		(c.globalPrefetch > 0 && c.globalUnacked >= c.globalPrefetch)) {
		qc.NeedKick, c.kickDue = true, true
		return false
	}
	if c.sinkFull {
		qc.NeedKick, c.kickDue = true, true
		if !c.waitingWrite {
			c.waitingWrite = true
			c.cfg.Sink.NotifyWritable(c.writable)
		}
		return false
	}
	c.nextTag++
	if !qc.NoAck {
		qc.Unacked++
		c.globalUnacked++
		c.track(q, qc, d)
	}
	c.deliver = amqp.BasicDeliver{ConsumerTag: qc.Tag, DeliveryTag: c.nextTag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey}
	props := d.Msg.Props
	if d.Count > 0 && q.CountsDeliveries() {
		props = withDeliveryCount(props, d.Count)
	}
	// The cap is checked after the append (one lock, not two, per
	// delivery): a channel may go one message over it.
	// The queue has the connection write it (qc.Out is the sink).
	c.sinkFull = c.cfg.Sink.AppendContent(c.cfg.Number, &c.deliver, props, d.Msg.Body)
	return true
}

// track records an unacked delivery with tag c.nextTag. c.mu held.
func (c *Channel) track(q *queue.Queue, qc *queue.Consumer, d queue.Delivery) {
	timeout := c.cfg.ConsumerTimeout
	if qt := q.Config().ConsumerTimeout; qt > 0 {
		timeout = qt
	}
	if qc != nil && qc.Timeout > 0 {
		timeout = qc.Timeout
	}
	if timeout < 0 {
		timeout = 0
	}
	if timeout > 0 && (c.minTimeout == 0 || timeout < c.minTimeout) {
		c.minTimeout = timeout
	}
	if c.outstanding == 0 {
		c.unacked = c.unacked[:0]
	}
	c.unacked = append(c.unacked, unacked{tag: c.nextTag, q: q, c: qc, d: d, at: time.Now().UnixNano(), timeout: timeout})
	c.outstanding++
}

// writable runs on the writer goroutine once the outbound buffer drained.
func (c *Channel) writable() {
	c.mu.Lock()
	c.waitingWrite, c.sinkFull = false, false
	kicks := c.kicksLocked()
	c.mu.Unlock()
	kick(kicks, nil)
}

type kickReq struct {
	q *queue.Queue
	c *queue.Consumer
}

// kicksLocked collects the consumers that were refused a delivery and may
// now take one. c.mu held.
func (c *Channel) kicksLocked() []kickReq {
	if !c.kickDue {
		return nil // no consumer was refused (one map walk less per ack)
	}
	c.kickDue = false
	var ks []kickReq
	for _, cons := range c.consumers {
		if cons.NeedKick {
			cons.NeedKick = false
			ks = append(ks, kickReq{cons.q, cons.Consumer})
		}
	}
	return ks
}

func kick(ks []kickReq, fl *queue.Flushes) {
	for _, k := range ks {
		k.q.Kick(k.c, fl)
	}
}

// Cancelled is called by a queue being deleted: the consumer is gone, and
// the client is told if it asked to be (consumer_cancel_notify).
func (c *Channel) Cancelled(qc *queue.Consumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.consumers[qc.Tag]; cur == nil || cur.Consumer != qc {
		return
	}
	delete(c.consumers, qc.Tag)
	if c.closed || !c.cfg.CancelNotify {
		return
	}
	c.send(&amqp.BasicCancel{ConsumerTag: qc.Tag, NoWait: true})
}

func (c *Channel) get(m *amqp.BasicGet) error {
	q, name, err := c.lookupQueue(m.Queue)
	if err != nil {
		return err
	}
	d, ok, remaining, err := q.Get(m.NoAck)
	if err != nil {
		return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, c.cfg.VHost.Name())
	}
	if !ok {
		c.send(&amqp.BasicGetEmpty{})
		return nil
	}
	c.mu.Lock()
	c.nextTag++
	if !m.NoAck {
		c.track(q, nil, d)
	}
	tag := c.nextTag
	c.mu.Unlock()
	props := d.Msg.Props
	if d.Count > 0 && q.CountsDeliveries() {
		props = withDeliveryCount(props, d.Count)
	}
	c.cfg.Sink.SendContent(c.cfg.Number, &amqp.BasicGetOk{DeliveryTag: tag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey, MessageCount: uint32(remaining)}, props, d.Msg.Body)
	return nil
}

// --- acknowledgements ----------------------------------------------------

type ackKind uint8

const (
	ackAck ackKind = iota
	ackReject
)

func (c *Channel) ack(m amqp.Method, tag uint64, multiple bool, kind ackKind, requeue bool) error {
	if c.tx {
		c.txOps = append(c.txOps, txOp{ack: cloneAck(m)})
		return nil
	}
	return c.settle(tag, multiple, kind, requeue)
}

func cloneAck(m amqp.Method) amqp.Method {
	switch a := m.(type) {
	case *amqp.BasicAck:
		x := *a
		return &x
	case *amqp.BasicNack:
		x := *a
		return &x
	case *amqp.BasicReject:
		x := *a
		return &x
	}
	return m
}

// batch groups settled deliveries by queue.
type batch struct {
	q  *queue.Queue
	ds []queue.Delivery
}

// settle acks, rejects or requeues delivery tag (and, with multiple, every
// earlier one; tag 0 with multiple means all).
func (c *Channel) settle(tag uint64, multiple bool, kind ackKind, requeue bool) error {
	c.mu.Lock()
	var one [1]batch // the common case, one queue, without an allocation
	bs := one[:0]
	add := func(u *unacked) {
		for i := range bs {
			if bs[i].q == u.q {
				bs[i].ds = append(bs[i].ds, u.d)
				return
			}
		}
		bs = append(bs, batch{q: u.q, ds: []queue.Delivery{u.d}})
	}
	// The tag itself must be outstanding, also with multiple (RabbitMQ's
	// collect_acks); multiple with tag 0 settles everything.
	i := sort.Search(len(c.unacked), func(i int) bool { return c.unacked[i].tag >= tag })
	if !(multiple && tag == 0) && (i == len(c.unacked) || c.unacked[i].tag != tag || c.unacked[i].done) {
		c.mu.Unlock()
		return precondition("unknown delivery tag %d", tag)
	}
	first, last := i, i
	if multiple {
		first = 0
		if tag == 0 {
			last = len(c.unacked) - 1
		}
	}
	for j := first; j <= last; j++ {
		if u := &c.unacked[j]; !u.done {
			c.release(u)
			add(u)
		}
	}
	c.compact()
	kicks := c.kicksLocked()
	c.mu.Unlock()
	for _, b := range bs {
		switch {
		case kind == ackAck:
			b.q.Ack(b.ds, c.cfg.Flushes)
		case requeue:
			b.q.Requeue(b.ds, c.cfg.Flushes)
		default:
			b.q.Discard(b.ds, c.cfg.Flushes)
		}
	}
	kick(kicks, c.cfg.Flushes)
	return nil
}

// release marks u settled and frees its prefetch slot. c.mu held.
func (c *Channel) release(u *unacked) {
	u.done = true
	c.outstanding--
	if u.c != nil {
		u.c.Unacked--
		c.globalUnacked--
	}
}

// compact drops settled entries from the front. c.mu held.
func (c *Channel) compact() {
	i := 0
	for i < len(c.unacked) && c.unacked[i].done {
		c.unacked[i] = unacked{}
		i++
	}
	if i == 0 {
		return
	}
	if i == len(c.unacked) {
		c.unacked = c.unacked[:0]
		return
	}
	if i > len(c.unacked)/2 {
		n := copy(c.unacked, c.unacked[i:])
		c.unacked = c.unacked[:n]
	} else {
		c.unacked = c.unacked[i:]
	}
}

// takeAllLocked removes every unacked delivery, grouped by queue in tag
// order. c.mu held.
func (c *Channel) takeAllLocked() []batch {
	var bs []batch
	for i := range c.unacked {
		u := &c.unacked[i]
		if u.done {
			continue
		}
		c.release(u)
		found := false
		for j := range bs {
			if bs[j].q == u.q {
				bs[j].ds = append(bs[j].ds, u.d)
				found = true
				break
			}
		}
		if !found {
			bs = append(bs, batch{q: u.q, ds: []queue.Delivery{u.d}})
		}
	}
	c.unacked = c.unacked[:0]
	return bs
}

// requeueAll returns every unacked delivery to its queue (basic.recover).
func (c *Channel) requeueAll() {
	c.mu.Lock()
	bs := c.takeAllLocked()
	kicks := c.kicksLocked()
	c.mu.Unlock()
	for _, b := range bs {
		b.q.Requeue(b.ds, c.cfg.Flushes)
	}
	kick(kicks, c.cfg.Flushes)
}

// TimedOut reports whether a delivery has stayed unacked past its
// consumer timeout, and the timeout it exceeded. Safe from any goroutine;
// it looks only at deliveries old enough to have expired.
func (c *Channel) TimedOut(now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outstanding == 0 || c.minTimeout == 0 || c.closed {
		return 0, false
	}
	n := now.UnixNano()
	for i := range c.unacked {
		u := &c.unacked[i]
		if n-u.at < int64(c.minTimeout) {
			break // later deliveries are younger still
		}
		if !u.done && u.timeout > 0 && n-u.at >= int64(u.timeout) {
			return u.timeout, true
		}
	}
	return 0, false
}

// Close releases the channel: its consumers are cancelled, then its
// unacked deliveries go back to their queues flagged redelivered.
func (c *Channel) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.cmu.Lock()
	c.cclosed = true
	c.cmu.Unlock()
	cons := make([]*consumer, 0, len(c.consumers))
	for _, x := range c.consumers {
		cons = append(cons, x)
	}
	c.consumers = map[string]*consumer{}
	bs := c.takeAllLocked()
	token := c.replyToken
	c.mu.Unlock()
	if token != "" {
		c.cfg.Replies.unregister(token)
	}
	for _, b := range bs {
		b.q.Requeue(b.ds, nil)
	}
	for _, x := range cons {
		x.q.Cancel(x.Consumer)
	}
}
