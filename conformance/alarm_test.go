package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Resource alarms as RabbitMQ raises them (rabbit_alarm, rabbit_reader):
// below the disk free limit or above the memory watermark, a connection
// that publishes is sent connection.blocked and no longer read; other
// connections, consumers among them, keep going, and connection.unblocked
// comes once the alarms clear.

// alarmBroker starts an in-process broker and returns a dialer whose
// connections are closed after the broker has shut down (cleanups run
// last in, first out): a client closing a connection the broker still
// blocks would wait for a close-ok it never sends, as with RabbitMQ.
func alarmBroker(t *testing.T, opts broker.Options) (*testutil.Broker, func() *rmq.Connection) {
	t.Helper()
	testutil.InProcess(t)
	var mu sync.Mutex
	var conns []*rmq.Connection
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	if opts.AlarmCheckInterval == 0 {
		opts.AlarmCheckInterval = 10 * time.Millisecond
	}
	b := testutil.Start(t, opts)
	return b, func() *rmq.Connection {
		t.Helper()
		c, err := rmq.Dial(b.URL)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c
	}
}

// diskAlarmBroker is alarmBroker with a 50 MB disk free limit and the
// free space the broker sees in free (1 TiB to begin with): set it below
// the limit for the disk alarm.
func diskAlarmBroker(t *testing.T) (*testutil.Broker, func() *rmq.Connection, *atomic.Uint64) {
	t.Helper()
	free := new(atomic.Uint64)
	free.Store(1 << 40)
	b, dial := alarmBroker(t, broker.Options{
		DiskFreeLimit: 50_000_000,
		DiskFree:      func() (uint64, error) { return free.Load(), nil },
	})
	return b, dial, free
}

func openChannel(t *testing.T, c *rmq.Connection) *rmq.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// blockings collects a connection's connection.blocked and unblocked.
type blockings struct {
	mu   sync.Mutex
	seen []rmq.Blocking
}

func watchBlocked(c *rmq.Connection) *blockings {
	b := &blockings{}
	ch := c.NotifyBlocked(make(chan rmq.Blocking, 16))
	go func() {
		for x := range ch { // closed when the connection closes
			b.mu.Lock()
			b.seen = append(b.seen, x)
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *blockings) all() []rmq.Blocking {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]rmq.Blocking(nil), b.seen...)
}

// waitFor polls until n notifications have come and returns them.
func (b *blockings) waitFor(t *testing.T, n int, what string) []rmq.Blocking {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool { return len(b.all()) >= n }, "%s", what)
	return b.all()
}

// TestDiskAlarmBlocksPublisher: with less free disk than the limit, a
// publishing connection is sent connection.blocked "low on disk" and no
// longer read, while a consumer on another connection drains the backlog
// with acks (prefetch 5, so its acks must get through); with space again,
// connection.unblocked, and what the publisher sent meanwhile arrives, in
// order and whole.
func TestDiskAlarmBlocksPublisher(t *testing.T) {
	_, dial, free := diskAlarmBroker(t)
	pub, cons := dial(), dial()
	pubBlocked, consBlocked := watchBlocked(pub), watchBlocked(cons)
	pch, cch := openChannel(t, pub), openChannel(t, cons)
	q, err := cch.QueueDeclare("", false, false, true, false, nil)
	must(t, err)
	must(t, pch.Confirm(false))

	// A backlog, confirmed before the alarm.
	const backlog = 50
	next := 0
	var confirms []*rmq.DeferredConfirmation
	publish := func() {
		t.Helper()
		dc, err := pch.PublishWithDeferredConfirm("", q.Name, false, false, rmq.Publishing{Body: []byte(strconv.Itoa(next))})
		if err != nil {
			t.Fatal(err)
		}
		confirms = append(confirms, dc)
		next++
	}
	confirmed := func() bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		for _, dc := range confirms {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				return false
			}
		}
		return true
	}
	for range backlog {
		publish()
	}
	if !confirmed() {
		t.Fatal("backlog nacked")
	}

	// The disk fills: the publisher's next publish is its last one read.
	free.Store(10_000_000)
	testutil.Eventually(t, 10*time.Second, func() bool {
		if len(pubBlocked.all()) > 0 {
			return true
		}
		publish()
		return false
	}, "connection.blocked")
	if got := pubBlocked.all()[0]; !got.Active || got.Reason != "low on disk" {
		t.Fatalf("publisher got %+v, want connection.blocked \"low on disk\"", got)
	}
	const late = 5 // sent after the broker stopped reading: wait in the socket
	for range late {
		publish()
	}

	// The consumer keeps receiving and acking.
	must(t, cch.Qos(5, 0, false))
	ds, err := cch.Consume(q.Name, "drain", false, false, false, false, nil)
	must(t, err)
	got := 0
	take := func(d rmq.Delivery) {
		t.Helper()
		if want := strconv.Itoa(got); string(d.Body) != want {
			t.Fatalf("delivery %q, want %q", d.Body, want)
		}
		must(t, d.Ack(false))
		got++
	}
	for got < backlog {
		take(recv(t, ds))
	}
	// Cancelled, the consumer has had every delivery the broker made; the
	// rest are ready. Nothing of the late ones is among them: the
	// publisher is still not read.
	must(t, cch.Cancel("drain", false))
	for d := range ds {
		take(d)
	}
	st, err := cch.QueueDeclarePassive(q.Name, false, false, true, false, nil)
	must(t, err)
	if routed := got + st.Messages; routed > next-late {
		t.Fatalf("%d messages routed while blocked, of %d published before connection.blocked came", routed, next-late)
	}
	if n := len(pubBlocked.all()); n != 1 {
		t.Fatalf("publisher notifications while the disk is full: %+v", pubBlocked.all())
	}

	// Space again: unblocked, and the rest arrives.
	free.Store(1 << 40)
	if all := pubBlocked.waitFor(t, 2, "connection.unblocked"); all[1].Active {
		t.Fatalf("publisher got %+v after the disk alarm cleared, want connection.unblocked", all)
	}
	publish()
	if !confirmed() {
		t.Fatal("nacked after the alarm")
	}
	ds, err = cch.Consume(q.Name, "rest", false, false, false, false, nil)
	must(t, err)
	for got < next {
		take(recv(t, ds))
	}
	if all := consBlocked.all(); len(all) != 0 {
		t.Errorf("the consumer's connection, which never published, got %+v", all)
	}
	if n := len(pubBlocked.all()); n != 2 {
		t.Errorf("publisher notifications %+v, want blocked and unblocked", pubBlocked.all())
	}
}

// TestMemoryAlarmAbsoluteWatermark: with a 1 MiB watermark, a publisher
// of 64 KiB messages is blocked ("low on memory") once queues hold more,
// with no more than a message or two beyond it taken in; a consumer on
// another connection acking what it gets drains the queue, which clears
// the alarm (as often as it takes) until every message is through.
func TestMemoryAlarmAbsoluteWatermark(t *testing.T) {
	// Paging off: above half the watermark queues would page (the paging
	// ratio, TestPagingRatioPagesBeforeTheAlarm), and their 1 MiB window
	// under pressure would keep them at the watermark, racing the alarm
	// this test is about.
	b, dial := alarmBroker(t, broker.Options{MemoryHighWatermark: 1 << 20, PagingRatio: 1})
	pub, cons := dial(), dial()
	pubBlocked, consBlocked := watchBlocked(pub), watchBlocked(cons)
	pch, cch := openChannel(t, pub), openChannel(t, cons)
	q, err := cch.QueueDeclare("", false, false, true, false, nil)
	must(t, err)

	const total = 64 // 4 MiB against 1 MiB
	body := make([]byte, 64<<10)
	done := make(chan error, 1)
	go func() {
		for i := range total {
			body := bytes.Clone(body)
			body[0] = byte(i)
			if err := pch.Publish("", q.Name, false, false, rmq.Publishing{Body: body}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	first := pubBlocked.waitFor(t, 1, "connection.blocked")[0]
	if !first.Active || first.Reason != "low on memory" {
		t.Fatalf("publisher got %+v, want connection.blocked \"low on memory\"", first)
	}
	if used := b.Server.MemoryUsed(); used > 1<<20+2*(64<<10)+4096 {
		t.Fatalf("queues hold %d bytes with a 1 MiB watermark", used)
	}

	must(t, cch.Qos(4, 0, false))
	ds, err := cch.Consume(q.Name, "", false, false, false, false, nil)
	must(t, err)
	for i := range total {
		d := recv(t, ds)
		if len(d.Body) != 64<<10 || d.Body[0] != byte(i) {
			t.Fatalf("delivery %d: %d bytes starting %d", i, len(d.Body), d.Body[0])
		}
		must(t, d.Ack(false))
	}
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the publisher is still blocked after its queue was drained")
	}
	// Blocked and unblocked in turn, ending unblocked.
	all := pubBlocked.all()
	testutil.Eventually(t, 10*time.Second, func() bool {
		all = pubBlocked.all()
		return len(all)%2 == 0
	}, "the last connection.unblocked")
	for i, x := range all {
		if x.Active != (i%2 == 0) || (x.Active && x.Reason != "low on memory") {
			t.Fatalf("notifications %+v: not blocked, unblocked in turn", all)
		}
	}
	if all := consBlocked.all(); len(all) != 0 {
		t.Errorf("the consumer's connection, which never published, got %+v", all)
	}
}

// TestAlarmBothReasons: with both alarms on, connection.blocked names both
// as RabbitMQ 3.10.8 does ("low on disk & memory"); a connection's other
// methods (declaring a queue) go through until it publishes. A watermark
// of 0 (negative in Options) keeps the memory alarm on, as RabbitMQ's 0.
func TestAlarmBothReasons(t *testing.T) {
	_, dial := alarmBroker(t, broker.Options{
		MemoryHighWatermark: -1,
		DiskFree:            func() (uint64, error) { return 1000, nil },
	})
	pub := dial()
	blocked := watchBlocked(pub)
	ch := openChannel(t, pub)
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	must(t, err)
	if _, err := ch.QueueDeclarePassive(q.Name, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	must(t, ch.Publish("", q.Name, false, false, rmq.Publishing{Body: []byte("x")}))
	got := blocked.waitFor(t, 1, "connection.blocked")[0]
	if !got.Active || got.Reason != "low on disk & memory" {
		t.Fatalf("got %+v, want connection.blocked \"low on disk & memory\"", got)
	}
}

// GET /api/connections shows each connection's state as RabbitMQ's
// management API does (checked against 3.10.8): "running"; during an
// alarm "blocked" for a connection that published and is no longer read,
// "blocking" for one that has not published since; "running" again once
// the alarm clears.
// connStates reads GET /api/connections from the management API at url:
// each connection's state by its connection_name. Errors are reported
// with t.Error, so it may run off the test's goroutine.
func connStates(t *testing.T, url string) map[string]string {
	req, _ := http.NewRequest("GET", url+"/api/connections", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	var cs []struct {
		State string `json:"state"`
		Props struct {
			Name string `json:"connection_name"`
		} `json:"client_properties"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]string{}
	for _, c := range cs {
		out[c.Props.Name] = c.State
	}
	return out
}

func TestConnectionStateInManagementAPI(t *testing.T) {
	b, _, free := diskAlarmBroker(t)
	states := stateReader(t, b)
	namedConn(t, b.URL, "idle")
	pub := namedConn(t, b.URL, "pub")
	pch := openChannel(t, pub)
	want := func(idleState, pubState string) {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, func() bool {
			s := states()
			return s["idle"] == idleState && s["pub"] == pubState
		}, "states idle=%s pub=%s", idleState, pubState)
	}
	want("running", "running")
	free.Store(1000) // below the limit: the disk alarm
	want("blocking", "blocking")
	must(t, pch.Publish("", "nowhere", false, false, rmq.Publishing{Body: []byte("x")}))
	want("blocking", "blocked")
	free.Store(1 << 40)
	want("running", "running")
}

// With --vm-memory-calculation-strategy rss the memory alarm measures the
// process, as RabbitMQ's default does: a watermark below the broker's own
// resident memory blocks a publisher though no message is held, and
// raising the watermark at run time (rabbitmqctl
// set_vm_memory_high_watermark: Server.SetMemoryHighWatermark) clears it.
func TestMemoryStrategyRSS(t *testing.T) {
	b, dial := alarmBroker(t, broker.Options{MemoryHighWatermark: 1 << 20, MemoryStrategy: "rss", PagingRatio: 1})
	pub := dial()
	blocked := watchBlocked(pub)
	ch := openChannel(t, pub)
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	must(t, err)
	// The monitor sees the RSS within its interval; a publish after that
	// is blocked.
	testutil.Eventually(t, 10*time.Second, func() bool {
		_ = ch.Publish("", q.Name, false, false, rmq.Publishing{Body: []byte("x")})
		return len(blocked.all()) >= 1
	}, "connection.blocked")
	if first := blocked.all()[0]; !first.Active || first.Reason != "low on memory" {
		t.Fatalf("got %+v, want connection.blocked \"low on memory\"", first)
	}
	b.Server.SetMemoryHighWatermark(1 << 40)
	if second := blocked.waitFor(t, 2, "connection.unblocked")[1]; second.Active {
		t.Fatalf("got %+v, want connection.unblocked", second)
	}
}

// TestStampAfterAlarmWait: a message's TTL counts from when the broker
// takes it in, as in RabbitMQ, where what a blocked connection sends waits
// unread in the socket. Two publishes with a 1 s TTL arrive in one write
// during a disk alarm. The first (no body: whole with its header, the
// content frame that blocks the connection) is taken in; it expires in
// the queue while the alarm lasts 2 s. The second waited in the broker's
// read buffer (the same read brought it) and is stamped once the
// connection is read again, so it is still there after the alarm. (The
// broker stamps a read batch's messages with the time of the read, and
// must not use that time after a wait.)
func TestStampAfterAlarmWait(t *testing.T) {
	b, dial, free := diskAlarmBroker(t)
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(amqp.Table{"connection.blocked": true}, 0, true)
	r.Send(1, &amqp.QueueDeclare{Queue: "stamp"})
	r.Expect((*amqp.QueueDeclareOk)(nil))
	ch := openChannel(t, dial()) // the reader, ready before the alarm ends

	// The alarm is on once another publisher is blocked by it.
	other := dial()
	blocked := watchBlocked(other)
	och := openChannel(t, other)
	free.Store(10_000_000)
	testutil.Eventually(t, 10*time.Second, func() bool {
		must(t, och.Publish("", "elsewhere", false, false, rmq.Publishing{}))
		return len(blocked.all()) > 0
	}, "connection.blocked")

	props := (&amqp.Properties{Flags: amqp.FlagExpiration, Expiration: "1000"}).Append(nil)
	var two []byte
	for _, body := range []string{"", "second"} { // the first whole with its header
		two = amqp.AppendMethodFrame(two, 1, &amqp.BasicPublish{RoutingKey: "stamp"})
		two = amqp.AppendContent(two, 1, amqp.ClassBasic, props, []byte(body), 131072)
	}
	r.Write(two)
	if m := r.Expect((*amqp.ConnectionBlocked)(nil)).(*amqp.ConnectionBlocked); m.Reason != "low on disk" {
		t.Fatalf("connection.blocked %q", m.Reason)
	}
	time.Sleep(2 * time.Second)
	free.Store(1 << 40)
	r.Expect((*amqp.ConnectionUnblocked)(nil))
	// The broker sends connection.unblocked before it reads on: an answer
	// to a synchronous method comes once the second publish is handled.
	r.Send(1, &amqp.QueueDeclare{Queue: "stamp", Passive: true})
	r.Expect((*amqp.QueueDeclareOk)(nil))

	var got []string
	for {
		d, ok, err := ch.Get("stamp", true)
		must(t, err)
		if !ok {
			break
		}
		got = append(got, string(d.Body))
	}
	if len(got) != 1 || got[0] != "second" {
		t.Fatalf("after the alarm the queue held %q, want [second] (the first expired while blocked)", got)
	}
}
