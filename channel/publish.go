package channel

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// txOp is a publish or acknowledgement deferred to tx.commit.
type txOp struct {
	msg      *queue.Message
	exchange string
	key      string
	mand     bool
	extra    []string    // CC and BCC routing keys
	ack      amqp.Method // *BasicAck, *BasicNack or *BasicReject
}

// What a deferred op holds besides the message's bytes, counted with them
// (a transaction of empty publishes or of acks holds memory too).
const (
	txOpSize  = int64(unsafe.Sizeof(txOp{}))
	txMsgSize = int64(unsafe.Sizeof(queue.Message{}))
	txAckSize = int64(unsafe.Sizeof(amqp.BasicNack{})) // the largest of the three
)

// hdrKeep is the largest properties the channel keeps its reused buffer
// for, uncounted, between the header and the first body frame: larger
// ones (up to frame_max) get a buffer of their own, counted while held.
const hdrKeep = 4 << 10

// HandleContent handles a content header or body frame.
//
// The header's declared size is not trusted: nothing is allocated for the
// body until its frames arrive (a client could otherwise reserve the
// maximum message size per channel with one small frame). A body that
// comes in one frame is allocated once, with its properties, at its exact
// size; a longer one's buffer grows, when full, to twice what has been
// received, capped at the declared size: the channel holds at most twice
// what it received, and a complete body fills its buffer exactly. What it
// holds is counted in cfg.Memory until the message is published (see
// complete).
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
		c.bodySize = h.BodySize
		if h.BodySize == 0 {
			c.buf = append(make([]byte, 0, len(h.Props)), h.Props...)
			c.plen = len(h.Props)
			return c.complete()
		}
		// The frame's payload is the reader's buffer: the properties are
		// copied, into the buffer kept for them when they are small.
		if len(h.Props) <= hdrKeep {
			c.hdr = append(c.hdr[:0], h.Props...)
			c.props = c.hdr
		} else {
			c.props = append([]byte(nil), h.Props...)
			c.hold(int64(cap(c.props)))
		}
		c.assembly = 2
		return nil
	default:
		if f.Type != amqp.FrameBody {
			return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		got := 0
		if c.buf != nil {
			got = len(c.buf) - c.plen
		}
		if uint64(got)+uint64(len(f.Payload)) > c.bodySize {
			return &amqp.Error{Code: amqp.FrameError, Text: "FRAME_ERROR - content body larger than the size its header declared",
				ClassID: amqp.ClassBasic, MethodID: 40}
		}
		c.appendBody(f.Payload)
		if uint64(len(c.buf)-c.plen) == c.bodySize {
			return c.complete()
		}
		c.hold(int64(cap(c.buf)))
		return nil
	}
}

// appendBody appends a body frame's payload to c.buf, making room as
// HandleContent says: for twice what has been received with p, at most
// the declared size. c.bodySize bounds what was received with p.
func (c *Channel) appendBody(p []byte) {
	got := 0
	if c.buf != nil {
		got = len(c.buf) - c.plen
	}
	if need := got + len(p); c.buf == nil || c.plen+need > cap(c.buf) {
		want := uint64(need) // the exact size when p completes the body
		if want < c.bodySize {
			want = min(2*want, c.bodySize)
		}
		if c.buf == nil {
			// The first body frame: properties and body share one
			// allocation.
			c.plen = len(c.props)
			c.buf = c.props
			c.props = nil // hdr is kept for the next message
		}
		buf := make([]byte, len(c.buf), c.plen+int(want))
		copy(buf, c.buf)
		c.buf = buf
	}
	c.buf = append(c.buf, p...)
}

// hold sets what cfg.Memory counts for the content being assembled to n
// bytes. Only the reader calls it (it owns asmHeld).
func (c *Channel) hold(n int64) {
	if d := n - c.asmHeld; d != 0 {
		c.asmHeld = n
		c.cfg.Memory.Add(d)
	}
}

// dropAssembly forgets the content being assembled (the channel closes
// mid-message) and its count.
func (c *Channel) dropAssembly() {
	c.assembly, c.pub = 0, nil
	c.props, c.buf = nil, nil
	c.hold(0)
}

// dropTx forgets the uncommitted transaction (tx.rollback, or the channel
// closes) and its count. The ops are dropped, not truncated: a truncated
// slice would keep their messages reachable until a later transaction
// overwrote them.
func (c *Channel) dropTx() {
	c.txOps = nil
	c.stats.uncommitted(nil)
	if c.txHeld != 0 {
		c.cfg.Memory.Add(-c.txHeld)
		c.txHeld = 0
	}
}

// deferOp adds op to the transaction, counting what it holds.
func (c *Channel) deferOp(op txOp) {
	n := txOpSize
	if op.msg != nil {
		n += txMsgSize + int64(len(op.msg.Props)+cap(op.msg.Body))
		for _, k := range op.extra {
			n += int64(unsafe.Sizeof(k)) + int64(len(k))
		}
	} else {
		n += txAckSize
	}
	c.txOps = append(c.txOps, op)
	c.stats.uncommitted(&op)
	c.txHeld += n
	c.cfg.Memory.Add(n)
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

// complete publishes the message assembled in c.buf. What the assembly
// counted is given back once the message is routed (its queues count its
// body themselves), deferred to tx.commit (then counted as a txOp) or
// refused.
func (c *Channel) complete() error {
	err := c.publishAssembled()
	c.hold(0)
	return err
}

// now is the time a message being published arrived: the reader's last
// read (Config.Flushes.At), or the clock's. Reading the clock for each message
// was 3.4% of the broker's CPU with 16-byte messages, a thousand of them
// to a read.
func (c *Channel) now() int64 {
	if f := c.cfg.Flushes; f != nil && f.At != 0 {
		return f.At
	}
	return queue.Now()
}

func (c *Channel) publishAssembled() error {
	p := c.pub
	c.assembly = 0
	c.pub = nil
	props := c.buf[:c.plen:c.plen]
	// Scanned from the message's own copy: BCC stripping finds the headers
	// by their offset in it.
	v := amqp.ViewProperties(props) // validated by ParseContentHeader
	msg := &queue.Message{
		Exchange:   p.Exchange,
		RoutingKey: p.RoutingKey,
		Props:      props,
		Body:       c.buf[c.plen:],
		Persistent: v.DeliveryMode == 2,
		Priority:   v.Priority,
		Enqueued:   c.now(),
	}
	c.buf = nil
	t := c.counts
	t.Received.Add(1)
	c.stats.Publish.Add(1)
	if c.confirm {
		t.ReceivedConfirm.Add(1)
	}
	t.CountSize(len(msg.Body))
	if !c.publisher {
		c.publisher = true
		t.Publishers.Add(1)
	}
	if c.leasePublish(p, v) { // amq.railmq.lease and .retry (lease.go)
		return nil
	}
	if err := c.allowPublish(p.Exchange, p.RoutingKey); err != nil {
		return withMethod(err, p)
	}
	if exp := v.Expiration; v.Flags&amqp.FlagExpiration != 0 {
		ms, err := parseExpiration(exp)
		if err != nil {
			return withMethod(err, p)
		}
		msg.Expires = msg.Enqueued + ms*int64(time.Millisecond)
		if ms == 0 {
			msg.Expires = msg.Enqueued // expires unless delivered at once
		}
	}
	err := c.publish(msg, p.Mandatory, v)
	return withMethod(err, p)
}

// parseExpiration reads the expiration property, a string of
// milliseconds, as RabbitMQ does (rabbit_channel, rabbit_basic:
// parse_expiration): Erlang's string:to_integer (a sign, then digits, any
// number of them), the rest refused as leftover_string, then
// rabbit_misc:check_expiry (not negative, at most 10 years). The 406's
// text prints the reason with ~p, as RabbitMQ's does.
func parseExpiration(b []byte) (int64, error) {
	const pre = "invalid expiration '%s': %s"
	col := len("invalid expiration '") + len(b) + len("': ")
	p := b
	neg := false
	if len(p) > 0 && (p[0] == '-' || p[0] == '+') {
		neg = p[0] == '-'
		p = p[1:]
	}
	n := 0
	for n < len(p) && p[n] >= '0' && p[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, precondition(pre, b, "no_integer")
	}
	digits, rest := strings.TrimLeft(string(p[:n]), "0"), p[n:]
	if len(rest) > 0 {
		return 0, precondition(pre, b, amqp.ErlPair(col, "leftover_string", amqp.ErlString(rest)))
	}
	if digits == "" {
		return 0, nil // 0, -0, 000
	}
	if neg {
		return 0, precondition(pre, b, amqp.ErlPair(col, "value_negative", "-"+digits))
	}
	if len(digits) > 12 { // maxTTL has 12 digits: more is larger, however many
		return 0, precondition(pre, b, amqp.ErlPair(col, "value_too_large", digits))
	}
	v, _ := strconv.ParseInt(digits, 10, 64)
	if v > maxTTL {
		return 0, precondition(pre, b, amqp.ErlPair(col, "value_too_large", digits))
	}
	return v, nil
}

// maxTTL is the largest TTL RabbitMQ takes, in ms: 10 years
// (rabbit_misc:check_expiry).
const maxTTL = 315_360_000_000

const replyToQueue = "amq.rabbitmq.reply-to"

func (c *Channel) publish(msg *queue.Message, mandatory bool, v amqp.PropertiesView) error {
	if v.UserID != nil && string(v.UserID) != c.cfg.User && !c.cfg.Impersonator {
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
			msg.Props = amqp.WithoutHeaderFields(msg.Props, v.Headers, r.BCC)
			v, _ = amqp.ScanProperties(msg.Props)
		}
	}
	if c.tx {
		c.deferOp(txOp{msg: msg, exchange: msg.Exchange, key: msg.RoutingKey, mand: mandatory, extra: extra})
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
		c.routed(c.cfg.Replies.deliver(msg), mandatory, msg)
		c.confirmNow()
		return nil
	}
	c.scratch.RawHeaders = headers
	c.scratch.Props = msg.Props
	c.scratch.Extra = extra
	c.scratch.HoldDedup = true // new ids are stored after the message (dedup_gate.go)
	qs, err := c.cfg.VHost.Route(msg.Exchange, msg.RoutingKey, &c.scratch)
	if (err != nil || len(qs) == 0 && msg.Exchange == "") && c.cfg.VHost.SyncMiss() {
		// Declared on another node a moment ago? (A queue named on the
		// default exchange too: RabbitMQ's declares are synchronous on
		// every node, and clients rely on it.)
		qs, err = c.cfg.VHost.Route(msg.Exchange, msg.RoutingKey, &c.scratch)
	}
	c.scratch.HoldDedup = false
	if err != nil {
		return err
	}
	var gate *dedupGate
	if len(c.scratch.DedupHeld) > 0 {
		gate = c.newDedupGate()
	}
	if c.cfg.VHost.Tracing() {
		// Before the message itself: its copy reaches a trace queue
		// before any delivery's.
		c.tracePublish(msg, qs, extra)
	}
	if c.scratch.Duplicate != queue.DedupConfirmDefault && len(qs) == 0 && len(c.scratch.Delayed) == 0 {
		if gate != nil {
			c.cfg.VHost.ReleaseDedup(gate.held, nil) // another exchange's new id: nothing to store first
		}
		c.duplicate(c.scratch.Duplicate) // dedup_confirm.go
		return nil
	}
	if len(c.scratch.Delayed) > 0 {
		return c.routeDelayed(msg, mandatory, qs, extra, gate)
	}
	// A queue's confirm is awaited when it writes the message to the store
	// or may refuse it (x-overflow reject-publish, deduplication).
	newConf := c.newConfirm
	dedup := c.scratch.DedupWrote && c.confirm
	switch {
	case gate != nil:
		newConf = gate.start
	case dedup:
		newConf = c.newConfirmDedup
	}
	routed, waited := vhost.FanOut(c.store, msg, qs, c.confirm /* rejects */, newConf, c.cfg.Flushes)
	if c.flowQ == nil {
		for _, q := range qs {
			if q.Behind() {
				c.flowQ = q // the connection waits for it (TakeFlow)
				break
			}
		}
	}
	c.scratch.ResetSeen()
	c.routed(routed, mandatory, msg)
	switch {
	case gate != nil:
		if !waited {
			gate.now() // nothing of it is stored, or needs to be
		}
	case dedup:
		// Routing added an id to a durable deduplication cache
		// (Scratch.DedupWrote): confirmed once its entry is durable too,
		// so that a confirmed id stays seen across a crash, whether or
		// not the queues wrote anything (a transient message to a queue
		// that may refuse it writes nothing).
		c.afterDedup(waited)
	case waited:
	default:
		c.confirmNow() // nothing of it needed the store
	}
	return nil
}

// newConfirmDedup is newConfirm for a publish whose routing added an id
// to a durable deduplication cache: one more Done, afterDedup's, is
// awaited.
func (c *Channel) newConfirmDedup(n int) queue.Confirmer {
	c.dedupConf = c.newConfirm(n + 1)
	return c.dedupConf
}

// afterDedup has the confirm of a publish that wrote a deduplication
// entry wait for the store's next commit (which writes the entries added
// so far): the one newConfirmDedup made when the queues were waited for,
// else a new one.
func (c *Channel) afterDedup(waited bool) {
	conf := c.dedupConf
	c.dedupConf = nil
	if !waited || conf == nil {
		conf = c.newConfirm(1)
	}
	c.cfg.VHost.AfterStored(conf.Done)
}

// routed counts a publish as routed or not, and returns an unroutable
// mandatory one.
func (c *Channel) routed(routed, mandatory bool, msg *queue.Message) {
	switch {
	case routed:
		c.counts.Routed.Add(1)
	case mandatory:
		c.counts.UnroutableReturn.Add(1)
		c.stats.ReturnUnroutable.Add(1)
		c.returnMsg(msg)
	default:
		c.counts.UnroutableDropped.Add(1)
		c.stats.DropUnroutable.Add(1)
	}
}

func (c *Channel) returnMsg(msg *queue.Message) {
	c.cfg.Sink.SendContent(c.cfg.Number, &amqp.BasicReturn{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE",
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}, msg.Props, msg.Body)
}

// commit applies the transaction's ops in order. What they counted is
// given back once all are routed (the queues have counted their bodies),
// or when one fails (the rest are dropped).
func (c *Channel) commit() error {
	ops, held := c.txOps, c.txHeld
	c.txOps, c.txHeld = nil, 0
	c.stats.uncommitted(nil)
	defer c.cfg.Memory.Add(-held)
	for _, op := range ops {
		if op.ack != nil {
			var err error
			switch a := op.ack.(type) {
			case *amqp.BasicAck:
				err = c.settle(a.DeliveryTag, a.Multiple, ackAck, false)
			case *amqp.BasicNack:
				err = c.settle(a.DeliveryTag, a.Multiple, ackNack, a.Requeue)
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

// routeDelayed is route for a message a delayed exchange held back (and
// that may have reached queues too, through an alternate exchange): its
// confirm waits for the store write of each delayed copy that is durable
// (vhost.Delay) as well as for the queues'. A delayed message is
// unroutable for mandatory (it is returned now), as with the plugin.
//
// gate (nil: none) holds the new deduplication ids routing added
// (dedup_gate.go): it then stands for the publish's confirm, waiting for
// the queues and the delayed copies before it releases them.
func (c *Channel) routeDelayed(msg *queue.Message, mandatory bool, qs []*queue.Queue, extra []string, gate *dedupGate) error {
	vh := c.cfg.VHost
	delayed, delay := c.scratch.Delayed, c.scratch.Delay
	nd := 0
	for _, x := range delayed {
		if vh.DelayWaits(x, msg) {
			nd++
		}
	}
	// Routing added an id to a durable deduplication cache on the way (an
	// exchange bound to the delayed one, or its alternate): the confirm
	// waits for the commit that writes it too, as route's does.
	dedup := c.scratch.DedupWrote && c.confirm
	nw := nd
	if dedup {
		nw++
	}
	// Copied before FanOut marks msg for the queues' store writes.
	held := *msg
	var conf queue.Confirmer
	newConf := c.newConfirm
	switch {
	case gate != nil:
		newConf = func(n int) queue.Confirmer {
			conf = gate.start(n + nd)
			return conf
		}
	case nw > 0:
		newConf = func(n int) queue.Confirmer {
			conf = c.newConfirm(n + nw)
			return conf
		}
	}
	routed, waited := vhost.FanOut(c.store, msg, qs, c.confirm /* rejects */, newConf, c.cfg.Flushes)
	switch {
	case waited:
	case gate != nil && nd > 0:
		conf = gate.start(nd)
		waited = true
	case gate != nil:
		gate.now() // nothing of it is stored, or needs to be
		waited = true
	case nw > 0:
		conf = c.newConfirm(nw)
		waited = true
	}
	for _, x := range delayed {
		vh.Delay(x, &held, extra, delay, conf)
	}
	if dedup && conf != nil {
		vh.AfterStored(conf.Done)
	}
	if c.flowQ == nil {
		for _, q := range qs {
			if q.Behind() {
				c.flowQ = q
				break
			}
		}
	}
	c.scratch.ResetSeen()
	c.routed(routed, mandatory, msg)
	if !waited {
		c.confirmNow()
	}
	return nil
}
