package shovel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// Channel is what a shovel does on an AMQP channel: the methods of
// amqp091-go's *Channel it uses, so that a broker's local path can stand
// in for a TCP connection.
type Channel interface {
	Qos(prefetchCount, prefetchSize int, global bool) error
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args rmq.Table) (rmq.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args rmq.Table) (rmq.Queue, error)
	QueueBind(name, key, exchange string, noWait bool, args rmq.Table) error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args rmq.Table) (<-chan rmq.Delivery, error)
	Cancel(consumer string, noWait bool) error
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	Confirm(noWait bool) error
	NotifyPublish(confirm chan rmq.Confirmation) chan rmq.Confirmation
	PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg rmq.Publishing) error
	NotifyClose(c chan *rmq.Error) chan *rmq.Error
	Close() error
}

// Conn is one connection to a source or destination broker.
type Conn interface {
	// Channel opens a channel.
	Channel() (Channel, error)
	// NotifyClose reports the connection's close (nil on a clean Close).
	NotifyClose(c chan *rmq.Error) chan *rmq.Error
	Close() error
}

// Dialer opens connections for a shovel. name is the connection name
// RabbitMQ gives it ("Shovel <name>").
type Dialer interface {
	Dial(ctx context.Context, uri, name string) (Conn, error)
}

// ErrLocalURI is AMQPDialer's answer to a URI with no host ("amqp://",
// "amqp:///vhost"): it means this broker, which only the broker's own
// Dialer can reach.
var ErrLocalURI = errors.New("a URI without a host means the local broker, which this dialer cannot reach")

// IsLocal says whether uri has no host, RabbitMQ's "this node" (a direct
// connection in RabbitMQ).
func IsLocal(uri string) bool {
	u, err := url.Parse(uri)
	return err == nil && u.Host == ""
}

// Vhost is the virtual host a URI names ("/" when none, as amqp091-go).
func Vhost(uri string) string {
	u, err := ParseURI(uri)
	if err != nil {
		return ""
	}
	return u.Vhost
}

// ParseURI parses an AMQP URI (RabbitMQ's URI spec,
// https://www.rabbitmq.com/docs/uri-spec and uri-query-parameters) and
// checks the TLS query options AMQPDialer supports: cacertfile, certfile,
// keyfile, verify (verify_peer, the default, or verify_none),
// server_name_indication (a host name), fail_if_no_peer_cert (accepted,
// a server option), plus amqp091-go's heartbeat, connection_timeout,
// channel_max and auth_mechanism.
func ParseURI(uri string) (rmq.URI, error) {
	u, err := rmq.ParseURI(uri)
	if err != nil {
		return u, err
	}
	pu, err := url.Parse(uri)
	if err != nil {
		return u, err
	}
	if pu.Host == "" && pu.Path != "" && !hasPrefix(pu.Path, "/") {
		return u, fmt.Errorf("bad vhost path %q", pu.Path)
	}
	q := pu.Query()
	switch v := q.Get("verify"); v {
	case "", "verify_peer", "verify_none":
	default:
		return u, fmt.Errorf("verify should be verify_peer or verify_none, actually was %q", v)
	}
	if q.Get("server_name_indication") == "disable" {
		return u, errors.New("server_name_indication=disable is not supported")
	}
	return u, nil
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// Redact removes the credentials from a URI, as RabbitMQ's
// amqp_uri:remove_credentials does for the status and the x-shovelled
// header.
func Redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.User == nil {
		return uri
	}
	u.User = nil
	return u.String()
}

// SplitDialer sends host-less URIs to Local (the broker's own path) and
// the others to Remote.
type SplitDialer struct {
	Local, Remote Dialer
}

// Dial picks Local or Remote by the URI; a nil one is ErrLocalURI or
// AMQPDialer.
func (d SplitDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	if IsLocal(uri) {
		if d.Local == nil {
			return nil, ErrLocalURI
		}
		return d.Local.Dial(ctx, uri, name)
	}
	if d.Remote == nil {
		return AMQPDialer{}.Dial(ctx, uri, name)
	}
	return d.Remote.Dial(ctx, uri, name)
}

// AMQPDialer dials remote brokers with amqp091-go over TCP (amqp://) or
// TLS (amqps://).
type AMQPDialer struct {
	// Timeout bounds the TCP connect and the handshake; 0 is 30 s.
	Timeout time.Duration
}

// Dial connects to uri; a host-less URI is ErrLocalURI.
func (d AMQPDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	c, err := DialAMQP(ctx, uri, name, d.Timeout)
	if err != nil {
		return nil, err
	}
	return amqpConn{c}, nil
}

// DialAMQP opens an amqp091-go connection to uri over TCP or TLS (the
// URI's TLS options: cacertfile, certfile, keyfile, verify,
// server_name_indication), named name, within timeout (0: 30 s) and
// ctx's deadline, its writes corked; a host-less URI is ErrLocalURI.
func DialAMQP(ctx context.Context, uri, name string, timeout time.Duration) (*rmq.Connection, error) {
	if IsLocal(uri) {
		return nil, ErrLocalURI
	}
	pu, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	props := rmq.NewConnectionProperties()
	props.SetClientConnectionName(name)
	dial := rmq.DefaultDial(timeout)
	cfg := rmq.Config{Properties: props, Heartbeat: 10 * time.Second, Dial: func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return cork(c), nil
	}}
	if pu.Scheme == "amqps" {
		if cfg.TLSClientConfig, err = tlsConfig(uri, pu); err != nil {
			return nil, err
		}
	}
	return rmq.DialConfig(uri, cfg)
}

// tlsConfig is the client TLS configuration of an amqps URI's query.
func tlsConfig(uri string, pu rmq.URI) (*tls.Config, error) {
	q, _ := url.Parse(uri)
	params := q.Query()
	cfg := &tls.Config{ServerName: pu.Host, MinVersion: tls.VersionTLS12}
	if pu.ServerName != "" {
		cfg.ServerName = pu.ServerName
	}
	if params.Get("verify") == "verify_none" {
		cfg.InsecureSkipVerify = true //nolint:gosec // the URI asked for it, as RabbitMQ's verify_none
	}
	if pu.CACertFile != "" {
		pem, err := os.ReadFile(pu.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("cacertfile: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cacertfile %s: no certificate", pu.CACertFile)
		}
	}
	if pu.CertFile != "" || pu.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(pu.CertFile, pu.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("certfile/keyfile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// amqpConn adapts *amqp091.Connection to Conn.
type amqpConn struct{ *rmq.Connection }

func (c amqpConn) Channel() (Channel, error) {
	ch, err := c.Connection.Channel()
	if err != nil {
		return nil, err
	}
	return ch, nil
}
