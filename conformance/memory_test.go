package conformance

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/queue"
)

const oneMiB = 1 << 20

// memoryBack polls until the broker counts want bytes again.
func memoryBack(t *testing.T, srv *broker.Server, want int64, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool { return srv.MemoryUsed() == want },
		"%s: the broker counts %d bytes, %d before", what, srv.MemoryUsed(), want)
}

// Uncommitted transactional publishes are held by the broker, so they
// count towards the memory alarm: before, 8,519 x 1 MiB published after
// tx.select without a commit reached 8.5 GiB with the alarm's count at 0.
// Now the publisher is blocked once they pass the watermark. Its own
// reader stops, so it cannot roll back (as in RabbitMQ, a blocked connection reads nothing more):
// closing it, here through the management API, gives them back.
func TestUncommittedTxRaisesMemoryAlarm(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{MemoryHighWatermark: 4 * oneMiB})
	q := e.queue("", nil)
	srv := e.b.Server
	before := srv.MemoryUsed()
	pub, err := rmq.DialConfig(e.b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "tx-publisher"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	blocked := pub.NotifyBlocked(make(chan rmq.Blocking, 8))
	ch := e.channel(pub)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, oneMiB)
	const n = 8
	published := make(chan error, 1)
	go func() {
		for range n {
			if err := ch.Publish("", q, false, false, rmq.Publishing{Body: body}); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	expectBlocked(t, blocked, "low on memory", func() string {
		return fmt.Sprintf("the broker counts %d bytes", srv.MemoryUsed())
	})
	if used := srv.MemoryUsed() - before; used <= 4*oneMiB {
		t.Fatalf("blocked with %d uncommitted bytes counted, the watermark at %d", used, 4*oneMiB)
	}

	hs := httptest.NewServer(e.b.ManagementHandler())
	defer hs.Close()
	call := func(method, path string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	var conns []struct {
		Name             string `json:"name"`
		ClientProperties struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	call("GET", "/api/connections", &conns)
	for _, c := range conns {
		if c.ClientProperties.ConnectionName == "tx-publisher" {
			call("DELETE", "/api/connections/"+url.PathEscape(c.Name), nil)
		}
	}
	select {
	case <-published: // ended by the close, or all sent before it
	case <-time.After(10 * time.Second):
		t.Fatal("the publisher is still blocked after its connection was closed")
	}
	memoryBack(t, srv, before, "the transaction's connection closed")
	if n := e.count(q); n != 0 {
		t.Fatalf("%d uncommitted messages reached the queue", n)
	}
}

// The counter follows every way a transaction ends: what it held is
// counted until then, and given back exactly once (the queue counts what
// a commit routes until it is acked).
func TestTxMemoryGivenBack(t *testing.T) {
	testutil.InProcess(t)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, e *env, c *rmq.Connection, ch *rmq.Channel, q string, before int64)
	}{
		{"commit, consume, ack", func(t *testing.T, e *env, c *rmq.Connection, ch *rmq.Channel, q string, before int64) {
			if err := ch.TxCommit(); err != nil {
				t.Fatal(err)
			}
			memoryBack(t, e.b.Server, before+3*(&queue.Message{RoutingKey: q, Props: (&amqp.Properties{}).Append(nil), Body: make([]byte, oneMiB)}).MemSize(), "committed: the queue's count")
			for range 3 {
				if err := e.get(ch, q, false).Ack(false); err != nil {
					t.Fatal(err)
				}
			}
			if err := ch.TxCommit(); err != nil { // the acks, deferred too
				t.Fatal(err)
			}
		}},
		{"rollback", func(t *testing.T, e *env, c *rmq.Connection, ch *rmq.Channel, q string, _ int64) {
			if err := ch.TxRollback(); err != nil {
				t.Fatal(err)
			}
		}},
		{"channel.close", func(t *testing.T, e *env, c *rmq.Connection, ch *rmq.Channel, q string, _ int64) {
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"connection.close", func(t *testing.T, e *env, c *rmq.Connection, ch *rmq.Channel, q string, _ int64) {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, broker.Options{MemoryHighWatermark: 64 * oneMiB})
			q := e.queue("", nil)
			srv := e.b.Server
			before := srv.MemoryUsed()
			c := dial(t, e.b.URL)
			ch := e.channel(c)
			if err := ch.Tx(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := ch.Publish("", q, false, false, rmq.Publishing{Body: make([]byte, oneMiB)}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Eventually(t, 10*time.Second, func() bool { return srv.MemoryUsed()-before >= 3*oneMiB },
				"3 uncommitted MiB counted (%d bytes)", srv.MemoryUsed()-before)
			tc.end(t, e, c, ch, q, before)
			memoryBack(t, srv, before, tc.name)
		})
	}
}

// A content header's declared size reserves nothing: a body is held, and
// counted, as its frames arrive, and given back when the connection
// closes mid-body. Before, each header declaring 128 MiB allocated it at
// once: 400 channels reserved 57.6 GB with a byte of body or none.
func TestContentHeaderReservesNothing(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	srv := e.b.Server
	before := srv.MemoryUsed()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	heapBefore := heap()
	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(amqp.Table{}, 0, false)
	header := func(ch uint16, size uint64) []byte {
		p := binary.BigEndian.AppendUint16(nil, amqp.ClassBasic)
		p = binary.BigEndian.AppendUint16(p, 0) // weight
		p = binary.BigEndian.AppendUint64(p, size)
		return testutil.Frame(amqp.FrameHeader, ch, append(p, 0, 0)) // no properties
	}
	const channels = 8
	for ch := uint16(1); ch <= channels; ch++ {
		r.Send(ch, &amqp.ChannelOpen{})
		r.Expect((*amqp.ChannelOpenOk)(nil))
		r.Send(ch, &amqp.BasicPublish{RoutingKey: "nowhere"})
		r.Write(header(ch, 128*oneMiB))
		r.Write(testutil.Frame(amqp.FrameBody, ch, make([]byte, 10)))
	}
	// The last channel's body frames are read once a method after them is.
	r.Send(0, &amqp.ConnectionUpdateSecret{NewSecret: "guest", Reason: "sync"})
	r.Expect((*amqp.ConnectionUpdateSecretOk)(nil))
	if used := srv.MemoryUsed() - before; used <= 0 || used > channels*64 {
		t.Fatalf("%d channels with 10 bytes of body each: the broker counts %d bytes", channels, used)
	}
	if grew := int64(heap()) - int64(heapBefore); grew > 64*oneMiB {
		t.Fatalf("the heap grew by %d bytes for %d channels with 10 bytes of body each", grew, channels)
	}
	// A body held mid-way is counted as it is: 1 MiB, not 128.
	for range 8 {
		r.Write(testutil.Frame(amqp.FrameBody, 1, make([]byte, 128<<10-8)))
	}
	r.Send(0, &amqp.ConnectionUpdateSecret{NewSecret: "guest", Reason: "sync"})
	r.Expect((*amqp.ConnectionUpdateSecretOk)(nil))
	if used := srv.MemoryUsed() - before; used < oneMiB || used > 2*oneMiB+channels*64 {
		t.Fatalf("1 MiB received of a 128 MiB body: the broker counts %d bytes", used)
	}
	r.NC.Close()
	memoryBack(t, srv, before, "closed mid-body")
}

// Above the paging ratio of the watermark (RabbitMQ's default 0.5), queues
// keep a small window and page the rest, so that the alarm is the last
// resort: 48 MiB published under a 64 MiB watermark into a queue whose own
// window would hold it all leaves little more than 32 MiB in memory, and no
// alarm.
func TestPagingRatioPagesBeforeTheAlarm(t *testing.T) {
	b, _ := alarmBroker(t, broker.Options{
		MemoryHighWatermark: 64 << 20,
		QueueWindow:         1 << 20,
		QueueWindowBytes:    1 << 30,
	})
	c, err := rmq.Dial(b.URL)
	must(t, err)
	defer c.Close()
	blocked := c.NotifyBlocked(make(chan rmq.Blocking, 4))
	ch := openChannel(t, c)
	_, err = ch.QueueDeclare("ratio", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	const n, size = 3072, 16 << 10
	body := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint64(body, uint64(i))
		dc, err := ch.PublishWithDeferredConfirm("", "ratio", false, false, rmq.Publishing{Body: body})
		must(t, err)
		if i%64 == 63 && !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	select {
	case bl := <-blocked:
		t.Fatalf("the memory alarm went off: %+v", bl)
	default:
	}
	if used := b.Server.MemoryUsed(); used > 36<<20 {
		t.Fatalf("queues hold %d MiB in memory after 48 MiB published: paging did not start at half the watermark", used>>20)
	}
	must(t, ch.Qos(100, 0, false))
	ds, err := ch.Consume("ratio", "", false, false, false, false, nil)
	must(t, err)
	for i := range n {
		d := recv(t, ds)
		if got := binary.BigEndian.Uint64(d.Body); got != uint64(i) {
			t.Fatalf("delivery %d is message %d", i, got)
		}
		must(t, d.Ack(false))
	}
}
