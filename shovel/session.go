package shovel

import (
	"context"
	"errors"
	"fmt"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// endpoint is one connected side of a session.
type endpoint struct {
	conn   Conn
	ch     Channel
	uri    string
	closed chan *rmq.Error // the connection's close
	chDown chan *rmq.Error // the channel's close
}

// connect tries the URIs in order and opens a channel on the first that
// answers. RabbitMQ picks the first at random, then tries the others
// (rabbit_amqp091_shovel.erl make_conn_and_chan); in order lets an
// operator say which is preferred.
func (s *Shovel) connect(ctx context.Context, side string, uris []string) (*endpoint, error) {
	var errs []error
	for _, uri := range uris {
		c, err := s.opts.Dialer.Dial(ctx, uri, "Shovel "+s.opts.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", side, Redact(uri), err))
			continue
		}
		e := &endpoint{conn: c, uri: uri}
		e.closed = c.NotifyClose(make(chan *rmq.Error, 1))
		if e.ch, err = c.Channel(); err != nil {
			_ = c.Close()
			errs = append(errs, fmt.Errorf("%s %s: channel: %w", side, Redact(uri), err))
			continue
		}
		e.chDown = e.ch.NotifyClose(make(chan *rmq.Error, 1))
		return e, nil
	}
	return nil, errors.Join(errs...)
}

// ensureQueue declares a queue passively and, if it is missing, durable
// with args, each on a channel of its own, as rabbit_shovel_parameters.erl
// ensure_queue.
func ensureQueue(c Conn, name string, args rmq.Table) error {
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclarePassive(name, false, false, false, false, nil)
	_ = ch.Close()
	var ae *rmq.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != rmq.NotFound {
		return err
	}
	if ch, err = c.Channel(); err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true /* durable */, false, false, false, args)
	return err
}

// loop is one session's state, owned by the shovel's goroutine.
type loop struct {
	s        *Shovel
	src, dst *endpoint
	inflight []pair // on-confirm: published, not yet confirmed, in order
	nextSeq  uint64
	ackTag   uint64 // highest source tag to ack (multiple), 0 for none
	ackN     uint64 // messages that ack covers
	limit    int64  // messages still to publish; -1 unlimited
}

type pair struct{ seq, tag uint64 }

// session connects both sides, sets them up and moves messages until an
// error, Stop (ctx) or completion (errComplete).
func (s *Shovel) session(ctx context.Context) error {
	s.connected = false
	src, err := s.connect(ctx, "source", s.cfg.SrcURIs)
	if err != nil {
		return err
	}
	defer src.conn.Close()
	dst, err := s.connect(ctx, "destination", s.cfg.DestURIs)
	if err != nil {
		return err
	}
	defer dst.conn.Close()
	s.connected = true
	// Stop lets the loop settle what it has published (finish) and
	// interrupts it after stopGrace: a publish blocked on a full socket.
	ended := make(chan struct{})
	defer close(ended)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-ended:
		case <-t.C:
			_ = src.conn.Close()
			_ = dst.conn.Close()
		}
	})
	defer stop()

	l := &loop{s: s, src: src, dst: dst, nextSeq: 1}
	var confirms chan rmq.Confirmation
	if err := s.setupDest(dst); err != nil {
		return fmt.Errorf("destination %s: %w", Redact(dst.uri), err)
	}
	if s.cfg.AckMode == OnConfirm {
		if err := dst.ch.Confirm(false); err != nil {
			return fmt.Errorf("destination %s: confirm.select: %w", Redact(dst.uri), err)
		}
		// Sized for every message in flight (the source's prefetch), so
		// that amqp091-go's reader never waits for this goroutine while it
		// publishes.
		confirms = dst.ch.NotifyPublish(make(chan rmq.Confirmation, max(s.cfg.SrcPrefetchCount, DefaultPrefetchCount)+1))
	}
	deliveries, err := s.setupSource(src)
	if err != nil {
		return fmt.Errorf("source %s: %w", Redact(src.uri), err)
	}
	if deliveries == nil {
		return errComplete
	}
	l.limit = s.remaining.Load()
	s.setRunning(src.uri, dst.uri)
	s.log.Info("shovel running", zap.String("src_uri", Redact(src.uri)), zap.String("dest_uri", Redact(dst.uri)))
	return l.run(ctx, deliveries, confirms)
}

// setupDest declares dest-queue.
func (s *Shovel) setupDest(dst *endpoint) error {
	if s.cfg.DestQueue == "" {
		return nil
	}
	return ensureQueue(dst.conn, s.cfg.DestQueue, s.cfg.DestQueueArgs)
}

// setupSource declares the source (src-queue, or for src-exchange a
// server-named exclusive queue bound with src-exchange-key), sets the
// prefetch, reads the queue's length for src-delete-after queue-length
// and consumes. It returns nil deliveries when nothing is left to move.
func (s *Shovel) setupSource(src *endpoint) (<-chan rmq.Delivery, error) {
	c := s.cfg
	queue := c.SrcQueue
	if queue != "" {
		if err := ensureQueue(src.conn, queue, c.SrcQueueArgs); err != nil {
			return nil, err
		}
	} else {
		q, err := src.ch.QueueDeclare("", false, false, true /* exclusive */, false, nil)
		if err != nil {
			return nil, err
		}
		queue = q.Name
		if err := src.ch.QueueBind(queue, c.SrcExchangeKey, c.SrcExchange, false, nil); err != nil {
			return nil, err
		}
	}
	if c.AckMode != NoAck {
		if err := src.ch.Qos(c.SrcPrefetchCount, 0, false); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	counted := s.counted
	s.mu.Unlock()
	if !counted && c.SrcDeleteAfter.QueueLength {
		q, err := src.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil {
			return nil, err
		}
		s.remaining.Store(int64(q.Messages))
		s.mu.Lock()
		s.counted = true
		s.mu.Unlock()
	}
	if s.remaining.Load() == 0 {
		return nil, nil
	}
	return src.ch.Consume(queue, consumerTag, c.AckMode == NoAck, false, false, false, c.SrcConsumerArgs)
}

const consumerTag = "shovel"

// run moves messages. It takes what has arrived without waiting and,
// when nothing more is there, acks the source up to the highest tag
// confirmed (multiple): batches grow with the load, never on a timer.
//
// On-confirm, at most cap(confirms)-1 publishes are in flight: with
// src-prefetch-count 0 (no limit) the source would not bound them, and a
// full confirms channel would stall amqp091-go's reader while this
// goroutine waits to publish.
func (l *loop) run(ctx context.Context, src <-chan rmq.Delivery, confirms chan rmq.Confirmation) error {
	for {
		var err error
		deliveries := src
		if confirms != nil && len(l.inflight) >= cap(confirms)-1 {
			deliveries = nil // wait for confirms first
		}
		select {
		case <-ctx.Done():
			return l.finish(ctx, confirms)
		case d, ok := <-deliveries:
			err = l.deliveryOrClosed(d, ok)
		case c := <-confirms:
			err = l.confirm(c)
		default:
			if err := l.flush(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return l.finish(ctx, confirms)
			case e := <-l.src.closed:
				return closeErr("source", l.src.uri, "connection", e)
			case e := <-l.dst.closed:
				return closeErr("destination", l.dst.uri, "connection", e)
			case e := <-l.src.chDown:
				return closeErr("source", l.src.uri, "channel", e)
			case e := <-l.dst.chDown:
				return closeErr("destination", l.dst.uri, "channel", e)
			case d, ok := <-deliveries:
				err = l.deliveryOrClosed(d, ok)
			case c := <-confirms:
				err = l.confirm(c)
			}
		}
		if err != nil {
			if errors.Is(err, errComplete) {
				if ferr := l.flush(); ferr != nil {
					return ferr
				}
				if l.s.cfg.AckMode == NoAck {
					return l.drainNoAck(src)
				}
			}
			return err
		}
	}
}

// stopGrace bounds how long Stop waits for the destination's confirms of
// what the session has published, so that it can ack them at the source.
const stopGrace = 5 * time.Second

// finish ends a stopped session: it takes no more deliveries (the source
// requeues them when the session closes), waits up to stopGrace for the
// confirms of what is in flight and acks the source up to there, so that
// a restart does not move again what has arrived. Acks sent after the
// connection began to close would be dropped by the broker, yet counted
// as moved.
func (l *loop) finish(ctx context.Context, confirms chan rmq.Confirmation) error {
	t := time.NewTimer(stopGrace)
	defer t.Stop()
wait:
	for len(l.inflight) > 0 {
		select {
		case c := <-confirms:
			if err := l.confirm(c); err != nil {
				return ctx.Err()
			}
			continue
		case <-l.src.closed:
		case <-l.dst.closed:
		case <-l.src.chDown:
		case <-l.dst.chDown:
		case <-t.C:
		}
		break wait
	}
	_ = l.flush()
	return ctx.Err()
}

func closeErr(side, uri, what string, e *rmq.Error) error {
	if e == nil {
		return fmt.Errorf("%s %s: %s closed", side, Redact(uri), what)
	}
	return closedError{fmt.Sprintf("%s %s: %s closed: %d %s", side, Redact(uri), what, e.Code, e.Reason), e}
}

// closedError is a close with the broker's exception, kept for errors.As.
type closedError struct {
	msg string
	e   *rmq.Error
}

func (c closedError) Error() string { return c.msg }
func (c closedError) Unwrap() error { return c.e }

func (l *loop) deliveryOrClosed(d rmq.Delivery, ok bool) error {
	if !ok {
		// The consumer's channel closes with its connection: report the
		// connection's or the channel's error if it comes, a
		// basic.cancel (the queue was deleted) otherwise.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case e := <-l.src.closed:
			return closeErr("source", l.src.uri, "connection", e)
		case e := <-l.src.chDown:
			return closeErr("source", l.src.uri, "channel", e)
		case <-t.C:
		}
		return fmt.Errorf("source %s: consumer cancelled", Redact(l.src.uri))
	}
	return l.deliver(d)
}

// deliver publishes one source delivery.
func (l *loop) deliver(d rmq.Delivery) error {
	s := l.s
	if l.limit == 0 && s.cfg.AckMode != NoAck {
		// Everything src-delete-after asks for is published; the rest
		// goes back to the source when the session ends (RabbitMQ drops
		// them likewise, rabbit_amqp091_shovel.erl publish/4).
		return nil
	}
	ex, key := s.route(d)
	pub := s.publishing(d, l.src.uri, l.dst.uri)
	if err := l.dst.ch.PublishWithContext(context.Background(), ex, key, false, false, pub); err != nil {
		return fmt.Errorf("destination %s: publish: %w", Redact(l.dst.uri), err)
	}
	s.published.Add(1)
	if l.limit > 0 {
		l.limit--
	}
	switch s.cfg.AckMode {
	case OnConfirm:
		l.inflight = append(l.inflight, pair{l.nextSeq, d.DeliveryTag})
		l.nextSeq++
		return nil
	case OnPublish:
		l.ackTag, l.ackN = d.DeliveryTag, l.ackN+1
		return nil
	}
	s.moved.Add(1)
	return l.countDown(1)
}

// confirm handles the destination's ack or nack of one publish
// (amqp091-go hands confirms over one by one, in order).
func (l *loop) confirm(c rmq.Confirmation) error {
	for len(l.inflight) > 0 && l.inflight[0].seq < c.DeliveryTag {
		l.inflight = l.inflight[1:] // cannot happen: confirms come in order
	}
	if len(l.inflight) == 0 || l.inflight[0].seq != c.DeliveryTag {
		return fmt.Errorf("destination %s: confirm of unknown publish %d", Redact(l.dst.uri), c.DeliveryTag)
	}
	tag := l.inflight[0].tag
	l.inflight = l.inflight[1:]
	if len(l.inflight) == 0 {
		l.inflight = l.inflight[:0:0]
	}
	if c.Ack {
		l.ackTag, l.ackN = tag, l.ackN+1
		return nil
	}
	// A nack: ack what comes before it, then nack it alone; the source
	// requeues it (RabbitMQ's basic.nack, requeue defaulting to true).
	if err := l.flush(); err != nil {
		return err
	}
	l.s.nacked.Add(1)
	if err := l.src.ch.Nack(tag, false, true /* requeue */); err != nil {
		return fmt.Errorf("source %s: nack: %w", Redact(l.src.uri), err)
	}
	if l.limit >= 0 {
		l.limit++ // to be moved again
	}
	return nil
}

// flush acks the source up to ackTag.
func (l *loop) flush() error {
	if l.ackTag == 0 {
		return nil
	}
	if err := l.src.ch.Ack(l.ackTag, true /* multiple */); err != nil {
		return fmt.Errorf("source %s: ack: %w", Redact(l.src.uri), err)
	}
	n := l.ackN
	l.ackTag, l.ackN = 0, 0
	l.s.moved.Add(n)
	return l.countDown(n)
}

// countDown takes n moved messages off src-delete-after's count and ends
// the session with errComplete when it reaches 0.
func (l *loop) countDown(n uint64) error {
	for {
		r := l.s.remaining.Load()
		if r < 0 {
			return nil
		}
		nr := max(r-int64(n), 0)
		if l.s.remaining.CompareAndSwap(r, nr) {
			if nr == 0 {
				return errComplete
			}
			return nil
		}
	}
}

// drainNoAck cancels the no-ack consumer and publishes what it had
// already been given, since those messages are no longer in the source.
func (l *loop) drainNoAck(deliveries <-chan rmq.Delivery) error {
	if err := l.src.ch.Cancel(consumerTag, false); err != nil {
		return fmt.Errorf("source %s: cancel: %w", Redact(l.src.uri), err)
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errComplete
			}
			ex, key := l.s.route(d)
			if err := l.dst.ch.PublishWithContext(context.Background(), ex, key, false, false, l.s.publishing(d, l.src.uri, l.dst.uri)); err != nil {
				return fmt.Errorf("destination %s: publish: %w", Redact(l.dst.uri), err)
			}
			l.s.published.Add(1)
			l.s.moved.Add(1)
		case <-timeout.C:
			return errComplete
		}
	}
}
