package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The management API against a hostile web page and hostile inputs
// (issue 38, items 9, 11 and 12).

// send makes one request with the given headers and body, returning the
// status, the headers and the body.
func (a *api) send(method, path string, hdr map[string]string, body []byte) (int, http.Header, string) {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.url+path, bytes.NewReader(body))
	if body == nil {
		req.Body = nil
	}
	for k, v := range hdr {
		if k == "auth" {
			u, p, _ := strings.Cut(v, ":")
			req.SetBasicAuth(u, p)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(out)
}

// TestMgmtCrossSiteFormImportsNothing: a page on another site posting a
// text/plain "form" to /api/definitions, from a browser that has the
// administrator's Basic credentials cached, imports nothing. RabbitMQ
// 3.10.8, asked with curl: POST /api/definitions with Content-Type
// text/plain, application/x-www-form-urlencoded or application/jsonx →
// 415 with no body; "application/json; charset=utf-8" → 204; PUT
// /api/queues/%2F/q with text/plain → 201 (railmq refuses it: 415); a
// request without credentials → 401 with `www-authenticate: Basic
// realm="RabbitMQ Management"` (kept: RabbitMQ sends it) and
// {"error":"not_authorized","reason":"Login failed"}. RabbitMQ does not
// look at Origin (a foreign one gets 201 on PUT): railmq refuses it on
// every state-changing request (403).
func TestMgmtCrossSiteFormImportsNothing(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	evil := []byte(`{"users":[{"name":"evil","password":"x","tags":"administrator"}],"permissions":[{"user":"evil","vhost":"/","configure":".*","write":".*","read":".*"}]}`)
	admin := "guest:guest"
	host := strings.TrimPrefix(a.url, "http://")
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"text/plain from another site", map[string]string{"auth": admin, "Content-Type": "text/plain", "Origin": "http://evil.example"}, 403},
		{"form from another site", map[string]string{"auth": admin, "Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}, 403},
		{"text/plain without Origin", map[string]string{"auth": admin, "Content-Type": "text/plain"}, 415},
		{"multipart without Origin", map[string]string{"auth": admin, "Content-Type": "multipart/form-data; boundary=x"}, 415},
		{"application/jsonx", map[string]string{"auth": admin, "Content-Type": "application/jsonx"}, 415},
		{"JSON from a sandboxed page", map[string]string{"auth": admin, "Content-Type": "application/json", "Origin": "null"}, 403},
		{"JSON from another port", map[string]string{"auth": admin, "Content-Type": "application/json", "Origin": "http://" + strings.Split(host, ":")[0] + ":1"}, 403},
		{"text/plain without credentials", map[string]string{"Content-Type": "text/plain"}, 401},
	} {
		code, _, body := a.send("POST", "/api/definitions", tc.hdr, evil)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
		if code == 415 && body != "" {
			t.Errorf("%s: 415 with body %q (RabbitMQ's has none)", tc.name, body)
		}
	}
	if code := a.call("GET", "/api/users/evil", "guest", "guest", nil, nil); code != 404 {
		t.Fatalf("the forged import made user evil: GET /api/users/evil %d", code)
	}
	// Elsewhere too: a body must be JSON, and another site may change
	// nothing; the console's own origin, and JSON with a charset, may.
	if code, _, body := a.send("PUT", "/api/queues/%2F/csrf-q", map[string]string{"auth": admin, "Content-Type": "text/plain"}, []byte(`{}`)); code != 415 || !strings.Contains(body, "unsupported_media_type") {
		t.Fatalf("text/plain PUT queue: %d %s", code, body)
	}
	if code, _, body := a.send("DELETE", "/api/queues/%2F/csrf-q", map[string]string{"auth": admin, "Origin": "http://evil.example"}, nil); code != 403 {
		t.Fatalf("DELETE from another site: %d %s", code, body)
	}
	if code, _, body := a.send("PUT", "/api/queues/%2F/csrf-q", map[string]string{"auth": admin, "Content-Type": "application/json; charset=utf-8", "Origin": a.url}, []byte(`{"durable":false}`)); code != 201 {
		t.Fatalf("same-origin JSON PUT: %d %s", code, body)
	}
	if code, _, body := a.send("GET", "/api/queues/%2F/csrf-q", map[string]string{"auth": admin, "Origin": "http://evil.example"}, nil); code != 200 {
		t.Fatalf("GET with a foreign Origin (reads are not state changes; no CORS lets the page read it): %d %s", code, body)
	}
	code, hdr, body := a.send("GET", "/api/overview", nil, nil)
	if code != 401 || hdr.Get("WWW-Authenticate") != `Basic realm="RabbitMQ Management"` || !strings.Contains(body, `"reason":"Login failed"`) {
		t.Fatalf("401: %d %q %s", code, hdr.Get("WWW-Authenticate"), body)
	}
}

// TestMgmtBodyLimit: a body over management.http_max_body_size
// (RabbitMQ's default 20000000 bytes) is refused as RabbitMQ 3.10.8
// refuses it (POST /api/definitions of 20,000,146 bytes: 400
// {"error":"bad_request","reason":"Exceeded HTTP request body size
// limit"}), whether its length is announced or not; nothing is imported.
func TestMgmtBodyLimit(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	pad := strings.Repeat("a", 20000100)
	big := []byte(`{"vhosts":[{"name":"big-vhost"}],"parameters":[],"policies":[{"vhost":"/","name":"pad","pattern":"^pad$","apply-to":"queues","definition":{"message-ttl":1},"priority":0,"pad":"` + pad + `"}]}`)
	// Announced, with "Expect: 100-continue" (as curl sends it): the
	// answer comes before the body is sent.
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	req, _ := http.NewRequest("POST", a.url+"/api/definitions", bytes.NewReader(big))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(out), "Exceeded HTTP request body size limit") {
		t.Fatalf("announced: %d %.200s", resp.StatusCode, out)
	}
	// Chunked: no length announced. The answer comes once the limit is
	// read, and the socket is closed on the rest: the client may see
	// the reset rather than the answer.
	req, _ = http.NewRequest("POST", a.url+"/api/definitions", io.MultiReader(bytes.NewReader(big)))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(out), "Exceeded HTTP request body size limit") {
			t.Fatalf("chunked: %d %.200s", resp.StatusCode, out)
		}
	}
	if code := a.call("GET", "/api/vhosts/big-vhost", "guest", "guest", nil, nil); code != 404 {
		t.Fatalf("an oversized import was applied: GET vhost %d", code)
	}
}

// TestVHostImportWritesPoliciesToTheTarget: a vhost's definitions
// (GET /api/definitions/{vhost}) imported into another vhost (POST
// /api/definitions/other) make their policies in the target, as their
// queues and exchanges, and leave the source's alone.
func TestVHostImportWritesPoliciesToTheTarget(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/vhosts/imp-target", map[string]any{}, 201)
	defs := `{"policies":[{"vhost":"/","name":"imp-pol","pattern":"^imp-","apply-to":"queues","definition":{"max-length":5},"priority":0}],
		"queues":[{"name":"imp-q","vhost":"/","durable":true,"auto_delete":false,"arguments":{}}]}`
	code, _, body := a.send("POST", "/api/definitions/imp-target", map[string]string{"auth": "guest:guest", "Content-Type": "application/json"}, []byte(defs))
	if code != 204 {
		t.Fatalf("import: %d %s", code, body)
	}
	if code := a.call("GET", "/api/policies/imp-target/imp-pol", "guest", "guest", nil, nil); code != 200 {
		t.Errorf("the policy is not in the target vhost: %d", code)
	}
	if code := a.call("GET", "/api/policies/%2F/imp-pol", "guest", "guest", nil, nil); code != 404 {
		t.Errorf("the policy went to the source vhost: %d", code)
	}
	var q struct{ Policy any }
	if code := a.call("GET", "/api/queues/imp-target/imp-q", "guest", "guest", nil, &q); code != 200 || q.Policy != "imp-pol" {
		t.Errorf("the imported queue's policy: %d %v", code, q.Policy)
	}
}

// TestPeekLeavesMessagesUndeliveredAcrossRestart: a peek shows messages
// and leaves them as they were, after a restart too: a consumer's first
// delivery of a peeked message is not flagged redelivered (a redelivered
// flag tells a consumer that it may have processed the message).
func TestPeekLeavesMessagesUndeliveredAcrossRestart(t *testing.T) {
	testutil.InProcess(t)
	dir := t.TempDir()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	c := dial(t, b.URL)
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("peek-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	must(t, ch.Confirm(false))
	for i := range 3 {
		dc, err := ch.PublishWithDeferredConfirm("", "peek-q", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint("m", i))})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish: %v", err)
		}
	}
	a := newAPI(t, b)
	var peeked []struct{ Payload string }
	if code := a.call("POST", "/api/queues/%2F/peek-q/peek", "guest", "guest", map[string]any{"count": 2}, &peeked); code != 200 || len(peeked) != 2 {
		t.Fatalf("peek: %d %+v", code, peeked)
	}
	// Something else for the store to commit after the peek, so that
	// whatever the peek left to write is written.
	dc, err := ch.PublishWithDeferredConfirm("", "peek-q", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("m3")})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish: %v", err)
	}
	c.Close()
	stop()
	b, _ = testutil.StartStoppable(t, broker.Options{DataDir: dir})
	c = dial(t, b.URL)
	defer c.Close()
	ch, _ = c.Channel()
	for i := range 4 {
		d, ok, err := ch.Get("peek-q", true)
		if err != nil || !ok || string(d.Body) != fmt.Sprint("m", i) {
			t.Fatalf("get %d: %v %v %q", i, ok, err, d.Body)
		}
		if d.Redelivered {
			t.Errorf("m%d flagged redelivered after a peek and a restart", i)
		}
	}
}

// TestRedriveStopsWhenTheClientLeaves: a slow redrive (rate 0.01 a
// second: 100 s between two messages) whose client hangs up ends then,
// and the messages it could not route are back in the queue at once,
// not held unacked until the pause is over.
func TestRedriveStopsWhenTheClientLeaves(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("rd-dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	must(t, ch.Publish("", "rd-dlq", false, false, rmq.Publishing{Body: []byte("stray")})) // no origin: not moved
	dlqSetup(t, ch, 3)
	testutil.Eventually(t, 5*time.Second, func() bool { return e2count(ch, "rd-dlq") == 4 }, "4 in the DLQ")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", a.url+"/api/queues/%2F/rd-dlq/redrive", strings.NewReader(`{"rate":0.01}`))
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// The stray was taken and kept, one job moved: the redrive pauses.
	testutil.Eventually(t, 10*time.Second, func() bool { return e2count(ch, "rd-work") == 1 }, "one job moved")
	cancel()
	<-done
	// Ready again: the stray and the two jobs not moved.
	testutil.Eventually(t, 10*time.Second, func() bool { return e2count(ch, "rd-dlq") == 3 }, "the stray back in the DLQ once the client left (ready: %d)", e2count(ch, "rd-dlq"))
}

// TestRedriveIntoItsOwnQueueIsRefused: a redrive whose target routes to
// the queue it drains would move each message back to be moved again:
// refused with 400 and RabbitMQ's error shape, nothing moved.
func TestRedriveIntoItsOwnQueueIsRefused(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	dlqSetup(t, ch, 3)
	testutil.Eventually(t, 5*time.Second, func() bool { return e2count(ch, "rd-dlq") == 3 }, "3 in the DLQ")
	code, _, body := a.send("POST", "/api/queues/%2F/rd-dlq/redrive", map[string]string{"auth": "guest:guest", "Content-Type": "application/json"},
		[]byte(`{"target_exchange":"","target_routing_key":"rd-dlq","max":50}`))
	var e struct{ Error, Reason string }
	_ = json.Unmarshal([]byte(body), &e)
	if code != 400 || e.Error != "bad_request" || !strings.Contains(e.Reason, "source queue") {
		t.Fatalf("redrive into itself: %d %s", code, body)
	}
	if n := e2count(ch, "rd-dlq"); n != 3 {
		t.Fatalf("DLQ holds %d, want 3", n)
	}
}

// TestQueueListPagination pins RabbitMQ 3.10.8's answers to its list
// parameters on GET /api/queues (asked with curl, queues pq-a, pq-b,
// pq-c, Pq-D, other): page=1&page_size=2&name=pq → filtered_count 4,
// items Pq-D, pq-a; name=PQ&use_regex=true → 4 (caseless);
// pagination=true alone → the plain list; name without page → not
// filtered; page=0 → 400 invalid_pagination_parameters "Invalid
// pagination parameters: page number 0, page size undefined"; page=x or
// a bad regex → 400 bad_request "Pagination parameters are invalid";
// page=9&page_size=2 → 400 page_out_of_range "Page out of range, page: 9
// page size: 2, len: 5".
func TestQueueListPagination(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, n := range []string{"pq-a", "pq-b", "pq-c", "Pq-D", "other"} {
		a.admin("PUT", "/api/queues/%2F/"+n, map[string]any{"durable": false}, 201)
	}
	type page struct {
		FilteredCount int `json:"filtered_count"`
		ItemCount     int `json:"item_count"`
		Items         []struct{ Name string }
		Page          int
		PageCount     int `json:"page_count"`
		PageSize      int `json:"page_size"`
		TotalCount    int `json:"total_count"`
	}
	names := func(p page) string {
		var s []string
		for _, it := range p.Items {
			s = append(s, it.Name)
		}
		return strings.Join(s, ",")
	}
	var p page
	a.call("GET", "/api/queues?page=1&page_size=2&name=pq", "guest", "guest", nil, &p)
	if p.FilteredCount != 4 || p.ItemCount != 2 || names(p) != "Pq-D,pq-a" || p.Page != 1 || p.PageCount != 2 || p.PageSize != 2 || p.TotalCount != 5 {
		t.Errorf("page 1 of pq: %+v", p)
	}
	p = page{}
	a.call("GET", "/api/queues?page=2&page_size=2&name=pq", "guest", "guest", nil, &p)
	if names(p) != "pq-b,pq-c" {
		t.Errorf("page 2 of pq: %+v", p)
	}
	p = page{}
	a.call("GET", "/api/queues?page=1&name=%5Epq-%5Bab%5D%24&use_regex=true", "guest", "guest", nil, &p)
	if names(p) != "pq-a,pq-b" {
		t.Errorf("regex: %+v", p)
	}
	p = page{}
	a.call("GET", "/api/queues?page=1&name=PQ&use_regex=true", "guest", "guest", nil, &p)
	if p.FilteredCount != 4 {
		t.Errorf("caseless regex: %+v", p)
	}
	p = page{}
	a.call("GET", "/api/queues/%2F?page=1&page_size=2&sort=name&sort_reverse=true&columns=name", "guest", "guest", nil, &p)
	if names(p) != "pq-c,pq-b" || p.PageCount != 3 {
		t.Errorf("sorted: %+v", p)
	}
	for _, path := range []string{"/api/queues?pagination=true", "/api/queues?name=pq", "/api/queues?page_size=2"} {
		var list []struct{ Name string }
		if code := a.call("GET", path, "guest", "guest", nil, &list); code != 200 || len(list) != 5 {
			t.Errorf("%s: %d %v, want the plain list of 5", path, code, list)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/api/queues?page=0", `{"error":"invalid_pagination_parameters","reason":"Invalid pagination parameters: page number 0, page size undefined"}`},
		{"/api/queues?page=1&page_size=501", `{"error":"invalid_pagination_parameters","reason":"Invalid pagination parameters: page number 1, page size 501"}`},
		{"/api/queues?page=x", `{"error":"bad_request","reason":"Pagination parameters are invalid"}`},
		{"/api/queues?page=1&name=(&use_regex=true", `{"error":"bad_request","reason":"Pagination parameters are invalid"}`},
		{"/api/queues?page=9&page_size=2", `{"error":"page_out_of_range","reason":"Page out of range, page: 9 page size: 2, len: 5"}`},
	} {
		if code, body := a.raw("GET", tc.path); code != 400 || strings.TrimSpace(body) != tc.body {
			t.Errorf("%s: %d %s, want 400 %s", tc.path, code, body, tc.body)
		}
	}
}
