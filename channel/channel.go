package channel

import (
	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// FrameSink is where a channel writes its frames: the connection's
// outbound buffer. Implementations are safe for concurrent use.
type FrameSink interface {
	SendMethod(ch uint16, m amqp.Method)
	SendContent(ch uint16, m amqp.Method, props, body []byte)
}

// Config describes a channel's place in its connection.
type Config struct {
	Number   uint16
	Sink     FrameSink
	User     string
	FrameMax uint32
	Logger   *zap.Logger
}

// Channel is one AMQP channel. Its methods are called only from the
// connection's reader goroutine, which owns the channel's state.
type Channel struct {
	cfg Config
}

// New opens a channel.
func New(cfg Config) *Channel {
	return &Channel{cfg: cfg}
}

// HandleMethod handles a method other than channel.open/close/close-ok
// (the connection handles those). It returns an *amqp.Error for an
// exception.
func (c *Channel) HandleMethod(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.ChannelFlow:
		if !m.Active {
			return notImplemented(m, "active=false")
		}
		c.cfg.Sink.SendMethod(c.cfg.Number, &amqp.ChannelFlowOk{Active: true})
		return nil
	case *amqp.ChannelFlowOk:
		return nil
	}
	return notImplemented(m, "%s", m.Name())
}

// HandleContent handles a content header or body frame.
func (c *Channel) HandleContent(f amqp.Frame) error {
	return &amqp.Error{Code: amqp.UnexpectedFrame, Text: "UNEXPECTED_FRAME - expected method frame, got non method frame instead"}
}

// Close releases the channel: its unacked deliveries are requeued and its
// consumers cancelled.
func (c *Channel) Close() {}

func notImplemented(m amqp.Method, format string, args ...any) *amqp.Error {
	e := amqp.Errorf(amqp.NotImplemented, format, args...)
	e.ClassID, e.MethodID = m.Index()
	return e
}
