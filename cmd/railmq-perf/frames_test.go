package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// perfRun runs the tool with args against url and returns its exit code,
// the decoded JSON report and stderr.
func perfRun(t *testing.T, url string, args ...string) (int, *result, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"--uri", url, "--json"}, args...), &out, &errOut)
	res := &result{}
	if err := json.Unmarshal(out.Bytes(), res); err != nil {
		t.Fatalf("railmq-perf %v: exit %d, report %q: %v\nstderr:\n%s", args, code, out.String(), err, errOut.String())
	}
	return code, res, errOut.String()
}

// Every scenario runs with the frame engine against an in-process broker
// and must deliver every message once, in order, with nothing lost. With
// RAILMQ_TEST_URL (testutil.Start) these tests, except those marked
// InProcess, run against another broker such as RabbitMQ.
func TestFramesEngine(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	const n = 3000
	for _, tc := range []struct {
		name   string
		args   []string
		queues uint64 // copies of each message delivered
	}{
		{"plain autoack", []string{"--autoack"}, 1},
		{"ack each", []string{"--prefetch", "100"}, 1},
		{"multiple acks", []string{"--prefetch", "200", "--multi-ack-every", "50"}, 1},
		{"confirms", []string{"--confirm", "64", "--autoack"}, 1},
		{"fanout to 3 queues", []string{"--exchange-type", "fanout", "--fanout-queues", "3", "--consumers", "3", "--prefetch", "100", "--multi-ack-every", "10"}, 3},
		{"persistent", []string{"--persistent", "--confirm", "100", "--prefetch", "100", "--multi-ack-every", "20"}, 1},
		{"two producers two queues, 1 KiB", []string{"--producers", "2", "--consumers", "2", "--queues", "2", "--size", "1024", "--autoack"}, 1},
		{"body over several frames", []string{"--size", "300000", "--autoack", "--confirm", "10"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--engine", "frames", "--pmessages", "3000", "--queue-prefix", "frames-" + strings.ReplaceAll(tc.name, " ", "-")}, tc.args...)
			msgs := uint64(n)
			if tc.name == "body over several frames" {
				args[3] = "200"
				msgs = 200
			}
			code, res, stderr := perfRun(t, b.URL, args...)
			producers := uint64(1)
			if strings.Contains(tc.name, "two producers") {
				producers = 2
			}
			if code != exitOK || res.Status != "ok" {
				t.Fatalf("exit %d, status %s\n%s", code, res.Status, stderr)
			}
			if res.Published != producers*msgs || res.Consumed != tc.queues*producers*msgs {
				t.Fatalf("published %d, consumed %d; want %d and %d", res.Published, res.Consumed, producers*msgs, tc.queues*producers*msgs)
			}
			if res.Lost != 0 || res.Unreceived != 0 || res.Duplicated != 0 || res.OutOfOrder != 0 || res.Errors != 0 {
				t.Fatalf("lost %d unreceived %d duplicated %d out of order %d errors %d", res.Lost, res.Unreceived, res.Duplicated, res.OutOfOrder, res.Errors)
			}
			if res.Config.Confirm > 0 && res.Confirmed != res.Published {
				t.Fatalf("confirmed %d of %d", res.Confirmed, res.Published)
			}
			if res.PerfCPUS <= 0 || res.PerfCPUUSPerMsg <= 0 {
				t.Fatalf("perf cpu %v s, %v us/msg", res.PerfCPUS, res.PerfCPUUSPerMsg)
			}
			if res.LatencyUS.Max <= 0 {
				t.Fatalf("no latency recorded: %+v", res.LatencyUS)
			}
		})
	}
}

// predeclare declares perf.direct and queue name with args, bound by its
// name, and returns a channel for the test's own publishes.
func predeclare(t *testing.T, url, name string, args rmq.Table) *rmq.Channel {
	t.Helper()
	conn, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("perf.direct", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, name, "perf.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	return ch
}

// A queue that drops its head (x-max-length) under a producer faster than
// its one-at-a-time consumer loses messages; the frame engine must see the
// gaps and exit 3.
func TestFramesEngineDetectsLoss(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	predeclare(t, b.URL, "lossy-1", rmq.Table{"x-max-length": int32(50)})
	code, res, stderr := perfRun(t, b.URL, "--engine", "frames", "--queue-prefix", "lossy", "--predeclared",
		"--duration", "500ms", "--prefetch", "1")
	if code != exitVerify || res.Status != "verify_failed" || res.Lost == 0 {
		t.Fatalf("exit %d, status %s, lost %d (published %d, consumed %d); want exit 3 with losses\n%s",
			code, res.Status, res.Lost, res.Published, res.Consumed, stderr)
	}
}

// A message with the tool's own (producer 0, seq 3) already in the queue
// arrives before the tool's publishes: the tool's seq 3 is then a
// duplicate, and its seqs 0..2 come after a higher one, out of order.
func TestFramesEngineDetectsDuplicates(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	ch := predeclare(t, b.URL, "dup-1", nil)
	body := newBody(headerSize)
	putHeader(body, header{producer: 0, seq: 3, sentNano: time.Now().UnixNano()})
	if err := ch.PublishWithContext(context.Background(), "", "dup-1", false, false, rmq.Publishing{Body: body}); err != nil {
		t.Fatal(err)
	}
	// Publish returns once the frames are written: the message is queued
	// when the broker has read them, which under a loaded CI run came
	// after the tool's first publishes (out of order 0). Wait for it.
	testutil.Eventually(t, 5*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive("dup-1", false, false, false, false, nil)
		return err == nil && q.Messages == 1
	}, "the test's message is not in dup-1")
	code, res, stderr := perfRun(t, b.URL, "--engine", "frames", "--queue-prefix", "dup", "--predeclared", "--pmessages", "10")
	if code != exitVerify || res.Duplicated != 1 || res.OutOfOrder != 3 || res.Lost != 0 || res.Consumed != 11 {
		t.Fatalf("exit %d: duplicated %d, out of order %d, lost %d, consumed %d; want 3, 1, 3, 0, 11\n%s",
			code, res.Duplicated, res.OutOfOrder, res.Lost, res.Consumed, stderr)
	}
}

// With a 1s heartbeat and a consumer that sends nothing else (autoack, a
// slow producer), the broker keeps the connections only if the engine
// sends heartbeats.
func TestFramesEngineHeartbeats(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	code, res, stderr := perfRun(t, b.URL, "--engine", "frames", "--queue-prefix", "hb", "--heartbeat", "1s",
		"--rate", "5", "--duration", "3500ms", "--autoack")
	if code != exitOK || res.Errors != 0 || res.Consumed != res.Published || res.Published == 0 {
		t.Fatalf("exit %d, errors %d, published %d, consumed %d\n%s", code, res.Errors, res.Published, res.Consumed, stderr)
	}
}

// While the broker's disk alarm is on, it sends connection.blocked and the
// producer stops publishing; after connection.unblocked it resumes, and
// nothing is lost.
func TestFramesEngineBlocked(t *testing.T) {
	testutil.InProcess(t)
	var free atomic.Uint64
	free.Store(1 << 40)
	b := testutil.Start(t, broker.Options{
		DiskFreeLimit:      1 << 20,
		DiskFree:           func() (uint64, error) { return free.Load(), nil },
		AlarmCheckInterval: 10 * time.Millisecond,
	})
	cfg, err := parseFlags([]string{"--engine", "frames", "--uri", b.URL, "--queue-prefix", "blocked", "--consumers", "0", "--rate", "2000"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(cfg, &bytes.Buffer{}, &bytes.Buffer{})
	if err := r.setup(); err != nil {
		t.Fatal(err)
	}
	p := r.producers[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	testutil.Eventually(t, 5*time.Second, func() bool { return p.published.Load() > 100 }, "publishing")
	free.Store(1) // under the limit: alarm
	testutil.Eventually(t, 5*time.Second, p.blocked.Load, "connection.blocked")
	before := p.published.Load()
	// An interval in which an unblocked producer at 2000 msg/s would
	// publish about 400; a blocked one publishes nothing more, except a
	// message it was writing when the block arrived.
	<-time.After(200 * time.Millisecond)
	if during := p.published.Load() - before; during > 1 {
		t.Fatalf("published %d messages while blocked", during)
	}
	free.Store(1 << 40)
	testutil.Eventually(t, 5*time.Second, func() bool { return !p.blocked.Load() }, "connection.unblocked")
	resumed := p.published.Load()
	testutil.Eventually(t, 5*time.Second, func() bool { return p.published.Load() > resumed+100 }, "publishing again")
	cancel()
	<-done
	r.teardown()
	if n := r.errors.Load(); n != 0 {
		t.Fatalf("%d errors", n)
	}
	ch := predeclare(t, b.URL, "blocked-1", nil)
	q, err := ch.QueueDeclarePassive("blocked-1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(q.Messages) != p.published.Load() {
		t.Fatalf("queue holds %d messages, published %d", q.Messages, p.published.Load())
	}
}

func TestFramesEngineRefusesTLS(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--engine", "frames", "--uri", "amqps://guest:guest@127.0.0.1:5671/"}, &bytes.Buffer{}, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "does not support TLS") {
		t.Fatalf("exit %d, stderr %q; want exit 2 naming TLS", code, stderr.String())
	}
	if _, err := parseFlags([]string{"--engine", "raw"}, &bytes.Buffer{}); err == nil {
		t.Fatal("--engine raw accepted")
	}
}

func TestConfirmTracker(t *testing.T) {
	type step struct {
		tag      uint64
		multiple bool
		want     uint64 // newly settled
		each     []uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
		low   uint64
	}{
		{"singles in order", []step{{1, false, 1, []uint64{1}}, {2, false, 1, []uint64{2}}}, 2},
		{"multiple", []step{{5, true, 5, []uint64{1, 2, 3, 4, 5}}, {7, true, 2, []uint64{6, 7}}}, 7},
		{"single out of order then multiple", []step{{3, false, 1, []uint64{3}}, {4, true, 3, []uint64{1, 2, 4}}}, 4},
		{"gap closes", []step{{2, false, 1, []uint64{2}}, {3, false, 1, []uint64{3}}, {1, false, 1, []uint64{1}}}, 3},
		{"repeats count once", []step{{3, true, 3, []uint64{1, 2, 3}}, {2, false, 0, nil}, {3, true, 0, nil}, {5, false, 1, []uint64{5}}, {5, false, 0, nil}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ct confirmTracker
			for i, s := range tc.steps {
				var got []uint64
				n := ct.settle(s.tag, s.multiple, func(x uint64) { got = append(got, x) })
				if n != s.want || len(got) != len(s.each) {
					t.Fatalf("step %d: settled %d %v, want %d %v", i, n, got, s.want, s.each)
				}
				for j := range got {
					if got[j] != s.each[j] {
						t.Fatalf("step %d: settled %v, want %v", i, got, s.each)
					}
				}
			}
			if ct.low != tc.low {
				t.Fatalf("low = %d, want %d", ct.low, tc.low)
			}
		})
	}
}

// deliveryStream is an endless stream of basic.deliver messages (method,
// header and body frames as a broker sends them) with increasing delivery
// tags and sequence numbers, for the decode benchmark.
type deliveryStream struct {
	msg     []byte
	tagOff  int // offset of the delivery tag in msg
	bodyOff int // offset of the body in msg
	pos     int
	seq     uint64
}

func newDeliveryStream(size int) *deliveryStream {
	b, s := beginMethod(nil, frameChannel, classBasic, mBasicDeliver)
	b = appendShortStr(b, "amq.ctag-bench")
	tagOff := len(b)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = append(b, 0) // redelivered
	b = appendShortStr(b, "perf.direct")
	b = appendShortStr(b, "perf-q-1")
	b = endFrame(b, s)
	tmpl, bodyOff := publishTemplate("x", "y", false, newBody(size), frameMaxWanted)
	// Keep the content frames of the publish template (header onwards).
	hdrAt := 7 + int(binary.BigEndian.Uint32(tmpl[3:])) + 1
	d := &deliveryStream{tagOff: tagOff, bodyOff: len(b) + bodyOff - hdrAt}
	d.msg = append(b, tmpl[hdrAt:]...)
	return d
}

func (d *deliveryStream) Read(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if d.pos == 0 {
			d.seq++
			binary.BigEndian.PutUint64(d.msg[d.tagOff:], d.seq)
			putHeader(d.msg[d.bodyOff:], header{producer: 0, seq: d.seq - 1, sentNano: time.Now().UnixNano()})
		}
		c := copy(p, d.msg[d.pos:])
		p, n, d.pos = p[c:], n+c, d.pos+c
		if d.pos == len(d.msg) {
			d.pos = 0
		}
	}
	return n, nil
}

// BenchmarkFramesMessage is the frame engine's per-message work on both
// sides, without the sockets: encode one publish into the batch buffer
// (copy the template, patch id, sequence and time), and parse one delivery
// (method, header and body frames out of the bufio.Reader), check it
// (loss, order, latency) and append its ack.
func BenchmarkFramesMessage(b *testing.B) {
	for _, size := range []int{16, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			r := newRunner(&config{}, &bytes.Buffer{}, &bytes.Buffer{})
			fc := &frameConn{br: bufio.NewReaderSize(newDeliveryStream(size), readBufSize), frameMax: frameMaxWanted}
			c := &consumer{r: r, q: newQueueState("perf-q-1"), ackEvery: 1, done: make(chan struct{}),
				fr: &frameConsumer{fc: fc, ackBuf: make([]byte, 0, 4096)}}
			tmpl, bodyOff := publishTemplate("perf.direct", "perf-q-1", false, newBody(size), frameMaxWanted)
			buf := make([]byte, 0, 64*len(tmpl))
			var seq uint64
			b.SetBytes(int64(max(size, headerSize)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if len(buf)+len(tmpl) > cap(buf) {
					buf = buf[:0]
				}
				buf = appendPublishes(buf, tmpl, bodyOff, 0, seq, 1, 42)
				seq++
				for before := c.consumed.Load(); c.consumed.Load() == before; {
					fresh := !fc.wholeFrameBuffered()
					typ, ch, p, err := fc.readFrame()
					if fresh {
						c.fr.now = time.Now().UnixNano()
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := c.frame(typ, ch, p); err != nil {
						b.Fatal(err)
					}
				}
				if len(c.fr.ackBuf) > 4000 {
					c.fr.ackBuf = c.fr.ackBuf[:0]
				}
			}
			b.StopTimer()
			if c.duplicated != 0 || c.outOfOrder != 0 || r.errors.Load() != 0 {
				b.Fatalf("duplicated %d, out of order %d, errors %d", c.duplicated, c.outOfOrder, r.errors.Load())
			}
		})
	}
}

// runAsync starts the tool and returns a channel with its exit code, report
// and stderr.
type asyncRun struct {
	code   int
	res    *result
	stderr string
}

func perfRunAsync(t *testing.T, url string, args ...string) <-chan asyncRun {
	t.Helper()
	out := make(chan asyncRun, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"--uri", url, "--json"}, args...), &stdout, &stderr)
		res := &result{}
		_ = json.Unmarshal(stdout.Bytes(), res)
		out <- asyncRun{code, res, stderr.String()}
	}()
	return out
}

// Deleting the queue under the consumer makes the broker send basic.cancel
// to it, and the producer's mandatory publishes come back as basic.return:
// the engine counts both (an error, and returned messages).
func TestFramesEngineCancelAndReturns(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	done := perfRunAsync(t, b.URL, "--engine", "frames", "--queue-prefix", "cancel", "--rate", "2000", "--duration", "1500ms", "--autoack")
	conn, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, 5*time.Second, func() bool {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive("cancel-1", false, false, false, false, nil)
		return err == nil && q.Consumers == 1
	}, "consumer on cancel-1")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("cancel-1", false, false, false); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != exitError || r.res.Errors == 0 || !strings.Contains(r.stderr, "broker cancelled the consumer on cancel-1") {
		t.Fatalf("exit %d, errors %d; want exit 1 and the cancel reported\n%s", r.code, r.res.Errors, r.stderr)
	}
	if r.res.Returned == 0 || r.res.Lost != 0 {
		t.Fatalf("returned %d, lost %d; want returns counted and not lost", r.res.Returned, r.res.Lost)
	}
}

// A connection closed by the broker (management API, 320
// CONNECTION_FORCED) is answered with close-ok and reported.
func TestFramesEngineBrokerClose(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	mgmt := httptest.NewServer(b.ManagementHandler())
	defer mgmt.Close()
	done := perfRunAsync(t, b.URL, "--engine", "frames", "--queue-prefix", "forced", "--rate", "1000", "--duration", "1500ms", "--prefetch", "10")
	var name string
	testutil.Eventually(t, 5*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, mgmt.URL+"/api/connections", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var conns []struct {
			Name  string         `json:"name"`
			Props map[string]any `json:"client_properties"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&conns); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if c.Props["connection_name"] == "railmq-perf consumer 0" {
				name = c.Name
				return true
			}
		}
		return false
	}, "the consumer's connection listed")
	// Closed once it consumes, not while it is still setting up (on a
	// loaded machine the connection is listed well before basic.consume).
	testutil.Eventually(t, 5*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, mgmt.URL+"/api/queues", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var qs []struct {
			Name      string `json:"name"`
			Consumers int    `json:"consumers"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&qs); err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if strings.HasPrefix(q.Name, "forced") && q.Consumers > 0 {
				return true
			}
		}
		return false
	}, "the consumer consuming")
	req, _ := http.NewRequest(http.MethodDelete, mgmt.URL+"/api/connections/"+url.PathEscape(name), nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE connection: %s", resp.Status)
	}
	r := <-done
	// Reported for consumer 0, whether the close came while it consumed
	// ("consumer 0: connection closed ...") or, on a loaded machine, in
	// the instant between its consumer registering and consume-ok
	// reaching it ("setup: consumer 0: basic.consume ...: connection
	// closed ...").
	if r.code != exitError || !strings.Contains(r.stderr, "consumer 0") ||
		!strings.Contains(r.stderr, "connection closed by the broker: 320 CONNECTION_FORCED") {
		t.Fatalf("exit %d; want exit 1 and the forced close reported\n%s", r.code, r.stderr)
	}
}

// Publishing to an exchange that does not exist closes the channel with 404
// (§1.8.3.7 basic.publish); the producer answers close-ok, reports it and
// stops publishing.
func TestFramesEngineChannelClosed(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	conn, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("perf.direct", false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("noex-1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	code, res, stderr := perfRun(t, b.URL, "--engine", "frames", "--queue-prefix", "noex", "--predeclared", "--consumers", "0", "--duration", "2s")
	if code != exitError || res.Errors == 0 || !strings.Contains(stderr, "producer 0: channel closed by the broker: 404") {
		t.Fatalf("exit %d, errors %d; want exit 1 and the 404 reported\n%s", code, res.Errors, stderr)
	}
	if res.DurationS >= 2 {
		t.Fatalf("the run lasted %vs: the producer kept going after its channel closed", res.DurationS)
	}
}
