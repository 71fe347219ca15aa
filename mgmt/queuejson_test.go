package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// age is the one value that changes between two encodings of a queue.
var age = regexp.MustCompile(`"head_message_timestamp_age_seconds":[-0-9.e+]+`)

// TestQueueAppendMatchesMarshal: GET /api/queues writes each queue
// without building its map (queuejson.go); the answer must be the bytes
// json.Marshal made of queueJSON's map before (same keys, values, key
// order and escaping), for a durable queue with a policy, consumers and
// messages, a transient one, an exclusive one, one with arguments of
// every AMQP field type, and names that need escaping (HTML characters,
// control characters, U+2028, invalid UTF-8). The columns= and sort=
// answers, still built from the map, must agree with it too.
func TestQueueAppendMatchesMarshal(t *testing.T) {
	srv, err := broker.New(broker.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, broker.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	api := New(srv, Options{StatsInterval: time.Hour})
	defer api.Close()
	h := api.Handler()
	get := func(path string) []byte {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.SetBasicAuth("guest", "guest")
		req.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	if code := putPolicy(h, `{"pattern":"^pol","definition":{"max-length":1000,"message-ttl":60000,"dead-letter-exchange":"dlx"},"apply-to":"queues"}`); code != 201 && code != 204 {
		t.Fatalf("policy: %d", code)
	}

	c, err := rmq.Dial("amqp://guest:guest@" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	declare := func(name string, durable, autoDelete, exclusive bool, args rmq.Table) {
		t.Helper()
		if _, err := ch.QueueDeclare(name, durable, autoDelete, exclusive, false, args); err != nil {
			t.Fatalf("declare %q: %v", name, err)
		}
	}
	declare("policed", true, false, false, rmq.Table{"x-max-priority": int32(5)})
	declare("transient", false, true, false, nil)
	declare("exclusive", false, false, true, nil)
	declare("every-type", true, false, false, rmq.Table{
		"bool": true, "int8": int8(-8), "int16": int16(-16), "int32": int32(-32), "int64": int64(1) << 40,
		"float32": float32(1.5), "float64": 0.1, "tiny": 1e-9, "huge": 1e300, "decimal": rmq.Decimal{Scale: 2, Value: 12345},
		"string": "s<&>\u2028", "bytes": []byte("raw\x00\xff"), "time": time.Unix(1700000000, 0),
		"table": rmq.Table{"nested": rmq.Table{"deep": int32(1)}, "list": []any{"a", int32(2), nil}},
		"array": []any{true, 2.5, "x"}, "void": nil,
	})
	for _, name := range []string{"<html>&amp;\"quoted\"\\", "ctl\x01\x1f\t\n\r\b\f", "sep\u2028\u2029", "bad\xff\xfeutf8\xc3", "ünïcödé ☃"} {
		declare(name, true, false, false, nil)
	}
	for i := 0; i < 3; i++ {
		if err := ch.Publish("", "policed", false, false, rmq.Publishing{Body: []byte("m"), DeliveryMode: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tag := range []string{"c1", "c2"} {
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume("policed", tag, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := srv.LookupVHost("/")
	poll.Eventually(t, 10*time.Second, func() bool {
		q := queueNamed(st, "policed")
		return q != nil && q.Unacked() == 2 && q.Ready() == 1 && q.Consumers() == 2
	}, "the consumers did not take their messages")
	api.sample() // counters and rates of a sample
	api.sample()

	// The list, as written now, against json.Marshal of each queue's map.
	list := get("/api/queues")
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		t.Fatalf("the list is not JSON: %v\n%s", err, list)
	}
	if len(items) != 9 {
		t.Fatalf("%d queues listed, want 9", len(items))
	}
	seen := map[string]bool{}
	for _, it := range items {
		var m struct{ Name string }
		if err := json.Unmarshal(it, &m); err != nil {
			t.Fatal(err)
		}
		q := findQueueNamed(st, it)
		if q == nil {
			t.Fatalf("no queue for %s", it)
		}
		seen[q.Name()] = true
		want, err := json.Marshal(api.queueJSON("/", q, false))
		if err != nil {
			t.Fatal(err)
		}
		got, want := age.ReplaceAll(it, []byte("AGE")), age.ReplaceAll(want, []byte("AGE"))
		if !bytes.Equal(got, want) {
			t.Errorf("queue %q:\n got %s\nwant %s", q.Name(), got, want)
		}
		if q.Name() == "policed" && !bytes.Contains(got, []byte(`"policy":"p"`)) {
			t.Errorf("the policy is not shown: %s", got)
		}
	}
	if !seen["bad\xff\xfeutf8\xc3"] || !seen["ctl\x01\x1f\t\n\r\b\f"] {
		t.Errorf("the escaped names were not found: %v", seen)
	}

	// columns= and sort= are built from the map: the same values.
	cols := get("/api/queues?columns=name,messages,message_stats.publish,arguments&sort=messages&sort_reverse=true")
	var rows []map[string]any
	if err := json.Unmarshal(cols, &rows); err != nil || len(rows) != 9 {
		t.Fatalf("columns: %v %s", err, cols)
	}
	if rows[0]["name"] != "policed" || rows[0]["messages"] != float64(3) || len(rows[0]) != 4 {
		t.Errorf("columns and sort: first row %v, want policed with 3 messages and 4 columns", rows[0])
	}
	for _, sort := range []string{"name", "consumers", "message_stats.publish"} {
		var sorted []json.RawMessage
		if err := json.Unmarshal(get("/api/queues?sort="+sort), &sorted); err != nil || len(sorted) != 9 {
			t.Fatalf("sort=%s: %v", sort, err)
		}
	}
}

// findQueueNamed is the queue an encoded item names (its name decoded
// from the JSON loses invalid UTF-8, so it is matched on its encoding).
func findQueueNamed(st *broker.VHostInfo, item []byte) *queue.Queue {
	for _, q := range st.Queues() {
		if bytes.Contains(item, append(append([]byte(`"name":`), appendJSONString(nil, q.Name())...), ',')) {
			return q
		}
	}
	return nil
}

// TestAppendJSONMatchesMarshal: the encoder writes what json.Marshal
// writes, for the values a list's objects hold.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	for _, v := range []any{
		nil, "", "plain", "<&>\"\\\x00\x1f\x7f\u2028\u2029\xff\xc3(", true, false,
		0, -1, int8(-8), int16(300), int32(-70000), int64(math.MinInt64), uint(7), uint8(255), uint16(65535), uint32(1 << 31), uint64(math.MaxUint64),
		0.0, math.Copysign(0, -1), 0.1, 1.5, -2.25, 1e-6, 9.99e-7, 1e20, 1e21, 123456789.125, 1e300, 5e-324, float32(0.1), float32(1e22),
		map[string]any{}, map[string]any{"b": 1, "a": []any{"x", 2.5, nil, map[string]any{"z": false, "<": "&"}}, "\xff": "bad key", "A": map[string]float64{"rate": 0.3}},
		[]any{}, []byte("base64"), time.Unix(0, 0).UTC(), map[string]int{"x": 1},
		vhost.AppliedPolicy{Policy: "p"}, map[string]any(nil), map[string]float64(nil), []any(nil),
		map[string]any{"nil map": map[string]any(nil), "nil list": []any(nil), "rates": map[string]float64(nil)},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendJSON([]byte("prefix"), v)
		if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("%#v: got %s (%v), want prefix%s", v, got, err, want)
		}
	}
	for _, v := range []any{math.NaN(), math.Inf(1), map[string]any{"x": math.Inf(-1)}, []any{math.NaN()}} {
		if _, err := appendJSON(nil, v); err == nil {
			t.Errorf("%v: encoded, json.Marshal refuses it", v)
		}
	}
}

// putPolicy sets the policy "p" on vhost "/" as guest; the status.
func putPolicy(h http.Handler, body string) int {
	req := httptest.NewRequest("PUT", "/api/policies/%2F/p", strings.NewReader(body))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

func queueNamed(st *broker.VHostInfo, name string) *queue.Queue {
	for _, q := range st.Queues() {
		if q.Name() == name {
			return q
		}
	}
	return nil
}

// FuzzAppendJSONString: any string, valid UTF-8 or not, is quoted as
// json.Marshal quotes it, and any float64 written as it writes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "<&>", "\x00\x7f\xff", "\u2028x\u2029", "\xc3", "é☃\U0001F600", `"\`} {
		f.Add(s, 1.5)
	}
	f.Add("x", 1e-7)
	f.Add("x", 1e21)
	f.Fuzz(func(t *testing.T, s string, x float64) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
		want, werr := json.Marshal(x)
		got, err := appendJSONFloat(nil, x)
		if (err != nil) != (werr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%v: got %s (%v), want %s (%v)", x, got, err, want, werr)
		}
	})
}
