package shovel_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/shovel"
)

// TestMoveAckModes moves 3,000 messages between two brokers in each ack
// mode, and on one broker from one vhost to another: every message
// arrives once and the source queue ends empty.
func TestMoveAckModes(t *testing.T) {
	const n = 3000
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	b := startNode(t, "127.0.0.1:0", t.TempDir())
	a.addVhost("other")
	for _, tc := range []struct {
		mode     string
		dest     *node
		destHost string
	}{
		{"on-confirm", b, "/"}, {"on-publish", b, "/"}, {"no-ack", b, "/"}, {"on-confirm", a, "other"},
	} {
		t.Run(tc.mode+"->"+tc.destHost, func(t *testing.T) {
			src, dst := "src-"+tc.mode, "dst-"+tc.mode
			fill(t, a.url("/"), src, n, 100)
			s := start(t, map[string]any{
				"src-uri": a.url("/"), "src-queue": src, "dest-uri": tc.dest.url(tc.destHost), "dest-queue": dst,
				"ack-mode": tc.mode, "src-prefetch-count": float64(200),
			}, shovel.Options{})
			seen, _ := collect(t, tc.dest.url(tc.destHost), dst, n, 60*time.Second)
			if dups := checkAll(t, seen, n); dups != 0 {
				t.Errorf("%d duplicates without a failure", dups)
			}
			poll.Eventually(t, 30*time.Second, func() bool { return s.Status().Moved == n },
				"moved count %d", s.Status().Moved)
			st := s.Status()
			if st.State != shovel.Running || st.Published != n || st.Sessions != 1 || st.Remaining != -1 {
				t.Errorf("status %+v", st)
			}
			if strings.Contains(st.SrcURI, "guest") || !strings.Contains(st.SrcURI, a.addr) {
				t.Errorf("src uri %q: the address, no credentials", st.SrcURI)
			}
			poll.Eventually(t, 10*time.Second, func() bool { return queueLen(t, a.url("/"), src) == 0 }, "source empty")
			s.Stop()
			if st := s.Status(); st.State != shovel.Terminated || st.Reason != "stopped" || !st.Done {
				t.Errorf("after Stop: %+v", st)
			}
		})
	}
}

// TestDestinationRestart stops the destination broker in the middle of
// an on-confirm move and starts it again on the same address and store:
// the status shows why the shovel is down while it is, then the shovel
// resumes and no message is lost (duplicates allowed and counted: the
// source requeues what the destination had not confirmed).
func TestDestinationRestart(t *testing.T) {
	const n = 20000
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	bdir := t.TempDir()
	b := startNode(t, "127.0.0.1:0", bdir)
	baddr := b.addr
	fill(t, a.url("/"), "src", n, 256)
	declare(t, b.url("/"), "dst")
	s := start(t, map[string]any{
		"src-uri": a.url("/"), "src-queue": "src", "dest-uri": b.url("/"), "dest-queue": "dst",
		"reconnect-delay": 0.2, "src-prefetch-count": float64(100),
	}, shovel.Options{})
	poll.Eventually(t, 60*time.Second, func() bool { return s.Status().Moved >= 500 }, "first messages moved")
	b.stop()
	st := waitState(t, s, shovel.Terminated, 30*time.Second)
	if st.Done || !strings.Contains(st.Reason, "destination") {
		t.Fatalf("status while the destination is down: %+v", st)
	}
	// While it is down every new session fails to connect, and says so.
	poll.Eventually(t, 30*time.Second, func() bool {
		st = s.Status()
		return st.Sessions >= 3 && st.State == shovel.Terminated && strings.Contains(st.Reason, "connection refused")
	}, "reconnect attempts with the reason (now %+v)", st)
	t.Logf("status while down: %+v", st)
	moved := st.Moved
	b = startNode(t, baddr, bdir)
	seen, _ := collect(t, b.url("/"), "dst", n, 120*time.Second)
	dups := checkAll(t, seen, n)
	t.Logf("moved %d before the stop; %d duplicates after the restart, %d sessions", moved, dups, s.Status().Sessions)
	poll.Eventually(t, 10*time.Second, func() bool { return queueLen(t, a.url("/"), "src") == 0 }, "source empty")
	if st := s.Status(); st.State != shovel.Running || st.LastError == "" {
		t.Errorf("after the restart: %+v", st)
	}
}

// TestReconnectStatus: a destination that is not there yet. The shovel
// is terminated with the dial error as its reason (RabbitMQ shows a
// dynamic shovel that cannot connect as terminated, then starting again
// after reconnect-delay), and moves once the broker is up.
func TestReconnectStatus(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	probe := startNode(t, "127.0.0.1:0", t.TempDir())
	addr := probe.addr
	probe.stop()
	fill(t, a.url("/"), "src", 10, 10)
	s := start(t, map[string]any{
		"src-uri": a.url("/"), "src-queue": "src", "dest-uri": "amqp://guest:guest@" + addr + "/", "dest-queue": "dst",
		"reconnect-delay": 0.1,
	}, shovel.Options{})
	st := waitState(t, s, shovel.Terminated, 30*time.Second)
	if !strings.Contains(st.Reason, "destination amqp://"+addr+"/") || !strings.Contains(st.Reason, "connection refused") ||
		strings.Contains(st.Reason, "guest") {
		t.Fatalf("reason %q: the destination, its address without credentials, the error", st.Reason)
	}
	b := startNode(t, addr, t.TempDir())
	seen, _ := collect(t, b.url("/"), "dst", 10, 60*time.Second)
	checkAll(t, seen, 10)
	waitState(t, s, shovel.Running, 10*time.Second)
}

// TestReconnectDelayZero: reconnect-delay 0 means no restart (RabbitMQ
// makes the shovel a temporary child): it stays terminated.
func TestReconnectDelayZero(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	declare(t, a.url("/"), "src")
	s := start(t, map[string]any{
		"src-uri": a.url("/"), "src-queue": "src", "dest-uri": "amqp://guest:guest@127.0.0.1:1/", "reconnect-delay": float64(0),
	}, shovel.Options{})
	poll.Eventually(t, 30*time.Second, func() bool { return s.Status().Done }, "done")
	if st := s.Status(); st.State != shovel.Terminated || st.Sessions != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestSrcExchange: with src-exchange the shovel consumes from a
// server-named exclusive queue bound with src-exchange-key (RabbitMQ's
// parse_amqp091_source declares queue.declare exclusive=true and binds
// it), so only what is published after it runs is moved; it publishes to
// dest-exchange with dest-exchange-key.
func TestSrcExchange(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	b := startNode(t, "127.0.0.1:0", t.TempDir())
	declare(t, b.url("/"), "dst")
	c, ch := dial(t, b.url("/"))
	if err := ch.QueueBind("dst", "to-dst", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s := start(t, map[string]any{
		"src-uri": a.url("/"), "src-exchange": "amq.topic", "src-exchange-key": "orders.#",
		"dest-uri": b.url("/"), "dest-exchange": "amq.direct", "dest-exchange-key": "to-dst",
	}, shovel.Options{})
	waitState(t, s, shovel.Running, 30*time.Second)
	_, pch := dial(t, a.url("/"))
	for i := range 100 {
		key := "orders.new"
		if i%2 == 1 {
			key = "other"
		}
		body := fmt.Sprintf("%012d", i/2)
		if i%2 == 1 {
			body = "not-moved"
		}
		if err := pch.Publish("amq.topic", key, false, false, rmq.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	seen, last := collect(t, b.url("/"), "dst", 50, 30*time.Second)
	checkAll(t, seen, 50)
	if d := last[0]; d.Exchange != "amq.direct" || d.RoutingKey != "to-dst" {
		t.Errorf("published to %q %q", d.Exchange, d.RoutingKey)
	}
}

// TestForwardHeaders: dest-add-forward-headers prepends a table to the
// x-shovelled array and dest-add-timestamp-header sets
// x-shovelled-timestamp. RabbitMQ 3.10.8, asked (a dynamic shovel
// src-queue src -> dest-queue dst in vhost sc-fwd, src-uri
// amqp://guest:guest@localhost/sc-fwd, a message with header a=b, read
// through GET /api/queues/sc-fwd/dst/get):
//
//	"headers":{"a":"b","x-shovelled":[{"dest-queue":"dst","dest-uri":"amqp:///sc-fwd",
//	 "shovel-name":"fwd","shovel-type":"dynamic","shovel-vhost":"sc-fwd","shovelled-by":"rabbit@vm",
//	 "src-queue":"src","src-uri":"amqp://localhost/sc-fwd"}],"x-shovelled-timestamp":1796580626}
//
// src-uri is written without credentials. A message shovelled twice
// carries two tables, the latest first (rabbit_basic:prepend_table_header).
func TestForwardHeaders(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	_, ch := dial(t, a.url("/"))
	for _, q := range []string{"src", "mid", "dst"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	body := fmt.Sprintf("%012d", 0)
	if err := ch.Publish("", "src", false, false, rmq.Publishing{Headers: rmq.Table{"a": "b"}, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Unix()
	for _, hop := range [][2]string{{"src", "mid"}, {"mid", "dst"}} {
		start(t, map[string]any{
			"src-uri": a.url("/"), "src-queue": hop[0], "dest-uri": a.url("/"), "dest-queue": hop[1],
			"dest-add-forward-headers": true, "dest-add-timestamp-header": true,
		}, shovel.Options{Name: "to-" + hop[1], Vhost: "/", ClusterName: "railmq@test"})
	}
	_, last := collect(t, a.url("/"), "dst", 1, 30*time.Second)
	h := last[0].Headers
	if h["a"] != "b" {
		t.Errorf("header a: %v", h["a"])
	}
	if ts, ok := h["x-shovelled-timestamp"].(int64); !ok || ts < before || ts > time.Now().Unix()+1 {
		t.Errorf("x-shovelled-timestamp %T %v", h["x-shovelled-timestamp"], h["x-shovelled-timestamp"])
	}
	arr, ok := h["x-shovelled"].([]any)
	if !ok || len(arr) != 2 {
		t.Fatalf("x-shovelled %T %v: an array of two tables", h["x-shovelled"], h["x-shovelled"])
	}
	srcURI := "amqp://" + a.addr + "/%2f"
	want := rmq.Table{
		"shovelled-by": "railmq@test", "shovel-type": "dynamic", "shovel-name": "to-dst", "shovel-vhost": "/",
		"src-uri": srcURI, "dest-uri": srcURI, "src-queue": "mid", "dest-queue": "dst",
	}
	got, _ := arr[0].(rmq.Table)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("latest hop:\n got %v\nwant %v", got, want)
	}
	if first, _ := arr[1].(rmq.Table); first["shovel-name"] != "to-mid" || first["src-queue"] != "src" {
		t.Errorf("first hop: %v", first)
	}
}

// TestQueueLength: src-delete-after queue-length moves the queue's length
// when the shovel started, then terminates and calls OnComplete (RabbitMQ
// then deletes the shovel's parameter: after a move of one message the
// 3.10.8 broker answered GET /api/shovels/sc-fwd with [] and GET
// /api/parameters/shovel/sc-fwd with []). Messages published later stay.
// A numeric src-delete-after moves that many.
func TestQueueLength(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	for _, tc := range []struct {
		name  string
		after any
		fill  int
		want  int
	}{
		{"queue-length", "queue-length", 1500, 1500},
		{"count", float64(700), 1500, 700},
		{"empty", "queue-length", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := "src-"+tc.name, "dst-"+tc.name
			fill(t, a.url("/"), src, tc.fill, 10)
			var completed atomic.Int32
			s := start(t, map[string]any{
				"src-uri": a.url("/"), "src-queue": src, "dest-uri": a.url("/"), "dest-queue": dst,
				"src-delete-after": tc.after, "src-prefetch-count": float64(100),
			}, shovel.Options{OnComplete: func() { completed.Add(1) }})
			poll.Eventually(t, 60*time.Second, func() bool { return s.Status().Done }, "completed")
			st := s.Status()
			if st.State != shovel.Terminated || st.Reason != "completed" || completed.Load() != 1 ||
				st.Moved != uint64(tc.want) || st.Remaining != 0 {
				t.Fatalf("status %+v, OnComplete called %d times", st, completed.Load())
			}
			fill(t, a.url("/"), src+"-late", 0, 0)
			if got := queueLen(t, a.url("/"), dst); got != tc.want {
				t.Errorf("destination holds %d, want %d", got, tc.want)
			}
			if got := queueLen(t, a.url("/"), src); got != tc.fill-tc.want {
				t.Errorf("source holds %d, want %d", got, tc.fill-tc.want)
			}
		})
	}
}

// TestQueueLengthNoAck: with no-ack the consumer's messages have left the
// source when the count is reached: those already handed over are
// published too, never dropped.
func TestQueueLengthNoAck(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	fill(t, a.url("/"), "src", 2000, 10)
	s := start(t, map[string]any{
		"src-uri": a.url("/"), "src-queue": "src", "dest-uri": a.url("/"), "dest-queue": "dst",
		"src-delete-after": "queue-length", "ack-mode": "no-ack",
	}, shovel.Options{})
	poll.Eventually(t, 60*time.Second, func() bool { return s.Status().Done }, "completed")
	if got, left := queueLen(t, a.url("/"), "dst"), queueLen(t, a.url("/"), "src"); got+left != 2000 || got < 2000-left {
		t.Fatalf("destination %d + source %d, want 2000 in all", got, left)
	}
}

// TestPublishProperties: dest-publish-properties override the message's.
func TestPublishProperties(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	fill(t, a.url("/"), "src", 1, 10)
	start(t, map[string]any{
		"src-uri": a.url("/"), "src-queue": "src", "dest-uri": a.url("/"), "dest-queue": "dst",
		"dest-publish-properties": map[string]any{"delivery_mode": float64(1), "app_id": "shovel", "content_type": "text/plain"},
	}, shovel.Options{})
	_, last := collect(t, a.url("/"), "dst", 1, 30*time.Second)
	if d := last[0]; d.DeliveryMode != 1 || d.AppId != "shovel" || d.ContentType != "text/plain" {
		t.Errorf("properties: mode %d app %q type %q", d.DeliveryMode, d.AppId, d.ContentType)
	}
}

// TestSrcURIList: src-uri as a list; a URI that does not answer is
// skipped for the next.
func TestSrcURIList(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	fill(t, a.url("/"), "src", 5, 10)
	s := start(t, map[string]any{
		"src-uri": []any{"amqp://guest:guest@127.0.0.1:1/", a.url("/")}, "src-queue": "src",
		"dest-uri": a.url("/"), "dest-queue": "dst",
	}, shovel.Options{})
	seen, _ := collect(t, a.url("/"), "dst", 5, 30*time.Second)
	checkAll(t, seen, 5)
	if st := s.Status(); st.Sessions != 1 || !strings.Contains(st.SrcURI, a.addr) {
		t.Errorf("status %+v", st)
	}
}

// TestRestart: Restart ends the session and starts another at once; the
// counts go on and every message still arrives once.
func TestRestart(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	fill(t, a.url("/"), "src", 100, 10)
	s := start(t, map[string]any{"src-uri": a.url("/"), "src-queue": "src", "dest-uri": a.url("/"), "dest-queue": "dst"}, shovel.Options{})
	seen, _ := collect(t, a.url("/"), "dst", 100, 30*time.Second)
	checkAll(t, seen, 100)
	s.Restart()
	waitState(t, s, shovel.Running, 30*time.Second)
	fill(t, a.url("/"), "src", 100, 10)
	seen, _ = collect(t, a.url("/"), "dst", 100, 30*time.Second)
	if dups := checkAll(t, seen, 100); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	poll.Eventually(t, 30*time.Second, func() bool { return s.Status().Moved == 200 }, "moved 200 (now %+v)", s.Status())
	if st := s.Status(); st.Sessions != 2 {
		t.Errorf("status %+v", st)
	}
}

// localDialer stands in for the broker's local path: it dials the given
// broker for a host-less URI, and counts.
type localDialer struct {
	addr  string
	dials atomic.Int32
}

func (d *localDialer) Dial(ctx context.Context, uri, name string) (shovel.Conn, error) {
	d.dials.Add(1)
	return shovel.AMQPDialer{}.Dial(ctx, "amqp://guest:guest@"+d.addr+"/"+url.PathEscape(shovel.Vhost(uri)), name)
}

// TestLocalURI: a host-less URI ("amqp://", RabbitMQ's this-node) goes to
// the Dialer's local path; the TCP dialer alone refuses it with the
// reason in the status. With src-prefetch-count 0 (no limit) the in-flight
// publishes stay bounded and everything moves.
func TestLocalURI(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", t.TempDir())
	fill(t, a.url("/"), "src", 3000, 10)
	s := start(t, map[string]any{"src-uri": "amqp://", "src-queue": "src", "dest-uri": a.url("/"), "dest-queue": "dst",
		"reconnect-delay": float64(0)}, shovel.Options{})
	poll.Eventually(t, 30*time.Second, func() bool { return s.Status().Done }, "done")
	if st := s.Status(); !strings.Contains(st.Reason, shovel.ErrLocalURI.Error()) {
		t.Fatalf("status %+v", st)
	}
	local := &localDialer{addr: a.addr}
	s = start(t, map[string]any{"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp:///", "dest-queue": "dst",
		"src-prefetch-count": float64(0)}, shovel.Options{Dialer: shovel.SplitDialer{Local: local}})
	seen, _ := collect(t, a.url("/"), "dst", 3000, 60*time.Second)
	checkAll(t, seen, 3000)
	if local.dials.Load() != 2 {
		t.Errorf("local dials: %d", local.dials.Load())
	}
	_ = s
}
