package broker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/channel"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// closeOkTimeout bounds how long a connection waits for the client's
// connection.close-ok after sending connection.close.
const closeOkTimeout = 3 * time.Second

// How long a connection that is done keeps reading (and discarding) what
// the client still sends before the socket is closed; see linger.
const (
	// closingTimeout bounds the wait for the client to close its end
	// after we answered its connection.close: RabbitMQ's CLOSING_TIMEOUT
	// (rabbit_reader), or the negotiated heartbeat when that is shorter.
	closingTimeout = 30 * time.Second
	// shortLinger is for the other orderly ends: after the client's
	// close-ok to our connection.close, and after a refused handshake, a
	// client that has what it needs closes at once; this only keeps its
	// last frames from turning our close into a RST.
	shortLinger = time.Second
)

// maxOutbound caps a connection's unsent bytes; past it, queues stop
// delivering to this connection's consumers until the writer catches up.
const maxOutbound = 4 << 20

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
	writerEnd chan struct{} // closed when the writer has exited
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

	user       string
	vhost      string
	clientCaps amqp.Table

	channels map[uint16]*channel.Channel
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
	lingerFor time.Duration
	lingering atomic.Bool
	released  bool // channels and exclusive queues released (reader-owned)

	// The read deadline the reader last set (unix nanos, 0 = none), if
	// rdlSet: reader-owned.
	rdl    int64
	rdlSet bool

	vh        *vhost.VHost
	busy      int           // read batches so far (for the read buffer size)
	flushes   queue.Flushes // outlets this reader delivered to
	published bool          // has published: blocked by the memory alarm

	// Requests from other goroutines for the reader (consumer timeouts):
	// queued under reqMu, flagged in reqFlag, and the reader is woken by a
	// read deadline in the past.
	reqMu   sync.Mutex
	reqs    []func()
	reqFlag atomic.Bool

	info atomic.Pointer[connInfo] // for the management API, once open

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
	return c
}

// deadlineReader sets the socket's read deadline before reads from the
// kernel (not per frame): the handshake timeout, then silentLimit, and
// never past the close deadline. A heartbeat deadline is
// re-armed only once it has moved by a slack, which spares a timer update
// per read.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	c := d.c
	c.flushes.Flush() // before waiting for input, write what we delivered
	for {
		if c.runRequests() {
			c.rdlSet = false // post moved the deadline
		}
		now := time.Now().UnixNano()
		var dl int64 // unix nanos; 0 = none
		if c.heartbeat > 0 {
			dl = now + int64(silentLimit(c.heartbeat))
		}
		cd := c.closeDeadline.Load()
		if cd != 0 && (dl == 0 || cd < dl) {
			dl = cd
		}
		// Keep a heartbeat deadline between silentLimit and a slack
		// from now: it is set a slack later than needed, so the reads
		// within the slack keep it. Anything else is set every time.
		slack := int64(c.heartbeat / 4)
		rearm := !c.rdlSet || cd != 0
		if !rearm {
			if dl == 0 {
				rearm = c.rdl != 0
			} else {
				rearm = c.rdl == 0 || c.rdl < dl || c.rdl > dl+slack
			}
		}
		if rearm {
			if cd == 0 && dl != 0 {
				dl += slack
			}
			var t time.Time
			if dl != 0 {
				t = time.Unix(0, dl)
			}
			if err := c.nc.SetReadDeadline(t); err != nil {
				return 0, err
			}
			c.rdl, c.rdlSet = dl, true
		}
		if c.reqFlag.Load() {
			continue // posted after runRequests: serve it before blocking
		}
		n, err := c.io.Read(p)
		if n == 0 && err != nil && isTimeout(err) {
			if c.reqFlag.Load() {
				continue // woken to serve a request, not a real timeout
			}
			if c.rdl != 0 && time.Now().UnixNano() < c.rdl {
				// A post's wake-up that lost the race with our deadline.
				c.rdlSet = false
				continue
			}
		}
		return n, err
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// post queues fn to run on the reader goroutine and wakes the reader.
func (c *conn) post(fn func()) {
	c.reqMu.Lock()
	c.reqs = append(c.reqs, fn)
	c.reqMu.Unlock()
	c.wakeReader()
}

// wakeReader has the reader run its requests and re-arm its read
// deadline: the flag first, then a deadline in the past, so that a reader
// which checked the flag before it was set is woken by the deadline.
func (c *conn) wakeReader() {
	c.reqFlag.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

// runRequests runs what post queued; it reports whether there was any.
func (c *conn) runRequests() bool {
	if !c.reqFlag.Load() {
		return false
	}
	c.reqMu.Lock()
	reqs := c.reqs
	c.reqs = nil
	c.reqFlag.Store(false)
	c.reqMu.Unlock()
	for _, fn := range reqs {
		fn()
	}
	return true
}

// checkTimeouts closes (through the reader) each channel holding a
// delivery past its consumer timeout. Called by the server's sweeper.
func (c *conn) checkTimeouts(now time.Time) {
	c.snapMu.Lock()
	type hit struct {
		n  uint16
		ch *channel.Channel
		t  time.Duration
	}
	var hits []hit
	for n, ch := range c.snap {
		if t, ok := ch.TimedOut(now); ok {
			hits = append(hits, hit{n, ch, t})
		}
	}
	c.snapMu.Unlock()
	for _, h := range hits {
		c.post(func() {
			if c.channels[h.n] != h.ch || c.closing.Load() {
				return
			}
			c.log.Warn("consumer timeout: closing channel", zap.Uint16("channel", h.n), zap.Duration("timeout", h.t))
			c.closeChannel(h.n, amqp.Errorf(amqp.PreconditionFailed,
				"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
					"This timeout value can be configured, see consumers doc guide to learn more", h.n, h.t.Milliseconds()))
		})
	}
}

// silentLimit is how long a client may stay silent before it is dropped
// for missed heartbeats, less the deadline's slack (a quarter interval),
// so that the drop comes 2¾ to 3 intervals after the last byte read.
// RabbitMQ checks every interval and drops at the second check in a row
// that saw nothing, 2 to 3 intervals after the last byte: a client it
// keeps (a pika application blocked for 2½ intervals) railmq keeps too.
func silentLimit(hb time.Duration) time.Duration { return 11 * hb / 4 }

// errHeartbeat is a peer that stayed silent past silentLimit.
var errHeartbeat = errors.New("missed heartbeats from client, timeout")

func (c *conn) serve() {
	defer c.srv.forget(c)
	go c.writeLoop()
	err := c.handshake()
	if err != nil && c.lingerFor == 0 && !isTimeout(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		// A refused handshake: let the client read why before we close.
		c.lingerFor = shortLinger
	}
	if err == nil {
		c.log.Info("connection opened", zap.String("user", c.user), zap.String("vhost", c.vhost))
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
	if c.user != "" || err == nil {
		c.log.Info("connection closed", zap.String("user", c.user), zap.String("vhost", c.vhost), zap.String("reason", reason))
	} else {
		c.log.Warn("connection closed during handshake", zap.String("reason", reason))
	}
	c.br, c.fr = nil, nil // what the client still sends is discarded unread
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

// linger reads and discards whatever the client still sends until it
// closes its end (EOF), d passes, or the broker shuts down. It never
// half-closes first. Closing a socket with unread input makes the kernel
// answer with a RST, and a client that is still writing when it sent its
// connection.close (frames buffered behind it) would then lose our
// close-ok; a client told EOF before it closed reports an error. So, as
// RabbitMQ does in its closed state, the broker waits for the client to
// close first.
func (c *conn) linger(d time.Duration) {
	if d <= 0 {
		return
	}
	c.lingering.Store(true)
	defer c.lingering.Store(false)
	deadline := time.Now().Add(d)
	buf := make([]byte, 4<<10)
	for {
		if err := c.nc.SetReadDeadline(deadline); err != nil {
			return
		}
		select {
		case <-c.srv.stop: // after the deadline was set: see endLinger
			return
		default:
		}
		if _, err := c.io.Read(buf); err != nil {
			return // EOF, the deadline, or a reset
		}
	}
}

// endLinger cuts a linger short (Shutdown, after closing srv.stop).
func (c *conn) endLinger() {
	if c.lingering.Load() {
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// clientClosingTimeout is how long to wait for the client to close its
// end after answering its connection.close: the negotiated heartbeat
// when it is shorter than closingTimeout, as RabbitMQ's close_connection.
func (c *conn) clientClosingTimeout() time.Duration {
	if c.heartbeat > 0 && c.heartbeat < closingTimeout {
		return c.heartbeat
	}
	return closingTimeout
}

// errClientClosed is the normal end: the client sent connection.close (or
// answered ours).
var errClientClosed = errors.New("client closed connection")

// --- writing -------------------------------------------------------------

// SendMethod queues a method frame (channel.FrameSink).
func (c *conn) SendMethod(ch uint16, m amqp.Method) {
	c.outMu.Lock()
	if !c.outClosed {
		c.out = amqp.AppendMethodFrame(c.out, ch, m)
	}
	c.outMu.Unlock()
	c.signal()
}

// SendContent queues a method with its content header and body frames,
// so they go out in one flush, and reports whether the bytes queued and
// being written are now over the cap (channel.FrameSink).
func (c *conn) SendContent(ch uint16, m amqp.Method, props, body []byte) (full bool) {
	full = c.AppendContent(ch, m, props, body)
	c.signal()
	return full
}

// AppendContent is SendContent without waking the writer: a queue has
// the bytes written after its batch (channel.FrameSink, queue.Outlet).
func (c *conn) AppendContent(ch uint16, m amqp.Method, props, body []byte) (full bool) {
	c.outMu.Lock()
	if !c.outClosed {
		c.out = amqp.AppendMethodFrame(c.out, ch, m)
		c.out = amqp.AppendContent(c.out, ch, amqp.ClassBasic, props, body, c.frameMax)
		full = len(c.out)+c.inflight >= maxOutbound
	}
	c.outMu.Unlock()
	return full
}

// Schedule calls fn from the writer before its next write
// (channel.FrameSink).
func (c *conn) Schedule(fn func()) {
	c.outMu.Lock()
	c.hooks = append(c.hooks, fn)
	c.outMu.Unlock()
	c.signal()
}

// NotifyWritable calls fn once the outbound bytes fall under the cap
// (channel.FrameSink). It runs on the writer goroutine.
func (c *conn) NotifyWritable(fn func()) {
	c.outMu.Lock()
	c.waiters = append(c.waiters, fn)
	c.outMu.Unlock()
	c.signal()
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes whatever is queued, one write per batch, and a
// heartbeat whenever a half interval passed with nothing written.
func (c *conn) writeLoop() {
	defer close(c.writerEnd)
	var tick <-chan time.Time
	tuned := c.tuned
	var hb time.Duration // c.heartbeat, once tuned
	wrote := false
	for {
		counts := true // whether this round's write counts as traffic
		select {
		case <-tuned:
			tuned = nil
			if hb = c.heartbeat; hb > 0 {
				ticker := time.NewTicker(hb / 2)
				defer ticker.Stop()
				tick = ticker.C
			}
			continue
		case <-c.wake:
		case <-tick:
			// A heartbeat every half interval in which nothing else went
			// out, as RabbitMQ's heartbeater: clients count two silent
			// intervals as a dead peer, so a full interval would leave no
			// margin. The heartbeat itself does not count as traffic.
			if inline := c.wroteInline.Swap(false); !wrote && !inline {
				c.outMu.Lock()
				if !c.outClosed && len(c.out) == 0 {
					c.out = amqp.AppendHeartbeat(c.out)
				}
				c.outMu.Unlock()
			}
			wrote, counts = false, false
		}
		c.wmu.Lock()
		w, ok := c.writeOut(hb)
		c.wmu.Unlock()
		wrote = wrote || (w && counts)
		if !ok {
			return
		}
	}
}

// writeOut is one round of the writer: the scheduled hooks, then what is
// left of an inline flush, then everything queued. It reports whether it
// wrote, and false in ok once the writer must exit. c.wmu held.
func (c *conn) writeOut(hb time.Duration) (wrote, ok bool) {
	c.outMu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.outMu.Unlock()
	for _, fn := range hooks {
		fn() // appends to c.out
	}
	if len(c.rest) > 0 {
		wrote = true
		if !c.writeAll(c.rest, hb) {
			return wrote, false
		}
		c.spare = c.restBuf[:0]
		c.rest, c.restBuf = nil, nil
	}
	c.outMu.Lock()
	buf := c.out
	c.out = c.spare[:0]
	c.spare = nil
	closed := c.outClosed
	c.inflight = len(buf)
	waiters := c.writableLocked()
	c.outMu.Unlock()
	for _, fn := range waiters {
		fn()
	}
	if len(buf) > 0 {
		wrote = true
		if !c.writeAll(buf, hb) {
			return wrote, false
		}
	}
	c.outMu.Lock()
	c.inflight = 0
	waiters = c.writableLocked() // registered while buf went out
	c.outMu.Unlock()
	for _, fn := range waiters {
		fn()
	}
	if cap(buf) > 1<<20 {
		buf = nil // do not keep a burst's buffer forever
	}
	c.spare = buf[:0]
	return wrote, !closed
}

// writableLocked takes the waiters to call once the outbound bytes are
// under the cap. c.outMu held.
func (c *conn) writableLocked() []func() {
	if len(c.waiters) == 0 || len(c.out)+c.inflight >= maxOutbound {
		return nil
	}
	w := c.waiters
	c.waiters = nil
	return w
}

// writeAll writes p, waiting for the socket up to the write timeout. On
// failure the connection is closed (which also stops the reader).
func (c *conn) writeAll(p []byte, hb time.Duration) bool {
	if err := c.nc.SetWriteDeadline(time.Now().Add(writeTimeout(hb))); err != nil {
		return false
	}
	if _, err := c.io.Write(p); err != nil {
		c.log.Debug("write failed", zap.Error(err))
		c.outMu.Lock()
		c.outClosed = true
		c.out = nil
		c.outMu.Unlock()
		c.nc.Close() // unblocks the reader
		return false
	}
	return true
}

// Wake has the writer write what deliveries appended (queue.Outlet).
func (c *conn) Wake() { c.signal() }

// Flush writes what deliveries appended on the calling goroutine when the
// socket takes it at once, else leaves it to the writer (queue.Outlet).
// Readers call it for the connections their read batch delivered to.
func (c *conn) Flush() {
	if !c.wmu.TryLock() {
		c.signal() // the writer is at it, and will look again
		return
	}
	c.outMu.Lock()
	if c.outClosed || len(c.rest) > 0 || len(c.hooks) > 0 || len(c.waiters) > 0 || len(c.out) == 0 {
		// Nothing to write, or work that is the writer's.
		wake := c.outClosed || len(c.rest) > 0 || len(c.hooks) > 0 || len(c.waiters) > 0
		c.outMu.Unlock()
		c.wmu.Unlock()
		if wake {
			c.signal()
		}
		return
	}
	buf := c.out
	c.out = c.spare[:0]
	c.spare = nil
	c.inflight = len(buf)
	c.outMu.Unlock()
	n := c.io.TryWrite(buf)
	if n < len(buf) {
		// The socket is full (or failed): the writer waits for it.
		c.rest, c.restBuf = buf[n:], buf
		c.outMu.Lock()
		c.inflight = len(c.rest)
		c.outMu.Unlock()
		c.wmu.Unlock()
		c.signal()
		return
	}
	c.outMu.Lock()
	c.inflight = 0
	c.outMu.Unlock()
	if cap(buf) > 1<<20 {
		buf = nil
	}
	c.spare = buf[:0]
	c.wroteInline.Store(true)
	c.wmu.Unlock()
}

// writeTimeout bounds a blocked write: a client that stops reading for
// this long is dropped.
func writeTimeout(hb time.Duration) time.Duration {
	if hb > 0 {
		return 2 * hb
	}
	return 5 * time.Minute
}

// stopWriter flushes what is queued and waits for the writer to exit.
func (c *conn) stopWriter() {
	c.outMu.Lock()
	c.outClosed = true
	c.outMu.Unlock()
	c.signal()
	select {
	case <-c.writerEnd:
	case <-time.After(closeOkTimeout):
		c.nc.Close()
		<-c.writerEnd
	}
}

// --- handshake -----------------------------------------------------------

func (c *conn) handshake() error {
	deadline := time.Now().Add(c.srv.opts.HandshakeTimeout)
	c.closeDeadline.Store(deadline.UnixNano())

	hdr := make([]byte, 8)
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		return fmt.Errorf("reading protocol header: %w", err)
	}
	// 0-9-1, and the 0-9 header (AMQP 1 1 0 9) that RabbitMQ also treats
	// as 0-9-1. Anything else gets the header we speak, then a close.
	if string(hdr) != string(amqp.ProtocolHeader[:]) && string(hdr) != "AMQP\x01\x01\x00\x09" {
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.outMu.Lock()
		c.out = append(c.out, amqp.ProtocolHeader[:]...)
		c.outMu.Unlock()
		return fmt.Errorf("bad protocol header %q", hdr)
	}

	c.outMu.Lock()
	c.out = append(c.out, c.srv.startFrame...) // encoded once per server
	c.outMu.Unlock()
	c.signal()
	m, err := c.readHandshakeMethod()
	if err != nil {
		return err
	}
	so, ok := m.(*amqp.ConnectionStartOk)
	if !ok {
		return c.handshakeUnexpected(m)
	}
	if caps, ok := so.ClientProperties["capabilities"].(amqp.Table); ok {
		c.clientCaps = caps
	}
	if so.Mechanism != "PLAIN" && so.Mechanism != "AMQPLAIN" {
		// RabbitMQ closes the socket on an unknown mechanism.
		return fmt.Errorf("unknown authentication mechanism %q", so.Mechanism)
	}
	user, pass, ok := parseCredentials(so.Mechanism, so.Response)
	if !ok || !c.srv.users.check(user, pass, c.nc.RemoteAddr()) {
		err := fmt.Errorf("authentication failed for user %q with mechanism %s", user, so.Mechanism)
		if c.clientCapability("authentication_failure_close") {
			c.closeWith(&amqp.Error{Code: amqp.AccessRefused,
				Text: "ACCESS_REFUSED - Login was refused using authentication mechanism " + so.Mechanism +
					". For details see the broker logfile."}, err.Error())
			return c.awaitCloseOk(err)
		}
		return err
	}
	c.user = user

	opts := &c.srv.opts
	c.SendMethod(0, &amqp.ConnectionTune{
		ChannelMax: opts.ChannelMax,
		FrameMax:   opts.FrameMax,
		Heartbeat:  uint16(opts.Heartbeat / time.Second),
	})
	m, err = c.readHandshakeMethod()
	if err != nil {
		return err
	}
	to, ok := m.(*amqp.ConnectionTuneOk)
	if !ok {
		return c.handshakeUnexpected(m)
	}
	// RabbitMQ closes the socket when the client asks for more than the
	// server offered, or for 0 (no limit) where the server has one.
	if to.FrameMax == 0 || to.FrameMax > opts.FrameMax || to.FrameMax < MinFrameMax {
		return fmt.Errorf("negotiated frame_max = %d is outside the allowed range [%d, %d]", to.FrameMax, MinFrameMax, opts.FrameMax)
	}
	if to.ChannelMax == 0 || to.ChannelMax > opts.ChannelMax {
		return fmt.Errorf("negotiated channel_max = %d is higher than the maximum allowed value (%d)", to.ChannelMax, opts.ChannelMax)
	}
	c.channelMax = to.ChannelMax
	c.heartbeat = time.Duration(to.Heartbeat) * time.Second
	c.frameMax = to.FrameMax
	c.fr.Max = to.FrameMax
	close(c.tuned) // the writer starts heartbeats

	m, err = c.readHandshakeMethod()
	if err != nil {
		return err
	}
	op, ok := m.(*amqp.ConnectionOpen)
	if !ok {
		return c.handshakeUnexpected(m)
	}
	if !c.srv.hasVHost(op.VirtualHost) {
		e := amqp.Errorf(amqp.NotAllowed, "vhost %s not found", op.VirtualHost)
		e.ClassID, e.MethodID = op.Index()
		c.closeWith(e, e.Text)
		return c.awaitCloseOk(errors.New(e.Text))
	}
	c.vhost = op.VirtualHost
	c.vh = c.srv.vhosts[op.VirtualHost]
	host, port := peer(c.nc)
	c.info.Store(&connInfo{Name: connectionName(c.nc), User: c.user, VHost: c.vhost, PeerHost: host, PeerPort: port,
		ConnectedAt: time.Now().UnixMilli(), ClientProperties: so.ClientProperties, State: "running"})
	c.SendMethod(0, &amqp.ConnectionOpenOk{})
	c.closeDeadline.Store(0)
	return nil
}

func (c *conn) clientCapability(name string) bool {
	v, _ := c.clientCaps[name].(bool)
	return v
}

// readHandshakeMethod reads the next method on channel 0. Heartbeats are
// skipped; a client connection.close is answered and ends the handshake.
func (c *conn) readHandshakeMethod() (amqp.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Type != amqp.FrameMethod || f.Channel != 0 {
			return nil, fmt.Errorf("unexpected frame type %d on channel %d during handshake", f.Type, f.Channel)
		}
		m, err := amqp.DecodeMethod(f.Payload) // not interned: its strings are one-offs
		if err != nil {
			return nil, fmt.Errorf("decoding handshake method: %w", err)
		}
		if _, ok := m.(*amqp.ConnectionClose); ok {
			c.SendMethod(0, &amqp.ConnectionCloseOk{})
			c.lingerFor = shortLinger
			return nil, errClientClosed
		}
		return m, nil
	}
}

func (c *conn) handshakeUnexpected(m amqp.Method) error {
	e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - unexpected method in connection state starting"}
	e.ClassID, e.MethodID = m.Index()
	c.closeWith(e, e.Text)
	return c.awaitCloseOk(errors.New(e.Text))
}

// --- the running connection ----------------------------------------------

// readLoop reads and dispatches frames until the connection ends.
func (c *conn) readLoop() error {
	for {
		if c.br.Buffered() == 0 {
			if c.busy++; c.busy == 64 && c.br.Size() < 64<<10 {
				// 64 batches in: a busy connection reads in large chunks.
				c.br = bufio.NewReaderSize(deadlineReader{c}, 64<<10)
				max := c.fr.Max
				c.fr = amqp.NewFrameReader(c.br)
				c.fr.Max = max
			}
		}
		if c.published && c.srv.memoryAlarm() {
			if err := c.blockWhileAlarm(); err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			if c.closing.Load() {
				return nil // no close-ok in time (or EOF): just close
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.log.Warn("missed heartbeats from client, closing", zap.Duration("heartbeat", c.heartbeat))
				return errHeartbeat
			}
			if errors.Is(err, amqp.ErrFrame) {
				return c.fail(frameError(err, f))
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
				if c.closeReason.Load() == nil {
					c.closeReason.Store("client unexpectedly closed TCP connection")
				}
				return nil
			}
			return err
		}
		if c.closing.Load() {
			if done := c.whileClosing(f); done {
				c.lingerFor = shortLinger
				return nil
			}
			continue
		}
		if err := c.handleFrame(f); err != nil {
			if errors.Is(err, errClientClosed) {
				return nil
			}
			return c.fail(err)
		}
	}
}

// blockWhileAlarm stops reading from a publishing connection while queues
// hold more than the memory watermark: TCP backpressure reaches the
// publisher, as RabbitMQ's memory alarm does. Clients that advertise
// connection.blocked are told.
func (c *conn) blockWhileAlarm() error {
	notify := c.clientCapability("connection.blocked")
	if notify {
		c.SendMethod(0, &amqp.ConnectionBlocked{Reason: "low on memory"})
	}
	c.log.Warn("memory alarm: blocking publishing connection", zap.Int64("memory", c.srv.MemoryUsed()))
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for c.srv.memoryAlarm() {
		select {
		case <-t.C:
		case <-c.srv.stop:
			return nil
		}
		c.runRequests()
		if c.closing.Load() {
			return nil
		}
	}
	if notify {
		c.SendMethod(0, &amqp.ConnectionUnblocked{})
	}
	c.log.Info("memory alarm cleared: unblocking connection")
	return nil
}

// whileClosing handles a frame after we sent connection.close: everything
// but close and close-ok is discarded (§4.2.2).
func (c *conn) whileClosing(f amqp.Frame) (done bool) {
	if f.Type != amqp.FrameMethod || f.Channel != 0 {
		return false
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return false
	}
	switch m.(type) {
	case *amqp.ConnectionCloseOk:
		return true
	case *amqp.ConnectionClose:
		c.SendMethod(0, &amqp.ConnectionCloseOk{})
		return true
	}
	return false
}

func frameError(err error, f amqp.Frame) *amqp.Error {
	var tl *amqp.FrameTooLargeError
	var be *amqp.BadFrameEndError
	switch {
	case errors.As(err, &tl):
		return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - " + tl.Error()}
	case errors.As(err, &be):
		return &amqp.Error{Code: amqp.FrameError, Text: fmt.Sprintf("FRAME_ERROR - type %d, all octets = %s: {invalid_frame_end_marker,%d}", be.Type, octets(f.Payload), be.End)}
	}
	return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - " + err.Error()}
}

// octets renders bytes as Erlang does (<<1,2,3>>), as RabbitMQ's frame
// error texts show them; long payloads are cut.
func octets(p []byte) string {
	const max = 64
	var b strings.Builder
	b.WriteString("<<")
	for i, x := range p {
		if i == max {
			b.WriteString(",...")
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", x)
	}
	b.WriteString(">>")
	return b.String()
}

// handleFrame dispatches one frame of the running connection.
func (c *conn) handleFrame(f amqp.Frame) error {
	switch f.Type {
	case amqp.FrameHeartbeat:
		if len(f.Payload) != 0 {
			// RabbitMQ knows only the empty heartbeat frame.
			return &amqp.Error{Code: amqp.FrameError, Text: fmt.Sprintf("FRAME_ERROR - type 8, all octets = %s: unknown_frame", octets(f.Payload))}
		}
		if f.Channel != 0 {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: fmt.Sprintf("UNEXPECTED_FRAME - type 8, all octets = %s", octets(f.Payload))}
		}
		return nil
	case amqp.FrameMethod, amqp.FrameHeader, amqp.FrameBody:
	default:
		return &amqp.Error{Code: amqp.FrameError, Text: fmt.Sprintf("FRAME_ERROR - type %d, all octets = %s: unknown_frame", f.Type, octets(f.Payload))}
	}
	if f.Channel == 0 {
		return c.handleChannel0(f)
	}
	if _, ok := c.closingChans[f.Channel]; ok {
		return c.whileChannelClosing(f)
	}
	ch := c.channels[f.Channel]
	if f.Type != amqp.FrameMethod {
		if ch == nil {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected method frame, got non method frame instead"}
		}
		err := ch.HandleContent(f)
		c.published = true
		return c.channelResult(f.Channel, err)
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	if !m.ServerHandles() {
		return unimplemented(m)
	}
	if ch == nil {
		if _, ok := m.(*amqp.ChannelOpen); ok {
			return c.openChannel(f.Channel)
		}
		e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - expected 'channel.open'"}
		e.ClassID, e.MethodID = m.Index()
		return e
	}
	switch m := m.(type) {
	case *amqp.ChannelOpen:
		e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - second 'channel.open' seen"}
		e.ClassID, e.MethodID = m.Index()
		return e
	case *amqp.ChannelClose:
		ch.Flush()
		c.removeChannel(f.Channel)
		c.SendMethod(f.Channel, &amqp.ChannelCloseOk{})
		return nil
	case *amqp.ChannelCloseOk:
		// A close-ok for a close we never sent: ignore, as RabbitMQ does
		// for a channel in the open state.
		return nil
	}
	err = ch.HandleMethod(m)
	return c.channelResult(f.Channel, err)
}

// removeChannel closes a channel and forgets it.
func (c *conn) removeChannel(n uint16) {
	ch := c.channels[n]
	if ch == nil {
		return
	}
	delete(c.channels, n)
	c.snapMu.Lock()
	delete(c.snap, n)
	c.snapMu.Unlock()
	ch.Close()
}

// channelResult turns a channel's soft error into channel.close; hard
// errors go up to close the connection.
func (c *conn) channelResult(n uint16, err error) error {
	if err == nil {
		return nil
	}
	var e *amqp.Error
	if errors.As(err, &e) && !e.Hard() {
		c.closeChannel(n, e)
		return nil
	}
	return err
}

// closeChannel closes channel n with a soft error: its deliveries are
// requeued now; the number is free again once the client's close-ok comes.
func (c *conn) closeChannel(n uint16, e *amqp.Error) {
	if ch := c.channels[n]; ch != nil {
		ch.Flush() // confirms already earned go out before the close
	}
	c.removeChannel(n)
	c.closingChans[n] = struct{}{}
	c.log.Debug("closing channel", zap.Uint16("channel", n), zap.Uint16("code", e.Code), zap.String("text", e.Text))
	c.SendMethod(n, &amqp.ChannelClose{ReplyCode: e.Code, ReplyText: e.Text, ClassID: e.ClassID, MethodID: e.MethodID})
}

// whileChannelClosing handles a frame on a channel we sent channel.close
// on: all but close-ok and close are dropped.
func (c *conn) whileChannelClosing(f amqp.Frame) error {
	if f.Type != amqp.FrameMethod {
		return nil
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	switch m.(type) {
	case *amqp.ChannelCloseOk:
		delete(c.closingChans, f.Channel)
	case *amqp.ChannelClose:
		// Both sides closed at once: answer, and still expect the
		// close-ok for ours (§4.2.4.1).
		c.SendMethod(f.Channel, &amqp.ChannelCloseOk{})
	case *amqp.ChannelOpen:
		// A client that took our close for done (no close-ok) reopens.
		delete(c.closingChans, f.Channel)
		return c.openChannel(f.Channel)
	}
	return nil
}

func (c *conn) openChannel(n uint16) error {
	if n > c.channelMax {
		return amqp.Errorf(amqp.NotAllowed, "channel number %d is higher than the negotiated channel_max (%d)", n, c.channelMax)
	}
	if len(c.channels) >= int(c.channelMax) {
		return amqp.Errorf(amqp.NotAllowed, "number of channels opened (%d) has reached the negotiated channel_max (%d)", len(c.channels), c.channelMax)
	}
	ch := channel.New(channel.Config{
		Number:          n,
		Sink:            c,
		VHost:           c.vh,
		ConnID:          c.id,
		User:            c.user,
		MaxMessageSize:  c.srv.opts.MaxMessageSize,
		ConsumerTimeout: c.srv.opts.ConsumerTimeout,
		CancelNotify:    c.clientCapability("consumer_cancel_notify"),
		Replies:         &c.srv.replies,
		Logger:          c.log.base,
		Flushes:         &c.flushes,
	})
	c.channels[n] = ch
	c.snapMu.Lock()
	c.snap[n] = ch
	c.snapMu.Unlock()
	c.SendMethod(n, &amqp.ChannelOpenOk{})
	return nil
}

// unimplemented answers a method only a server may send, as RabbitMQ does.
func unimplemented(m amqp.Method) error {
	e := &amqp.Error{Code: amqp.CommandInvalid, Text: "COMMAND_INVALID - unimplemented method"}
	e.ClassID, e.MethodID = m.Index()
	return e
}

// decodeError maps a method decoding failure to RabbitMQ's close.
func decodeError(err error, payload []byte) error {
	var um *amqp.UnknownMethodError
	if errors.As(err, &um) {
		return &amqp.Error{Code: amqp.CommandInvalid, Text: fmt.Sprintf("COMMAND_INVALID - unknown method %d/%d", um.ClassID, um.MethodID),
			ClassID: um.ClassID, MethodID: um.MethodID}
	}
	e := &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - cannot decode " + octets(payload[min(4, len(payload)):])}
	if len(payload) >= 4 {
		e.ClassID = uint16(payload[0])<<8 | uint16(payload[1])
		e.MethodID = uint16(payload[2])<<8 | uint16(payload[3])
	}
	return e
}

func (c *conn) handleChannel0(f amqp.Frame) error {
	if f.Type != amqp.FrameMethod {
		return &amqp.Error{Code: amqp.UnexpectedFrame, Text: fmt.Sprintf("UNEXPECTED_FRAME - type %d, all octets = %s", f.Type, octets(f.Payload))}
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return decodeError(err, f.Payload)
	}
	if !m.ServerHandles() {
		return unimplemented(m)
	}
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		c.closeReason.Store(fmt.Sprintf("client closed connection: %d %s", m.ReplyCode, m.ReplyText))
		c.closing.Store(true) // closed: a later closeWith sends nothing
		c.release()
		c.SendMethod(0, &amqp.ConnectionCloseOk{})
		c.lingerFor = c.clientClosingTimeout()
		return errClientClosed
	case *amqp.ConnectionUpdateSecret:
		// The method is for token-based backends; RabbitMQ's internal
		// user database takes any new secret and keeps the user as it is
		// (rabbit_auth_backend_internal's update_state).
		c.log.Info("secret updated", zap.String("user", c.user), zap.String("reason", m.Reason))
		c.SendMethod(0, &amqp.ConnectionUpdateSecretOk{})
		return nil
	case *amqp.ConnectionBlocked, *amqp.ConnectionUnblocked:
		return nil // a client telling us it is blocked: nothing to do
	}
	e := &amqp.Error{Code: amqp.ChannelError, Text: "CHANNEL_ERROR - unexpected method in connection state running"}
	e.ClassID, e.MethodID = m.Index()
	return e
}

func (c *conn) closeAllChannels() {
	for n := range c.channels {
		c.removeChannel(n)
	}
}

// fail closes the connection for a hard error, or for anything that is
// not an AMQP exception (541 INTERNAL_ERROR, logged as a bug).
func (c *conn) fail(err error) error {
	var e *amqp.Error
	if !errors.As(err, &e) {
		c.log.Error("internal error", zap.Error(err))
		e = &amqp.Error{Code: amqp.InternalError, Text: "INTERNAL_ERROR"}
	}
	c.log.Warn("closing connection on protocol error", zap.Uint16("code", e.Code), zap.String("text", e.Text))
	c.closeAllChannels()
	c.closeWith(e, e.Text)
	return c.awaitCloseOk(nil)
}

// closeWith sends connection.close and enters the closing state. It is
// safe from any goroutine.
func (c *conn) closeWith(e *amqp.Error, reason string) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.closeReason.Store(reason)
	c.closeDeadline.Store(time.Now().Add(closeOkTimeout).UnixNano())
	c.SendMethod(0, &amqp.ConnectionClose{ReplyCode: e.Code, ReplyText: e.Text, ClassID: e.ClassID, MethodID: e.MethodID})
	// Wake the reader so that it re-arms its read deadline with the close
	// deadline. Setting the close deadline here instead could be undone
	// by a reader that loaded closeDeadline before the store above and
	// sets its (heartbeat, or no) deadline after us: the request flag is
	// checked after the reader sets a deadline and before it blocks.
	c.wakeReader()
}

// awaitCloseOk reads until the client's close-ok (or close) or the close
// deadline, discarding everything else; then returns err.
func (c *conn) awaitCloseOk(err error) error {
	for {
		f, rerr := c.fr.ReadFrame()
		if rerr != nil {
			if errors.Is(rerr, amqp.ErrFrame) {
				continue
			}
			return err
		}
		if c.whileClosing(f) {
			c.lingerFor = shortLinger
			return err
		}
	}
}

// platform names the Go runtime as RabbitMQ names Erlang/OTP.
func platform() string {
	return "Go " + strings.TrimPrefix(runtime.Version(), "go") + " " + runtime.GOOS + "/" + runtime.GOARCH
}

var hostname = func() string { h, _ := os.Hostname(); return h }()

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
