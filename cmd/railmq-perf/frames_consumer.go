package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// frameDelivery is the consumer's parse state across the frames of one
// delivery (basic.deliver, content header, body frames).
type frameDelivery struct {
	active      bool
	tag         uint64
	redelivered bool
	left        uint64 // body bytes still to come
	head        [headerSize]byte
	got         int // bytes of head filled
}

// frameConsumer is the raw-socket state of a consumer.
type frameConsumer struct {
	fc      *frameConn
	d       frameDelivery
	now     int64 // when the last read from the socket returned, Unix ns
	ackBuf  []byte
	closeMu sync.Once
}

// openFrameConsumer is openConsumer for --engine frames.
func (r *runner) openFrameConsumer(id int, q *queueState, ackEvery int) (*consumer, error) {
	fc, err := r.frameDial(fmt.Sprintf("railmq-perf consumer %d", id))
	if err != nil {
		return nil, err
	}
	c := &consumer{id: id, r: r, q: q, ackEvery: ackEvery, done: make(chan struct{}),
		fr: &frameConsumer{fc: fc, ackBuf: make([]byte, 0, 4096)}}
	fail := func(what string, err error) (*consumer, error) {
		_ = fc.closeHandshake(time.Now().Add(stopWait))
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if r.cfg.Prefetch > 0 {
		a := binary.BigEndian.AppendUint32(nil, 0) // prefetch-size
		a = binary.BigEndian.AppendUint16(a, uint16(r.cfg.Prefetch))
		a = append(a, 0) // global=false
		if _, err := fc.rpc(classBasic, mBasicQos, a, mBasicQosOk); err != nil {
			return fail("basic.qos", err)
		}
	}
	if r.cfg.Replay {
		return c, nil // basic.consume once the stream is written
	}
	if err := c.consumeFrames(); err != nil {
		return fail("start", err)
	}
	return c, nil
}

// consumeFrames is consume for --engine frames.
func (c *consumer) consumeFrames() error {
	a := []byte{0, 0} // reserved-1
	a = appendShortStr(a, c.q.name)
	a = appendShortStr(a, "") // server-generated consumer tag
	var bits byte
	if c.r.cfg.AutoAck {
		bits |= 2 // no-ack
	}
	a = append(a, bits)
	a = c.r.cfg.appendConsumeArgs(a)
	if _, err := c.fr.fc.rpc(classBasic, mBasicConsume, a, mBasicConsumeOk); err != nil {
		return fmt.Errorf("basic.consume %s: %w", c.q.name, err)
	}
	return nil
}

// errConsumerEnd stops the consumer's loop; the cause was already reported.
var errConsumerEnd = errors.New("consumer ended")

// runFrames is run for --engine frames. It reads frames until stop is
// closed, then acks what is pending and closes the connection. Acks are
// appended to a buffer and written once no whole frame is left in the
// reader's buffer, i.e. once per read batch.
func (c *consumer) runFrames(stop <-chan struct{}) {
	defer close(c.done)
	fr := c.fr
	fc := fr.fc
	quit := make(chan struct{})
	defer close(quit)
	go func() { // wake the reader when the run stops
		select {
		case <-stop:
			_ = fc.nc.SetReadDeadline(time.Now())
		case <-quit:
		}
	}()
	for {
		// Deliveries that arrived in one read share its arrival time: one
		// clock reading per read, not per message.
		fresh := !fc.wholeFrameBuffered()
		typ, ch, p, err := fc.readFrame()
		if fresh {
			fr.now = time.Now().UnixNano()
		}
		if err != nil {
			select {
			case <-stop:
				if errors.Is(err, os.ErrDeadlineExceeded) {
					c.flushAcks()
					c.closeFrames()
					return
				}
			default:
			}
			if !c.r.closing.Load() {
				c.r.fail("consumer %d: connection lost: %v", c.id, err)
			}
			return
		}
		if err := c.frame(typ, ch, p); err != nil {
			if !errors.Is(err, errConsumerEnd) {
				c.r.fail("consumer %d: %v", c.id, err)
			}
			return
		}
		if len(fr.ackBuf) > 0 && !fc.wholeFrameBuffered() {
			if err := c.writeAcks(); err != nil {
				return
			}
		}
	}
}

// wholeFrameBuffered reports whether the reader holds a complete frame, so
// that reading it will not block.
func (fc *frameConn) wholeFrameBuffered() bool {
	n := fc.br.Buffered()
	if n < 7 {
		return false
	}
	h, _ := fc.br.Peek(7)
	return n >= 8+int(binary.BigEndian.Uint32(h[3:]))
}

// frame handles one frame, received on channel ch, on a consumer's
// connection.
func (c *consumer) frame(typ uint8, ch uint16, p []byte) error {
	d := &c.fr.d
	switch typ {
	case frameMethod:
		if len(p) < 4 {
			return errFrameSyntax
		}
		class, method, args := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:]), p[4:]
		if class == classBasic && method == mBasicDeliver {
			// consumer-tag, delivery-tag, redelivered, exchange, routing-key
			_, rest, ok := shortStrAt(args)
			if !ok || len(rest) < 9 {
				return errFrameSyntax
			}
			*d = frameDelivery{active: true, tag: binary.BigEndian.Uint64(rest), redelivered: rest[8]&1 != 0}
			return nil
		}
		return c.method(ch, class, method, args)
	case frameHeader:
		if !d.active {
			return fmt.Errorf("%w: content header without basic.deliver", errUnexpected)
		}
		if len(p) < 12 {
			return errFrameSyntax
		}
		d.left = binary.BigEndian.Uint64(p[4:])
		if d.left == 0 {
			c.delivered()
		}
	case frameBody:
		if !d.active {
			return fmt.Errorf("%w: body without basic.deliver", errUnexpected)
		}
		d.got += copy(d.head[d.got:], p)
		d.left -= min(d.left, uint64(len(p)))
		if d.left == 0 {
			c.delivered()
		}
	case frameHeartbeat:
	default:
		return fmt.Errorf("%w: frame type %d", errUnexpected, typ)
	}
	return nil
}

// method handles a method other than basic.deliver on a consumer's
// connection.
func (c *consumer) method(ch, class, method uint16, args []byte) error {
	switch {
	case class == classBasic && method == mBasicCancel:
		c.r.fail("consumer %d: broker cancelled the consumer on %s", c.id, c.q.name)
		return errConsumerEnd
	case class == classConnection && (method == mConnBlocked || method == mConnUnblocked):
		return nil // acks are not publishes; RabbitMQ still reads them
	}
	if ce := c.fr.fc.answerClose(ch, class, method, args); ce != nil {
		if !c.r.closing.Load() {
			c.r.fail("consumer %d: %v", c.id, ce)
		}
		return errConsumerEnd
	}
	return fmt.Errorf("%w: method %d.%d", errUnexpected, class, method)
}

// delivered completes the current delivery.
func (c *consumer) delivered() {
	d := &c.fr.d
	d.active = false
	c.handleDelivery(c.fr.now, d.tag, d.redelivered, d.head[:d.got])
}

// appendAck appends a basic.ack frame on channel 1.
func appendAck(b []byte, tag uint64, multiple bool) []byte {
	b = append(b, frameMethod, 0, frameChannel, 0, 0, 0, 13, 0, classBasic, 0, mBasicAck)
	b = binary.BigEndian.AppendUint64(b, tag)
	var m byte
	if multiple {
		m = 1
	}
	return append(b, m, frameEnd)
}

// writeAcks writes the buffered acks.
func (c *consumer) writeAcks() error {
	fr := c.fr
	err := fr.fc.write(fr.ackBuf)
	fr.ackBuf = fr.ackBuf[:0]
	if err != nil && !c.r.closing.Load() {
		c.r.fail("consumer %d: basic.ack: %v", c.id, err)
	}
	return err
}

// closeFrames closes the consumer's connection once.
func (c *consumer) closeFrames() {
	c.fr.closeMu.Do(func() {
		if err := c.fr.fc.closeHandshake(time.Now().Add(stopWait)); err != nil && !errIsClosed(err) {
			c.r.note("consumer %d: close: %v", c.id, err)
		}
	})
}
