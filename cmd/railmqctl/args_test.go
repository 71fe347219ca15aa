package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is what railmqctl asked of the management API.
type request struct {
	Method, Path string // the path as sent, escaped
	User, Pass   string
	Body         any // decoded JSON, nil without a body
}

// fakeAPI records railmqctl's requests and answers each with replies'
// entry for "METHOD path" (status and body), or 200 and [] for a GET and
// 204 for anything else.
type fakeAPI struct {
	URL     string
	mu      sync.Mutex
	reqs    []request
	raw     [][]byte // the bodies as sent
	replies map[string]reply
}

type reply struct {
	code int
	body string
}

func newFakeAPI(t *testing.T, replies map[string]reply) *fakeAPI {
	t.Helper()
	f := &fakeAPI{replies: replies}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := request{Method: r.Method, Path: r.URL.EscapedPath()}
		req.User, req.Pass, _ = r.BasicAuth()
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &req.Body); err != nil {
				t.Errorf("%s %s: body %q is not JSON", r.Method, req.Path, raw)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %s: Content-Type %q", r.Method, req.Path, ct)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.raw = append(f.raw, raw)
		f.mu.Unlock()
		rep, ok := replies[r.Method+" "+req.Path]
		switch {
		case ok:
		case r.Method == "GET":
			rep = reply{200, "[]"}
		default:
			rep = reply{204, ""}
		}
		if rep.body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(rep.code)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(hs.Close)
	f.URL = hs.URL
	return f
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// cleanEnv unsets the variables railmqctl reads (restored after the
// test).
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range envVars {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// ctl runs railmqctl called as name with args and env; the exit code,
// stdout and stderr.
func ctl(t *testing.T, name string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	cleanEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := run(name, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// j decodes a JSON literal, for the requests' expected bodies.
func j(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func guest(method, path string, body any) request {
	return request{Method: method, Path: path, User: "guest", Pass: "guest", Body: body}
}

// Each command and its flags make the management API requests they
// stand for, and print their answers.
func TestCommandRequests(t *testing.T) {
	// No progress line (nor the request for it) during a redrive or an
	// import: the fake API answers at once.
	defer func(d time.Duration) { defaultInterval = d }(defaultInterval)
	defaultInterval = time.Hour
	dir := t.TempDir()
	defsOut := filepath.Join(dir, "out.json")
	defsIn := filepath.Join(dir, "in.json")
	defs := `{"rabbit_version":"3.13.0","queues":[{"name":"q","vhost":"/"}]}`
	if err := os.WriteFile(defsIn, []byte(defs), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := "127.0.0.1:50000 -> 127.0.0.1:5672"
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string // after --url
		noURL   bool     // the URL from the environment
		slash   bool     // the URL ends in a slash
		replies map[string]reply
		want    []request
		out     string // stdout, exactly
		stderr  string // stderr begins so (progress), else is empty
	}{
		{name: "list queues", args: []string{"list", "queues"}, want: []request{guest("GET", "/api/queues/%2F", nil)},
			out: "vhost  name  type  messages  messages_ready  messages_unacknowledged  message_bytes  consumers  policy\n"},
		{name: "list exchanges", args: []string{"list", "exchanges"}, want: []request{guest("GET", "/api/exchanges/%2F", nil)},
			out: "vhost  name  type  durable  auto_delete  internal\n"},
		{name: "list bindings", args: []string{"list", "bindings"}, want: []request{guest("GET", "/api/bindings/%2F", nil)},
			out: "vhost  source  destination  destination_type  routing_key  properties_key\n"},
		{name: "list policies", args: []string{"list", "policies"}, want: []request{guest("GET", "/api/policies/%2F", nil)},
			out: "vhost  name  pattern  apply-to  priority  definition\n"},
		{name: "list consumers", args: []string{"list", "consumers"}, want: []request{guest("GET", "/api/consumers/%2F", nil)},
			out: "queue.name  consumer_tag  prefetch_count  ack_required\n"},
		{name: "list connections", args: []string{"list", "connections"}, want: []request{guest("GET", "/api/connections", nil)},
			out: "name  user  vhost  state\n"},
		{name: "list channels", args: []string{"list", "channels"}, want: []request{guest("GET", "/api/channels", nil)},
			out: "name  user  vhost\n"},
		{name: "list users", args: []string{"list", "users"}, want: []request{guest("GET", "/api/users", nil)}, out: "name  tags\n"},
		{name: "list vhosts", args: []string{"list", "vhosts"}, want: []request{guest("GET", "/api/vhosts", nil)},
			out: "name  description  messages\n"},
		{name: "list permissions", args: []string{"list", "permissions"}, want: []request{guest("GET", "/api/permissions", nil)},
			out: "vhost  user  configure  write  read\n"},
		{name: "list in a vhost", args: []string{"--vhost", "/prod", "list", "queues", "name"}, want: []request{guest("GET", "/api/queues/%2Fprod", nil)},
			out: "name\n"},
		{name: "list in a vhost, short flag", args: []string{"-V", "a b", "list", "bindings", "source"}, want: []request{guest("GET", "/api/bindings/a%20b", nil)},
			out: "source\n"},
		{name: "list columns", args: []string{"list", "consumers", "queue.name", "prefetch_count", "ack_required", "arguments", "missing"},
			replies: map[string]reply{"GET /api/consumers/%2F": {200, `[{"queue":{"name":"q1"},"prefetch_count":10,"ack_required":true,"arguments":{"x":1}},
				{"queue":{"name":"q2"},"prefetch_count":2.5,"ack_required":false,"arguments":null}]`}},
			want: []request{guest("GET", "/api/consumers/%2F", nil)},
			out: "queue.name  prefetch_count  ack_required  arguments  missing\n" +
				"q1          10              true          {\"x\":1}    \n" +
				"q2          2.5             false                    \n"},
		{name: "list one object", args: []string{"list", "vhosts", "name"}, replies: map[string]reply{"GET /api/vhosts": {200, `{"name":"/"}`}},
			want: []request{guest("GET", "/api/vhosts", nil)}, out: "name\n/\n"},
		{name: "list json", args: []string{"list", "users", "--format", "json"}, replies: map[string]reply{"GET /api/users": {200, `[{"name":"guest"}]`}},
			want: []request{guest("GET", "/api/users", nil)}, out: "[{\"name\":\"guest\"}]\n"},
		{name: "list json, short flag", args: []string{"-f", "json", "list", "users"}, replies: map[string]reply{"GET /api/users": {200, `[]`}},
			want: []request{guest("GET", "/api/users", nil)}, out: "[]\n"},
		{name: "user and password", args: []string{"-u", "ann", "-p", "pw", "list", "users"},
			want: []request{{Method: "GET", Path: "/api/users", User: "ann", Pass: "pw"}}, out: "name  tags\n"},
		{name: "user and password, long flags", args: []string{"--user", "ann", "--password", "pw", "list", "users"},
			want: []request{{Method: "GET", Path: "/api/users", User: "ann", Pass: "pw"}}, out: "name  tags\n"},
		{name: "environment", noURL: true, env: map[string]string{"RAILMQ_USER": "bob", "RAILMQ_PASSWORD": "secret"}, args: []string{"list", "users"},
			want: []request{{Method: "GET", Path: "/api/users", User: "bob", Pass: "secret"}}, out: "name  tags\n"},
		{name: "flags beat the environment", env: map[string]string{"RAILMQ_USER": "bob", "RAILMQ_PASSWORD": "secret"}, args: []string{"-u", "ann", "list", "users"},
			want: []request{{Method: "GET", Path: "/api/users", User: "ann", Pass: "secret"}}, out: "name  tags\n"},
		{name: "url with a slash", slash: true, args: []string{"list", "users"}, want: []request{guest("GET", "/api/users", nil)}, out: "name  tags\n"},

		{name: "declare queue", args: []string{"declare", "queue", "name=a/b", "durable=true", `arguments={"x-max-length":10}`, "note=plain text"},
			want: []request{guest("PUT", "/api/queues/%2F/a%2Fb", j(t, `{"name":"a/b","durable":true,"arguments":{"x-max-length":10},"note":"plain text"}`))},
			out:  "declared queue 'a/b' in vhost '/'\n"},
		{name: "declare exchange", args: []string{"-V", "v", "declare", "exchange", "name=x", "type=topic", "auto_delete=false"},
			want: []request{guest("PUT", "/api/exchanges/v/x", j(t, `{"name":"x","type":"topic","auto_delete":false}`))},
			out:  "declared exchange 'x' in vhost 'v'\n"},
		{name: "declare binding", args: []string{"declare", "binding", "source=x", "destination=q", "routing_key=a.*"},
			want: []request{guest("POST", "/api/bindings/%2F/e/x/q/q", j(t, `{"source":"x","destination":"q","routing_key":"a.*"}`))},
			out:  "declared binding from exchange 'x' to queue 'q' with routing key 'a.*' in vhost '/'\n"},
		{name: "declare exchange binding", args: []string{"declare", "binding", "source=x", "destination=y", "destination_type=exchange"},
			want: []request{guest("POST", "/api/bindings/%2F/e/x/e/y", j(t, `{"source":"x","destination":"y","destination_type":"exchange"}`))},
			out:  "declared binding from exchange 'x' to exchange 'y' with routing key '' in vhost '/'\n"},
		{name: "delete queue", args: []string{"delete", "queue", "a b"}, want: []request{guest("DELETE", "/api/queues/%2F/a%20b", nil)}, out: "deleted queue 'a b' in vhost '/'\n"},
		{name: "delete exchange", args: []string{"-V", "v", "delete", "exchange", "x"}, want: []request{guest("DELETE", "/api/exchanges/v/x", nil)}, out: "deleted exchange 'x' in vhost 'v'\n"},
		{name: "delete user", args: []string{"-V", "v", "delete", "user", "ann"}, want: []request{guest("DELETE", "/api/users/ann", nil)}, out: "deleted user 'ann'\n"},
		{name: "delete vhost", args: []string{"delete", "vhost", "/prod"}, want: []request{guest("DELETE", "/api/vhosts/%2Fprod", nil)}, out: "deleted vhost '/prod'\n"},
		{name: "delete policy", args: []string{"delete", "policy", "p"}, want: []request{guest("DELETE", "/api/policies/%2F/p", nil)}, out: "deleted policy 'p' in vhost '/'\n"},
		{name: "add_vhost", args: []string{"add_vhost", "a/b", "--description", "d", "--tags", "x,y", "--default-queue-type", "quorum"},
			want: []request{guest("PUT", "/api/vhosts/a%2Fb", j(t, `{"description":"d","tags":"x,y","default_queue_type":"quorum"}`))}},
		{name: "add_vhost, no flags", args: []string{"add_vhost", "v"}, want: []request{guest("PUT", "/api/vhosts/v", j(t, `{}`))}},
		{name: "purge", args: []string{"purge", "q"}, replies: map[string]reply{"GET /api/queues/%2F/q": {200, `{"name":"q","messages":4}`}},
			want: []request{guest("GET", "/api/queues/%2F/q", nil), guest("DELETE", "/api/queues/%2F/q/contents", nil)},
			out:  "purged queue 'q' in vhost '/' (it held 4 messages)\n"},
		// rabbitmqadmin v2's spellings.
		{name: "v2 purge queue", args: []string{"purge", "queue", "--name", "q"}, replies: map[string]reply{"GET /api/queues/%2F/q": {200, `{"name":"q","messages":0}`}},
			want: []request{guest("GET", "/api/queues/%2F/q", nil), guest("DELETE", "/api/queues/%2F/q/contents", nil)},
			out:  "purged queue 'q' in vhost '/' (it held 0 messages)\n"},
		{name: "v2 declare queue", args: []string{"--vhost", "v", "declare", "queue", "--name", "qq", "--type", "quorum", "--durable", "true", "--arguments", `{"x-max-length":9}`},
			want: []request{guest("PUT", "/api/queues/v/qq", j(t, `{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum","x-max-length":9}}`))},
			out:  "declared queue 'qq' in vhost 'v'\n"},
		{name: "v2 queues declare", args: []string{"queues", "declare", "--name", "q", "--durable", "false", "--auto-delete", "true"},
			want: []request{guest("PUT", "/api/queues/%2F/q", j(t, `{"durable":false,"auto_delete":true,"arguments":{}}`))},
			out:  "declared queue 'q' in vhost '/'\n"},
		{name: "v2 declare exchange", args: []string{"exchanges", "declare", "--name", "x", "--type", "topic"},
			want: []request{guest("PUT", "/api/exchanges/%2F/x", j(t, `{"type":"topic","durable":true,"auto_delete":false,"internal":false,"arguments":{}}`))},
			out:  "declared exchange 'x' in vhost '/'\n"},
		{name: "v2 declare binding", args: []string{"declare", "binding", "--source", "x", "--destination", "y", "--destination-type", "exchange", "--routing-key", "k"},
			want: []request{guest("POST", "/api/bindings/%2F/e/x/e/y", j(t, `{"routing_key":"k","arguments":{}}`))},
			out:  "declared binding from exchange 'x' to exchange 'y' with routing key 'k' in vhost '/'\n"},
		{name: "v2 declare user", args: []string{"--password", "adminpw", "declare", "user", "--name", "ann", "--password", "pw", "--tags", "management"},
			want: []request{{Method: "PUT", Path: "/api/users/ann", User: "guest", Pass: "adminpw", Body: j(t, `{"password":"pw","tags":"management"}`)}},
			out:  "declared user 'ann'\n"},
		{name: "v2 users declare", args: []string{"users", "declare", "--name", "bob", "--password=pw"},
			want: []request{guest("PUT", "/api/users/bob", j(t, `{"password":"pw","tags":""}`))}, out: "declared user 'bob'\n"},
		{name: "v2 vhosts declare", args: []string{"vhosts", "declare", "--name", "v", "--default-queue-type", "quorum"},
			want: []request{guest("PUT", "/api/vhosts/v", j(t, `{"default_queue_type":"quorum"}`))}, out: "declared vhost 'v'\n"},
		{name: "v2 declare policy", args: []string{"declare", "policy", "--name", "p", "--pattern", "^q", "--definition", `{"max-length":1}`, "--apply-to", "queues"},
			want: []request{guest("PUT", "/api/policies/%2F/p", j(t, `{"pattern":"^q","definition":{"max-length":1},"priority":0,"apply-to":"queues"}`))},
			out:  "declared policy 'p' in vhost '/'\n"},
		{name: "v2 delete queue", args: []string{"delete", "queue", "--name", "q"}, want: []request{guest("DELETE", "/api/queues/%2F/q", nil)},
			out: "deleted queue 'q' in vhost '/'\n"},
		{name: "v2 queues delete", args: []string{"queues", "delete", "--name", "q"}, want: []request{guest("DELETE", "/api/queues/%2F/q", nil)},
			out: "deleted queue 'q' in vhost '/'\n"},
		{name: "v2 delete idempotently", args: []string{"delete", "queue", "--name", "nope", "--idempotently"},
			replies: map[string]reply{"DELETE /api/queues/%2F/nope": {404, `{"error":"Object Not Found","reason":"Not Found"}`}},
			want:    []request{guest("DELETE", "/api/queues/%2F/nope", nil)}, out: "no queue 'nope' in vhost '/': nothing to delete\n"},
		{name: "v2 delete binding", args: []string{"bindings", "delete", "--source", "x", "--destination", "q", "--routing-key", "k"},
			replies: map[string]reply{"GET /api/bindings/%2F/e/x/q/q": {200, `[{"routing_key":"k","properties_key":"k~1"},{"routing_key":"j","properties_key":"j"}]`}},
			want:    []request{guest("GET", "/api/bindings/%2F/e/x/q/q", nil), guest("DELETE", "/api/bindings/%2F/e/x/q/q/k~1", nil)},
			out:     "deleted 1 binding(s) from exchange 'x' to queue 'q' with routing key 'k' in vhost '/'\n"},
		{name: "v2 queues list", args: []string{"--non-interactive", "queues", "list"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"vhost":"/","name":"q","type":"quorum","messages":2,"message_bytes":3145728}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)},
			out:     "/ q quorum 2   3145728\n"},
		// rabbitmqadmin v2's --non-interactive (src/output.rs): no header
		// row, each column its widest cell and one space, a newline in a
		// cell becomes ",".
		{name: "v2 non-interactive aligned", args: []string{"--non-interactive", "list", "queues", "name", "messages", "message_bytes", "policy"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"name":"jobs","messages":2,"message_bytes":3145728,"policy":"a\nb"},{"name":"q","messages":12345,"message_bytes":0,"policy":"p"}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)},
			out:     "jobs 2     3145728 a,b\nq    12345 0       p\n"},
		{name: "v2 list with units", args: []string{"list", "queues", "name", "message_bytes", "message_stats.publish_details.rate"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"name":"q","message_bytes":3145728,"message_stats":{"publish_details":{"rate":12.5}}}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)},
			out:     "name  message_bytes  message_stats.publish_details.rate\nq     3.0 MiB        12.5/s\n"},
		{name: "v2 show overview", args: []string{"show", "overview"},
			replies: map[string]reply{"GET /api/overview": {200, `{"product_name":"railmq","product_version":"1.2","rabbitmq_version":"3.10.8","node":"railmq@h","object_totals":{"connections":1,"channels":2,"queues":3,"consumers":4},"queue_totals":{"messages":5,"messages_ready":4,"messages_unacknowledged":1},"message_stats":{"publish_details":{"rate":1.5}},"memory_used":1048576}`}},
			want:    []request{guest("GET", "/api/overview", nil)},
			out: "key                                                         value\n" +
				"Product name                                                railmq\n" +
				"Product version                                             1.2\n" +
				"RabbitMQ version (API)                                      3.10.8\n" +
				"Node                                                        railmq@h\n" +
				"Connections (total)                                         1\n" +
				"AMQP 0-9-1 channels (total)                                 2\n" +
				"Queues and streams (total)                                  3\n" +
				"Consumers (total)                                           4\n" +
				"Messages (total)                                            5\n" +
				"Messages ready for delivery (total)                         4\n" +
				"Messages delivered but unacknowledged by consumers (total)  1\n" +
				"Publishing (ingress) rate (global)                          1.5/s\n" +
				"Consumer delivery (egress) rate (global)                    \n" +
				"Consumer acknowledgement rate (global)                      \n" +
				"Memory used                                                 1.0 MiB\n"},
		{name: "v2 connections close", args: []string{"connections", "close", "--name", conn},
			want: []request{guest("DELETE", "/api/connections/127.0.0.1:50000%20-%3E%20127.0.0.1:5672", nil)}, out: "closed connection '" + conn + "'\n"},
		{name: "v2 health_check", args: []string{"health_check", "local_alarms"}, replies: map[string]reply{"GET /api/health/checks/local-alarms": {200, `{"status":"ok"}`}},
			want: []request{guest("GET", "/api/health/checks/local-alarms", nil)}, out: "passed\n"},
		{name: "v2 host and port", args: []string{"-H", "127.0.0.1", "--username", "ann", "list", "users"},
			want: []request{{Method: "GET", Path: "/api/users", User: "ann", Pass: "guest"}}, out: "name  tags\n"},
		{name: "get", args: []string{"get", "q"},
			replies: map[string]reply{"POST /api/queues/%2F/q/get": {200, `[{"routing_key":"k","exchange":"","redelivered":false,"payload_bytes":2,"payload":"hi"}]`}},
			want:    []request{guest("POST", "/api/queues/%2F/q/get", j(t, `{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}`))},
			out:     "routing_key  exchange  redelivered  payload_bytes  payload\nk                      false        2              hi\n"},
		{name: "get with flags", args: []string{"get", "q", "--count", "5", "--ackmode", "reject_requeue_false"},
			replies: map[string]reply{"POST /api/queues/%2F/q/get": {200, `[]`}},
			want:    []request{guest("POST", "/api/queues/%2F/q/get", j(t, `{"count":5,"ackmode":"reject_requeue_false","encoding":"auto"}`))},
			out:     "routing_key  exchange  redelivered  payload_bytes  payload\n"},
		{name: "peek", args: []string{"peek", "q", "--count", "3"}, replies: map[string]reply{"POST /api/queues/%2F/q/peek": {200, `[]`}},
			want: []request{guest("POST", "/api/queues/%2F/q/peek", j(t, `{"count":3}`))}, out: "routing_key  exchange  payload_bytes  payload\n"},
		{name: "publish, not routed", args: []string{"publish"},
			replies: map[string]reply{"POST /api/exchanges/%2F/amq.default/publish": {200, `{"routed":false}`}},
			want: []request{guest("POST", "/api/exchanges/%2F/amq.default/publish",
				j(t, `{"properties":{},"routing_key":"","payload":"","payload_encoding":"string"}`))},
			out: "published, not routed\n"},
		{name: "publish", args: []string{"publish", "--exchange", "x", "--routing-key", "a.b", "--payload", "hello"},
			replies: map[string]reply{"POST /api/exchanges/%2F/x/publish": {200, `{"routed":true}`}},
			want: []request{guest("POST", "/api/exchanges/%2F/x/publish",
				j(t, `{"properties":{},"routing_key":"a.b","payload":"hello","payload_encoding":"string"}`))}},
		{name: "redrive", args: []string{"redrive", "dlq"},
			replies: map[string]reply{"POST /api/queues/%2F/dlq/redrive": {200, `{"moved":10,"unroutable":1,"remaining":0}`}, "GET /api/queues/%2F/dlq": {200, `{"messages":11}`}},
			want:    []request{guest("GET", "/api/queues/%2F/dlq", nil), guest("POST", "/api/queues/%2F/dlq/redrive", j(t, `{}`))},
			out:     "moved  unroutable  remaining\n10     1           0\n", stderr: "redriving 11 messages from 'dlq' in vhost '/'\nredrove 10 messages from 'dlq' in "},
		{name: "redrive with limits", args: []string{"redrive", "dlq", "--rate", "2.5", "--max", "0"},
			replies: map[string]reply{"POST /api/queues/%2F/dlq/redrive": {200, `{}`}, "GET /api/queues/%2F/dlq": {200, `{"messages":11}`}},
			want:    []request{guest("GET", "/api/queues/%2F/dlq", nil), guest("POST", "/api/queues/%2F/dlq/redrive", j(t, `{"rate":2.5,"max":0}`))},
			out:     "moved  unroutable  remaining\n                   \n", stderr: "redriving "},
		{name: "redrive to an exchange", args: []string{"redrive", "dlq", "--target-exchange", "x", "--target-routing-key", "k"},
			replies: map[string]reply{"POST /api/queues/%2F/dlq/redrive": {200, `{}`}, "GET /api/queues/%2F/dlq": {200, `{"messages":11}`}},
			want:    []request{guest("GET", "/api/queues/%2F/dlq", nil), guest("POST", "/api/queues/%2F/dlq/redrive", j(t, `{"target_exchange":"x","target_routing_key":"k"}`))},
			out:     "moved  unroutable  remaining\n                   \n", stderr: "redriving "},
		{name: "redrive to the default exchange", args: []string{"redrive", "dlq", "--target-exchange", "", "--target-routing-key", "q"},
			replies: map[string]reply{"POST /api/queues/%2F/dlq/redrive": {200, `{}`}, "GET /api/queues/%2F/dlq": {200, `{"messages":11}`}},
			want:    []request{guest("GET", "/api/queues/%2F/dlq", nil), guest("POST", "/api/queues/%2F/dlq/redrive", j(t, `{"target_exchange":"","target_routing_key":"q"}`))},
			out:     "moved  unroutable  remaining\n                   \n", stderr: "redriving "},
		{name: "close connection", args: []string{"close", "connection", conn},
			want: []request{guest("DELETE", "/api/connections/127.0.0.1:50000%20-%3E%20127.0.0.1:5672", nil)}},
		{name: "add user", args: []string{"add_user", "ann", "pw", "--tags", "administrator,management"},
			want: []request{guest("PUT", "/api/users/ann", j(t, `{"password":"pw","tags":"administrator,management"}`))}},
		{name: "add user without tags", args: []string{"add_user", "ann", "pw"},
			want: []request{guest("PUT", "/api/users/ann", j(t, `{"password":"pw","tags":""}`))}},
		{name: "set user tags", args: []string{"set_user_tags", "ann", "monitoring", "management"},
			replies: map[string]reply{"GET /api/users/ann": {200, `{"name":"ann","password_hash":"h4sh","hashing_algorithm":"rabbit_password_hashing_sha256","tags":"x"}`}},
			want: []request{guest("GET", "/api/users/ann", nil),
				guest("PUT", "/api/users/ann", j(t, `{"tags":"monitoring,management","password_hash":"h4sh","hashing_algorithm":"rabbit_password_hashing_sha256"}`))}},
		{name: "set user tags to none", args: []string{"set_user_tags", "ann"},
			replies: map[string]reply{"GET /api/users/ann": {200, `{"name":"ann","password_hash":"h4sh","hashing_algorithm":"a"}`}},
			want: []request{guest("GET", "/api/users/ann", nil),
				guest("PUT", "/api/users/ann", j(t, `{"tags":"","password_hash":"h4sh","hashing_algorithm":"a"}`))}},
		{name: "set permissions", args: []string{"-V", "v", "set_permissions", "ann", "^ann-", ".*", ""},
			want: []request{guest("PUT", "/api/permissions/v/ann", j(t, `{"configure":"^ann-","write":".*","read":""}`))}},
		{name: "set policy", args: []string{"set_policy", "cap", "^q", `{"max-length":5}`},
			want: []request{guest("PUT", "/api/policies/%2F/cap", j(t, `{"pattern":"^q","definition":{"max-length":5},"priority":0,"apply-to":"all"}`))}},
		{name: "set policy with flags", args: []string{"set_policy", "cap", "^q", `{}`, "--priority", "3", "--apply-to", "queues"},
			want: []request{guest("PUT", "/api/policies/%2F/cap", j(t, `{"pattern":"^q","definition":{},"priority":3,"apply-to":"queues"}`))}},
		{name: "clear policy", args: []string{"clear_policy", "cap"}, want: []request{guest("DELETE", "/api/policies/%2F/cap", nil)}},
		{name: "export", args: []string{"export", defsOut}, replies: map[string]reply{"GET /api/definitions": {200, defs}},
			want: []request{guest("GET", "/api/definitions", nil)}, out: "exported definitions (1 queues) to " + defsOut + "\n"},
		{name: "v2 export definitions", args: []string{"definitions", "export", "--stdout"}, replies: map[string]reply{"GET /api/definitions": {200, defs}},
			want: []request{guest("GET", "/api/definitions", nil)}, out: defs + "\n"},
		{name: "import", args: []string{"import", defsIn}, want: []request{guest("POST", "/api/definitions", j(t, defs))},
			out: "imported definitions from " + defsIn + " (1 queues) in ", stderr: "importing definitions from " + defsIn + ": 1 queues\n"},
		{name: "v2 import definitions", args: []string{"import", "definitions", "--file", defsIn}, want: []request{guest("POST", "/api/definitions", j(t, defs))},
			out: "imported definitions from " + defsIn + " (1 queues) in ", stderr: "importing definitions from " + defsIn + ": 1 queues\n"},
		{name: "status", args: []string{"status"},
			replies: map[string]reply{"GET /api/nodes": {200, `[{"name":"railmq@h","running":true,"mem_used":100,"mem_limit":1000,"mem_alarm":false,"disk_free":5e9,"disk_free_limit":5e7,"disk_free_alarm":false,"uptime":1234}]`}},
			want:    []request{guest("GET", "/api/nodes", nil)},
			out: "name      running  mem_used  mem_limit  mem_alarm  disk_free  disk_free_limit  disk_free_alarm  uptime\n" +
				"railmq@h  true     100 B     1000 B     false      4.7 GiB    47.7 MiB         false            1234\n"},
		{name: "cluster status", args: []string{"cluster", "status"},
			replies: map[string]reply{"GET /api/cluster": {200, `{"name":"a@h","state":"Follower","leader":"b@h","term":7,"members":[{"name":"a@h","address":"h:1","voter":true,"leader":false},{"name":"b@h","address":"h:2","voter":true,"leader":true}]}`}},
			want:    []request{guest("GET", "/api/cluster", nil)},
			out:     "node a@h: Follower, term 7, leader b@h\nname  address  voter  leader\na@h   h:1      true   false\nb@h   h:2      true   true\n"},
		{name: "cluster join", args: []string{"cluster", "join", "c@h", "h:3"},
			want: []request{guest("PUT", "/api/cluster/members/c@h", j(t, `{"address":"h:3"}`))}},
		{name: "cluster leave", args: []string{"cluster", "leave", "c@h"}, want: []request{guest("DELETE", "/api/cluster/members/c@h", nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.replies)
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			args := tc.args
			if tc.noURL {
				env["RAILMQ_MANAGEMENT_URL"] = api.URL
			} else {
				url := api.URL
				if tc.slash {
					url += "/"
				}
				args = append([]string{"--url", url}, args...)
			}
			code, out, errOut := ctl(t, "railmqctl", env, args...)
			if code != 0 || !strings.HasPrefix(errOut, tc.stderr) || (tc.stderr == "" && errOut != "") {
				t.Fatalf("%v: exit %d\n%s", tc.args, code, errOut)
			}
			if got := api.requests(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%v: requests\n got %+v\nwant %+v", tc.args, got, tc.want)
			}
			if strings.HasSuffix(tc.out, " in ") && strings.HasPrefix(out, tc.out) {
				// import's final line ends with the time it took
			} else if out != tc.out {
				t.Errorf("%v: printed\n%q\nwant\n%q", tc.args, out, tc.out)
			}
		})
	}

	// export wrote what the API answered; import sent the file as it is.
	if b, err := os.ReadFile(defsOut); err != nil || string(b) != defs {
		t.Errorf("export wrote %q, %v", b, err)
	}
	api := newFakeAPI(t, nil)
	if code, _, errOut := ctl(t, "railmqctl", nil, "--url", api.URL, "import", defsIn); code != 0 || len(api.raw) != 1 || string(api.raw[0]) != defs {
		t.Errorf("import: exit %d %s, sent %q", code, errOut, api.raw)
	}
}

// Usage errors: railmqctl says what is wrong, exits 1 and asks nothing
// of the API.
func TestUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.json")
	for _, tc := range []struct {
		args []string
		err  string // stderr, exactly
	}{
		{[]string{"bogus"}, "Error: unknown command \"bogus\" for \"railmqctl\"\nRun 'railmqctl --help' for usage.\n"},
		{[]string{"--bogus"}, "Error: unknown flag: --bogus\n"},
		{[]string{"list"}, "Error: requires at least 1 arg(s), only received 0\n"},
		{[]string{"list", "bogus"}, "Error: unknown kind \"bogus\" (queues, exchanges, bindings, connections, channels, consumers, users, vhosts, policies, permissions, nodes)\n"},
		{[]string{"declare"}, "Error: requires at least 1 arg(s), only received 0\n"},
		{[]string{"declare", "queue"}, "Error: declare queue: --name is required\n"},
		{[]string{"declare", "queue", "--durable", "maybe"}, "Error: invalid argument \"maybe\" for \"--durable\" flag: \"maybe\": true or false\n"},
		{[]string{"declare", "queue", "--name", "q", "--arguments", "{"}, "Error: --arguments: not a JSON object: unexpected end of JSON input\n"},
		{[]string{"declare", "binding", "--source", "x"}, "Error: declare binding: --source and --destination are required\n"},
		{[]string{"declare", "thing", "name=x"}, "Error: cannot declare \"thing\" (queue, exchange, binding, user, vhost or policy)\n"},
		{[]string{"delete", "queue"}, "Error: delete queue: --name is required\n"},
		{[]string{"delete", "binding", "b"}, "Error: delete binding: --source and --destination are required\n"},
		{[]string{"delete", "thing", "t"}, "Error: cannot delete \"thing\" (queue, exchange, binding, user, vhost or policy)\n"},
		{[]string{"purge"}, "Error: purge: give the queue: purge queue --name QUEUE\n"},
		{[]string{"purge", "a", "b"}, "Error: accepts between 0 and 1 arg(s), received 2\n"},
		{[]string{"queues", "purge"}, "Error: purge queue: --name is required\n"},
		{[]string{"--format", "yaml", "list", "queues"}, "Error: --format \"yaml\": table or json\n"},
		{[]string{"get"}, "Error: accepts 1 arg(s), received 0\n"},
		{[]string{"get", "q", "--count", "x"}, "Error: invalid argument \"x\" for \"--count\" flag: strconv.ParseInt: parsing \"x\": invalid syntax\n"},
		{[]string{"peek", "q", "--ackmode", "x"}, "Error: unknown flag: --ackmode\n"},
		{[]string{"redrive", "q", "--rate", "fast"}, "Error: invalid argument \"fast\" for \"--rate\" flag: strconv.ParseFloat: parsing \"fast\": invalid syntax\n"},
		{[]string{"close", "connection"}, "Error: accepts 2 arg(s), received 1\n"},
		{[]string{"add_user", "ann"}, "Error: accepts 2 arg(s), received 1\n"},
		{[]string{"set_user_tags"}, "Error: requires at least 1 arg(s), only received 0\n"},
		{[]string{"set_permissions", "ann", ".*", ".*"}, "Error: accepts 4 arg(s), received 3\n"},
		// rabbitmqctl's texts (rabbitmq_cli core/virtual_hosts.ex, v4.3.5).
		{[]string{"add_vhost", "v", "--default-queue-type", ""}, "Error: Default queue type must not be an empty string\n"},
		{[]string{"add_vhost", "v", "--default-queue-type", "lazy"}, "Error: Default queue type must be one of: quorum, stream, classic. Provided: lazy\n"},
		{[]string{"add_vhost"}, "Error: accepts 1 arg(s), received 0\n"},
		{[]string{"set_policy", "p", "^q", "{"}, "Error: definition: unexpected end of JSON input\n"},
		{[]string{"set_policy", "p", "^q", "{}", "--priority", "high"}, "Error: invalid argument \"high\" for \"--priority\" flag: strconv.ParseInt: parsing \"high\": invalid syntax\n"},
		{[]string{"clear_policy"}, "Error: accepts 1 arg(s), received 0\n"},
		{[]string{"export"}, "Error: export: --file FILE or --stdout\n"},
		{[]string{"definitions", "import"}, "Error: import: --file FILE or --stdin\n"},
		{[]string{"import", missing}, "Error: open " + missing + ": no such file or directory\n"},
		{[]string{"cluster", "status", "extra"}, "Error: unknown command \"extra\" for \"railmqctl cluster status\"\n"},
		{[]string{"cluster", "join", "c@h"}, "Error: accepts 2 arg(s), received 1\n"},
		{[]string{"cluster", "leave"}, "Error: accepts 1 arg(s), received 0\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := newFakeAPI(t, nil)
			code, out, errOut := ctl(t, "railmqctl", nil, append([]string{"--url", api.URL}, tc.args...)...)
			if code != 1 || out != "" || errOut != tc.err {
				t.Errorf("%v: exit %d, stdout %q, stderr\n%q\nwant\n%q", tc.args, code, out, errOut, tc.err)
			}
			if reqs := api.requests(); len(reqs) != 0 {
				t.Errorf("%v asked the API %+v", tc.args, reqs)
			}
		})
	}
}

// The API's refusals: its reason when it gives one, else its status.
func TestAPIErrors(t *testing.T) {
	api := newFakeAPI(t, map[string]reply{
		"DELETE /api/queues/%2F/nope": {404, `{"error":"Object Not Found","reason":"Not Found"}`},
		"GET /api/queues/%2F":         {401, `{"error":"not_authorised","reason":"Login failed\n"}`},
		"GET /api/users":              {500, `oops`},
		"PUT /api/cluster/members/c":  {400, `{"error":"bad_request"}`},
	})
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"delete", "queue", "nope"}, "Error: no queue 'nope' in vhost '/': 404 Not Found: Not Found\n"},
		{[]string{"list", "queues"}, "Error: 401 Unauthorized: Login failed\n"},
		{[]string{"list", "users"}, "Error: 500 Internal Server Error\n"},
		{[]string{"cluster", "join", "c", "h:1"}, "Error: 400 Bad Request\n"},
	} {
		code, out, errOut := ctl(t, "railmqctl", nil, append([]string{"--url", api.URL}, tc.args...)...)
		if code != 1 || out != "" || errOut != tc.err {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.err)
		}
	}
	// Nothing listening: 69, EX_UNAVAILABLE, as RabbitMQ's tools.
	ln := httptest.NewServer(http.NotFoundHandler())
	url := ln.URL
	ln.Close()
	code, _, errOut := ctl(t, "railmqctl", nil, "--url", url, "status")
	if code != 69 || !strings.HasPrefix(errOut, `Error: Get "`+url+`/api/nodes": dial tcp `) {
		t.Errorf("no API: exit %d, %q", code, errOut)
	}
}

// Called as rabbitmqctl or rabbitmq-diagnostics, railmqctl takes
// RabbitMQ's commands and flags; its address and user come from the
// environment only. The texts are RabbitMQ 3.10.8's (shim_test.go runs
// them against a broker).
func TestShim(t *testing.T) {
	conn := "127.0.0.1:50000 -> 127.0.0.1:5672"
	ov := map[string]reply{"GET /api/overview": {200, `{"node":"railmq@h","listeners":[]}`}}
	with := func(m map[string]reply) map[string]reply {
		out := map[string]reply{}
		for k, v := range ov {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	overview := guest("GET", "/api/overview", nil)
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		replies map[string]reply
		want    []request
		out     string
		only    string // the one tool that has the command (RabbitMQ 3.10.8's split), else both
	}{
		{name: "ping", args: []string{"ping"}, replies: ov, want: []request{overview},
			out: "Will ping railmq@h. This only checks if the node's management API answers and takes the CLI's user. Timeout: 60000 ms.\nPing succeeded\n"},
		{name: "quiet ping", args: []string{"-q", "ping"}, replies: ov, want: []request{overview}, out: "Ping succeeded\n"},
		// A node still recovering answers 503: its process is up.
		{name: "ping while recovering", args: []string{"-q", "ping"}, replies: map[string]reply{"GET /api/overview": {503, `{"reason":"recovering"}`}},
			want: []request{overview}, out: "Ping succeeded\n"},
		{name: "await_startup", args: []string{"await_startup"}, replies: ov, want: []request{overview}, only: "rabbitmqctl"},
		{name: "node_health_check", args: []string{"node_health_check"}, env: map[string]string{"RAILMQ_USER": "ann", "RAILMQ_PASSWORD": "pw"},
			replies: with(map[string]reply{"GET /api/health/checks/local-alarms": {200, `{"status":"ok"}`}}),
			want:    []request{{Method: "GET", Path: "/api/overview", User: "ann", Pass: "pw"}, {Method: "GET", Path: "/api/health/checks/local-alarms", User: "ann", Pass: "pw"}},
			out:     "Asking node railmq@h to report any local resource alarms ...\nNode railmq@h reported no local alarms\n"},
		{name: "the official image's user", args: []string{"-q", "check_running"}, env: map[string]string{"RABBITMQ_DEFAULT_USER": "admin", "RABBITMQ_DEFAULT_PASS": "s3cret"},
			replies: ov, want: []request{{Method: "GET", Path: "/api/overview", User: "admin", Pass: "s3cret"}},
			out: "RabbitMQ on node railmq@h is fully booted and running\n", only: "rabbitmq-diagnostics"},
		// RabbitMQ 3.10.8: rabbitmq-diagnostics check_alarms prints "Asking node
		// rabbit@vm to report any local resource alarms ..." and "Node
		// rabbit@vm reported no alarms, local or clusterwide".
		{name: "check_alarms", args: []string{"check_alarms"}, replies: with(map[string]reply{"GET /api/health/checks/alarms": {200, `{"status":"ok"}`}}),
			want: []request{overview, guest("GET", "/api/health/checks/alarms", nil)},
			out:  "Asking node railmq@h to report any local resource alarms ...\nNode railmq@h reported no alarms, local or clusterwide\n", only: "rabbitmq-diagnostics"},
		{name: "check_virtual_hosts", args: []string{"check_virtual_hosts"}, replies: with(map[string]reply{"GET /api/health/checks/virtual-hosts": {200, `{"status":"ok"}`}}),
			want: []request{overview, guest("GET", "/api/health/checks/virtual-hosts", nil)},
			out:  "Checking if all vhosts are running on node railmq@h ...\nNode railmq@h reported all vhosts as running\n", only: "rabbitmq-diagnostics"},
		{name: "watermark", args: []string{"set_vm_memory_high_watermark", "0.6"},
			want: []request{guest("PUT", "/api/vm-memory-high-watermark", j(t, `{"value":"0.6"}`))}, only: "rabbitmqctl"},
		{name: "absolute watermark", args: []string{"set_vm_memory_high_watermark", "absolute", "2GB"},
			want: []request{guest("PUT", "/api/vm-memory-high-watermark", j(t, `{"value":"2GB"}`))}, only: "rabbitmqctl"},
		{name: "list_queues", args: []string{"list_queues"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"name":"q","messages":3}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)}, out: "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\nname\tmessages\nq\t3\n"},
		{name: "list_queues in a vhost", args: []string{"-p", "/prod", "list_queues", "name", "consumers", "arguments", "members", "durable"},
			replies: map[string]reply{"GET /api/queues/%2Fprod": {200, `[{"name":"q","consumers":1,"arguments":{"x-queue-type":"quorum","x-delivery-limit":2},"members":["a@h","b@h"],"durable":true}]`}},
			want:    []request{guest("GET", "/api/queues/%2Fprod", nil)},
			out:     "Timeout: 60.0 seconds ...\nListing queues for vhost /prod ...\nname\tconsumers\targuments\tmembers\tdurable\nq\t1\t[{\"x-delivery-limit\",2},{\"x-queue-type\",\"quorum\"}]\t[a@h,b@h]\ttrue\n"},
		{name: "list_queues flags after", args: []string{"list_queues", "--vhost", "v", "-q", "--no-table-headers", "name", "messages"},
			replies: map[string]reply{"GET /api/queues/v": {200, `[{"name":"q","messages":3},{"name":"r","messages":0}]`}},
			want:    []request{guest("GET", "/api/queues/v", nil)}, out: "q\t3\nr\t0\n"},
		{name: "list_queues json", args: []string{"list_queues", "--formatter", "json", "name", "messages"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"name":"q","messages":3},{"name":"r","messages":0}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)}, out: "[\n{\"name\":\"q\",\"messages\":3}\n,{\"name\":\"r\",\"messages\":0}\n]\n"},
		// RabbitMQ 3.10.8: a vhost that does not exist lists nothing, exit 0.
		{name: "list_queues no vhost", args: []string{"list_queues", "-p", "nope"},
			replies: map[string]reply{"GET /api/queues/nope": {404, `{"error":"Object Not Found","reason":"Not Found"}`}},
			want:    []request{guest("GET", "/api/queues/nope", nil)}, out: "Timeout: 60.0 seconds ...\nListing queues for vhost nope ...\n"},
		{name: "trace_on", args: []string{"trace_on", "-p", "v"}, replies: map[string]reply{"GET /api/vhosts/v": {200, `{"name":"v"}`}},
			want: []request{guest("GET", "/api/vhosts/v", nil), guest("PUT", "/api/vhosts/v", j(t, `{"tracing":true}`))},
			out:  "Starting tracing for vhost \"v\" ...\nTrace enabled for vhost v\n", only: "rabbitmqctl"},
		{name: "trace_off", args: []string{"-q", "trace_off"}, replies: map[string]reply{"GET /api/vhosts/%2F": {200, `{"name":"/"}`}},
			want: []request{guest("GET", "/api/vhosts/%2F", nil), guest("PUT", "/api/vhosts/%2F", j(t, `{"tracing":false}`))},
			out:  "Trace disabled for vhost /\n", only: "rabbitmqctl"},
		// RabbitMQ 3.10.8 answers a missing vhost as one that exists; the
		// shim creates nothing.
		{name: "trace_on no vhost", args: []string{"trace_on", "-p", "nope"}, replies: map[string]reply{"GET /api/vhosts/nope": {404, `{}`}},
			want: []request{guest("GET", "/api/vhosts/nope", nil)}, out: "Starting tracing for vhost \"nope\" ...\nTrace enabled for vhost nope\n", only: "rabbitmqctl"},
		{name: "-n accepted", args: []string{"-n", "rabbit@localhost", "-q", "ping"}, replies: ov, want: []request{overview}, out: "Ping succeeded\n"},
		{name: "version", args: []string{"version"}, out: version + "\n"},
		{name: "list_connections", args: []string{"list_connections"},
			replies: map[string]reply{"GET /api/connections": {200, `[{"user":"guest","peer_host":"127.0.0.1","peer_port":50000,"state":"running"}]`}},
			want:    []request{guest("GET", "/api/connections", nil)},
			out:     "user   peer_host  peer_port  state\nguest  127.0.0.1  50000      running\n"},
		{name: "list_connections columns", args: []string{"list_connections", "name"},
			replies: map[string]reply{"GET /api/connections": {200, `[{"name":"` + conn + `"}]`}},
			want:    []request{guest("GET", "/api/connections", nil)}, out: "name\n" + conn + "\n"},
		{name: "close_connection", args: []string{"close_connection", conn, "go away"},
			want: []request{guest("DELETE", "/api/connections/127.0.0.1:50000%20-%3E%20127.0.0.1:5672", nil)}, only: "rabbitmqctl"},
	} {
		for _, name := range []string{"rabbitmqctl", "rabbitmq-diagnostics"} {
			if tc.only != "" && tc.only != name {
				continue
			}
			t.Run(name+" "+tc.name, func(t *testing.T) {
				api := newFakeAPI(t, tc.replies)
				env := map[string]string{"RAILMQ_MANAGEMENT_URL": api.URL}
				for k, v := range tc.env {
					env[k] = v
				}
				code, out, errOut := ctl(t, name, env, tc.args...)
				if code != 0 || errOut != "" {
					t.Fatalf("%v: exit %d\n%s", tc.args, code, errOut)
				}
				if got := api.requests(); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%v: requests\n got %+v\nwant %+v", tc.args, got, tc.want)
				}
				if out != tc.out {
					t.Errorf("%v: printed\n%q\nwant\n%q", tc.args, out, tc.out)
				}
			})
		}
	}
}

// The shims' failures: RabbitMQ's exit codes (64 usage, 69 unavailable or
// a failed check, 70 the node's error) and texts.
func TestShimErrors(t *testing.T) {
	// RabbitMQ 3.10.8's answer to a command its tool does not have
	// (stderr, exit 64), then the commands the tool takes.
	notFound := func(tool, cmd string) string {
		return "\nCommand '" + cmd + "' not found. \n\nUsage\n\n" + tool +
			" [--node <node>] [--timeout <timeout>] [--longnames] [--quiet] <command> [<command options>]\n\nAvailable commands:\n\n"
	}
	usage := "Error: no command given (usage: rabbitmqctl [-n NODE] [-q] [-t SECONDS] COMMAND [ARGS])\n"
	alarms := map[string]reply{"GET /api/overview": {200, `{"node":"railmq@h"}`},
		"GET /api/health/checks/local-alarms": {503, `{"status":"failed","reason":"There are alarms in effect on the node","alarms":[{"node":"railmq@h","resource":"memory"},{"node":"railmq@h","resource":"disk"}]}`}}
	for _, tc := range []struct {
		args    []string
		tool    string // rabbitmqctl unless given
		replies map[string]reply
		code    int
		out     string
		err     string
		asks    int // requests made
	}{
		{args: nil, code: 64, err: usage},
		{args: []string{"-p", "/"}, code: 64, err: usage},
		{args: []string{"-p"}, code: 64, err: "Error: option -p needs a value\n"},
		{args: []string{"--url", "http://x", "ping"}, code: 64, err: "Error: invalid option --url\n"},
		{args: []string{"-t", "soon", "ping"}, code: 64, err: "Error: timeout soon is not a number of seconds above 0\n"},
		{args: []string{"--formatter", "yaml", "status"}, code: 64, err: "Error: formatter yaml is not supported (json or table)\n"},
		{args: []string{"list_exchanges"}, code: 64, err: notFound("rabbitmqctl", "list_exchanges")},
		// Each tool refuses the other's commands, as RabbitMQ 3.10.8's:
		// rabbitmq-diagnostics await_startup and rabbitmqctl
		// check_running exit 64 with "Command '...' not found." and the
		// usage, asking the node nothing.
		{args: []string{"-q", "await_startup"}, tool: "rabbitmq-diagnostics", code: 64, err: notFound("rabbitmq-diagnostics", "await_startup")},
		{args: []string{"trace_on"}, tool: "rabbitmq-diagnostics", code: 64, err: notFound("rabbitmq-diagnostics", "trace_on")},
		{args: []string{"close_connection", "c"}, tool: "rabbitmq-diagnostics", code: 64, err: notFound("rabbitmq-diagnostics", "close_connection")},
		{args: []string{"set_vm_memory_high_watermark", "0.5"}, tool: "rabbitmq-diagnostics", code: 64, err: notFound("rabbitmq-diagnostics", "set_vm_memory_high_watermark")},
		{args: []string{"check_running"}, code: 64, err: notFound("rabbitmqctl", "check_running")},
		{args: []string{"-q", "check_local_alarms"}, code: 64, err: notFound("rabbitmqctl", "check_local_alarms")},
		{args: []string{"check_port_connectivity"}, code: 64, err: notFound("rabbitmqctl", "check_port_connectivity")},
		{args: []string{"check_virtual_hosts"}, code: 64, err: notFound("rabbitmqctl", "check_virtual_hosts")},
		{args: []string{"listeners"}, code: 64, err: notFound("rabbitmqctl", "listeners")},
		{args: []string{"set_vm_memory_high_watermark"}, code: 64, err: "Error: usage: rabbitmqctl set_vm_memory_high_watermark FRACTION | absolute SIZE\n"},
		{args: []string{"close_connection"}, code: 64, err: "Error: usage: rabbitmqctl close_connection NAME [REASON]\n"},
		{args: []string{"await_startup", "x"}, code: 64, err: "Error: await_startup takes no arguments\n"},
		{args: []string{"list_queues", "name", "bogus"}, code: 64, err: "Error: (argument validation): Info key(s) bogus are not supported (must be one of " + strings.Join(queueInfoKeys, ", ") + ")\n"},
		// check_local_alarms: rabbitmq_cli's alarm_lines, exit 69.
		{args: []string{"check_local_alarms"}, tool: "rabbitmq-diagnostics", replies: alarms, code: 69, asks: 2,
			out: "Asking node railmq@h to report any local resource alarms ...\n", err: "Error:\nMemory alarm on node railmq@h\nFree disk space alarm on node railmq@h\n"},
		{args: []string{"-q", "check_local_alarms"}, tool: "rabbitmq-diagnostics", replies: alarms, code: 69, asks: 2, err: "Error:\nMemory alarm on node railmq@h\nFree disk space alarm on node railmq@h\n"},
		// Booting: check_running fails as RabbitMQ's does.
		{args: []string{"-q", "check_running"}, tool: "rabbitmq-diagnostics", replies: map[string]reply{"GET /api/overview": {503, `{}`}}, code: 69, asks: 1,
			err: "Error:\nRabbitMQ on node " + localNodeName() + " is not running or has not fully booted yet (check with is_booting)\n"},
		{args: []string{"-q", "ping"}, replies: map[string]reply{"GET /api/overview": {401, `{"error":"not_authorised","reason":"Login failed"}`}}, code: 69, asks: 1,
			err: "Error:\nFailed to connect and authenticate to " + localNodeName() + " in 60000 ms (401 Unauthorized: Login failed)\n"},
		{args: []string{"-q", "check_running"}, tool: "rabbitmq-diagnostics", replies: map[string]reply{"GET /api/overview": {401, `{"error":"not_authorised","reason":"Login failed"}`}}, code: 69, asks: 1,
			err: "Error: unable to perform an operation on node '" + localNodeName() + "': the management API at URL refused user 'guest' (401 Unauthorized: Login failed); set RAILMQ_USER and RAILMQ_PASSWORD (or RABBITMQ_DEFAULT_USER and RABBITMQ_DEFAULT_PASS)\n"},
		{args: []string{"set_vm_memory_high_watermark", "lots"}, replies: map[string]reply{"PUT /api/vm-memory-high-watermark": {400, `{"error":"bad_request","reason":"bad value"}`}},
			code: 70, asks: 1, err: "Error: 400 Bad Request: bad value\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := newFakeAPI(t, tc.replies)
			tool := tc.tool
			if tool == "" {
				tool = "rabbitmqctl"
			}
			code, out, errOut := ctl(t, tool, map[string]string{"RAILMQ_MANAGEMENT_URL": api.URL}, tc.args...)
			want := strings.ReplaceAll(tc.err, "at URL", "at "+api.URL)
			if strings.HasPrefix(want, "\nCommand '") && strings.HasPrefix(errOut, want) {
				want = errOut // the list of the tool's commands follows
			}
			if code != tc.code || out != tc.out || errOut != want {
				t.Errorf("%v: exit %d, stdout %q, stderr\n%q\nwant exit %d, %q,\n%q", tc.args, code, out, errOut, tc.code, tc.out, want)
			}
			if reqs := api.requests(); len(reqs) != tc.asks {
				t.Errorf("%v asked the API %+v", tc.args, reqs)
			}
		})
	}
}
