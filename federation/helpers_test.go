package federation_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// amqp091-go's heartbeater may outlive Close by a tick.
		goleak.IgnoreTopFunction("github.com/rabbitmq/amqp091-go.(*Connection).heartbeater"),
	)
}

// node is a real railmq broker, in-process on a loopback port.
type node struct {
	t testing.TB
	b *testutil.Broker
}

func startNode(t testing.TB) *node {
	t.Helper()
	b, _ := testutil.StartStoppable(t, broker.Options{DataDir: t.TempDir()})
	return &node{t: t, b: b}
}

// addVhost makes a vhost guest may use.
func (n *node) addVhost(name string) {
	n.t.Helper()
	if _, err := n.b.Server.PutVHost(name, broker.VHostRecord{Limits: map[string]int64{}}); err != nil {
		n.t.Fatal(err)
	}
	p, err := auth.NewPermission(".*", ".*", ".*")
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.b.Server.PutAccess(nil, []auth.PermissionEntry{{VHost: name, User: "guest", Permission: p}}, nil); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) url(vhost string) string {
	return "amqp://guest:guest@" + n.b.Addr + "/" + url.PathEscape(vhost)
}

func dial(t testing.TB, u string) *rmq.Channel {
	t.Helper()
	c, err := rmq.Dial(u)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// amqpPublisher is the test's stand-in for the broker's Publisher: it
// publishes to the downstream broker over AMQP in confirm mode and calls
// done from one goroutine reading the confirms (as the broker's will
// from its store's committer).
type amqpPublisher struct {
	mu      sync.Mutex
	ch      *rmq.Channel
	pending map[uint64]func(error)
}

func newPublisher(t testing.TB, u string) *amqpPublisher {
	ch := dial(t, u)
	must(t, ch.Confirm(false))
	p := &amqpPublisher{ch: ch, pending: map[uint64]func(error){}}
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 1024))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range confirms {
			p.mu.Lock()
			f := p.pending[c.DeliveryTag]
			delete(p.pending, c.DeliveryTag)
			p.mu.Unlock()
			if f == nil {
				continue
			}
			if c.Ack {
				f(nil)
			} else {
				f(errors.New("nacked by the downstream"))
			}
		}
	}()
	t.Cleanup(func() { _ = ch.Close(); <-done })
	return p
}

func (p *amqpPublisher) Publish(ctx context.Context, exchange, key string, msg rmq.Publishing, confirm bool, done func(error)) error {
	p.mu.Lock()
	seq := p.ch.GetNextPublishSeqNo()
	p.pending[seq] = done
	err := p.ch.PublishWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		delete(p.pending, seq)
	}
	p.mu.Unlock()
	return err
}

// staticBindings are binding keys the test sets.
type staticBindings struct {
	mu      sync.Mutex
	keys    []federation.Binding
	changed chan struct{}
}

func newBindings(keys ...string) *staticBindings {
	b := &staticBindings{changed: make(chan struct{}, 1)}
	b.set(keys...)
	return b
}

func (b *staticBindings) set(keys ...string) {
	b.mu.Lock()
	b.keys = b.keys[:0]
	for _, k := range keys {
		b.keys = append(b.keys, federation.Binding{Key: k})
	}
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *staticBindings) Bindings() []federation.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]federation.Binding(nil), b.keys...)
}

func (b *staticBindings) Changed() <-chan struct{} { return b.changed }

// queueDemand asks the downstream broker (queue.declare passive) whether
// the queue has consumers and no ready messages; Changed ticks, standing
// in for the broker's event.
type queueDemand struct {
	mu    sync.Mutex
	ch    *rmq.Channel
	queue string
	c     chan struct{}
	asked int
	seen  bool // Wanted has answered true
}

func newDemand(t testing.TB, u, queue string) *queueDemand {
	d := &queueDemand{ch: dial(t, u), queue: queue, c: make(chan struct{}, 1)}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				select {
				case d.c <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return d
}

func (d *queueDemand) Wanted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	q, err := d.ch.QueueDeclarePassive(d.queue, true, false, false, false, nil)
	d.asked++
	w := err == nil && q.Consumers > 0 && q.Messages == 0
	d.seen = d.seen || w
	return w
}

func (d *queueDemand) Changed() <-chan struct{} { return d.c }

func (d *queueDemand) stats() (asked int, seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked, d.seen
}

type statuser interface{ Status() federation.Status }

func waitRunning(t testing.TB, l statuser) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, func() bool { return l.Status().State == federation.Running },
		"link not running: %+v", l.Status())
}

func get(t testing.TB, ch *rmq.Channel, q string) rmq.Delivery {
	t.Helper()
	var d rmq.Delivery
	poll.Eventually(t, 30*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(q, true)
		must(t, err)
		return ok
	}, "no message in %s", q)
	return d
}
