package federation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/shovel"
)

// Channel is what a link does on an upstream AMQP channel: the methods of
// amqp091-go's *Channel it uses.
type Channel interface {
	Qos(prefetchCount, prefetchSize int, global bool) error
	ExchangeDeclare(name, kind string, durable, autoDelete, internal, noWait bool, args rmq.Table) error
	ExchangeDeclarePassive(name, kind string, durable, autoDelete, internal, noWait bool, args rmq.Table) error
	ExchangeDelete(name string, ifUnused, noWait bool) error
	ExchangeBind(destination, key, source string, noWait bool, args rmq.Table) error
	ExchangeUnbind(destination, key, source string, noWait bool, args rmq.Table) error
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args rmq.Table) (rmq.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args rmq.Table) (rmq.Queue, error)
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
	QueueBind(name, key, exchange string, noWait bool, args rmq.Table) error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args rmq.Table) (<-chan rmq.Delivery, error)
	Cancel(consumer string, noWait bool) error
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	NotifyClose(c chan *rmq.Error) chan *rmq.Error
	Close() error
}

// Conn is one connection to an upstream broker.
type Conn interface {
	Channel() (Channel, error)
	// ClusterName is the upstream's cluster_name server property (written
	// as cluster-name in x-received-from).
	ClusterName() string
	NotifyClose(c chan *rmq.Error) chan *rmq.Error
	Close() error
}

// Dialer opens upstream connections. name is the connection name.
type Dialer interface {
	Dial(ctx context.Context, uri, name string) (Conn, error)
}

// AMQPDialer dials upstreams with amqp091-go over TCP or TLS (amqps://,
// with the URI's TLS options), as shovel's does.
type AMQPDialer struct {
	// Timeout bounds the TCP connect and the handshake; 0 is 30 s.
	Timeout time.Duration
}

// Dial connects to uri; a host-less URI (this broker) is
// shovel.ErrLocalURI: only the broker's own Dialer reaches it.
func (d AMQPDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	c, err := shovel.DialAMQP(ctx, uri, name, d.Timeout)
	if err != nil {
		return nil, err
	}
	return amqpConn{c}, nil
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

func (c amqpConn) ClusterName() string {
	s, _ := c.Properties["cluster_name"].(string)
	return s
}

// reason is an error as RabbitMQ's /api/federation-links writes a link's
// "error": econnrefused, {auth_failure,"..."}, or the text.
func reason(err error) string {
	var ae *rmq.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "econnrefused"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "ehostunreach"
	case errors.Is(err, rmq.ErrCredentials):
		return `{auth_failure,"ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."}`
	case errors.As(err, &ae) && ae.Code == rmq.AccessRefused && !ae.Server:
		return fmt.Sprintf("{auth_failure,%q}", ae.Reason)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

// LocalDialer reaches the broker itself (a host-less URI): Open gives a
// connection the broker serves as a direct one (user "none").
type LocalDialer struct {
	Open func(ctx context.Context) (net.Conn, error)
}

// Dial opens a connection to uri's vhost of this broker through Open.
func (d LocalDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	nc, err := d.Open(ctx)
	if err != nil {
		return nil, err
	}
	c, err := shovel.OpenLocal(nc, shovel.Vhost(uri), name)
	if err != nil {
		return nil, err
	}
	return amqpConn{c}, nil
}

// SplitDialer sends host-less URIs to Local and the others to Remote
// (AMQPDialer{} when nil).
type SplitDialer struct {
	Local  Dialer
	Remote Dialer
}

// Dial connects to uri through the dialer for its kind.
func (d SplitDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	if shovel.IsLocal(uri) {
		return d.Local.Dial(ctx, uri, name)
	}
	if d.Remote == nil {
		return AMQPDialer{}.Dial(ctx, uri, name)
	}
	return d.Remote.Dial(ctx, uri, name)
}
