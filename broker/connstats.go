package broker

import (
	"crypto/tls"
	"net"
)

// ConnNet is what RabbitMQ's management API shows of a connection's
// socket and negotiation beside its identity (Connection): the local
// address, TLS, the SASL mechanism, the tuned limits, and the bytes and
// socket operations so far.
type ConnNet struct {
	Host          string // the local address the client connected to
	Port          int
	SSL           bool
	SSLProtocol   string // "tlsv1.3", ... ("" without TLS)
	SSLCipher     string
	AuthMechanism string // "PLAIN", "AMQPLAIN", "EXTERNAL"
	Timeout       int    // heartbeat, in seconds
	FrameMax      uint32
	ChannelMax    uint16
	// RecvOct and SendOct are the bytes read and written (for a TLS
	// connection, the plaintext); RecvCnt and SendCnt the reads and writes
	// that moved them; SendPend the bytes waiting to be written.
	RecvOct, RecvCnt, SendOct, SendCnt, SendPend int64
}

// netInfo reads c's ConnNet; any goroutine may call it once the
// handshake is done (the tuned fields are read-only from then on).
func (c *conn) netInfo() ConnNet {
	n := ConnNet{AuthMechanism: c.mechanism, Timeout: int(c.heartbeat.Seconds()), FrameMax: c.frameMax, ChannelMax: c.channelMax,
		RecvOct: c.io.recvOct.Load(), RecvCnt: c.io.recvCnt.Load(), SendOct: c.io.sendOct.Load(), SendCnt: c.io.sendCnt.Load()}
	if a, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
		n.Host, n.Port = a.IP.String(), a.Port
	}
	if tc := c.tlsConn(); tc != nil {
		st := tc.ConnectionState()
		n.SSL, n.SSLProtocol, n.SSLCipher = true, tlsVersionName(st.Version), tls.CipherSuiteName(st.CipherSuite)
	}
	c.outMu.Lock()
	n.SendPend = int64(len(c.out) + c.inflight)
	c.outMu.Unlock()
	return n
}

// tlsVersionName is RabbitMQ's name of a TLS version (ssl_protocol).
func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS10:
		return "tlsv1"
	case tls.VersionTLS11:
		return "tlsv1.1"
	case tls.VersionTLS12:
		return "tlsv1.2"
	case tls.VersionTLS13:
		return "tlsv1.3"
	}
	return ""
}

// ChannelStats are a channel's message counts since it opened (the
// channel package's StatsSnapshot, field for field): what the management
// API shows as its message_stats and the metrics as rabbitmq_channel_*.
type ChannelStats struct {
	Publish, Confirm, ReturnUnroutable, DropUnroutable int64
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty     int64
	Redeliver, Ack                                     int64
	Transactional                                      bool
	UncommittedMsgs, UncommittedAcks                   int64
}
