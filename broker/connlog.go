package broker

// The connection's lines, worded as RabbitMQ 3.10.8's rabbit_reader and
// rabbit_channel word them (so that what operators grep for is there),
// each with the same facts as typed fields:
//
//	accepting AMQP connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672)
//	connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672) has a client-provided name: billing
//	connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672 - billing): user 'guest' authenticated and granted access to vhost '/'
//	Channel error on connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:
//	operation queue.declare caused a channel exception precondition_failed: inequivalent arg 'durable' ...
//	closing AMQP connection <0.7.0> (127.0.0.1:58852 -> 127.0.0.1:5672 - billing, vhost: '/', user: 'guest')
//
// RabbitMQ names a connection by its Erlang pid; railmq writes the
// connection's id in the pid's place, <0.ID.0>. A socket closed before it
// sent a byte (a load balancer's or a health check's TCP probe) is logged
// at debug only, as rabbit_reader does (connection_closed_with_no_data_received).

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// errProbe ends a connection that closed before it sent anything.
var errProbe = errors.New("connection closed with no data received")

// abruptClose is the close reason of a socket closed without
// connection.close (onFrame), RabbitMQ's words.
const abruptClose = "client unexpectedly closed TCP connection"

// pid is the connection's name in RabbitMQ's pid shape.
func (c *conn) pid() string { return fmt.Sprintf("<0.%d.0>", c.id) }

// logName is rabbit_reader's dynamic connection name: "peer -> local",
// then " - " and the client-provided name once the client gave one.
func (c *conn) logName() string {
	n := connectionName(c.nc)
	if c.clientName != "" {
		n += " - " + c.clientName
	}
	return n
}

// acceptFields are the connection's listener and TLS session.
func (c *conn) acceptFields() []zap.Field {
	f := []zap.Field{zap.String("connection", connectionName(c.nc)), zap.String("listener", c.nc.LocalAddr().String())}
	if tc := c.tlsConn(); tc != nil {
		st := tc.ConnectionState()
		if st.HandshakeComplete {
			f = append(f, zap.String("tls_protocol", tls.VersionName(st.Version)),
				zap.String("tls_cipher", tls.CipherSuiteName(st.CipherSuite)))
		}
	}
	return f
}

// isProbe reports whether err, from a connection's wait for its first
// byte, is a probe's: closed with nothing sent (a TLS one before or in
// its TLS handshake).
func isProbe(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// logAccepting logs the connection once its first byte came (info), or
// once it closed without one (debug).
func (c *conn) logAccepting(probe bool) {
	msg := "accepting AMQP connection " + c.pid() + " (" + connectionName(c.nc) + ")"
	if probe {
		c.log.Debug(msg, c.acceptFields()...)
		return
	}
	c.log.Info(msg, c.acceptFields()...)
}

// logClientName records and logs the client-provided name of
// connection.start-ok's client properties.
func (c *conn) logClientName(props amqp.Table) {
	c.props = props
	name, _ := props["connection_name"].(string)
	if name == "" {
		return
	}
	c.log.Info("connection "+c.pid()+" ("+connectionName(c.nc)+") has a client-provided name: "+name,
		zap.String("connection", connectionName(c.nc)), zap.String("connection_name", name))
	c.clientName = name
}

// logGranted is the line of a connection open: who, where, and the
// client's product and version from its properties.
func (c *conn) logGranted() {
	f := append(c.acceptFields(), zap.String("user", c.user), zap.String("vhost", c.vhost))
	if c.clientName != "" {
		f = append(f, zap.String("connection_name", c.clientName))
	}
	for _, k := range [...]string{"product", "version", "platform"} {
		if v, ok := c.props[k].(string); ok {
			f = append(f, zap.String("client_"+k, v))
		}
	}
	c.log.Info(fmt.Sprintf("connection %s (%s): user '%s' authenticated and granted access to vhost '%s'",
		c.pid(), c.logName(), c.user, c.vhost), f...)
}

// logClosed is the connection's last line, from how it ended: err is
// what serve ended with, reason the close reason.
func (c *conn) logClosed(err error, reason string) {
	f := []zap.Field{zap.String("connection", connectionName(c.nc)), zap.String("reason", reason)}
	if c.clientName != "" {
		f = append(f, zap.String("connection_name", c.clientName))
	}
	switch {
	case errors.Is(err, errProbe):
		c.log.Debug("closing AMQP connection "+c.pid()+" ("+connectionName(c.nc)+"):\n"+abruptClose, f...)
	case c.user == "" || c.vh == nil:
		// Ended in the handshake: RabbitMQ's line without user and vhost.
		c.log.Warn("closing AMQP connection "+c.pid()+" ("+c.logName()+"):\n"+reason, f...)
	case reason == abruptClose:
		c.log.Warn(fmt.Sprintf("closing AMQP connection %s (%s, vhost: '%s', user: '%s'):\n%s",
			c.pid(), c.logName(), c.vhost, c.user, abruptClose), append(f, zap.String("user", c.user), zap.String("vhost", c.vhost))...)
	default:
		c.log.Info(fmt.Sprintf("closing AMQP connection %s (%s, vhost: '%s', user: '%s')",
			c.pid(), c.logName(), c.vhost, c.user), append(f, zap.String("user", c.user), zap.String("vhost", c.vhost))...)
	}
}

// exceptionFields are an exception's facts: method, reply code and text.
func exceptionFields(e *amqp.Error) []zap.Field {
	return []zap.Field{zap.String("method", amqp.MethodName(e.ClassID, e.MethodID)),
		zap.Uint16("reply_code", e.Code), zap.String("reply_text", e.Text)}
}

// explain is rabbit_channel's format_soft_error (format_hard_error for a
// connection's): "operation queue.declare caused a channel exception
// precondition_failed: <the text after the constant>".
func explain(e *amqp.Error, kind string) string {
	name := amqp.ReplyText(e.Code)
	text := strings.TrimPrefix(e.Text, name+" - ")
	return "operation " + amqp.MethodName(e.ClassID, e.MethodID) + " caused a " + kind + " exception " +
		strings.ToLower(name) + ": " + text
}

// logChannelError is RabbitMQ's line for a channel exception, at its
// level (error).
func (c *conn) logChannelError(n uint16, e *amqp.Error) {
	f := append(exceptionFields(e), zap.Uint16("channel", n), zap.String("connection", connectionName(c.nc)),
		zap.String("user", c.user), zap.String("vhost", c.vhost))
	// rabbit_channel names the connection without its client-provided
	// name (RabbitMQ 3.10.8's log shows it so).
	c.log.Error(fmt.Sprintf("Channel error on connection %s (%s, vhost: '%s', user: '%s'), channel %d:\n%s",
		c.pid(), connectionName(c.nc), c.vhost, c.user, n, explain(e, "channel")), f...)
}

// logConnectionError is RabbitMQ's line for a connection exception.
func (c *conn) logConnectionError(e *amqp.Error) {
	f := append(exceptionFields(e), zap.Uint16("channel", 0), zap.String("connection", connectionName(c.nc)),
		zap.String("user", c.user), zap.String("vhost", c.vhost))
	c.log.Error(fmt.Sprintf("Error on AMQP connection %s (%s, vhost: '%s', user: '%s', state: running), channel 0:\n %s",
		c.pid(), connectionName(c.nc), c.vhost, c.user, explain(e, "connection")), f...)
}
