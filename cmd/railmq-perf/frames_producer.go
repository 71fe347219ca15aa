package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
)

// batchBytes is about how many bytes of publishes one write carries.
const batchBytes = 64 << 10

// publishTemplate encodes one message (basic.publish, content header, body
// frames split at frameMax) on channel 1 and returns it with the offset of
// the body's first byte, where putHeader patches each message's id and
// send time.
func publishTemplate(exchange, key string, persistent bool, body []byte, frameMax uint32) (tmpl []byte, bodyOff int) {
	b, s := beginMethod(nil, frameChannel, classBasic, mBasicPublish)
	b = append(b, 0, 0) // reserved-1
	b = appendShortStr(b, exchange)
	b = appendShortStr(b, key)
	b = append(b, 1) // mandatory=1, immediate=0
	b = endFrame(b, s)
	b, s = beginFrame(b, frameHeader, frameChannel)
	b = binary.BigEndian.AppendUint16(b, classBasic)
	b = append(b, 0, 0) // weight
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	if persistent {
		b = append(b, 0x10, 0x00, 2) // property flags: delivery-mode only; mode 2
	} else {
		b = append(b, 0, 0)
	}
	b = endFrame(b, s)
	chunk := int(frameMax) - 8
	bodyOff = len(b) + 7
	for rest := body; len(rest) > 0; {
		n := min(chunk, len(rest))
		b, s = beginFrame(b, frameBody, frameChannel)
		b = append(b, rest[:n]...)
		b = endFrame(b, s)
		rest = rest[n:]
	}
	return b, bodyOff
}

// appendPublishes appends n copies of tmpl to buf with sequence numbers
// seq.. and send time now patched in. It does not allocate once buf has
// room.
func appendPublishes(buf, tmpl []byte, bodyOff int, id uint32, seq uint64, n int, now int64) []byte {
	for i := range n {
		at := len(buf)
		buf = append(buf, tmpl...)
		putHeader(buf[at+bodyOff:], header{producer: id, seq: seq + uint64(i), sentNano: now})
	}
	return buf
}

// openFrameProducer is openProducer for --engine frames.
func (r *runner) openFrameProducer(id int, key string) (*producer, error) {
	fc, err := r.frameDial(fmt.Sprintf("railmq-perf producer %d", id))
	if err != nil {
		return nil, err
	}
	if r.cfg.Confirm > 0 {
		if _, err := fc.rpc(classConfirm, mConfirmSelect, []byte{0 /* nowait */}, mConfirmSelectOk); err != nil {
			_ = fc.closeHandshake(time.Now().Add(stopWait))
			return nil, fmt.Errorf("confirm.select: %w", err)
		}
	}
	p := &producer{
		id: uint32(id), r: r, fc: fc, key: key,
		confirmsDone: make(chan struct{}),
		returnsDone:  make(chan struct{}),
		skip:         make(map[uint64]struct{}),
		wake:         make(chan struct{}, 1),
	}
	go p.readFrames()
	return p, nil
}

// signal wakes the publishing goroutine if it waits (window, blocked).
func (p *producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// runFrames is run for --engine frames: it writes batches of pre-encoded
// publishes, as many as the confirm window, --pmessages and batchBytes
// allow, all with one send time.
func (p *producer) runFrames(ctx context.Context) {
	cfg := p.r.cfg
	fc := p.fc
	// A broker that stops reading would leave Write blocked for ever.
	stopW := context.AfterFunc(ctx, func() { _ = fc.nc.SetWriteDeadline(time.Now().Add(stopWait)) })
	defer stopW()
	tmpl, bodyOff := publishTemplate(cfg.exchange(), p.key, cfg.Persistent, newBody(cfg.Size), fc.frameMax)
	perBatch := max(batchBytes/len(tmpl), 1)
	buf := make([]byte, 0, perBatch*len(tmpl))
	lim := newLimiter(cfg.Rate)
	var seq uint64
	for cfg.PMessages == 0 || seq < cfg.PMessages {
		if ctx.Err() != nil {
			break
		}
		select {
		case <-p.confirmsDone: // the reader ended: the channel or connection is gone
			return
		default:
		}
		n := perBatch
		if cfg.PMessages > 0 {
			n = int(min(uint64(n), cfg.PMessages-seq))
		}
		wait := p.blocked.Load()
		if cfg.Confirm > 0 && !wait {
			room := cfg.Confirm - p.outstanding()
			wait = room <= 0
			n = min(n, room)
		}
		if wait {
			select {
			case <-p.wake:
			case <-ctx.Done():
			case <-p.confirmsDone: // connection lost; the reader reports it
				return
			}
			continue
		}
		if cfg.Rate > 0 {
			n = 1
			if d := lim.delay(time.Now()); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					continue
				}
			}
		}
		buf = appendPublishes(buf[:0], tmpl, bodyOff, p.id, seq, n, time.Now().UnixNano())
		// Counted before the write: a confirm may come back before Write
		// returns, and outstanding must not go negative.
		p.published.Add(uint64(n))
		if err := fc.write(buf); err != nil {
			p.published.Add(^uint64(n - 1))
			if ctx.Err() == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
				p.r.fail("producer %d: publish: %v", p.id, err)
			}
			break
		}
		seq += uint64(n)
	}
	p.awaitConfirms()
}

// readFrames reads the producer's connection: confirms, returns,
// connection.blocked/unblocked, heartbeats and closes. It ends when the
// connection closes, and closes confirmsDone and returnsDone.
func (p *producer) readFrames() {
	defer close(p.returnsDone)
	defer close(p.confirmsDone)
	defer p.signal()
	fc := p.fc
	var (
		inReturn bool   // a basic.return's content follows
		left     uint64 // its body bytes still to come
		head     [headerSize]byte
		got      int
	)
	returned := func() {
		inReturn = false
		p.returned.Add(1)
		if h, err := parseHeader(head[:got]); err == nil {
			p.mu.Lock()
			p.skip[h.seq] = struct{}{}
			p.mu.Unlock()
		}
	}
	for {
		typ, ch, pl, err := fc.readFrame()
		if err != nil {
			if !p.closingFrames.Load() {
				p.r.fail("producer %d: connection lost: %v", p.id, err)
			}
			return
		}
		switch typ {
		case frameHeader:
			if inReturn && len(pl) >= 12 {
				left, got = binary.BigEndian.Uint64(pl[4:]), 0
				if left == 0 {
					returned()
				}
			}
		case frameBody:
			if inReturn {
				got += copy(head[got:], pl)
				left -= min(left, uint64(len(pl)))
				if left == 0 {
					returned()
				}
			}
		case frameMethod:
			if len(pl) < 4 {
				p.r.fail("producer %d: %v", p.id, errFrameSyntax)
				return
			}
			class, method, args := binary.BigEndian.Uint16(pl), binary.BigEndian.Uint16(pl[2:]), pl[4:]
			switch {
			case class == classBasic && (method == mBasicAck || method == mBasicNack):
				if len(args) < 9 {
					p.r.fail("producer %d: %v", p.id, errFrameSyntax)
					return
				}
				p.settle(binary.BigEndian.Uint64(args), args[8]&1 != 0, method == mBasicAck)
			case class == classBasic && method == mBasicReturn:
				inReturn = true
			case class == classConnection && method == mConnBlocked:
				p.blocked.Store(true)
			case class == classConnection && method == mConnUnblocked:
				p.blocked.Store(false)
				p.signal()
			case class == classConnection && method == mConnCloseOk:
				return
			default:
				if ce := fc.answerClose(ch, class, method, args); ce != nil {
					if !p.closingFrames.Load() || ce.code != replySuccess {
						p.r.fail("producer %d: %v", p.id, ce)
					}
					return
				}
				p.r.fail("producer %d: %v: method %d.%d", p.id, errUnexpected, class, method)
			}
		}
		if p.fc.br.Buffered() == 0 {
			p.signal()
		}
	}
}

// settle records basic.ack or basic.nack for tag (and, with multiple, every
// earlier tag). Tags start at 1 with confirm.select and this channel
// publishes sequence numbers from 0, so tag t carries seq t-1.
func (p *producer) settle(tag uint64, multiple, ack bool) {
	var each func(uint64)
	if !ack {
		each = func(t uint64) {
			p.mu.Lock()
			p.skip[t-1] = struct{}{}
			p.mu.Unlock()
		}
	}
	n := p.conf.settle(tag, multiple, each)
	if ack {
		p.confirmed.Add(n)
	} else {
		p.nacked.Add(n)
	}
	if p.r.cfg.Confirm > 0 && p.outstanding() < p.r.cfg.Confirm/2+1 {
		p.signal()
	}
}

// confirmTracker counts settled delivery tags once each, whatever mix of
// single and multiple confirms the broker sends. Owned by the reader.
type confirmTracker struct {
	low   uint64              // every tag <= low is settled
	above map[uint64]struct{} // settled tags above low (out-of-order singles)
}

// settle marks tag (with multiple: every tag up to it) settled, calls each
// (if not nil) for every newly settled tag, and returns how many there were.
func (t *confirmTracker) settle(tag uint64, multiple bool, each func(uint64)) uint64 {
	if tag <= t.low {
		return 0
	}
	var n uint64
	switch {
	case !multiple && tag != t.low+1:
		if _, dup := t.above[tag]; dup {
			return 0
		}
		if t.above == nil {
			t.above = make(map[uint64]struct{})
		}
		t.above[tag] = struct{}{}
		if each != nil {
			each(tag)
		}
		return 1
	case len(t.above) == 0:
		n = tag - t.low
		if each != nil {
			for x := t.low + 1; x <= tag; x++ {
				each(x)
			}
		}
	default:
		for x := t.low + 1; x <= tag; x++ {
			if _, ok := t.above[x]; ok {
				delete(t.above, x)
				continue
			}
			n++
			if each != nil {
				each(x)
			}
		}
	}
	t.low = tag
	for len(t.above) > 0 {
		if _, ok := t.above[t.low+1]; !ok {
			break
		}
		delete(t.above, t.low+1)
		t.low++
	}
	return n
}

// closeFrames closes a frame producer's connection: connection.close, then
// the reader sees close-ok and ends.
func (p *producer) closeFrames() {
	p.closingFrames.Store(true)
	if err := p.fc.sendClose(); err == nil {
		select {
		case <-p.confirmsDone:
		case <-time.After(stopWait):
			p.r.note("producer %d: no connection.close-ok within %v", p.id, stopWait)
		}
	}
	p.fc.shutdown()
	<-p.confirmsDone
}
