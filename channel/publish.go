package channel

import (
	"strconv"
	"strings"
	"time"

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
	routed, waited := vhost.FanOut(c.store, msg, qs, c.confirm /* rejects */, c.newConfirm, c.cfg.Flushes)
	c.scratch.ResetSeen()
	if !routed && mandatory {
		c.returnMsg(msg)
	}
	if !waited {
		c.confirmNow() // nothing of it needed the store
	}
	return nil
}

func (c *Channel) returnMsg(msg *queue.Message) {
	c.cfg.Sink.SendContent(c.cfg.Number, &amqp.BasicReturn{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE",
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}, msg.Props, msg.Body)
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
