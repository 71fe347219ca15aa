package shovel

import (
	"context"
	"net"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// LocalDialer opens AMQP connections over the net.Conns Open gives: the
// broker's local path for host-less URIs (a connection it serves itself,
// with no TCP). The URI's vhost is opened ("/" when it names none) as
// user "none": the broker's direct connections check no password and
// have every permission, as RabbitMQ's (who may name a vhost is checked
// when the shovel is defined).
type LocalDialer struct {
	Open func(ctx context.Context) (net.Conn, error)
}

// Dial opens a connection to the broker through Open.
func (d LocalDialer) Dial(ctx context.Context, uri, name string) (Conn, error) {
	pu, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	nc, err := d.Open(ctx)
	if err != nil {
		return nil, err
	}
	c, err := OpenLocal(nc, pu.Vhost, name)
	if err != nil {
		return nil, err
	}
	return amqpConn{c}, nil
}

// OpenLocal opens an AMQP connection named name to vhost over nc, a
// connection the broker serves as a direct one (user "none", no
// password), its writes corked; nc is closed if the handshake fails.
func OpenLocal(nc net.Conn, vhost, name string) (*rmq.Connection, error) {
	props := rmq.NewConnectionProperties()
	props.SetClientConnectionName(name)
	cfg := rmq.Config{Vhost: vhost, Properties: props, Heartbeat: 10 * time.Second,
		SASL: []rmq.Authentication{&rmq.PlainAuth{Username: "none"}}}
	c, err := rmq.Open(cork(nc), cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}
