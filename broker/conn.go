package broker

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/channel"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// conn is one client connection. Its reader goroutine (run) owns the
// protocol state and the channels; its writer goroutine owns the socket's
// write side. They share only the outbound buffer (outMu).
type conn struct {
	srv *Server
	nc  net.Conn
	io  *sockIO // nc's reads and writes
	log connLogger
	id  uint64

	br  *bufio.Reader
	fr  *amqp.FrameReader
	dec amqp.Decoder

	// outMu guards out, outClosed, inflight, waiters and hooks. Held only
	// to append or swap the buffer, never across I/O.
	outMu     sync.Mutex
	out       []byte
	outClosed bool
	inflight  int           // bytes the writer is writing now
	waiters   []func()      // to call when the outbound bytes drop under the cap
	hooks     []func()      // to call before the next write (FrameSink.Schedule)
	wake      chan struct{} // one slot: the writer has work
	tuned     chan struct{} // closed once frameMax and heartbeat are final
	writerEnd chan struct{} // closed when the last writer has exited
	// writerOn is set while a writer goroutine runs (signal starts one),
	// and for good once the last one exited.
	writerOn     atomic.Bool
	wroteTraffic atomic.Bool // the writer wrote since the last heartbeat tick
	hbTimer      *time.Timer // heartbeatTick, once tuned; outMu guards Reset and Stop
	// wmu is held to write the socket: by the writer, or by a reader
	// flushing inline (Flush). It guards spare, rest and restBuf.
	wmu         sync.Mutex
	spare       []byte // the second buffer, swapped with out
	rest        []byte // what an inline flush left unwritten, first in line
	restBuf     []byte // rest's whole buffer
	wroteInline atomic.Bool

	// Negotiated at tune-ok; read-only after the handshake.
	channelMax uint16
	frameMax   uint32
	heartbeat  time.Duration
	mechanism  string // the client's SASL mechanism (start-ok)

	user       string
	vhost      string
	clientCaps amqp.Table
	props      amqp.Table // client properties (connlog.go)
	clientName string     // the client-provided name, connection_name (connlog.go)

	channels map[uint16]*channel.Channel
	// lastN and lastCh are the channel the reader last looked up (see
	// channel): nil once it is removed.
	lastN  uint16
	lastCh *channel.Channel
	// closingChans are channels we sent channel.close on and whose
	// close-ok has not come yet: their other frames are dropped (§4.2.4.1).
	closingChans map[uint16]struct{}

	// closing is set once we sent connection.close: from then on only
	// close and close-ok are read. closeDeadline bounds the wait.
	closing       atomic.Bool
	closeDeadline atomic.Int64 // unix nanos; 0 = none
	closeReason   atomic.Value // string

	// lingerFor is how long teardown keeps reading before it closes the
	// socket (reader-owned); lingering is set while it does, for Shutdown.
	lingerFor   time.Duration
	silentClose bool // a refused login: teardown closes after silentCloseDelay
	lingering   atomic.Bool
	released    bool // channels and exclusive queues released (reader-owned)

	// The read deadline the reader last set (unix nanos, 0 = none), if
	// rdlSet: reader-owned.
	rdl    int64
	rdlSet bool

	vh        *vhost.VHost
	authUser  *auth.User   // set by the handshake
	grant     *auth.Grant  // the user's rights in vh
	direct    bool         // a shovel's local connection (shovels.go): no password, every permission
	nchan     atomic.Int32 // channels open (user max-channels)
	fullReads int          // reads that filled the read buffer (for its size)
	push      pushState    // push-mode reading (push.go)
	coal      ackCoalescer // ack coalescing (lowat.go), reader-owned
	// lowatRaised: the reader raised the socket's low-water mark, and
	// no delivery or deadline has lowered it since (lowat.go).
	lowatRaised atomic.Bool
	lowatGen    atomic.Uint64    // raises so far: a write pokes only for one before it (lowat.go)
	lowatRoom   atomic.Int64     // deliveries the raise left room for; a write past them pokes (lowat.go)
	pokeFn      func(fd uintptr) // c.poke, bound once
	flushes     queue.Flushes    // outlets this reader delivered to
	published   bool             // published since the last look at the alarms
	flowQ       *queue.Queue     // a queue published into that is behind (waitFlow)
	floor       paceFloor        // the least a paced connection is read (flow.go)

	// Requests from other goroutines for the reader (consumer timeouts):
	// queued under reqMu, flagged in reqFlag, and the reader is woken by a
	// read deadline in the past.
	reqMu   sync.Mutex
	reqs    []func()
	reqFlag atomic.Bool

	info    atomic.Pointer[connInfo] // for the admin API (admin.go), once open
	blocked atomic.Bool              // not read for an alarm (blockWhileAlarm)
	flowAt  atomic.Int64             // when waitFlow last began (Unix ns): the "flow" state

	// snapMu guards snap, the channels as the sweeper may see them.
	snapMu sync.Mutex
	snap   map[uint16]*channel.Channel
}

func newConn(s *Server, nc net.Conn, id uint64) *conn {
	c := &conn{
		srv:          s,
		nc:           nc,
		io:           newSockIO(nc),
		id:           id,
		log:          connLogger{base: s.log, id: id, remote: nc.RemoteAddr()},
		wake:         make(chan struct{}, 1),
		tuned:        make(chan struct{}),
		writerEnd:    make(chan struct{}),
		channels:     make(map[uint16]*channel.Channel),
		closingChans: make(map[uint16]struct{}),
		snap:         make(map[uint16]*channel.Channel),
	}
	// A small read buffer while the connection is idle (most of them are);
	// readLoop swaps in a large one once it carries traffic.
	c.br = bufio.NewReaderSize(deadlineReader{c}, 2<<10)
	c.fr = amqp.NewFrameReader(c.br)
	c.push.step = c.pushStep
	c.pokeFn = c.poke
	return c
}

func (c *conn) serve() {
	defer c.srv.forget(c)
	err := c.handshake()
	if err != nil && c.lingerFor == 0 && !isTimeout(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errProbe) {
		// A refused handshake: let the client read why before we close.
		c.lingerFor = shortLinger
	}
	if err == nil {
		c.logGranted() // connlog.go
		err = c.readLoop()
	}
	c.teardown(err)
}

// teardown closes every channel (requeueing their unacked deliveries),
// flushes what is queued for the client, lingers (see linger) and closes
// the socket.
func (c *conn) teardown(err error) {
	c.flushes.Flush()
	c.release()
	c.stopWriter()
	reason := "client closed connection"
	if r, ok := c.closeReason.Load().(string); ok {
		reason = r
	}
	if err != nil && !errors.Is(err, errClientClosed) {
		reason = err.Error()
	}
	c.logClosed(err, reason) // connlog.go
	c.br, c.fr = nil, nil    // what the client still sends is discarded unread
	if c.silentClose {
		// A refused login: the socket waits out RabbitMQ's delay on a
		// timer, and this goroutine (and the writer) are gone now.
		c.srv.delayed.add(c.nc, silentCloseDelay)
		return
	}
	c.linger(c.lingerFor)
	c.nc.Close()
}

// release closes every channel (requeueing their unacked deliveries) and
// deletes the connection's exclusive queues, once. RabbitMQ does both
// before it sends close-ok to a client's connection.close.
func (c *conn) release() {
	if c.released {
		return
	}
	c.released = true
	c.closeAllChannels()
	if c.vh != nil {
		c.vh.ConnectionClosed(c.id)
	}
}

// connLogger adds the connection's fields to each line at the time it is
// logged, rather than holding a child logger (with its own encoder
// buffer) per connection: most connections log two lines in their life.
type connLogger struct {
	base   *zap.Logger
	id     uint64
	remote net.Addr
}

func (l connLogger) fields(f []zap.Field) []zap.Field {
	return append([]zap.Field{zap.Uint64("conn", l.id), zap.Stringer("remote", l.remote)}, f...)
}

func (l connLogger) Debug(msg string, f ...zap.Field) {
	if ce := l.base.Check(zap.DebugLevel, msg); ce != nil {
		ce.Write(l.fields(f)...)
	}
}
func (l connLogger) Info(msg string, f ...zap.Field)  { l.base.Info(msg, l.fields(f)...) }
func (l connLogger) Warn(msg string, f ...zap.Field)  { l.base.Warn(msg, l.fields(f)...) }
func (l connLogger) Error(msg string, f ...zap.Field) { l.base.Error(msg, l.fields(f)...) }
