package shovel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/shovel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// amqp091-go's heartbeater may outlive Close by a tick.
		goleak.IgnoreTopFunction("github.com/rabbitmq/amqp091-go.(*Connection).heartbeater"),
	)
}

// node is an in-process broker on a fixed address, so that it can stop
// and start again where a shovel's URI points.
type node struct {
	t    testing.TB
	addr string
	dir  string
	srv  *broker.Server
	done chan error
}

// startNode starts a broker on addr ("127.0.0.1:0" for any port) with
// its store in dir.
func startNode(t testing.TB, addr, dir string) *node {
	t.Helper()
	srv, err := broker.New(broker.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	var ln net.Listener
	poll.Eventually(t, 30*time.Second, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, "listen on %s: %v", addr, err)
	n := &node{t: t, addr: ln.Addr().String(), dir: dir, srv: srv, done: make(chan error, 1)}
	go func() { n.done <- srv.Serve(ln) }()
	t.Cleanup(n.stop)
	return n
}

func (n *node) url(vhost string) string {
	return "amqp://guest:guest@" + n.addr + "/" + strings.ReplaceAll(vhost, "/", "%2f")
}

// stop shuts the broker down (its clients see the connection close);
// idempotent.
func (n *node) stop() {
	if n.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.srv.Shutdown(ctx)
	if err := <-n.done; !errors.Is(err, broker.ErrServerClosed) {
		n.t.Errorf("Serve: %v", err)
	}
	n.srv = nil
}

// addVhost makes a vhost guest may use.
func (n *node) addVhost(name string) {
	n.t.Helper()
	if _, err := n.srv.PutVHost(name, broker.VHostRecord{Limits: map[string]int64{}}); err != nil {
		n.t.Fatal(err)
	}
	p, err := auth.NewPermission(".*", ".*", ".*")
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.srv.PutAccess(nil, []auth.PermissionEntry{{VHost: name, User: "guest", Permission: p}}, nil); err != nil {
		n.t.Fatal(err)
	}
}

func dial(t testing.TB, url string) (*rmq.Connection, *rmq.Channel) {
	t.Helper()
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// fill declares a durable queue and publishes n persistent messages
// numbered from 0, confirmed, with bodies of size bytes.
func fill(t testing.TB, url, q string, n, size int) {
	t.Helper()
	c, ch := dial(t, url)
	defer c.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var last *rmq.DeferredConfirmation
	for i := range n {
		body := make([]byte, max(size, 12))
		copy(body, fmt.Sprintf("%012d", i))
		var err error
		last, err = ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			if ok, err := last.WaitContext(t.Context()); !ok || err != nil {
				t.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	if last != nil {
		if ok, err := last.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("confirm: %v %v", ok, err)
		}
	}
}

func declare(t testing.TB, url, q string) {
	t.Helper()
	c, ch := dial(t, url)
	defer c.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

func queueLen(t testing.TB, url, q string) int {
	t.Helper()
	c, ch := dial(t, url)
	defer c.Close()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info.Messages
}

// collect consumes q until it has seen want distinct messages, and
// returns how many times it saw each and the last delivery of each.
func collect(t testing.TB, url, q string, want int, within time.Duration) (map[int]int, map[int]rmq.Delivery) {
	t.Helper()
	// The shovel declares the destination queue when it starts.
	poll.Eventually(t, within, func() bool {
		c, err := rmq.Dial(url)
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}, "queue %s declared", q)
	c, ch := dial(t, url)
	defer c.Close()
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen, last := map[int]int{}, map[int]rmq.Delivery{}
	timer := time.NewTimer(within)
	defer timer.Stop()
	for len(seen) < want {
		select {
		case d := <-ds:
			id, err := strconv.Atoi(string(d.Body[:12]))
			if err != nil {
				t.Fatalf("body %q: %v", d.Body, err)
			}
			seen[id]++
			last[id] = d
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timer.C:
			t.Fatalf("%d of %d messages arrived in %s within %v", len(seen), want, q, within)
		}
	}
	return seen, last
}

// checkAll fails unless ids 0..n-1 were all seen, and returns how many
// were seen more than once.
func checkAll(t testing.TB, seen map[int]int, n int) (dups int) {
	t.Helper()
	for i := range n {
		switch seen[i] {
		case 0:
			t.Errorf("message %d lost", i)
		case 1:
		default:
			dups += seen[i] - 1
		}
	}
	return dups
}

// start parses def and starts a shovel, stopped when the test ends.
func start(t testing.TB, def map[string]any, opts shovel.Options) *shovel.Shovel {
	t.Helper()
	cfg, err := shovel.Parse(def)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Name == "" {
		opts.Name = "s1"
	}
	if opts.Vhost == "" {
		opts.Vhost = "/"
	}
	s := shovel.New(cfg, opts)
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func waitState(t testing.TB, s *shovel.Shovel, state shovel.State, within time.Duration) shovel.Status {
	t.Helper()
	var st shovel.Status
	poll.Eventually(t, within, func() bool { st = s.Status(); return st.State == state }, "shovel %s (now %+v)", state, st)
	return st
}
