package conformance

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	neturl "net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// Streams in the management API, the console and the metrics.
//
// RabbitMQ 3.10.8, asked with a durable stream (x-queue-type stream,
// x-stream-max-segment-size-bytes 2000), 50 messages published with
// confirms and two consumers on one node (qos 10 from "first", 5 acked;
// qos 5 from offset 30, none acked), answered GET /api/queues/%2F/s with
// "type": "stream", "durable": true, "consumers": 2, "members":
// ["rabbit@vm"], "online": ["rabbit@vm"], "leader" (rabbitmqctl
// list_queues: rabbit@vm), "readers": {"rabbit@vm": 2},
// "messages_unacknowledged": 0 with 15 deliveries unacked, and
// "messages" = "messages_ready" = the offsets the stream holds (54: its
// log gives each segment after the first a tracking chunk's offset;
// rabbitmq-streams stream_status: offset 53, first_offset 0, segments
// 5). Its consumers (GET /api/consumers and the queue's
// consumer_details) carry "consumer_tag", "prefetch_count",
// "ack_required": true, and their arguments ({"x-stream-offset":
// "first"}, {"x-stream-offset": 30}). RabbitMQ 4.3.5 adds
// "segments" and "first_timestamp" (ms) to the queue
// (rabbit_osiris_metrics.erl STATISTICS_KEYS), and its stream protocol's
// consumers carry "offset" and "offset_lag" (rabbit_stream_metrics.erl).
// Its rabbitmq_prometheus (3.10.8, /metrics and /metrics/per-object)
// shows the stream only as a queue (rabbitmq_queue_messages 54,
// rabbitmq_queue_messages_unacked 0); 4.3.5's adds
// rabbitmq_stream_segments (counter) and
// rabbitmq_stream_consumer_max_offset_lag (gauge)
// (prometheus_rabbitmq_core_metrics_collector.erl).

// smStream is one stream's object in the management API.
type smStream struct {
	Name, Type, Node, Leader string
	Durable                  bool
	Arguments                map[string]any
	Consumers                int
	Messages                 int
	Ready                    int `json:"messages_ready"`
	Unacked                  int `json:"messages_unacknowledged"`
	Members, Online          []string
	Readers                  map[string]int
	Segments                 int
	FirstTimestamp           int64 `json:"first_timestamp"`
	Stream                   struct {
		First           uint64  `json:"first_offset"`
		Next            uint64  `json:"next_offset"`
		Last            *uint64 `json:"last_offset"`
		Segments        int
		DiskBytes       int64 `json:"disk_bytes"`
		FirstTimestamp  int64 `json:"first_timestamp"`
		LastTimestamp   int64 `json:"last_timestamp"`
		Published       int64
		SegmentsDeleted int64 `json:"segments_deleted"`
		Consumers       int
	} `json:"railmq_stream"`
	ConsumerDetails []smConsumer `json:"consumer_details"`
}

// smConsumer is a consumer in the management API.
type smConsumer struct {
	Tag         string `json:"consumer_tag"`
	Prefetch    int    `json:"prefetch_count"`
	AckRequired bool   `json:"ack_required"`
	Queue       struct{ Name, Vhost string }
	Arguments   map[string]any
	Offset      *uint64 `json:"offset"`
	Lag         *uint64 `json:"offset_lag"`
	Tracking    string  `json:"railmq_offset_tracking"`
}

// smConsume starts a consumer of the stream with the prefetch and
// arguments given.
func smConsume(t *testing.T, c *rmq.Connection, stream, tag string, prefetch int, args rmq.Table) (*rmq.Channel, <-chan rmq.Delivery) {
	t.Helper()
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Qos(prefetch, 0, false))
	d, err := ch.Consume(stream, tag, false, false, false, false, args)
	must(t, err)
	return ch, d
}

// smPublish publishes n messages of size bytes into the stream, each
// confirmed before the next (so that each is a chunk of its own).
func smPublish(t *testing.T, ch *rmq.Channel, stream string, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		body := []byte(fmt.Sprintf("%-*d", size, i))
		dc, err := ch.PublishWithDeferredConfirm("", stream, false, false, rmq.Publishing{Body: body})
		must(t, err)
		if ok := dc.Wait(); !ok {
			t.Fatalf("message %d nacked", i)
		}
	}
}

func smOffset(p *uint64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// TestStreamManagementAPI: a stream and its consumers as RabbitMQ shows
// them (above), with railmq's own figures of the log (railmq_stream:
// offsets, segments, bytes on disk, timestamps, counters) and each
// consumer's offset and lag; the list, the queue's GET, /api/consumers
// and rabbitmqadmin's list agree; retention moves the first offset and
// counts the segments it deleted.
func TestStreamManagementAPI(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	node := b.Server.NodeName()
	c := dial(t, b.URL)
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	_, err = ch.QueueDeclare("sm-s", true, false, false, false, rmq.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(2000)})
	must(t, err)
	before := time.Now().UnixMilli()
	smPublish(t, ch, "sm-s", 50, 100)
	after := time.Now().UnixMilli()

	// first: qos 10, 5 acked (15 delivered); from 30: qos 5, none acked
	// (5 delivered); tracked: qos 1 under a name, 1 acked (2 delivered).
	_, d1 := smConsume(t, c, "sm-s", "sm-first", 10, rmq.Table{"x-stream-offset": "first"})
	for i := 0; i < 5; i++ {
		must(t, (<-d1).Ack(false))
	}
	_, d2 := smConsume(t, c, "sm-s", "sm-30", 5, rmq.Table{"x-stream-offset": int64(30)})
	if m := <-d2; m.Headers["x-stream-offset"] != int64(30) {
		t.Fatalf("first delivery from offset 30: %v", m.Headers)
	}
	_, d3 := smConsume(t, c, "sm-s", "sm-tracked", 1, rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": "billing"})
	must(t, (<-d3).Ack(false))

	want := map[string][2]uint64{"sm-first": {15, 35}, "sm-30": {35, 15}, "sm-tracked": {2, 48}} // offset, lag
	var q smStream
	testutil.Eventually(t, 20*time.Second, func() bool {
		q = smStream{}
		if code := a.call("GET", "/api/queues/%2F/sm-s", "guest", "guest", nil, &q); code != 200 {
			t.Fatalf("GET the stream: %d", code)
		}
		if q.Messages != 50 || q.Consumers != 3 || len(q.ConsumerDetails) != 3 {
			return false
		}
		for _, cd := range q.ConsumerDetails {
			if w := want[cd.Tag]; cd.Offset == nil || cd.Lag == nil || *cd.Offset != w[0] || *cd.Lag != w[1] {
				return false
			}
		}
		return true
	}, "the stream's counts and its consumers' offsets (offset, lag) %v: %+v", want, &q)
	if q.Type != "stream" || !q.Durable || q.Arguments["x-queue-type"] != "stream" || q.Ready != 50 || q.Unacked != 0 {
		t.Errorf("the stream as a queue: type %q durable %v arguments %v messages_ready %d messages_unacknowledged %d; want stream, true, x-queue-type stream, 50, 0",
			q.Type, q.Durable, q.Arguments, q.Ready, q.Unacked)
	}
	if strings.Join(q.Members, ",") != node || strings.Join(q.Online, ",") != node || q.Leader != node || q.Readers[node] != 3 || len(q.Readers) != 1 {
		t.Errorf("members %v online %v leader %q readers %v; want [%s] [%s] %s {%s: 3}", q.Members, q.Online, q.Leader, q.Readers, node, node, node, node)
	}
	s := q.Stream
	if s.First != 0 || s.Next != 50 || s.Last == nil || *s.Last != 49 || s.Published != 50 || s.SegmentsDeleted != 0 || s.Consumers != 3 {
		t.Errorf("offsets: first %d next %d last %s published %d segments_deleted %d consumers %d; want 0 50 49 50 0 3",
			s.First, s.Next, smOffset(s.Last), s.Published, s.SegmentsDeleted, s.Consumers)
	}
	// 50 chunks of 100-byte bodies over 2,000-byte segments: several.
	if s.Segments < 2 || q.Segments != s.Segments || s.DiskBytes < 50*100 {
		t.Errorf("segments %d (railmq_stream %d), disk_bytes %d: want several, the same, at least the bodies' 5,000", q.Segments, s.Segments, s.DiskBytes)
	}
	if s.FirstTimestamp < before || s.FirstTimestamp > after || s.LastTimestamp < s.FirstTimestamp || s.LastTimestamp > after || q.FirstTimestamp != s.FirstTimestamp {
		t.Errorf("timestamps (ms) first %d last %d (top level %d), published between %d and %d", s.FirstTimestamp, s.LastTimestamp, q.FirstTimestamp, before, after)
	}
	wantArgs := map[string]string{"sm-first": `{"x-stream-offset":"first"}`, "sm-30": `{"x-stream-offset":30}`,
		"sm-tracked": `{"x-stream-offset":"first","x-stream-offset-tracking":"billing"}`}
	for _, cd := range q.ConsumerDetails {
		if !cd.AckRequired || cd.Queue.Name != "sm-s" || cd.Queue.Vhost != "/" {
			t.Errorf("consumer %+v", cd)
		}
		if args, _ := json.Marshal(cd.Arguments); string(args) != wantArgs[cd.Tag] {
			t.Errorf("consumer %s: arguments %s, want %s", cd.Tag, args, wantArgs[cd.Tag])
		}
		if (cd.Tag == "sm-tracked") != (cd.Tracking == "billing") {
			t.Errorf("consumer %s: tracking %q; want billing for sm-tracked alone", cd.Tag, cd.Tracking)
		}
	}

	// The list and /api/consumers say the same.
	var list []smStream
	a.call("GET", "/api/queues/%2F", "guest", "guest", nil, &list)
	if len(list) != 1 || list[0].Type != "stream" || list[0].Stream.Next != 50 || list[0].Segments != s.Segments {
		t.Errorf("GET /api/queues/%%2F: %+v", list)
	}
	var cs []smConsumer
	a.call("GET", "/api/consumers/%2F", "guest", "guest", nil, &cs)
	if len(cs) != 3 {
		t.Fatalf("GET /api/consumers/%%2F: %+v", cs)
	}
	for _, cd := range cs {
		if w := want[cd.Tag]; cd.Offset == nil || *cd.Offset != w[0] || *cd.Lag != w[1] {
			t.Errorf("/api/consumers: %s at %s, want %d", cd.Tag, smOffset(cd.Offset), w[0])
		}
	}
	smRabbitmqadmin(t, a.url)

	// Retention: over x-max-length-bytes, whole segments go and the
	// first offset moves.
	_, err = ch.QueueDeclare("sm-r", true, false, false, false, rmq.Table{"x-queue-type": "stream",
		"x-stream-max-segment-size-bytes": int64(2000), "x-max-length-bytes": int64(5000)})
	must(t, err)
	smPublish(t, ch, "sm-r", 100, 100)
	var r smStream
	testutil.Eventually(t, 20*time.Second, func() bool {
		r = smStream{}
		a.call("GET", "/api/queues/%2F/sm-r", "guest", "guest", nil, &r)
		return r.Stream.First > 0 && r.Stream.SegmentsDeleted > 0 && r.Messages == int(r.Stream.Next-r.Stream.First)
	}, "retention deleted no segment, or messages are not the offsets kept: %+v", &r)
	if r.Stream.Next != 100 || r.Stream.Published != 100 {
		t.Errorf("after retention: next %d published %d; want 100, 100", r.Stream.Next, r.Stream.Published)
	}
}

// smRabbitmqadmin lists the queues' types with rabbitmqadmin (RabbitMQ's
// CLI for its HTTP API; skipped where it is not installed).
func smRabbitmqadmin(t *testing.T, api string) {
	t.Helper()
	admin, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		t.Log("rabbitmqadmin not installed: its list not checked")
		return
	}
	u, _ := neturl.Parse(api)
	out, err := exec.Command("python3", admin, "-H", u.Hostname(), "-P", u.Port(), "-u", "guest", "-p", "guest",
		"list", "queues", "name", "type", "messages", "-f", "tsv").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqadmin: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sm-s\tstream\t50") {
		t.Errorf("rabbitmqadmin list queues name type messages:\n%s", out)
	}
}

// TestStreamMetrics: a stream's series on /metrics/per-object (RabbitMQ
// 4.3.5's families and types, railmq's own under railmq_stream_, one
// series per consumer) and summed on /metrics; as a queue, its messages
// are its offsets and none is unacknowledged (RabbitMQ 3.10.8's
// rabbitmq_queue_messages_unacked 0 with deliveries unacked).
func TestStreamMetrics(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.PrometheusHandler())
	t.Cleanup(hs.Close)
	c := dial(t, b.URL)
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	_, err = ch.QueueDeclare("sm-m", true, false, false, false, rmq.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(2000)})
	must(t, err)
	smPublish(t, ch, "sm-m", 40, 100)
	_, d := smConsume(t, c, "sm-m", "sm-m-c", 4, rmq.Table{"x-stream-offset": int64(10)})
	<-d // 4 delivered from 10, none acked: the consumer's next is 14

	lv := `{queue="sm-m",vhost="/"}`
	cl := `{consumer_tag="sm-m-c",queue="sm-m",vhost="/"}`
	var per scrape
	testutil.Eventually(t, 20*time.Second, func() bool {
		per = getMetrics(t, hs.URL+"/metrics/per-object")
		return per.series["railmq_stream_consumer_offset"+cl] == 14 && per.series["rabbitmq_queue_messages"+lv] == 40
	}, "the consumer's offset (14) and the stream's messages (40): %v", &per)
	for name, v := range map[string]float64{
		"railmq_stream_first_offset" + lv:              0,
		"railmq_stream_next_offset" + lv:               40,
		"railmq_stream_published_total" + lv:           40,
		"railmq_stream_segments_deleted_total" + lv:    0,
		"railmq_stream_consumer_offset_lag" + cl:       26,
		"rabbitmq_stream_consumer_max_offset_lag" + lv: 26,
		"rabbitmq_queue_messages_ready" + lv:           40,
		"rabbitmq_queue_messages_unacked" + lv:         0,
	} {
		if got, ok := per.series[name]; !ok || got != v {
			t.Errorf("%s = %v (%v); want %v", name, got, ok, v)
		}
	}
	if per.series["rabbitmq_stream_segments"+lv] < 2 || per.series["railmq_stream_disk_bytes"+lv] < 40*100 {
		t.Errorf("segments %v, disk bytes %v: want several and at least the bodies' 4,000",
			per.series["rabbitmq_stream_segments"+lv], per.series["railmq_stream_disk_bytes"+lv])
	}
	if ts := per.series["railmq_stream_first_timestamp_seconds"+lv]; ts < float64(time.Now().Add(-time.Hour).Unix()) || ts > float64(time.Now().Unix()+1) {
		t.Errorf("railmq_stream_first_timestamp_seconds = %v", ts)
	}
	for name, typ := range map[string]string{"rabbitmq_stream_segments": "counter", "rabbitmq_stream_consumer_max_offset_lag": "gauge",
		"railmq_stream_published_total": "counter", "railmq_stream_segments_deleted_total": "counter", "railmq_stream_disk_bytes": "gauge",
		"railmq_stream_first_offset": "gauge", "railmq_stream_next_offset": "gauge", "railmq_stream_consumer_offset": "gauge", "railmq_stream_consumer_offset_lag": "gauge"} {
		if per.types[name] != typ {
			t.Errorf("per object: %s is %q, want %s", name, per.types[name], typ)
		}
	}
	agg := getMetrics(t, hs.URL+"/metrics")
	if agg.series["rabbitmq_stream_segments"] != per.series["rabbitmq_stream_segments"+lv] || agg.series["railmq_stream_published_total"] != 40 ||
		agg.series["rabbitmq_stream_consumer_max_offset_lag"] != 26 || agg.types["rabbitmq_stream_segments"] != "counter" {
		t.Errorf("/metrics: segments %v, published %v, max lag %v, segments' type %q", agg.series["rabbitmq_stream_segments"],
			agg.series["railmq_stream_published_total"], agg.series["rabbitmq_stream_consumer_max_offset_lag"], agg.types["rabbitmq_stream_segments"])
	}
}

// TestStreamManagementAccess: a stream is seen as any queue of its vhost
// is. RabbitMQ 3.10.8, asked by a user tagged management without
// permissions in /: GET /api/queues/%2F/s is 401 {"error":
// "not_authorised", "reason": "User not authorised to access virtual
// host"}, GET /api/queues and GET /api/consumers/%2F are 200 [] (the
// user's own channels have no consumers). A user tagged monitoring
// without permissions gets the same 401 for the stream and sees its
// consumers in /api/consumers (RabbitMQ 3.10.8 listed both of the
// stream's).
func TestStreamManagementAccess(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("sm-a", true, false, false, false, rmq.Table{"x-queue-type": "stream"})
	must(t, err)
	smConsume(t, c, "sm-a", "sm-a-c", 10, nil)
	a.admin("PUT", "/api/users/sm-user", map[string]any{"password": "pw", "tags": "management"}, 201)
	a.admin("PUT", "/api/users/sm-mon", map[string]any{"password": "pw", "tags": "monitoring"}, 201)

	for _, user := range []string{"sm-user", "sm-mon"} {
		var e struct{ Error, Reason string }
		if code := a.call("GET", "/api/queues/%2F/sm-a", user, "pw", nil, &e); code != 401 || e.Error != "not_authorised" || e.Reason != "User not authorised to access virtual host" {
			t.Errorf("%s: GET the stream: %d %+v; want 401 not_authorised", user, code, e)
		}
		var qs []smStream
		if code := a.call("GET", "/api/queues", user, "pw", nil, &qs); code != 200 || len(qs) != 0 {
			t.Errorf("%s: GET /api/queues: %d %+v; want 200 []", user, code, qs)
		}
	}
	var cs []smConsumer
	if code := a.call("GET", "/api/consumers/%2F", "sm-user", "pw", nil, &cs); code != 200 || len(cs) != 0 {
		t.Errorf("sm-user: GET /api/consumers/%%2F: %d %+v; want 200 []", code, cs)
	}
	cs = nil
	if code := a.call("GET", "/api/consumers", "sm-mon", "pw", nil, &cs); code != 200 || len(cs) != 1 || cs[0].Tag != "sm-a-c" || cs[0].Offset == nil {
		t.Errorf("sm-mon: GET /api/consumers: %d %+v; want the stream's consumer with its offset", code, cs)
	}

	// Given permissions in /, the user sees the stream.
	a.admin("PUT", "/api/permissions/%2F/sm-user", map[string]any{"configure": "", "write": "", "read": ".*"}, 201)
	var q smStream
	if code := a.call("GET", "/api/queues/%2F/sm-a", "sm-user", "pw", nil, &q); code != 200 || q.Type != "stream" {
		t.Errorf("sm-user with permissions: GET the stream: %d %+v", code, q)
	}
}

// TestStreamConsole: the console's queue list shows a stream's type, and
// its page shows the stream's offsets, segments and size on disk and
// each consumer's offset and lag, in Debian's headless Chromium.
func TestStreamConsole(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.Management(mgmt.Options{StatsInterval: 250 * time.Millisecond}).Handler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/?poll=300"
	c := dial(t, b.URL)
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	_, err = ch.QueueDeclare("sm-console", true, false, false, false, rmq.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(2000)})
	must(t, err)
	_, err = ch.QueueDeclare("sm-classic", true, false, false, false, nil)
	must(t, err)
	smPublish(t, ch, "sm-console", 30, 100)
	_, d := smConsume(t, c, "sm-console", "sm-console-c", 3, rmq.Table{"x-stream-offset": int64(20)})
	<-d // 3 delivered from 20: at 23, 7 behind

	br.login(url, "guest", "guest")
	br.run("open the queues", chromedp.Navigate(url+"#/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues tbody tr`)))
	rows := br.waitText("#queues tbody", 10*time.Second, func(s string) bool { return strings.Contains(s, "sm-consolestream") }, "the list shows the stream's type")
	if !strings.Contains(rows, "sm-classicclassic") {
		t.Errorf("the list's rows: %q; want sm-classic's type classic", rows)
	}
	br.run("open the stream", chromedp.Navigate(url+"#/queues/%2F/sm-console"))
	br.waitText("#q-type", 10*time.Second, func(s string) bool { return s == "stream" }, "the page shows the type")
	br.waitText("#q-last-offset", 10*time.Second, func(s string) bool { return s == "29" }, "the page shows the last offset")
	for sel, want := range map[string]string{"#q-first-offset": "0", "#q-next-offset": "30", "#q-total": "30"} {
		if got := br.text(sel); got != want {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if n := number(br.text("#q-segments")); n < 2 {
		t.Errorf("#q-segments shows %q", br.text("#q-segments"))
	}
	if s := br.text("#q-size-on-disk"); !strings.HasSuffix(s, "KiB") {
		t.Errorf("#q-size-on-disk shows %q, want some KiB", s)
	}
	if s := br.text("#q-first-message-at"); !strings.HasSuffix(s, "UTC") || !strings.HasPrefix(s, time.Now().UTC().Format("2006-")) {
		t.Errorf("#q-first-message-at shows %q", s)
	}
	cons := br.waitText("#consumers", 10*time.Second, func(s string) bool { return strings.Contains(s, "sm-console-c") && strings.Contains(s, "Lag") }, "the consumers table")
	offs := eval[[]string](br, `[...document.querySelectorAll('#consumers tbody td')].map(td => td.textContent)`)
	if len(offs) < 2 || offs[len(offs)-3] != "23" || offs[len(offs)-2] != "7" {
		t.Errorf("the consumer's row %q (table %q): want offset 23, lag 7", offs, cons)
	}
	if eval[bool](br, `!document.querySelector('#redrive') || document.querySelector('#redrive').hidden`) != true {
		t.Errorf("a stream's page offers to redrive")
	}
	br.shot("stream")
	br.noErrors()
}
