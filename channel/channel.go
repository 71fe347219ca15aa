package channel

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
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
	Number uint16
	Sink   FrameSink
	VHost  *vhost.VHost
	ConnID uint64
	User   string
	// ConnName is the connection's name as RabbitMQ gives it, "peer ->
	// local" (trace copies carry it: trace.go).
	ConnName string
	// Grant is the user's rights in VHost, checked where RabbitMQ checks
	// them (access.go); nil allows everything.
	Grant *auth.Grant
	// Impersonator: the user has the impersonator tag, and may publish
	// with another user's user_id (RabbitMQ's check_user_id_header).
	Impersonator    bool
	MaxMessageSize  uint64
	ConsumerTimeout time.Duration // broker default; negative disables
	// CancelNotify is the client's consumer_cancel_notify capability.
	CancelNotify bool
	Replies      *ReplyRegistry
	Logger       *zap.Logger
	// Flushes collects what the reader's publishes and acks delivered
	// (to any connection) for it to flush after its read batch. Its At,
	// when not zero, is the time of the reader's last read: messages are
	// stamped with it (queue.Message.Enqueued), not with a clock read each.
	Flushes *queue.Flushes
	// Memory is the broker's count of bytes held for clients, the one its
	// memory alarm compares with the watermark (queues add their bodies
	// to it). The channel adds what it holds itself: the content being
	// assembled and uncommitted transactions (publish.go). Nil: a count of
	// the channel's own.
	Memory *atomic.Int64
	// Totals counts publishes, deliveries, acks and confirms for the
	// broker's metrics (nil: counted for nobody).
	Totals *queue.Totals
}

// Channel is one AMQP channel. HandleMethod, HandleContent and Close are
// called only from the connection's reader goroutine, which owns the
// fields above cmu. Flush runs on the writer (and on the reader before a
// close) under cmu. Deliver and Cancelled are called by queues (doc.go)
// and take mu.
// TakeFlow returns (and forgets) a queue that a publish on this channel
// found Behind, or nil. The connection's reader calls it after content
// and waits for the queue to catch up before it reads on: per-connection
// flow control, as RabbitMQ's credit flow.
func (c *Channel) TakeFlow() *queue.Queue {
	q := c.flowQ
	c.flowQ = nil
	return q
}

type Channel struct {
	cfg Config

	// For Info, which any goroutine calls: the confirm mode and the
	// prefetch for new consumers, as the reader sets them.
	confirmA  atomic.Bool
	prefetchA atomic.Int32

	// The last publish's exchange allowed, and by which permission
	// (access.go).
	pubExchange string
	pubPerm     *auth.Permission

	// Content assembly (publish.go). Until the first body frame the
	// properties wait in props (in hdr, reused, when small); from then on
	// buf holds the properties (plen bytes) and the body received so far,
	// grown as its frames arrive, never to the declared size up front.
	pub      *amqp.BasicPublish // the publish awaiting content (points at pubBuf)
	pubBuf   amqp.BasicPublish
	hdr      []byte
	props    []byte
	buf      []byte
	plen     int
	bodySize uint64 // as the header declared it
	assembly uint8  // 0 idle, 1 expecting header, 2 expecting body
	// asmHeld and txHeld are what the channel has added to cfg.Memory for
	// the content being assembled and for txOps.
	asmHeld int64
	txHeld  int64

	// Publishing.
	confirm   bool
	published uint64 // publish sequence number in confirm mode
	tx        bool
	txOps     []txOp
	scratch   vhost.Scratch
	lastQueue string
	publisher bool // has published: counted in Publishers until closed
	prefetch  int  // for consumers created from now on (global=false)
	// flowQ is a queue this channel published into that was Behind: the
	// connection stops reading until it catches up (TakeFlow).
	flowQ *queue.Queue
	// dedupConf is the confirm newConfirmDedup made for the publish being
	// routed (the reader's).
	dedupConf queue.Confirmer

	store queue.Store // nil when nothing is durable

	counts *queue.Counts // the metrics' shard of this channel's connection
	stats  Stats         // the channel's own counts (stats.go)

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
	replicated     bool      // had a delivery from a Replicated queue (AckWait)
	globalPrefetch int
	globalUnacked  int
	minTimeout     time.Duration
	waitingWrite   bool
	sinkFull       bool              // the connection's outbound buffer was over its cap at our last delivery
	kickDue        bool              // some consumer's NeedKick may be set
	deliver        amqp.BasicDeliver // reused: one per delivery would allocate
	holdCancels    bool              // a queue.delete is under way: Cancelled holds its basic.cancel
	heldCancels    []string          // consumer tags whose basic.cancel waits for the delete-ok
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
	lease   int64         // the deadline amq.railmq.lease set (unix nanos); 0: at + timeout (lease.go)
	done    bool
	// returned: a consumer timeout gave it back to its queue
	// (timeout.go); the client may still ack it, which goes nowhere.
	returned bool
}

// New opens a channel.
func New(cfg Config) *Channel {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Memory == nil {
		cfg.Memory = new(atomic.Int64)
	}
	if cfg.Totals == nil {
		cfg.Totals = new(queue.Totals)
	}
	c := &Channel{
		cfg:       cfg,
		consumers: make(map[string]*consumer),
	}
	c.counts = cfg.Totals.Shard(cfg.ConnID)
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
		return c.ack(m, m.DeliveryTag, m.Multiple, ackNack, m.Requeue)
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
		if m.Exchange != "" && !strings.HasPrefix(m.Exchange, "amq.") { // those refused first, below
			if err := c.allow(auth.Configure, "exchange", m.Exchange); err != nil {
				return err
			}
		}
		return c.answer(c.cfg.VHost.DeleteExchange(m.Exchange, m.IfUnused), m.NoWait, &amqp.ExchangeDeleteOk{})
	case *amqp.ExchangeBind:
		if err := c.allowBinding("exchange", m.Destination, m.Source, m.RoutingKey); err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Bind(c.cfg.ConnID, m.Destination, true, m.Source, m.RoutingKey, m.Arguments), m.NoWait, &amqp.ExchangeBindOk{})
	case *amqp.ExchangeUnbind:
		if err := c.allowBinding("exchange", m.Destination, m.Source, m.RoutingKey); err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Unbind(c.cfg.ConnID, m.Destination, true, m.Source, m.RoutingKey, m.Arguments), m.NoWait, &amqp.ExchangeUnbindOk{})
	case *amqp.QueueDeclare:
		return c.queueDeclare(m)
	case *amqp.QueueBind:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		if err := c.allowBinding("queue", name, m.Exchange, m.RoutingKey); err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Bind(c.cfg.ConnID, name, false, m.Exchange, m.RoutingKey, m.Arguments), m.NoWait, &amqp.QueueBindOk{})
	case *amqp.QueueUnbind:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		if err := c.allowBinding("queue", name, m.Exchange, m.RoutingKey); err != nil {
			return err
		}
		return c.answer(c.cfg.VHost.Unbind(c.cfg.ConnID, name, false, m.Exchange, m.RoutingKey, m.Arguments), false, &amqp.QueueUnbindOk{})
	case *amqp.QueuePurge:
		q, name, err := c.lookupQueueFor(auth.Read, m.Queue)
		if err != nil {
			return err
		}
		n, err := q.Purge()
		if err != nil {
			return c.queueGone(err, name)
		}
		return c.answer(nil, m.NoWait, &amqp.QueuePurgeOk{MessageCount: uint32(n)})
	case *amqp.QueueDelete:
		name, err := c.queueName(m.Queue)
		if err != nil {
			return err
		}
		if err := c.allow(auth.Configure, "queue", name); err != nil {
			return err
		}
		// The queue cancels its consumers as it goes, this channel's among
		// them: their basic.cancel follows the delete-ok, as from RabbitMQ
		// (its queue tells the channel by a message handled after the
		// delete), and clients such as amqplib close the channel on the
		// cancel, expecting no reply after it.
		c.mu.Lock()
		c.holdCancels = true
		c.mu.Unlock()
		n, err := c.cfg.VHost.DeleteQueue(c.cfg.ConnID, name, m.IfUnused, m.IfEmpty)
		c.mu.Lock()
		c.holdCancels = false
		held := c.heldCancels
		c.heldCancels = nil
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if !m.NoWait {
			c.send(&amqp.QueueDeleteOk{MessageCount: uint32(n)})
		}
		for _, tag := range held {
			c.send(&amqp.BasicCancel{ConsumerTag: tag, NoWait: true})
		}
		return nil
	case *amqp.TxSelect:
		if c.confirm {
			return precondition("cannot switch from confirm to tx mode")
		}
		c.tx = true
		c.stats.Transactional.Store(true)
		c.send(&amqp.TxSelectOk{})
		return nil
	case *amqp.TxCommit:
		if !c.tx {
			return precondition("channel is not transactional")
		}
		if err := c.commitTx(); err != nil {
			return err
		}
		c.send(&amqp.TxCommitOk{})
		return nil
	case *amqp.TxRollback:
		if !c.tx {
			return precondition("channel is not transactional")
		}
		c.dropTx()
		c.send(&amqp.TxRollbackOk{})
		return nil
	case *amqp.ConfirmSelect:
		if c.tx {
			return precondition("cannot switch from tx to confirm mode")
		}
		c.confirm = true
		c.confirmA.Store(true)
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

// lookupQueueFor finds the queue a method names (the empty name meaning
// the last declared one) once op on it is allowed: 403 if not, 404 if
// missing, 405 if another connection owns it.
func (c *Channel) lookupQueueFor(op auth.Op, name string) (*queue.Queue, string, error) {
	name, err := c.queueName(name)
	if err != nil {
		return nil, "", err
	}
	if err := c.allow(op, "queue", name); err != nil {
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
		AutoDelete: m.AutoDelete, Internal: m.Internal, Args: m.Arguments, Grant: c.cfg.Grant,
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
		AutoDelete: m.AutoDelete, Args: m.Arguments, Owner: c.cfg.ConnID, Grant: c.cfg.Grant,
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

// Close releases the channel: the content it was assembling and its
// uncommitted transaction are dropped, its unacked deliveries go back to
// their queues flagged redelivered and its consumers are cancelled.
func (c *Channel) Close() {
	c.dropAssembly()
	c.dropTx()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if c.publisher {
		c.counts.Publishers.Add(-1)
	}
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
	// A replicated queue's consumers are cancelled first: a return
	// applied before the cancel would check the messages out to the
	// closing consumer again, and a restart before that went back would
	// count them returned twice (x-delivery-count). A classic queue's are
	// cancelled after: its closed consumer takes nothing more, and the
	// returned messages are at the head before another consumer is served.
	for _, x := range cons {
		if x.q.Replicated() {
			x.q.Cancel(x.Consumer)
		}
	}
	for _, b := range bs {
		b.q.Requeue(b.ds, nil)
	}
	for _, x := range cons {
		if !x.q.Replicated() {
			x.q.Cancel(x.Consumer)
		}
	}
}

// ConsumerInfo is what the management API shows of a consumer.
type ConsumerInfo struct {
	Tag       string
	Queue     string
	NoAck     bool
	Exclusive bool
	Prefetch  int
	Args      amqp.Table // basic.consume's arguments
}

// ChannelInfo is what the management API shows of a channel.
type ChannelInfo struct {
	Consumers                []ConsumerInfo
	Unacked, Unconfirmed     int
	Prefetch, GlobalPrefetch int
	Confirm                  bool
	Stats                    StatsSnapshot // the channel's message counts (stats.go)
}

// Info is what the management API shows of the channel: its consumers,
// its unacked deliveries and unconfirmed publishes, its prefetch and
// confirm mode. Any goroutine may call it.
func (c *Channel) Info() ChannelInfo {
	c.mu.Lock()
	in := ChannelInfo{Unacked: c.outstanding, GlobalPrefetch: c.globalPrefetch,
		Prefetch: int(c.prefetchA.Load()), Confirm: c.confirmA.Load()}
	for _, x := range c.consumers {
		in.Consumers = append(in.Consumers, ConsumerInfo{Tag: x.Tag, Queue: x.q.Name(), NoAck: x.NoAck, Exclusive: x.Exclusive, Prefetch: x.Prefetch, Args: x.Args})
	}
	c.mu.Unlock()
	c.cmu.Lock()
	in.Unconfirmed = len(c.cstate)
	c.cmu.Unlock()
	in.Stats = c.stats.Snapshot()
	return in
}
