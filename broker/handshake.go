package broker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
)

func (c *conn) handshake() error {
	deadline := time.Now().Add(c.srv.opts.HandshakeTimeout)
	c.closeDeadline.Store(deadline.UnixNano())

	hdr := make([]byte, 8)
	// Logged once the first byte came, or the socket closed without one
	// (a probe's, at debug): connlog.go.
	_, err := c.br.Peek(1)
	probe := err != nil && isProbe(err)
	c.logAccepting(probe)
	if probe {
		return errProbe
	}
	if _, err = io.ReadFull(c.br, hdr); err != nil {
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
	c.out = append(c.out, c.startFrame()...) // encoded once per server (and once for TLS: tls.go)
	c.outMu.Unlock()
	c.flushes.Add(c) // written before the read (reply)
	m, err := c.readHandshakeMethod()
	if err != nil {
		return err
	}
	so, ok := m.(*amqp.ConnectionStartOk)
	if !ok {
		return c.handshakeUnexpected(m)
	}
	c.logClientName(so.ClientProperties)
	if caps, ok := so.ClientProperties["capabilities"].(amqp.Table); ok {
		c.clientCaps = caps
	}
	if so.Mechanism != "PLAIN" && so.Mechanism != "AMQPLAIN" && (so.Mechanism != "EXTERNAL" || !c.offersExternal()) {
		// RabbitMQ closes the socket on an unknown mechanism, after its
		// silent close delay.
		c.silentClose = true
		return fmt.Errorf("unknown authentication mechanism %q", so.Mechanism)
	}
	c.mechanism = so.Mechanism
	user, pass, ok := parseCredentials(so.Mechanism, so.Response)
	var u *auth.User
	if c.direct {
		// This broker's own shovel (shovels.go): RabbitMQ's direct
		// connection of user "none".
		user, u, ok = "none", &auth.User{Name: "none"}, true
	} else if so.Mechanism == "EXTERNAL" {
		user, u, ok = c.externalLogin() // tls.go: the client certificate's CN
	} else if ok {
		u, ok = c.srv.login(user, pass, c.nc.RemoteAddr())
	}
	if !ok {
		// As RabbitMQ: connection.close at once to a client that asks
		// for it (authentication_failure_close), then the socket stays
		// open, unread, for the silent close delay.
		err := fmt.Errorf("authentication failed for user %q with mechanism %s", user, so.Mechanism)
		if c.clientCapability("authentication_failure_close") {
			c.closeWith(&amqp.Error{Code: amqp.AccessRefused,
				Text: "ACCESS_REFUSED - Login was refused using authentication mechanism " + so.Mechanism +
					". For details see the broker logfile."}, err.Error())
		}
		c.silentClose = true
		return err
	}
	c.user = user

	opts := &c.srv.opts
	c.reply(0, &amqp.ConnectionTune{
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
	close(c.tuned)
	c.startHeartbeats()

	m, err = c.readHandshakeMethod()
	if err != nil {
		return err
	}
	op, ok := m.(*amqp.ConnectionOpen)
	if !ok {
		return c.handshakeUnexpected(m)
	}
	st := c.srv.vhostByName(op.VirtualHost)
	var refuse *amqp.Error
	// In rabbit_reader's order: the vhost's connection limit (where a
	// missing vhost is found), the user's, then access to the vhost.
	switch {
	case st == nil:
		refuse = amqp.Errorf(amqp.NotAllowed, "vhost %s not found", op.VirtualHost)
	default:
		refuse = c.srv.openLimits(st, u)
		if refuse == nil && !c.direct && c.srv.reg.Grant(op.VirtualHost, u.Name).Permission() == nil {
			refuse = amqp.Errorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s'", op.VirtualHost, u.Name)
		}
	}
	if refuse != nil {
		refuse.ClassID, refuse.MethodID = op.Index()
		c.closeWith(refuse, refuse.Text)
		return c.awaitCloseOk(errors.New(refuse.Text))
	}
	c.authUser = u
	c.grant = c.srv.reg.Grant(op.VirtualHost, u.Name)
	protocol, typ := "AMQP 0-9-1", "network"
	if c.direct {
		c.grant = auth.DirectGrant(op.VirtualHost, u.Name)
		protocol, typ = "Direct 0-9-1", "direct"
	}
	c.vhost = op.VirtualHost
	c.vh = st.v
	host, port := peer(c.nc)
	c.info.Store(&connInfo{Name: connectionName(c.nc), User: c.user, VHost: c.vhost, PeerHost: host, PeerPort: port,
		ConnectedAt: time.Now().UnixMilli(), ClientProperties: so.ClientProperties,
		Node: c.srv.nodeName(), Protocol: protocol, Type: typ})
	c.srv.connOpened.Add(1)
	c.reply(0, &amqp.ConnectionOpenOk{})
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

// platform names the Go runtime as RabbitMQ names Erlang/OTP.
func platform() string {
	return "Go " + strings.TrimPrefix(runtime.Version(), "go") + " " + runtime.GOOS + "/" + runtime.GOARCH
}

var hostname = func() string { h, _ := os.Hostname(); return h }()
