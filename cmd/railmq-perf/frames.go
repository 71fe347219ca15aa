package main

// The frame engine (--engine frames) speaks AMQP 0-9-1 itself on raw TCP
// sockets for the per-message traffic: publishes go out as pre-encoded
// method, header and body frames whose id and timestamp bytes are patched in
// place and written many at a time; deliveries are parsed straight out of a
// large bufio.Reader (Peek and Discard, no copies, no allocations). The
// declares, passive declares and deletes still go through amqp091-go on the
// control connection, as with the default engine.
//
// Each raw connection opens channel 1 only. Its frames are written under
// wmu by their owner (the producer's publishing goroutine or the
// consumer's goroutine), by the connection's reader (confirm tracking needs
// no writes, but close-ok and channel.close-ok do) and by the heartbeat
// goroutine; a write is a whole batch of frames, never a partial frame.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Frame types, end octet and the classes and methods the engine speaks
// (AMQP 0-9-1 §4.2.3, §4.2.6 and the spec's method table).
const (
	frameMethod    = 1
	frameHeader    = 2
	frameBody      = 3
	frameHeartbeat = 8
	frameEnd       = 0xCE

	classConnection = 10
	classChannel    = 20
	classExchange   = 40
	classQueue      = 50
	classBasic      = 60
	classConfirm    = 85

	mConnStart     = 10
	mConnStartOk   = 11
	mConnTune      = 30
	mConnTuneOk    = 31
	mConnOpen      = 40
	mConnOpenOk    = 41
	mConnClose     = 50
	mConnCloseOk   = 51
	mConnBlocked   = 60
	mConnUnblocked = 61

	mChanOpen    = 10
	mChanOpenOk  = 11
	mChanClose   = 40
	mChanCloseOk = 41

	mBasicQos       = 10
	mBasicQosOk     = 11
	mBasicConsume   = 20
	mBasicConsumeOk = 21
	mBasicCancel    = 30
	mBasicCancelOk  = 31
	mBasicPublish   = 40
	mBasicReturn    = 50
	mBasicDeliver   = 60
	mBasicAck       = 80
	mBasicNack      = 120

	mConfirmSelect   = 10
	mConfirmSelectOk = 11

	// frameChannel is the one channel a raw connection opens.
	frameChannel = 1
	// frameMaxWanted caps the frame_max the engine accepts; the reader's
	// buffer holds two such frames, so any frame can be peeked whole.
	frameMaxWanted = 128 << 10
	readBufSize    = 2 * frameMaxWanted
	// replySuccess is the reply code of a normal connection.close (§1.4.2).
	replySuccess = 200
)

var (
	errFrameSyntax = errors.New("malformed frame")
	errUnexpected  = errors.New("unexpected frame")
)

// closeError is a connection.close or channel.close received from the
// broker.
type closeError struct {
	what string // "connection" or "channel"
	code uint16
	text string
}

func (e *closeError) Error() string {
	return fmt.Sprintf("%s closed by the broker: %d %s", e.what, e.code, e.text)
}

// frameConn is one raw AMQP connection with channel 1 open.
type frameConn struct {
	nc       net.Conn
	br       *bufio.Reader
	frameMax uint32 // negotiated; 0 never (the engine always proposes a limit)
	hb       time.Duration

	wmu sync.Mutex // serialises writes to nc

	hbStop chan struct{}
	hbDone chan struct{}
	closed sync.Once
}

// frameDial opens a raw connection to uri, performs the handshake, opens
// channel 1 and starts sending heartbeats.
func (r *runner) frameDial(name string) (*frameConn, error) {
	uris := strings.Split(r.cfg.URI, ",")
	raw := uris[int(r.dials.Add(1)-1)%len(uris)]
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	nc, err := net.DialTimeout("tcp", net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	fc := &frameConn{nc: nc, br: bufio.NewReaderSize(nc, readBufSize), hbStop: make(chan struct{}), hbDone: make(chan struct{})}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if err := fc.handshake(u, name, r.cfg.Heartbeat); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	_ = nc.SetDeadline(time.Time{})
	go fc.heartbeats()
	return fc, nil
}

// handshake runs §2.2.4: protocol header, start/start-ok (PLAIN),
// tune/tune-ok, open/open-ok, then channel.open on channel 1.
func (fc *frameConn) handshake(u amqp.URI, name string, heartbeat time.Duration) error {
	if _, err := fc.nc.Write([]byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}); err != nil {
		return err
	}
	p, err := fc.expect(0, classConnection, mConnStart)
	if err != nil {
		return err
	}
	if !startOffersPlain(p) {
		return errors.New("the broker does not offer the PLAIN mechanism")
	}
	var b []byte
	b, s := beginMethod(b, 0, classConnection, mConnStartOk)
	b = appendTable(b, func(t []byte) []byte {
		t = appendField(t, "product", 'S', []byte("railmq-perf"))
		t = appendField(t, "connection_name", 'S', []byte(name))
		caps := appendTable(nil, func(c []byte) []byte {
			for _, k := range []string{"publisher_confirms", "basic.nack", "consumer_cancel_notify", "connection.blocked"} {
				c = appendField(c, k, 't', []byte{1})
			}
			return c
		})
		return appendField(t, "capabilities", 'F', caps)
	})
	b = appendShortStr(b, "PLAIN")
	b = appendLongStr(b, "\x00"+u.Username+"\x00"+u.Password)
	b = appendShortStr(b, "en_US")
	b = endFrame(b, s)
	if _, err := fc.nc.Write(b); err != nil {
		return err
	}
	if p, err = fc.expect(0, classConnection, mConnTune); err != nil {
		return err
	}
	if len(p) < 8 {
		return errFrameSyntax
	}
	fm := binary.BigEndian.Uint32(p[2:])
	srvHB := binary.BigEndian.Uint16(p[6:])
	fc.frameMax = frameMaxWanted
	if fm != 0 && fm < fc.frameMax {
		fc.frameMax = fm
	}
	hb := pickNonZeroMin(int(heartbeat/time.Second), int(srvHB)) // as amqp091-go does
	fc.hb = time.Duration(hb) * time.Second
	b, s = beginMethod(b[:0], 0, classConnection, mConnTuneOk)
	b = binary.BigEndian.AppendUint16(b, 1) // channel-max: channel 1 is all it opens
	b = binary.BigEndian.AppendUint32(b, fc.frameMax)
	b = binary.BigEndian.AppendUint16(b, uint16(hb))
	b = endFrame(b, s)
	b, s = beginMethod(b, 0, classConnection, mConnOpen)
	b = appendShortStr(b, u.Vhost)
	b = appendShortStr(b, "") // reserved-1
	b = append(b, 0)          // reserved-2
	b = endFrame(b, s)
	b, s = beginMethod(b, frameChannel, classChannel, mChanOpen)
	b = appendShortStr(b, "")
	b = endFrame(b, s)
	if _, err := fc.nc.Write(b); err != nil {
		return err
	}
	if _, err := fc.expect(0, classConnection, mConnOpenOk); err != nil {
		return err
	}
	_, err = fc.expect(frameChannel, classChannel, mChanOpenOk)
	return err
}

func pickNonZeroMin(client, server int) int {
	if client == 0 || server == 0 {
		return max(client, server)
	}
	return min(client, server)
}

// startOffersPlain reports whether connection.start lists PLAIN.
func startOffersPlain(p []byte) bool {
	// version-major, version-minor, server-properties (table), mechanisms.
	if len(p) < 6 {
		return false
	}
	n := int(binary.BigEndian.Uint32(p[2:]))
	p = p[6:]
	if len(p) < n+4 {
		return false
	}
	p = p[n:]
	m := int(binary.BigEndian.Uint32(p))
	if len(p) < 4+m {
		return false
	}
	for _, mech := range strings.Fields(string(p[4 : 4+m])) {
		if mech == "PLAIN" {
			return true
		}
	}
	return false
}

// expect reads frames until a method frame arrives and checks it is
// class.method on channel ch (heartbeats are skipped). A connection.close
// or channel.close is answered and returned as a *closeError. It returns
// the method's arguments, valid until the next read.
func (fc *frameConn) expect(ch uint16, class, method uint16) ([]byte, error) {
	for {
		typ, fch, p, err := fc.readFrame()
		if err != nil {
			return nil, err
		}
		if typ == frameHeartbeat {
			continue
		}
		if typ != frameMethod || len(p) < 4 {
			return nil, fmt.Errorf("%w: type %d on channel %d", errUnexpected, typ, fch)
		}
		c, m := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
		if c == class && m == method && fch == ch {
			return p[4:], nil
		}
		if ce := fc.answerClose(fch, c, m, p[4:]); ce != nil {
			return nil, ce
		}
		return nil, fmt.Errorf("%w: method %d.%d on channel %d, want %d.%d", errUnexpected, c, m, fch, class, method)
	}
}

// answerClose handles connection.close and channel.close from the broker:
// it sends the close-ok and returns the error; for any other method it
// returns nil.
func (fc *frameConn) answerClose(ch, class, method uint16, args []byte) *closeError {
	var what string
	var ok uint16
	switch {
	case class == classConnection && method == mConnClose:
		what, ok = "connection", mConnCloseOk
	case class == classChannel && method == mChanClose:
		what, ok = "channel", mChanCloseOk
	default:
		return nil
	}
	ce := &closeError{what: what}
	if len(args) >= 3 {
		ce.code = binary.BigEndian.Uint16(args)
		if n := int(args[2]); len(args) >= 3+n {
			ce.text = string(args[3 : 3+n])
		}
	}
	b, s := beginMethod(nil, ch, class, ok)
	_ = fc.write(endFrame(b, s))
	return ce
}

// readFrame returns the next frame. The payload aliases the reader's buffer
// and is valid until the next call; nothing is consumed unless a whole
// frame is returned, so a read deadline may interrupt it and a later call
// resumes cleanly.
func (fc *frameConn) readFrame() (typ uint8, ch uint16, payload []byte, err error) {
	h, err := fc.br.Peek(7)
	if err != nil {
		return 0, 0, nil, err
	}
	size := int(binary.BigEndian.Uint32(h[3:]))
	if size > int(fc.frameMaxOr())-8 {
		return 0, 0, nil, fmt.Errorf("%w: frame of %d bytes exceeds frame_max %d", errFrameSyntax, size, fc.frameMaxOr())
	}
	f, err := fc.br.Peek(7 + size + 1)
	if err != nil {
		return 0, 0, nil, err
	}
	if f[7+size] != frameEnd {
		return 0, 0, nil, fmt.Errorf("%w: bad frame end %#x", errFrameSyntax, f[7+size])
	}
	_, _ = fc.br.Discard(7 + size + 1) // the bytes stay valid until the next read
	return f[0], binary.BigEndian.Uint16(f[1:]), f[7 : 7+size], nil
}

func (fc *frameConn) frameMaxOr() uint32 {
	if fc.frameMax == 0 {
		return frameMaxWanted // during the handshake
	}
	return fc.frameMax
}

// write writes b whole under wmu.
func (fc *frameConn) write(b []byte) error {
	fc.wmu.Lock()
	_, err := fc.nc.Write(b)
	fc.wmu.Unlock()
	return err
}

// heartbeats sends a heartbeat frame every half interval (§4.2.7) until
// the connection closes. The engine does not time out a silent broker; a
// dead peer shows up as a failed write or read.
func (fc *frameConn) heartbeats() {
	defer close(fc.hbDone)
	if fc.hb <= 0 {
		<-fc.hbStop
		return
	}
	t := time.NewTicker(fc.hb / 2)
	defer t.Stop()
	hb := []byte{frameHeartbeat, 0, 0, 0, 0, 0, 0, frameEnd}
	for {
		select {
		case <-fc.hbStop:
			return
		case <-t.C:
			if fc.write(hb) != nil {
				<-fc.hbStop
				return
			}
		}
	}
}

// sendClose starts the connection.close handshake (§4.2.2.2) from the
// client side.
func (fc *frameConn) sendClose() error {
	b, s := beginMethod(nil, 0, classConnection, mConnClose)
	b = binary.BigEndian.AppendUint16(b, replySuccess)
	b = appendShortStr(b, "Goodbye")
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	return fc.write(endFrame(b, s))
}

// shutdown stops the heartbeats and closes the socket; it is idempotent.
func (fc *frameConn) shutdown() {
	fc.closed.Do(func() {
		close(fc.hbStop)
		_ = fc.nc.Close()
		<-fc.hbDone
	})
}

// closeHandshake sends connection.close and reads (discarding) until
// close-ok, the broker's own connection.close, an error or the deadline;
// then it shuts the connection down. For connections whose frames nobody
// else reads.
func (fc *frameConn) closeHandshake(deadline time.Time) error {
	defer fc.shutdown()
	if err := fc.sendClose(); err != nil {
		return err
	}
	_ = fc.nc.SetReadDeadline(deadline)
	for {
		typ, ch, p, err := fc.readFrame()
		if err != nil {
			return err
		}
		if typ != frameMethod || len(p) < 4 {
			continue
		}
		c, m := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
		switch {
		case c == classConnection && m == mConnCloseOk:
			return nil
		case c == classConnection && m == mConnClose:
			fc.answerClose(ch, c, m, p[4:])
			return nil
		}
	}
}

// rpc sends one method frame on channel 1 and waits for the reply; for
// setup only (it allocates).
func (fc *frameConn) rpc(class, method uint16, args []byte, replyMethod uint16) ([]byte, error) {
	b, s := beginMethod(nil, frameChannel, class, method)
	b = append(b, args...)
	if err := fc.write(endFrame(b, s)); err != nil {
		return nil, err
	}
	_ = fc.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = fc.nc.SetReadDeadline(time.Time{}) }()
	return fc.expect(frameChannel, class, replyMethod)
}

// Encoding helpers, for setup and for building templates.

func beginMethod(b []byte, ch uint16, class, method uint16) ([]byte, int) {
	b = append(b, frameMethod, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	s := len(b)
	b = binary.BigEndian.AppendUint16(b, class)
	b = binary.BigEndian.AppendUint16(b, method)
	return b, s
}

func beginFrame(b []byte, typ uint8, ch uint16) ([]byte, int) {
	b = append(b, typ, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	return b, len(b)
}

func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start-4:], uint32(len(b)-start))
	return append(b, frameEnd)
}

func appendShortStr(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

func appendLongStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendTable appends a field table whose fields fill appends.
func appendTable(b []byte, fill func([]byte) []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// appendField appends one table field: 'S' takes the string bytes, 't' one
// octet, 'F' an encoded table.
func appendField(b []byte, name string, kind byte, v []byte) []byte {
	b = appendShortStr(b, name)
	b = append(b, kind)
	if kind == 'S' {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	}
	return append(b, v...)
}

// shortStrAt returns the short string at p[0:] and the rest.
func shortStrAt(p []byte) ([]byte, []byte, bool) {
	if len(p) < 1 || len(p) < 1+int(p[0]) {
		return nil, nil, false
	}
	n := int(p[0])
	return p[1 : 1+n], p[1+n:], true
}

// errIsClosed reports errors that mean the socket was closed under us.
func errIsClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}
