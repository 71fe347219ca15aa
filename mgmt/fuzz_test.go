package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/railmq/railmq/broker"
)

// Fuzzing the management API's JSON inputs, as the AMQP decoders are: a
// handler given any body answers it (no panic), never with a 5xx, and a
// 4xx is RabbitMQ's {"error": ..., "reason": ...} (a 415 from
// /api/definitions has no body, as RabbitMQ's). Run one with
// `go test -fuzz FuzzPutQueue ./mgmt/`; the inputs kept in
// testdata/fuzz run as tests.

// fuzzAPI is one broker's management API for a fuzz target, closed when
// the target ends.
func fuzzAPI(f *testing.F) http.Handler {
	s, err := broker.New(broker.Options{DataDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	api := New(s, Options{})
	f.Cleanup(func() {
		api.Close()
		_ = s.Shutdown(context.Background())
	})
	h := api.Handler()
	// What the routes name exists.
	for _, req := range []struct{ method, path, body string }{
		{"PUT", "/api/queues/%2F/fz-q", `{"durable":false}`},
		{"PUT", "/api/exchanges/%2F/fz-x", `{"type":"direct","durable":false}`},
		{"PUT", "/api/users/fz-u", `{"password":"pw","tags":""}`},
	} {
		if code, body := fuzzCall(h, req.method, req.path, []byte(req.body)); code/100 != 2 {
			f.Fatalf("%s %s: %d %s", req.method, req.path, code, body)
		}
	}
	return h
}

func fuzzCall(h http.Handler, method, path string, body []byte) (int, []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.SetBasicAuth("guest", "guest")
	req.RemoteAddr = "127.0.0.1:1"
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// fuzzRoute fuzzes the body of method path, seeded with seeds.
func fuzzRoute(f *testing.F, method, path string, seeds ...string) {
	for _, s := range append(seeds, ``, `{}`, `[]`, `null`, `"x"`, `{"arguments":{"x-max-length":"a"}}`, `{`, "{\"a\":\"\xff\"}") {
		f.Add([]byte(s))
	}
	h := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := fuzzCall(h, method, path, body)
		checkAnswer(t, code, out, body)
	})
}

// checkAnswer fails on a 5xx, or a 4xx that is not RabbitMQ's error
// shape.
func checkAnswer(t *testing.T, code int, out, body []byte) {
	t.Helper()
	if code >= 500 {
		t.Fatalf("body %q: %d %s", body, code, out)
	}
	if code >= 400 && !(code == http.StatusUnsupportedMediaType && len(out) == 0) {
		var e struct {
			Error  *string
			Reason any
		}
		if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Reason == nil {
			t.Fatalf("body %q: %d with %q, not {\"error\",\"reason\"}", body, code, out)
		}
	}
}

func FuzzPutQueue(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/queues/%2F/fz-q2",
		`{"durable":true,"auto_delete":false,"arguments":{"x-message-ttl":1000,"x-max-priority":300}}`,
		`{"durable":"yes","arguments":{"x-queue-type":"stream"}}`,
		`{"arguments":{"x-dead-letter-exchange":1,"x-expires":-1,"x-overflow":"nope"}}`)
}

func FuzzPutExchange(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/exchanges/%2F/fz-x2",
		`{"type":"topic","durable":true,"internal":false,"arguments":{"alternate-exchange":"ae"}}`,
		`{"type":"bogus"}`, `{"type":"x-delayed-message","arguments":{"x-delayed-type":"direct"}}`,
		`{"type":"x-message-deduplication","arguments":{"x-cache-size":"a"}}`)
}

func FuzzPostBinding(f *testing.F) {
	fuzzRoute(f, "POST", "/api/bindings/%2F/e/fz-x/q/fz-q",
		`{"routing_key":"k","arguments":{"x-match":"all","a":1}}`, `{"routing_key":1}`, `{"arguments":[1,2]}`)
}

func FuzzPutPolicy(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/policies/%2F/fz-p",
		`{"pattern":"^fz-","definition":{"max-length":1,"dead-letter-exchange":"x"},"priority":1,"apply-to":"queues"}`,
		`{"pattern":"(","definition":{}}`, `{"pattern":"a","definition":{"message-ttl":-1},"priority":"x"}`,
		`{"pattern":"a","definition":{"x-cache-size":1e300},"apply-to":"exchanges"}`)
}

func FuzzPutUser(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/users/fz-u2",
		`{"password":"pw","tags":"administrator"}`, `{"password_hash":"bad","hashing_algorithm":"rabbit_password_hashing_md5","tags":["a",1]}`,
		`{"tags":null}`)
}

func FuzzPutPermission(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/permissions/%2F/fz-u",
		`{"configure":".*","write":".*","read":".*"}`, `{"configure":"(","write":1,"read":null}`)
}

func FuzzPublish(f *testing.F) {
	fuzzRoute(f, "POST", "/api/exchanges/%2F/amq.default/publish",
		`{"properties":{"delivery_mode":2,"headers":{"a":[1,{"b":null}]},"priority":300,"expiration":"x"},"routing_key":"fz-q","payload":"aGk=","payload_encoding":"base64"}`,
		`{"properties":{"timestamp":-1,"user_id":"nobody"},"routing_key":"fz-q","payload":"x","payload_encoding":"string"}`,
		`{"properties":[],"routing_key":null,"payload":1}`)
}

func FuzzGet(f *testing.F) {
	fuzzRoute(f, "POST", "/api/queues/%2F/fz-q/get",
		`{"count":5,"ackmode":"ack_requeue_true","encoding":"auto","truncate":50000}`,
		`{"count":-1,"ackmode":"reject_requeue_false","encoding":"base64"}`, `{"count":"x","ackmode":"nope"}`)
}

func FuzzImportDefinitions(f *testing.F) {
	fuzzRoute(f, "POST", "/api/definitions",
		`{"vhosts":[{"name":"fz-v"}],"users":[{"name":"fz-iu","password_hash":"","hashing_algorithm":"rabbit_password_hashing_sha256","tags":["management"]}],`+
			`"permissions":[{"user":"fz-iu","vhost":"fz-v","configure":".*","write":".*","read":".*"}],`+
			`"policies":[{"vhost":"fz-v","name":"p","pattern":".*","apply-to":"all","definition":{"max-length":3},"priority":0}],`+
			`"exchanges":[{"name":"fx","vhost":"fz-v","type":"fanout","durable":true,"auto_delete":false,"internal":false,"arguments":{}}],`+
			`"queues":[{"name":"fq","vhost":"fz-v","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"classic"}}],`+
			`"bindings":[{"source":"fx","vhost":"fz-v","destination":"fq","destination_type":"queue","routing_key":"","arguments":{}}]}`,
		`{"parameters":[{"vhost":"/","component":"vhost-limits","name":"limits","value":{"max-queues":1.5}}]}`,
		`{"bindings":[{"source":"amq.direct","vhost":"/","destination":"fz-q","destination_type":"stream"}]}`,
		`{"users":[{"name":""}]}`, `{"queues":[{"name":"q","vhost":"nowhere"}]}`, `{"vhosts":[{"name":"v","tags":{}}]}`)
}
