package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Conn is the cluster's one inter-node request/answer link: one
// connection between two nodes (usually opened through a Link, so
// authenticated with the cluster secret), carrying requests, their
// answers and one-way frames in both directions. The metadata forwarding
// (node.go), the quorum queues' group RPC (grouprpc.go) and the
// replicated queue kinds' link run on it.
//
// A frame: its length (4 bytes, big-endian, counting what follows), its
// kind (1 byte), a request id (uvarint), the body. Kind 0 is an answer,
// its id the request's; kinds 1 to 255 are the user's: a request when
// the id is not 0 (the peer answers it with Answer), a one-way frame when
// it is 0. Requests are pipelined: many are in flight at once, answered
// in any order, matched by id.
//
// Goroutines: NewConn starts two, a reader and a writer; Close stops
// both and waits for them.
//   - The reader reads frames (a length over MaxFrame breaks the link
//     before anything is allocated) and, in the order they came, passes
//     answers to their calls' done functions and requests and one-way
//     frames to Handle. Both run on the reader goroutine: while they run
//     nothing else is read, so they must not wait long (hand long work to
//     another goroutine, and Answer from there).
//   - Sending (Call, Send, Answer) only appends the frame to the
//     outbound buffer under Conn.mu and signals the writer through a
//     one-slot channel: it never touches the socket and never waits for
//     the peer, so it may be called under any lock (a queue's exec
//     included). The writer swaps the buffer out and writes it with no
//     lock held, so frames sent together go out in one write (in writes
//     of writeChunk bytes at most, each within WriteTimeout: a peer that
//     takes none for that long breaks the link).
//
// Bounds. A frame is at most MaxFrame bytes, refused on sending
// (ErrTooLarge) and on reading (the link breaks). What waits in the
// outbound buffer and the writer's chunk in flight are at most MaxBuffered
// bytes together: a frame that would pass it is refused with ErrOverflow
// (not sent; the link stays up). Callers keep well under it by credit: a
// quorum queue group has at most roundsFlying rounds in flight, a
// replicated queue's consumer at most its prefetch (or window) of
// deliveries, and publishers to a classic queue homed elsewhere wait
// (flow control) while Buffered is over a few MiB; the cap is for a peer
// that stopped reading before WriteTimeout tells.
// With ConnConfig.Memory, the bytes waiting are counted in the owner's
// memory figure until the socket takes them (or the link drops them).
//
// Fail-all. When the link goes down (a read or write fails, the peer
// hangs up, Handle returns an error, Break or Close), every call still
// waiting for its answer gets its error at once (ErrBroken, or ErrClosed
// after Close), later sends get ErrClosed, and OnDown is told, once, so
// that its owner can forget the link and dial again.
//
// Liveness. With ConnConfig.Heartbeat, a link that has nothing waiting
// to be written sends an empty frame (kind 0, id 0: an answer to no
// call, which a reader drops) every Heartbeat, and one whose reader has
// waited DeadAfter for the peer's next byte breaks (ErrSilent): a peer
// that stopped (a process paused by SIGSTOP or a long GC, a frozen VM)
// or a network that drops packets without closing the connection leaves
// a TCP connection open with nothing on it, and without this the calls
// on it would wait for answers for as long as that lasts. Only the time
// the reader spends waiting on the socket counts, not the time Handle
// holds it: a busy node is not taken for a silent one.
//
// Locks: Conn.mu guards the outbound buffer, the calls waiting for
// answers and the state; it is a leaf, never held across I/O or while a
// callback (done, Handle, OnDown) runs.
type Conn struct {
	nc   net.Conn
	cfg  ConnConfig
	kick chan struct{} // one slot: the outbound buffer has frames
	quit chan struct{} // closed when the link goes down
	wg   sync.WaitGroup
	// waiting is the bytes appended and not yet taken by the socket:
	// the outbound buffer and what the writer is writing (Buffered).
	waiting atomic.Int64
	// readSince is when the reader began waiting for the socket (its
	// monoNanos), 0 while it is not waiting: how long the peer has been
	// silent, for the watcher (Heartbeat).
	readSince atomic.Int64

	mu    sync.Mutex
	out   []byte                         // frames not yet taken by the writer
	calls map[uint64]func([]byte, error) // waiting for their answers, by id
	next  uint64                         // the last request id handed out
	err   error                          // why the link went down; nil while up
}

// ConnConfig configures a Conn. Zero values take the defaults.
type ConnConfig struct {
	// Handle gets every request and one-way frame the peer sends, on the
	// reader goroutine, in order. The frame's Body is its own to keep. It
	// answers a request (f.ID != 0) with Answer, then or later, from any
	// goroutine; an error breaks the link. Nil: the peer may only answer
	// (a request or one-way frame breaks the link).
	Handle func(c *Conn, f Frame) error
	// OnDown is told once that the link went down, and why, after the
	// calls waiting for answers have had their errors; on the goroutine
	// that took it down (the reader, the writer, Break's or Close's
	// caller), with no lock of the link's held. It must not call Close
	// (Break is fine).
	OnDown func(c *Conn, err error)
	// MaxFrame bounds a frame, both ways (default DefaultMaxFrame).
	MaxFrame int
	// MaxBuffered bounds the outbound buffer (default 4 MaxFrame).
	MaxBuffered int
	// WriteTimeout is how long the peer may take to take writeChunk bytes
	// before the link breaks (default 10 s).
	WriteTimeout time.Duration
	// Heartbeat, when set, is how often a link with nothing to send
	// sends an empty frame, so that its peer hears from it; DeadAfter
	// (default 5 Heartbeats) is how long the reader may wait for the
	// peer's next byte before the link breaks with ErrSilent. Zero: no
	// heartbeats, and a silent peer is waited for (the peer's side may
	// still send them).
	Heartbeat, DeadAfter time.Duration
	// Memory, when set, counts the bytes waiting to be written (appended,
	// not yet taken by the socket), as its owner's memory figure counts
	// what it holds: a peer that falls behind shows there rather than
	// growing unseen. What a link that goes down drops is uncounted.
	Memory *atomic.Int64
}

// Frame is a request or one-way frame received.
type Frame struct {
	Kind byte   // 1 to 255, the user's
	ID   uint64 // the request's id, to answer; 0: a one-way frame
	Body []byte
}

const (
	// DefaultMaxFrame is a frame's default bound.
	DefaultMaxFrame = 64 << 20
	// kindAnswer is an answer's kind; the user's are 1 to 255.
	kindAnswer byte = 0
	// frameHeader is the most a frame adds to its body: the length, the
	// kind, a 10-byte uvarint id.
	frameHeader = 4 + 1 + binary.MaxVarintLen64
	// writeChunk is the most the writer writes at once, so that
	// WriteTimeout bounds a stall, not a burst.
	writeChunk = 1 << 20
	// keepBuffer is the largest outbound buffer kept for reuse once
	// written; a larger one (a burst) is left to the collector.
	keepBuffer = 4 << 20
	readBuffer = 64 << 10
)

// The link's errors.
var (
	// ErrClosed is a frame not sent: the link was down (or Close was
	// called while the call waited, which is its error then).
	ErrClosed = errors.New("cluster: link closed")
	// ErrBroken is a call whose link went down before its answer came:
	// the peer may or may not have handled it. The error a call gets
	// wraps the cause.
	ErrBroken = errors.New("cluster: link broken")
	// ErrOverflow is a frame not sent: the outbound buffer is full (the
	// peer reads slower than this node sends). The link stays up.
	ErrOverflow = errors.New("cluster: link's outbound buffer full")
	// ErrTooLarge is a frame over MaxFrame, not sent.
	ErrTooLarge = errors.New("cluster: link frame too large")
	// ErrTimeout is CallWait's: no answer in time (the link stays up).
	ErrTimeout = errors.New("cluster: no answer in time")
	// ErrSilent is a link broken because the peer sent nothing, not even
	// a heartbeat, for DeadAfter.
	ErrSilent = errors.New("cluster: the peer went silent")
)

// brokenError is ErrBroken with its cause.
type brokenError struct{ cause error }

func (e *brokenError) Error() string        { return ErrBroken.Error() + ": " + e.cause.Error() }
func (e *brokenError) Unwrap() error        { return e.cause }
func (e *brokenError) Is(target error) bool { return target == ErrBroken }

func broken(cause error) error {
	if cause == nil || errors.Is(cause, ErrBroken) {
		if cause == nil {
			return ErrBroken
		}
		return cause
	}
	return &brokenError{cause}
}

var (
	errBadFrame   = errors.New("cluster: link frame malformed")
	errUnexpected = errors.New("cluster: link frame not expected")
)

// NewConn runs the link over nc, which it owns from then on.
func NewConn(nc net.Conn, cfg ConnConfig) *Conn {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = 4 * cfg.MaxFrame
	}
	if cfg.MaxBuffered < cfg.MaxFrame+frameHeader {
		cfg.MaxBuffered = cfg.MaxFrame + frameHeader
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Heartbeat > 0 && cfg.DeadAfter <= 0 {
		cfg.DeadAfter = 5 * cfg.Heartbeat
	}
	c := &Conn{nc: nc, cfg: cfg, kick: make(chan struct{}, 1), quit: make(chan struct{}),
		calls: map[uint64]func([]byte, error){}}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	if cfg.Heartbeat > 0 {
		c.wg.Add(1)
		go c.watch()
	}
	return c
}

// Call sends a request of kind (1 to 255) with body (copied: the caller
// may reuse it) and returns; done gets the answer's body (its own to
// keep) or the error that kept it from coming (ErrBroken, or ErrClosed
// if Close was called), once: on the reader goroutine, or on the one
// that took the link down, never inside Call. An error from Call
// itself (ErrClosed, ErrOverflow, ErrTooLarge) means nothing was sent,
// and done is not called.
func (c *Conn) Call(kind byte, body []byte, done func(answer []byte, err error)) error {
	_, err := c.call(kind, body, done)
	return err
}

func (c *Conn) call(kind byte, body []byte, done func([]byte, error)) (uint64, error) {
	if kind == kindAnswer {
		panic("cluster: a link frame's kind is 1 to 255")
	}
	if err := c.fits(body); err != nil {
		return 0, err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	id := c.next + 1
	if err := c.appendLocked(kind, id, body); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	c.next = id
	c.calls[id] = done
	c.mu.Unlock()
	c.signal()
	return id, nil
}

// CallWait is Call, waiting up to timeout for the answer. On timeout it
// forgets the call (an answer that comes later is dropped) and returns
// ErrTimeout; the link stays up.
func (c *Conn) CallWait(kind byte, body []byte, timeout time.Duration) ([]byte, error) {
	type result struct {
		p   []byte
		err error
	}
	ch := make(chan result, 1)
	id, err := c.call(kind, body, func(p []byte, err error) { ch <- result{p, err} })
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.p, r.err
	case <-t.C:
	}
	c.mu.Lock()
	_, waiting := c.calls[id]
	delete(c.calls, id)
	c.mu.Unlock()
	if waiting {
		return nil, ErrTimeout
	}
	r := <-ch // the answer (or the link's failure) came meanwhile
	return r.p, r.err
}

// forget forgets call id (its answer, if it comes, is dropped); true if
// it was still waiting, in which case its done function will not be
// called, and the caller tells it what became of it.
func (c *Conn) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, waiting := c.calls[id]
	delete(c.calls, id)
	return waiting
}

// Send sends a one-way frame of kind (1 to 255); body is copied. An
// error means it was not sent (ErrClosed, ErrOverflow, ErrTooLarge): a
// caller whose peer would be left out of step breaks the link.
func (c *Conn) Send(kind byte, body []byte) error {
	if kind == kindAnswer {
		panic("cluster: a link frame's kind is 1 to 255")
	}
	return c.send(kind, 0, body)
}

// Answer answers the peer's request id with body (copied); id 0 (a
// one-way frame's) is answered by nothing. From any goroutine, in any
// order.
func (c *Conn) Answer(id uint64, body []byte) error {
	if id == 0 {
		return nil
	}
	return c.send(kindAnswer, id, body)
}

func (c *Conn) send(kind byte, id uint64, body []byte) error {
	if err := c.fits(body); err != nil {
		return err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return ErrClosed
	}
	err := c.appendLocked(kind, id, body)
	c.mu.Unlock()
	if err == nil {
		c.signal()
	}
	return err
}

func (c *Conn) fits(body []byte) error {
	if len(body) > c.cfg.MaxFrame-1-binary.MaxVarintLen64 {
		return ErrTooLarge
	}
	return nil
}

// appendLocked appends a frame to the outbound buffer. c.mu held.
func (c *Conn) appendLocked(kind byte, id uint64, body []byte) error {
	if int(c.waiting.Load())+frameHeader+len(body) > c.cfg.MaxBuffered {
		return ErrOverflow // counts what the writer holds too
	}
	n := len(c.out)
	c.out = appendFrame(c.out, kind, id, body)
	c.count(len(c.out) - n)
	return nil
}

// count adds n bytes to the waiting bytes' figures (Buffered, Memory).
func (c *Conn) count(n int) {
	if n == 0 {
		return
	}
	c.waiting.Add(int64(n))
	if c.cfg.Memory != nil {
		c.cfg.Memory.Add(int64(n))
	}
}

// appendFrame appends one frame to b.
func appendFrame(b []byte, kind byte, id uint64, body []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, kind)
	b = binary.AppendUvarint(b, id)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func (c *Conn) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Buffered is how many bytes wait to be written (for a caller's flow
// control).
// It takes no lock: a caller may ask on every send.
func (c *Conn) Buffered() int { return int(c.waiting.Load()) }

// Done is closed when the link goes down.
func (c *Conn) Done() <-chan struct{} { return c.quit }

// Err is why the link went down; nil while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Break takes the link down with cause (wrapped as ErrBroken) without
// waiting for its goroutines: from anywhere, Handle, done and OnDown
// included. Its owner still calls Close.
func (c *Conn) Break(cause error) { c.fail(broken(cause)) }

// Close takes the link down (calls still waiting get ErrClosed) and
// waits for its reader and writer to return. Not from the link's own
// callbacks (Handle, done, OnDown): Break there.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// fail takes the link down, once: the socket is closed (which ends a
// read or write in progress), every call waiting gets err, OnDown is
// told.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.count(-len(c.out))
	c.calls, c.out = nil, nil
	close(c.quit)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, done := range calls {
		done(nil, err)
	}
	if c.cfg.OnDown != nil {
		c.cfg.OnDown(c, err)
	}
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var buf []byte
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
		c.mu.Lock()
		buf, c.out = c.out, buf[:0]
		c.mu.Unlock()
		for p := buf; len(p) > 0; {
			n := min(len(p), writeChunk)
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
			if _, err := c.nc.Write(p[:n]); err != nil {
				c.count(-len(p)) // dropped
				c.fail(broken(err))
				return
			}
			c.count(-n)
			p = p[n:]
		}
		if cap(buf) > keepBuffer {
			buf = nil
		}
	}
}

// watch sends the heartbeats and breaks the link when the peer has
// been silent for DeadAfter (see Liveness, above).
func (c *Conn) watch() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.quit:
			return
		}
		if since := c.readSince.Load(); since != 0 && monoNanos()-since >= int64(c.cfg.DeadAfter) {
			c.fail(broken(ErrSilent))
			return
		}
		if c.waiting.Load() == 0 { // else what waits tells the peer, if it reads
			_ = c.send(kindAnswer, 0, nil)
		}
	}
}

// silenceReader is the socket as the reader reads it: the time it
// waits for the peer is noted (Conn.readSince).
type silenceReader struct{ c *Conn }

func (r silenceReader) Read(p []byte) (int, error) {
	r.c.readSince.Store(max(monoNanos(), 1))
	n, err := r.c.nc.Read(p)
	r.c.readSince.Store(0)
	return n, err
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	var src io.Reader = c.nc
	if c.cfg.Heartbeat > 0 {
		src = silenceReader{c}
	}
	br := bufio.NewReaderSize(src, readBuffer)
	for {
		f, err := readFrame(br, c.cfg.MaxFrame)
		if err != nil {
			c.fail(broken(err))
			return
		}
		if f.Kind == kindAnswer && f.ID == 0 {
			continue // a heartbeat
		}
		if f.Kind == kindAnswer {
			c.mu.Lock()
			done := c.calls[f.ID]
			delete(c.calls, f.ID)
			c.mu.Unlock()
			if done != nil { // nil: forgotten (CallWait timed out)
				done(f.Body, nil)
			}
			continue
		}
		if c.cfg.Handle == nil {
			c.fail(broken(errUnexpected))
			return
		}
		if err := c.cfg.Handle(c, f); err != nil {
			c.fail(broken(err))
			return
		}
	}
}

// readFrame reads one frame; its length is checked against max before
// anything is allocated.
func readFrame(br *bufio.Reader, max int) (Frame, error) {
	var l [4]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if uint64(n) > uint64(max) {
		return Frame{}, ErrTooLarge
	}
	if n < 2 { // a kind and an id at least
		return Frame{}, errBadFrame
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	id, k := binary.Uvarint(p[1:])
	if k <= 0 {
		return Frame{}, errBadFrame
	}
	return Frame{Kind: p[0], ID: id, Body: nilIfEmpty(p[1+k:])}, nil
}

// linkSet is a node's links of one service: those it dialled, one per
// peer address, and those it accepted. A link that goes down leaves the
// set, and a goroutine of the set's closes it (waits for its reader and
// writer); close closes every link and waits for those goroutines. Its
// mu is taken before a Conn's mu, never under it (OnDown runs with no
// lock of the link's held).
type linkSet struct {
	mu     sync.Mutex
	closed bool
	byAddr map[string]*Conn // dialled, by the peer's address
	all    map[*Conn]struct{}
	wg     sync.WaitGroup // the goroutines closing links that went down
}

func newLinkSet() *linkSet {
	return &linkSet{byAddr: map[string]*Conn{}, all: map[*Conn]struct{}{}}
}

// dial returns the link to addr, dialled through layer if there is none.
func (s *linkSet) dial(addr string, layer interface {
	Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error)
}, timeout time.Duration, cfg ConnConfig) (*Conn, error) {
	s.mu.Lock()
	c, closed := s.byAddr[addr], s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case c != nil && c.Err() == nil:
		return c, nil // a link gone down is replaced (its OnDown may not have run yet)
	}
	nc, err := layer.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return nil, err
	}
	down := cfg.OnDown
	cfg.OnDown = func(c *Conn, err error) {
		s.down(addr, c)
		if down != nil {
			down(c, err)
		}
	}
	c = NewConn(nc, cfg)
	s.mu.Lock()
	old := s.byAddr[addr]
	if old != nil && old.Err() != nil {
		old = nil // gone down: replaced (its OnDown leaves the new one be)
	}
	if s.closed || old != nil || c.Err() != nil {
		s.mu.Unlock()
		_ = c.Close() // closed, or another caller dialled first, or down already
		if old != nil {
			return old, nil
		}
		return nil, ErrClosed
	}
	s.byAddr[addr] = c
	s.all[c] = struct{}{}
	s.mu.Unlock()
	return c, nil
}

// serve runs an accepted connection as a link of the set; false if the
// set is closed (nc is closed then).
func (s *linkSet) serve(nc net.Conn, cfg ConnConfig) (*Conn, bool) {
	down := cfg.OnDown
	cfg.OnDown = func(c *Conn, err error) {
		s.down("", c)
		if down != nil {
			down(c, err)
		}
	}
	c := NewConn(nc, cfg)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return nil, false
	}
	if c.Err() == nil {
		s.all[c] = struct{}{}
	}
	s.mu.Unlock()
	return c, true
}

// down forgets a link that went down and has a goroutine close it (its
// OnDown may run on the link's own reader, which Close waits for). Once
// the set is closed, close (or whoever made the link) closes it.
func (s *linkSet) down(addr string, c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr != "" && s.byAddr[addr] == c {
		delete(s.byAddr, addr)
	}
	delete(s.all, c)
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = c.Close()
	}()
}

// close closes every link of the set and waits until all are closed.
func (s *linkSet) close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*Conn, 0, len(s.all))
	for c := range s.all {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		_ = c.Close()
	}
	s.wg.Wait()
}
