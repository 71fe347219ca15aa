package federation

import (
	"context"
	"errors"
	"net"
	"sync"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/shovel"
)

// ErrNacked is a message the downstream refused (basic.nack).
var ErrNacked = errors.New("the downstream refused the message (basic.nack)")

// errPublisherClosed fails what was in flight when the connection went.
var errPublisherClosed = errors.New("the downstream connection closed before it confirmed")

// confirmBuffer is the room for confirms the publisher's reader has not
// taken yet; what is in flight is bounded by the link's prefetch.
const confirmBuffer = 8192

// LocalPublisher is the Publisher of a link into the broker it runs in:
// one connection opened through Open (a direct connection, user "none")
// on the downstream vhost, with one channel in confirm mode. It connects
// on first use and again after its connection closes.
type LocalPublisher struct {
	Open  func(ctx context.Context) (net.Conn, error)
	Vhost string
	Name  string // the connection's name (connection_name)

	// mu guards below; held across a publish's write so that sequence
	// numbers and pending stay in step (LOCKS.md).
	mu      sync.Mutex
	conn    *rmq.Connection
	ch      *rmq.Channel
	pending map[uint64]func(error)
	reader  chan struct{} // closed when the confirm reader is done
}

// Publish publishes msg to exchange with key; done runs once the
// downstream confirmed it (confirm), or once written (not confirm).
func (p *LocalPublisher) Publish(ctx context.Context, exchange, key string, msg rmq.Publishing, confirm bool, done func(error)) error {
	p.mu.Lock()
	if p.ch == nil {
		if err := p.connectLocked(ctx); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	seq := p.ch.GetNextPublishSeqNo()
	if confirm {
		p.pending[seq] = done
	}
	err := p.ch.PublishWithContext(ctx, exchange, key, false, false, msg)
	if err != nil && confirm {
		delete(p.pending, seq)
	}
	p.mu.Unlock()
	if err == nil && !confirm {
		done(nil)
	}
	return err
}

// Connect opens the connection now (so that it shows while the link
// runs); Publish would otherwise on its first message.
func (p *LocalPublisher) Connect(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		return nil
	}
	return p.connectLocked(ctx)
}

func (p *LocalPublisher) connectLocked(ctx context.Context) error {
	nc, err := p.Open(ctx)
	if err != nil {
		return err
	}
	conn, err := shovel.OpenLocal(nc, p.Vhost, p.Name)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return err
	}
	pending := map[uint64]func(error){}
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, confirmBuffer))
	reader := make(chan struct{})
	p.conn, p.ch, p.pending, p.reader = conn, ch, pending, reader
	go p.readConfirms(ch, pending, confirms, reader)
	return nil
}

// readConfirms settles pending from confirms until the channel closes,
// then fails what is left and forgets the connection.
func (p *LocalPublisher) readConfirms(ch *rmq.Channel, pending map[uint64]func(error), confirms <-chan rmq.Confirmation, reader chan struct{}) {
	defer close(reader)
	for c := range confirms {
		p.mu.Lock()
		f := pending[c.DeliveryTag]
		delete(pending, c.DeliveryTag)
		p.mu.Unlock()
		if f == nil {
			continue
		}
		if c.Ack {
			f(nil)
		} else {
			f(ErrNacked)
		}
	}
	p.mu.Lock()
	rest := make([]func(error), 0, len(pending))
	for k, f := range pending {
		rest = append(rest, f)
		delete(pending, k)
	}
	var conn *rmq.Connection
	if p.ch == ch {
		conn = p.conn
		p.conn, p.ch = nil, nil
	}
	p.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	for _, f := range rest {
		f(errPublisherClosed)
	}
}

// Close closes the connection and waits until what was in flight is
// settled (failed if not confirmed).
func (p *LocalPublisher) Close() {
	p.mu.Lock()
	conn, reader := p.conn, p.reader
	p.mu.Unlock()
	if conn == nil {
		return
	}
	conn.Close()
	<-reader
}

// Table is a table of the broker's (the same Go types) as amqp091-go's.
func Table(t map[string]any) rmq.Table {
	if t == nil {
		return nil
	}
	out := make(rmq.Table, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}
