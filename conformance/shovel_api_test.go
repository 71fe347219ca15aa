package conformance

// RabbitMQ 3.10.8's shovel plugin contract (rabbitmq_shovel,
// rabbitmq_shovel_management), pinned call by call: every expected status
// and body below is what RabbitMQ 3.10.8 answered on this machine
// (2026-12-06; node and cluster name rabbit@vm, written here as the
// broker's own cluster name). The same tests run against RabbitMQ with
// RAILMQ_TEST_URL=amqp://guest:guest@localhost:5672/
// RAILMQ_TEST_MGMT_URL=http://localhost:15672. The full record, with the
// calls not pinned here, is the note /work/notes/shovel-rabbit.md.
//
// Source: rabbitmq-server v3.10.8 deps/rabbitmq_shovel/src/
// rabbit_shovel_parameters.erl (validation), rabbit_shovel_worker.erl
// (states), rabbit_shovel_util.erl (headers, delete, restart),
// deps/rabbitmq_shovel_management/src/rabbit_shovel_mgmt.erl (routes,
// authorisation), deps/rabbit/src/rabbit_parameter_validation.erl (texts).

import (
	"encoding/json"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// sapiValidation is the prefix of every runtime parameter and policy
// validation failure (rabbit_runtime_parameters.erl v3.10.8 format_error).
const sapiValidation = "Validation failed\n\n"

// sapiReq makes one management call with a raw body ("" for none) and
// returns the status and the body.
func sapiReq(t *testing.T, a *api, method, path, user, pass, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// sapiGuest is sapiReq as guest.
func sapiGuest(t *testing.T, a *api, method, path, body string) (int, []byte) {
	t.Helper()
	return sapiReq(t, a, method, path, "guest", "guest", body)
}

// sapiWantErr asserts a call answers status with the JSON error body
// {"error": kind, "reason": reason}.
func sapiWantErr(t *testing.T, a *api, user, pass, method, path, body string, status int, kind, reason string) {
	t.Helper()
	got, out := sapiReq(t, a, method, path, user, pass, body)
	var e struct{ Error, Reason string }
	if got != status || json.Unmarshal(out, &e) != nil || e.Error != kind || e.Reason != reason {
		t.Fatalf("%s %s %s as %s: %d %s\nwant %d {%q %q}", method, path, body, user, got, out, status, kind, reason)
	}
}

// sapiWantStatus asserts a call's status only.
func sapiWantStatus(t *testing.T, a *api, method, path, body string, status int) []byte {
	t.Helper()
	got, out := sapiGuest(t, a, method, path, body)
	if got != status {
		t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, got, out, status)
	}
	return out
}

// sapiVhosts makes the vhosts with full permissions for guest and deletes
// them (and so their parameters, policies and queues) when the test ends.
func sapiVhosts(t *testing.T, a *api, names ...string) {
	t.Helper()
	for _, v := range names {
		sapiGuest(t, a, "DELETE", "/api/vhosts/"+v, "")
		sapiWantStatus(t, a, "PUT", "/api/vhosts/"+v, "", 201)
		if got, _ := sapiGuest(t, a, "PUT", "/api/permissions/"+v+"/guest", `{"configure":".*","write":".*","read":".*"}`); got != 201 && got != 204 {
			t.Fatalf("permissions on %s: %d", v, got)
		}
		t.Cleanup(func() { sapiGuest(t, a, "DELETE", "/api/vhosts/"+v, "") })
	}
}

// sapiUser makes a user with password "pw" and the tags, with full
// permissions on each vhost, deleted when the test ends.
func sapiUser(t *testing.T, a *api, name, tags string, vhosts ...string) {
	t.Helper()
	sapiWantStatus(t, a, "PUT", "/api/users/"+name, `{"password":"pw","tags":"`+tags+`"}`, 201)
	t.Cleanup(func() { sapiGuest(t, a, "DELETE", "/api/users/"+name, "") })
	for _, v := range vhosts {
		sapiWantStatus(t, a, "PUT", "/api/permissions/"+v+"/"+name, `{"configure":".*","write":".*","read":".*"}`, 201)
	}
}

// sapiClusterName is the name RabbitMQ writes as shovelled-by and in the
// federation names ("rabbit@vm" on the RabbitMQ that answered).
func sapiClusterName(t *testing.T, a *api) string {
	t.Helper()
	var o struct {
		ClusterName string `json:"cluster_name"`
	}
	if got := a.call("GET", "/api/overview", "guest", "guest", nil, &o); got != 200 || o.ClusterName == "" {
		t.Fatalf("overview: %d, cluster_name %q", got, o.ClusterName)
	}
	return o.ClusterName
}

// sapiJSON decodes a body that must be JSON.
func sapiJSON(t *testing.T, body []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return v
}

// sapiShovels is GET path decoded as a list of shovel status objects.
func sapiShovels(t *testing.T, a *api, path string) []map[string]any {
	t.Helper()
	out := sapiWantStatus(t, a, "GET", path, "", 200)
	var l []map[string]any
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("GET %s: %s", path, out)
	}
	return l
}

// sapiStatus is the status object of shovel name in vhost, nil if it is
// not listed.
func sapiStatus(t *testing.T, a *api, vhost, name string) map[string]any {
	t.Helper()
	for _, s := range sapiShovels(t, a, "/api/shovels/"+vhost) {
		if s["name"] == name {
			return s
		}
	}
	return nil
}

// sapiTimestamp is the format of a status timestamp: local time,
// "~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w" (rabbit_shovel_mgmt_util.erl
// format_ts; the hour is not zero-padded).
var sapiTimestamp = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{1,2}:\d{2}:\d{2}$`)

// sapiWithoutTimestamp checks and drops the timestamp of a status object.
func sapiWithoutTimestamp(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	ts, _ := s["timestamp"].(string)
	if !sapiTimestamp.MatchString(ts) {
		t.Fatalf("timestamp %q in %v", ts, s)
	}
	c := map[string]any{}
	for k, v := range s {
		if k != "timestamp" {
			c[k] = v
		}
	}
	return c
}

// sapiEqualJSON asserts got equals the JSON text want (as decoded values).
func sapiEqualJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	w := sapiJSON(t, []byte(want))
	b, _ := json.Marshal(got)
	g := sapiJSON(t, b)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, b, want)
	}
}

// Every validation failure of PUT /api/parameters/shovel/{vhost}/{name},
// with RabbitMQ 3.10.8's status and reason. The reason lists the plugin's
// cross-key checks first, then "Unrecognised terms", then the per-key
// results in reverse order of the constraint list; Erlang terms are
// printed with ~p and HTML-escaped (<<"x">> is &lt;&lt;\"x\"&gt;&gt;).
func TestShovelParameterValidation(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-val-up", "sapi-val-down")
	const p = "/api/parameters/shovel/sapi-val-up/s0"
	base := `"src-uri":"amqp:///sapi-val-up","src-queue":"q","dest-uri":"amqp:///sapi-val-down"`
	sda := `src-delete-after should be a number greater than or equal to 0, \"never\" or \"queue-length\", actually was `
	for _, c := range []struct{ value, reason string }{
		// RabbitMQ: 400 "Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in s0\nKey \"src-uri\" not found in s0\n"
		{`{}`, "Must specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in s0\nKey \"src-uri\" not found in s0\n"},
		{`{"src-uri":"amqp:///sapi-val-up"}`, "Must specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in s0\n"},
		{`{"src-uri":"amqp:///sapi-val-up","src-queue":"q"}`, "Key \"dest-uri\" not found in s0\n"},
		{`{"src-uri":"amqp:///sapi-val-up","dest-uri":"amqp:///sapi-val-down"}`, "Must specify 'src-exchange' or 'src-queue'\n"},
		{`{` + base + `,"src-exchange":"x","dest-queue":"d"}`, "Cannot specify 'src-exchange' and 'src-queue'\n"},
		{`{` + base + `,"dest-queue":"a","dest-exchange":"b"}`, "Cannot specify 'dest-exchange' and 'dest-queue'\n"},
		{`{` + base + `,"ack-mode":"bogus"}`, `ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"bogus"&gt;&gt;` + "\n"},
		{`{` + base + `,"src-delete-after":"bogus"}`, strings.ReplaceAll(sda, `\"`, `"`) + `&lt;&lt;"bogus"&gt;&gt;` + "\n"},
		{`{` + base + `,"src-delete-after":-1}`, strings.ReplaceAll(sda, `\"`, `"`) + "-1\n"},
		{`{` + base + `,"src-delete-after":1.5}`, strings.ReplaceAll(sda, `\"`, `"`) + "1.5\n"},
		{`{` + base + `,"src-delete-after":"5"}`, strings.ReplaceAll(sda, `\"`, `"`) + `&lt;&lt;"5"&gt;&gt;` + "\n"},
		{`{` + base + `,"src-delete-after":5,"ack-mode":"no-ack"}`, "Cannot specify 'no-ack' and numerical 'delete-after'\n"},
		{`{"src-uri":"http://x","src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`, `"http://x" not a valid URI: {{unexpected_uri_scheme,"http"},"http://x"}` + "\n"},
		{`{"src-uri":"","src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`, `"" not a valid URI: {{unable_to_parse_uri,no_scheme},[]}` + "\n"},
		{`{"src-uri":"amqp:///sapi-val-up","src-queue":"q","dest-uri":"amqp://u:p@host:99999/v"}`, `"amqp://u:p@host:99999/v" not a valid URI: {{port_out_of_range,99999},` + "\n" + `                                            "amqp://u:p@host:99999/v"}` + "\n"},
		{`{"src-uri":5,"src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`, "src-uri should be list, actually was 5\n"},
		{`{"src-uri":["amqp:///sapi-val-up","amqp://localhost"],"src-queue":"q","dest-uri":["amqp:///sapi-val-down","bad://x"]}`, `"bad://x" not a valid URI: {{unexpected_uri_scheme,"bad"},"bad://x"}` + "\n"},
		// A direct URI (no host) names a vhost the acting user must be able to open.
		{`{"src-uri":"amqp:///sapi-val-nosuchvh","src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`, `user "guest" may not connect to vhost "sapi-val-nosuchvh"` + "\n"},
		{`{` + base + `,"src-prefetch-count":"x"}`, `src-prefetch-count should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
		{`{` + base + `,"reconnect-delay":"x"}`, `reconnect-delay should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
		{`{` + base + `,"dest-add-forward-headers":"yes"}`, `dest-add-forward-headers should be boolean, actually was &lt;&lt;"yes"&gt;&gt;` + "\n"},
		{`{` + base + `,"dest-publish-properties":"x"}`, `dest-publish-properties not a list &lt;&lt;"x"&gt;&gt;` + "\n"},
		{`{` + base + `,"dest-publish-properties":{"bogus":1}}`, `Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in dest-publish-properties` + "\n"},
		{`{` + base + `,"dest-queue-args":{"x-bogus":1}}`, `Unrecognised terms [{&lt;&lt;"x-bogus"&gt;&gt;,1}] in dest-queue-args` + "\n"},
		{`{` + base + `,"dest-queue":5}`, "dest-queue should be binary, actually was 5\n"},
		{`{"src-uri":"amqp:///sapi-val-up","src-queue":5,"dest-uri":"amqp:///sapi-val-down"}`, "src-queue should be binary, actually was 5\n"},
		{`{` + base + `,"bogus-key":1}`, `Unrecognised terms [{&lt;&lt;"bogus-key"&gt;&gt;,1}] in s0` + "\n"},
		// amqp10 takes src-address, not src-queue.
		{`{` + base + `,"src-protocol":"amqp10"}`, `Unrecognised terms [{&lt;&lt;"src-queue"&gt;&gt;,&lt;&lt;"q"&gt;&gt;}] in s0` + "\nKey \"src-address\" not found in s0\n"},
	} {
		sapiWantErr(t, a, "guest", "guest", "PUT", p, `{"value":`+c.value+`}`, 400, "bad_request", sapiValidation+c.reason)
	}
	// RabbitMQ: 400 {"error":"bad_request","reason":"not_json"}
	sapiWantErr(t, a, "guest", "guest", "PUT", p, `notjson`, 400, "bad_request", "not_json")
	// RabbitMQ: 404 {"error":"not_found","reason":"vhost_not_found"}
	sapiWantErr(t, a, "guest", "guest", "PUT", "/api/parameters/shovel/sapi-val-nosuchvh/s0", `{"value":{`+base+`}}`, 404, "not_found", "vhost_not_found")
	// Accepted by RabbitMQ 3.10.8: no destination (messages keep their
	// exchange and key), a negative reconnect-delay, an empty URI list,
	// queue-length with an exchange source, the legacy keys.
	for i, v := range []string{
		`{"src-uri":"amqp:///sapi-val-up","src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`,
		`{` + base + `,"reconnect-delay":-1}`,
		`{"src-uri":[],"src-queue":"q","dest-uri":"amqp:///sapi-val-down"}`,
		`{"src-uri":"amqp:///sapi-val-up","src-exchange":"amq.direct","dest-uri":"amqp:///sapi-val-down","dest-queue":"d","src-delete-after":"queue-length"}`,
		`{` + base + `,"prefetch-count":5,"delete-after":"never","add-forward-headers":false,"add-timestamp-header":false,"publish-properties":{"priority":1}}`,
	} {
		want := 204
		if i == 0 {
			want = 201
		}
		sapiWantStatus(t, a, "PUT", p, `{"value":`+v+`}`, want)
	}
	sapiWantStatus(t, a, "DELETE", p, "", 204)
	// RabbitMQ: 404 {"error":"Object Not Found","reason":"Not Found"}
	sapiWantErr(t, a, "guest", "guest", "DELETE", p, "", 404, "Object Not Found", "Not Found")
}

// The parameter is stored and served as given: no defaults filled in,
// keys sorted, credentials not redacted (3.10.8); PUT answers 201 then
// 204; "component", "vhost" and "name" in the body are ignored.
func TestShovelParameterReadBack(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-rb-up", "sapi-rb-down")
	v := `{"src-protocol":"amqp091","src-uri":"amqp:///sapi-rb-up","src-queue":"src","dest-protocol":"amqp091","dest-uri":"amqp:///sapi-rb-down","dest-queue":"dst","ack-mode":"on-confirm","dest-add-forward-headers":true,"dest-add-timestamp-header":true,"src-prefetch-count":10,"reconnect-delay":2,"src-delete-after":"never","dest-publish-properties":{"delivery_mode":2}}`
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-rb-up/s1", `{"component":"shovel","vhost":"sapi-rb-up","name":"other","value":`+v+`}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-rb-up/s1", `{"value":`+v+`}`, 204)
	// RabbitMQ: {"value":{"ack-mode":"on-confirm","dest-add-forward-headers":true,"dest-add-timestamp-header":true,"dest-protocol":"amqp091","dest-publish-properties":{"delivery_mode":2},"dest-queue":"dst","dest-uri":"amqp:///sr-down","reconnect-delay":2,"src-delete-after":"never","src-prefetch-count":10,"src-protocol":"amqp091","src-queue":"src","src-uri":"amqp:///sr-up"},"vhost":"sr-up","component":"shovel","name":"s1"}
	obj := `{"value":` + v + `,"vhost":"sapi-rb-up","component":"shovel","name":"s1"}`
	sapiEqualJSON(t, "GET one", sapiJSON(t, sapiWantStatus(t, a, "GET", "/api/parameters/shovel/sapi-rb-up/s1", "", 200)), obj)
	sapiEqualJSON(t, "GET vhost", sapiJSON(t, sapiWantStatus(t, a, "GET", "/api/parameters/shovel/sapi-rb-up", "", 200)), "["+obj+"]")
	all := sapiJSON(t, sapiWantStatus(t, a, "GET", "/api/parameters/shovel", "", 200)).([]any)
	found := false
	for _, o := range all {
		if m, _ := o.(map[string]any); m["vhost"] == "sapi-rb-up" {
			sapiEqualJSON(t, "GET all", m, obj)
			found = true
		}
	}
	if !found {
		t.Fatalf("GET /api/parameters/shovel: no sapi-rb-up/s1 in %v", all)
	}
	// A network URI keeps its credentials in the parameter.
	net := `{"src-uri":"amqp://guest:guest@` + b.Addr + `/sapi-rb-up","src-queue":"q2","dest-uri":"amqp:///sapi-rb-down"}`
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-rb-up/s%20x", `{"value":`+net+`}`, 201)
	sapiEqualJSON(t, "name with a space", sapiJSON(t, sapiWantStatus(t, a, "GET", "/api/parameters/shovel/sapi-rb-up/s%20x", "", 200)),
		`{"value":`+net+`,"vhost":"sapi-rb-up","component":"shovel","name":"s x"}`)
	for _, path := range []string{"/api/parameters/shovel/sapi-rb-up/nope", "/api/parameters/shovel/sapi-rb-nosuchvh"} {
		// RabbitMQ: 404 {"error":"Object Not Found","reason":"Not Found"}
		sapiWantErr(t, a, "guest", "guest", "GET", path, "", 404, "Object Not Found", "Not Found")
	}
	// The definitions export carries it under "parameters" as the same
	// object, the whole-broker one and the vhost's.
	for _, path := range []string{"/api/definitions", "/api/definitions/sapi-rb-up"} {
		var d struct{ Parameters []map[string]any }
		if err := json.Unmarshal(sapiWantStatus(t, a, "GET", path, "", 200), &d); err != nil {
			t.Fatal(err)
		}
		found = false
		for _, p := range d.Parameters {
			if p["component"] == "shovel" && p["name"] == "s1" && p["vhost"] == "sapi-rb-up" {
				sapiEqualJSON(t, path, p, obj)
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: no shovel s1 in %v", path, d.Parameters)
		}
	}
}

// GET /api/shovels[/{vhost}] for a running shovel, its routes, and a
// shovelled message's x-shovelled and x-shovelled-timestamp headers.
func TestShovelStatusAndHeaders(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-st-up", "sapi-st-down")
	node := sapiClusterName(t, a)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-st-up/s1",
		`{"value":{"src-uri":"amqp:///sapi-st-up","src-queue":"src","dest-uri":"amqp:///sapi-st-down","dest-queue":"dst","dest-add-forward-headers":true,"dest-add-timestamp-header":true,"dest-publish-properties":{"delivery_mode":2}}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-st-up/net",
		`{"value":{"src-uri":"amqp://guest:guest@`+b.Addr+`/sapi-st-up","src-queue":"nq","dest-uri":"amqp://guest:guest@`+b.Addr+`/sapi-st-down","dest-exchange":"amq.topic","dest-exchange-key":"k"}}`, 201)
	poll.Eventually(t, 30*time.Second, func() bool {
		s, n := sapiStatus(t, a, "sapi-st-up", "s1"), sapiStatus(t, a, "sapi-st-up", "net")
		return s != nil && s["state"] == "running" && n != nil && n["state"] == "running"
	}, "shovels running")
	// RabbitMQ: [{"node":"rabbit@vm","timestamp":"2026-12-06 18:07:24","name":"s1","vhost":"sr-up","type":"dynamic","state":"running","src_uri":"amqp:///sr-up","src_protocol":"amqp091","dest_protocol":"amqp091","dest_uri":"amqp:///sr-down","src_queue":"src","dest_queue":"dst"}]
	s1 := `{"node":"` + node + `","name":"s1","vhost":"sapi-st-up","type":"dynamic","state":"running","src_uri":"amqp:///sapi-st-up","src_protocol":"amqp091","dest_protocol":"amqp091","dest_uri":"amqp:///sapi-st-down","src_queue":"src","dest_queue":"dst"}`
	// RabbitMQ: {...,"name":"net",...,"src_uri":"amqp://localhost:5672/sr-up",...,"dest_uri":"amqp://localhost:5672/sr-down","src_queue":"nq","dest_exchange":"amq.topic","dest_exchange_key":"k"}: credentials stripped.
	nt := `{"node":"` + node + `","name":"net","vhost":"sapi-st-up","type":"dynamic","state":"running","src_uri":"amqp://` + b.Addr + `/sapi-st-up","src_protocol":"amqp091","dest_protocol":"amqp091","dest_uri":"amqp://` + b.Addr + `/sapi-st-down","src_queue":"nq","dest_exchange":"amq.topic","dest_exchange_key":"k"}`
	sapiEqualJSON(t, "s1 status", sapiWithoutTimestamp(t, sapiStatus(t, a, "sapi-st-up", "s1")), s1)
	sapiEqualJSON(t, "net status", sapiWithoutTimestamp(t, sapiStatus(t, a, "sapi-st-up", "net")), nt)
	// 3.10.8: /api/shovels/vhost/{vhost}/{name} answers the vhost's whole
	// list (rabbit_shovel_mgmt.erl to_json filters by vhost only); 404 when
	// name is not a shovel there.
	if l := sapiShovels(t, a, "/api/shovels/vhost/sapi-st-up/s1"); len(l) != 2 {
		t.Fatalf("GET /api/shovels/vhost/sapi-st-up/s1: %v, want both shovels of the vhost", l)
	}
	var inAll int
	for _, s := range sapiShovels(t, a, "/api/shovels") {
		if s["vhost"] == "sapi-st-up" {
			inAll++
		}
	}
	if inAll != 2 {
		t.Fatalf("GET /api/shovels: %d shovels of sapi-st-up, want 2", inAll)
	}
	for _, path := range []string{"/api/shovels/vhost/sapi-st-up/nope", "/api/shovels/sapi-st-up/s1", "/api/shovels/sapi-st-nosuchvh", "/api/shovels/vhost/sapi-st-nosuchvh/s1"} {
		// RabbitMQ: 404 {"error":"Object Not Found","reason":"Not Found"}
		sapiWantErr(t, a, "guest", "guest", "GET", path, "", 404, "Object Not Found", "Not Found")
	}
	// Allowed methods HEAD GET DELETE OPTIONS: POST and PUT are 405.
	sapiWantStatus(t, a, "POST", "/api/shovels/vhost/sapi-st-up/s1/restart", "", 405)
	sapiWantStatus(t, a, "PUT", "/api/shovels/vhost/sapi-st-up/s1", "", 405)

	// The message keeps its headers; x-shovelled (an array of tables,
	// prepended) and x-shovelled-timestamp (long, seconds) are added.
	// RabbitMQ: "headers":{"h":"v","x-shovelled":[{"dest-queue":"dst","dest-uri":"amqp:///sr-down","shovel-name":"s1","shovel-type":"dynamic","shovel-vhost":"sr-up","shovelled-by":"rabbit@vm","src-queue":"src","src-uri":"amqp:///sr-up"}],"x-shovelled-timestamp":1796580446}, delivery_mode 2, exchange "", routing key "dst".
	c := dial(t, "amqp://guest:guest@"+b.Addr+"/sapi-st-up")
	ch := openChannel(t, c)
	if err := ch.Publish("", "src", false, false, rmq.Publishing{Headers: rmq.Table{"h": "v"}, Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	dc := dial(t, "amqp://guest:guest@"+b.Addr+"/sapi-st-down")
	dch := openChannel(t, dc)
	var m rmq.Delivery
	poll.Eventually(t, 30*time.Second, func() bool {
		var ok bool
		var err error
		m, ok, err = dch.Get("dst", true)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}, "the message at dst")
	if string(m.Body) != "hello" || m.Exchange != "" || m.RoutingKey != "dst" || m.DeliveryMode != 2 || m.Headers["h"] != "v" {
		t.Fatalf("shovelled message: %+v", m)
	}
	ts, ok := m.Headers["x-shovelled-timestamp"].(int64)
	if now := time.Now().Unix(); !ok || ts < now-3600 || ts > now+3600 {
		t.Fatalf("x-shovelled-timestamp %T %v", m.Headers["x-shovelled-timestamp"], m.Headers["x-shovelled-timestamp"])
	}
	sapiEqualJSON(t, "x-shovelled", m.Headers["x-shovelled"],
		`[{"dest-queue":"dst","dest-uri":"amqp:///sapi-st-down","shovel-name":"s1","shovel-type":"dynamic","shovel-vhost":"sapi-st-up","shovelled-by":"`+node+`","src-queue":"src","src-uri":"amqp:///sapi-st-up"}]`)
}

// src-delete-after: "queue-length" moves the messages the source queue
// held when the shovel started, N moves N; then the shovel deletes its own
// parameter and leaves /api/shovels. The messages past N had been
// delivered under the prefetch and come back redelivered.
func TestShovelDeleteAfter(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-da-up", "sapi-da-down")
	c := dial(t, "amqp://guest:guest@"+b.Addr+"/sapi-da-up")
	ch := openChannel(t, c)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ql", "qn"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"m1", "m2", "m3", "m4", "m5"} {
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{Body: []byte(body)})
			if err != nil || !dc.Wait() {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-da-up/ql", `{"value":{"src-uri":"amqp:///sapi-da-up","src-queue":"ql","dest-uri":"amqp:///sapi-da-down","dest-queue":"ql-out","src-delete-after":"queue-length"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-da-up/qn", `{"value":{"src-uri":"amqp:///sapi-da-up","src-queue":"qn","dest-uri":"amqp:///sapi-da-down","dest-queue":"qn-out","src-delete-after":3}}`, 201)
	for _, n := range []string{"ql", "qn"} {
		poll.Eventually(t, 30*time.Second, func() bool {
			got, _ := sapiGuest(t, a, "GET", "/api/parameters/shovel/sapi-da-up/"+n, "")
			return got == 404 && sapiStatus(t, a, "sapi-da-up", n) == nil
		}, "shovel %s deletes itself", n)
	}
	dc := dial(t, "amqp://guest:guest@"+b.Addr+"/sapi-da-down")
	dch := openChannel(t, dc)
	drain := func(ch *rmq.Channel, q string) (bodies []string, redelivered []bool) {
		for {
			m, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return bodies, redelivered
			}
			bodies = append(bodies, string(m.Body))
			redelivered = append(redelivered, m.Redelivered)
		}
	}
	// RabbitMQ: ql-out m1..m5; qn-out m1, m2, m3; qn keeps m4, m5 redelivered:true.
	if got, _ := drain(dch, "ql-out"); !reflect.DeepEqual(got, []string{"m1", "m2", "m3", "m4", "m5"}) {
		t.Fatalf("ql-out: %v", got)
	}
	if got, _ := drain(dch, "qn-out"); !reflect.DeepEqual(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("qn-out: %v", got)
	}
	if got, red := drain(ch, "qn"); !reflect.DeepEqual(got, []string{"m4", "m5"}) || !reflect.DeepEqual(red, []bool{true, true}) {
		t.Fatalf("qn left: %v redelivered %v", got, red)
	}
	if got, _ := drain(ch, "ql"); len(got) != 0 {
		t.Fatalf("ql left: %v", got)
	}
}

// DELETE /api/shovels/vhost/{vhost}/{name}/restart restarts it (204);
// DELETE /api/shovels/vhost/{vhost}/{name} deletes the shovel and its
// parameter (204), then both are unknown (404).
func TestShovelRestartAndDelete(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-rd-up", "sapi-rd-down")
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-rd-up/s1", `{"value":{"src-uri":"amqp:///sapi-rd-up","src-queue":"q","dest-uri":"amqp:///sapi-rd-down","dest-queue":"d"}}`, 201)
	running := func() bool {
		s := sapiStatus(t, a, "sapi-rd-up", "s1")
		return s != nil && s["state"] == "running"
	}
	poll.Eventually(t, 30*time.Second, running, "running")
	sapiWantStatus(t, a, "DELETE", "/api/shovels/vhost/sapi-rd-up/s1/restart", "", 204)
	poll.Eventually(t, 30*time.Second, running, "running after the restart")
	for _, path := range []string{"/api/shovels/vhost/sapi-rd-up/nope/restart", "/api/shovels/vhost/sapi-rd-nosuchvh/nope/restart"} {
		// RabbitMQ: 404 {"error":"Object Not Found","reason":"Not Found"}
		sapiWantErr(t, a, "guest", "guest", "DELETE", path, "", 404, "Object Not Found", "Not Found")
	}
	sapiWantStatus(t, a, "DELETE", "/api/shovels/vhost/sapi-rd-up/s1", "", 204)
	sapiWantErr(t, a, "guest", "guest", "GET", "/api/parameters/shovel/sapi-rd-up/s1", "", 404, "Object Not Found", "Not Found")
	poll.Eventually(t, 30*time.Second, func() bool { return sapiStatus(t, a, "sapi-rd-up", "s1") == nil }, "gone from /api/shovels")
	sapiWantErr(t, a, "guest", "guest", "DELETE", "/api/shovels/vhost/sapi-rd-up/s1", "", 404, "Object Not Found", "Not Found")
}

// What failing shovels show. A source or destination that cannot be
// reached (refused connection) keeps the shovel "starting" with no other key: the worker
// stops before it reports (rabbit_shovel_worker.erl handle_cast(init)
// {stop, shutdown, State}). A topology error at start (a reserved queue
// name: 403) shows "terminated" with the reason "\"needed a restart\""
// (terminate({{shutdown, {server_initiated_close, ..}}, _}), printed ~p).
func TestShovelFailureStates(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-fs-up", "sapi-fs-down")
	node := sapiClusterName(t, a)
	closed := testutil.FreePort(t)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-fs-up/down-src", `{"value":{"src-uri":"amqp://guest:guest@`+closed+`/sapi-fs-up","src-queue":"q","dest-uri":"amqp:///sapi-fs-down","reconnect-delay":1}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-fs-up/down-dst", `{"value":{"src-uri":"amqp:///sapi-fs-up","src-queue":"q2","dest-uri":"amqp://guest:guest@`+closed+`/","reconnect-delay":1}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-fs-up/noq", `{"value":{"src-uri":"amqp:///sapi-fs-up","src-queue":"amq.nope","dest-uri":"amqp:///sapi-fs-down","reconnect-delay":5}}`, 201)
	// RabbitMQ: {"node":"rabbit@vm","timestamp":"2026-12-06 18:07:45","name":"noq","vhost":"sr-up","type":"dynamic","state":"terminated","reason":"\"needed a restart\""}
	// It alternates between starting and terminated as it retries: the
	// terminated status seen is the one checked.
	var noq map[string]any
	poll.Eventually(t, 30*time.Second, func() bool {
		noq = sapiStatus(t, a, "sapi-fs-up", "noq")
		return noq != nil && noq["state"] == "terminated"
	}, "noq terminated")
	sapiEqualJSON(t, "noq", sapiWithoutTimestamp(t, noq),
		`{"node":"`+node+`","name":"noq","vhost":"sapi-fs-up","type":"dynamic","state":"terminated","reason":"\"needed a restart\""}`)
	// RabbitMQ: {"node":"rabbit@vm","timestamp":"2026-12-06 18:07:55","name":"down-src","vhost":"sr-up","type":"dynamic","state":"starting"},
	// through every retry. Seen over several reconnect delays, it never
	// shows another state.
	deadline := time.Now().Add(3 * time.Second)
	poll.Eventually(t, 30*time.Second, func() bool {
		for _, n := range []string{"down-src", "down-dst"} {
			sapiEqualJSON(t, n, sapiWithoutTimestamp(t, sapiStatus(t, a, "sapi-fs-up", n)),
				`{"node":"`+node+`","name":"`+n+`","vhost":"sapi-fs-up","type":"dynamic","state":"starting"}`)
		}
		return time.Now().After(deadline)
	}, "down-src and down-dst starting through their retries")
}

// Who may do what, 3.10.8: the parameter is policymaker's (and
// administrator's) and needs the vhost; /api/shovels, its restart and its
// delete are monitoring's (rabbit_shovel_mgmt.erl is_authorized:
// is_authorized_monitor, for DELETE too), filtered to the vhosts the user
// may open.
func TestShovelPermissions(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-pm-up", "sapi-pm-down")
	vs := []string{"sapi-pm-up", "sapi-pm-down"}
	sapiUser(t, a, "sapi-adm", "administrator", vs...)
	sapiUser(t, a, "sapi-pm", "policymaker", vs...)
	sapiUser(t, a, "sapi-mon", "monitoring", vs...)
	sapiUser(t, a, "sapi-mg", "management", vs...)
	sapiUser(t, a, "sapi-na", "management")
	sapiUser(t, a, "sapi-none", "", vs...)
	sapiUser(t, a, "sapi-pmna", "policymaker")
	sapiUser(t, a, "sapi-monna", "monitoring")
	sapiUser(t, a, "sapi-pm1", "policymaker", "sapi-pm-up")
	v := func(q string) string {
		return `{"value":{"src-uri":"amqp:///sapi-pm-up","src-queue":"` + q + `","dest-uri":"amqp:///sapi-pm-down"}}`
	}
	const (
		notObj  = "User not authorised to access object"
		notMon  = "Not monitor user"
		notMgmt = "Not management user"
	)
	// RabbitMQ: PUT 201 as administrator and policymaker; 401 {"error":"not_authorised","reason":"User not authorised to access object"} as monitoring, management, management without permissions, policymaker without permissions; "Not management user" without tags.
	for _, u := range []string{"sapi-adm", "sapi-pm"} {
		if got, out := sapiReq(t, a, "PUT", "/api/parameters/shovel/sapi-pm-up/p-"+u, u, "pw", v("q-"+u)); got != 201 {
			t.Fatalf("PUT as %s: %d %s", u, got, out)
		}
		if got, _ := sapiReq(t, a, "GET", "/api/parameters/shovel/sapi-pm-up/p-"+u, u, "pw", ""); got != 200 {
			t.Fatalf("GET parameter as %s: %d", u, got)
		}
	}
	for u, reason := range map[string]string{"sapi-mon": notObj, "sapi-mg": notObj, "sapi-na": notObj, "sapi-pmna": notObj, "sapi-none": notMgmt} {
		sapiWantErr(t, a, u, "pw", "PUT", "/api/parameters/shovel/sapi-pm-up/p-x", v("qx"), 401, "not_authorised", reason)
		sapiWantErr(t, a, u, "pw", "GET", "/api/parameters/shovel/sapi-pm-up/p-sapi-adm", "", 401, "not_authorised", reason)
	}
	// RabbitMQ: 400 "Validation failed\n\nuser \"sr-pm1\" may not connect to vhost \"sr-down\"\n": a direct URI is checked against the acting user.
	sapiWantErr(t, a, "sapi-pm1", "pw", "PUT", "/api/parameters/shovel/sapi-pm-up/p-pm1", v("q1"), 400, "bad_request", sapiValidation+`user "sapi-pm1" may not connect to vhost "sapi-pm-down"`+"\n")
	// RabbitMQ: a policymaker without permissions lists [] (GET /api/parameters/shovel).
	if got, out := sapiReq(t, a, "GET", "/api/parameters/shovel", "sapi-pmna", "pw", ""); got != 200 || string(out) != "[]" {
		t.Fatalf("GET /api/parameters/shovel as sapi-pmna: %d %s", got, out)
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		s := sapiStatus(t, a, "sapi-pm-up", "p-sapi-adm")
		return s != nil && s["state"] == "running"
	}, "running")
	for _, u := range []string{"sapi-adm", "sapi-mon"} {
		if got, out := sapiReq(t, a, "GET", "/api/shovels/sapi-pm-up", u, "pw", ""); got != 200 || !strings.Contains(string(out), `"p-sapi-adm"`) {
			t.Fatalf("GET /api/shovels/sapi-pm-up as %s: %d %s", u, got, out)
		}
		if got, out := sapiReq(t, a, "DELETE", "/api/shovels/vhost/sapi-pm-up/p-sapi-adm/restart", u, "pw", ""); got != 204 {
			t.Fatalf("restart as %s: %d %s", u, got, out)
		}
	}
	// RabbitMQ: 401 {"error":"not_authorised","reason":"Not monitor user"} for policymaker and management; "Not management user" without tags.
	for u, reason := range map[string]string{"sapi-pm": notMon, "sapi-mg": notMon, "sapi-na": notMon, "sapi-none": notMgmt} {
		sapiWantErr(t, a, u, "pw", "GET", "/api/shovels", "", 401, "not_authorised", reason)
		sapiWantErr(t, a, u, "pw", "GET", "/api/shovels/sapi-pm-up", "", 401, "not_authorised", reason)
		sapiWantErr(t, a, u, "pw", "DELETE", "/api/shovels/vhost/sapi-pm-up/p-sapi-adm/restart", "", 401, "not_authorised", reason)
	}
	// RabbitMQ: monitoring without vhost permissions sees [] and its restart is 404.
	if got, out := sapiReq(t, a, "GET", "/api/shovels/sapi-pm-up", "sapi-monna", "pw", ""); got != 200 || string(out) != "[]" {
		t.Fatalf("GET /api/shovels/sapi-pm-up as sapi-monna: %d %s", got, out)
	}
	sapiWantErr(t, a, "sapi-monna", "pw", "DELETE", "/api/shovels/vhost/sapi-pm-up/p-sapi-adm/restart", "", 404, "Object Not Found", "Not Found")
	// RabbitMQ: a monitoring user deletes a shovel (and its parameter): 204.
	if got, out := sapiReq(t, a, "DELETE", "/api/shovels/vhost/sapi-pm-up/p-sapi-pm", "sapi-mon", "pw", ""); got != 204 {
		t.Fatalf("delete as sapi-mon: %d %s", got, out)
	}
	sapiWantErr(t, a, "guest", "guest", "GET", "/api/parameters/shovel/sapi-pm-up/p-sapi-pm", "", 404, "Object Not Found", "Not Found")
}

// A URI with no host is this broker's vhost "/" (amqp_uri: the default
// vhost), not the parameter's vhost: a shovel in sapi-dv-up with src-uri
// "amqp://" consumes from "/"'s queue, declaring it durable there.
func TestShovelNoHostURIIsDefaultVhost(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-dv-up")
	const q = "sapi-dv-src"
	sapiGuest(t, a, "DELETE", "/api/queues/%2F/"+q, "")
	t.Cleanup(func() {
		sapiGuest(t, a, "DELETE", "/api/parameters/shovel/sapi-dv-up/s1", "")
		sapiGuest(t, a, "DELETE", "/api/queues/%2F/"+q, "")
	})
	sapiWantStatus(t, a, "PUT", "/api/parameters/shovel/sapi-dv-up/s1", `{"value":{"src-uri":"amqp://","src-queue":"`+q+`","dest-uri":"amqp:///sapi-dv-up","dest-queue":"out"}}`, 201)
	poll.Eventually(t, 30*time.Second, func() bool {
		s := sapiStatus(t, a, "sapi-dv-up", "s1")
		return s != nil && s["state"] == "running"
	}, "running")
	// RabbitMQ: GET /api/queues/%2F/src {"consumers":1,"durable":true,...}; sr-up's own queue src had 0 consumers.
	c := dial(t, b.URL)
	ch := openChannel(t, c)
	dq, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil || dq.Consumers != 1 {
		t.Fatalf("queue %s in /: %+v %v", q, dq, err)
	}
	if err := ch.Publish("", q, false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	uc := dial(t, "amqp://guest:guest@"+b.Addr+"/sapi-dv-up")
	uch := openChannel(t, uc)
	poll.Eventually(t, 30*time.Second, func() bool {
		m, ok, err := uch.Get("out", true)
		if err != nil {
			t.Fatal(err)
		}
		return ok && string(m.Body) == "x"
	}, "moved from / to sapi-dv-up")
}

// rabbitmqadmin 3.10.8 has no shovel commands; shovels go through its
// parameter commands (declare, list in its formats, delete) and its
// export and import, with RabbitMQ's answers (each compared on this
// machine with RabbitMQ 3.10.8's on the same command).
func TestShovelRabbitmqadmin(t *testing.T) {
	admin := os.Getenv("RAILMQ_RABBITMQADMIN")
	for _, p := range []string{"rabbitmqadmin", "/usr/bin/rabbitmqadmin"} {
		if admin != "" {
			break
		}
		if path, err := exec.LookPath(p); err == nil {
			admin = path
		}
	}
	if admin == "" {
		t.Skip("rabbitmqadmin not found: set RAILMQ_RABBITMQADMIN=$(bash scripts/rabbitmqadmin.sh)")
	}
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-adm-up", "sapi-adm-down")
	u, _ := neturl.Parse(a.url)
	runIn := func(vhost string, args ...string) (string, error) {
		cmd := exec.Command("python3", append([]string{admin, "-H", u.Hostname(), "-P", u.Port(), "-u", "guest", "-p", "guest", "-V", vhost}, args...)...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(args ...string) (string, error) { return runIn("sapi-adm-up", args...) }
	value := `{"src-uri":"amqp:///sapi-adm-up","src-queue":"aq","dest-uri":"amqp:///sapi-adm-down","dest-queue":"aq2"}`
	// RabbitMQ: "parameter declared", exit 0.
	if out, err := run("declare", "parameter", "component=shovel", "name=adm1", "value="+value); err != nil || out != "parameter declared\n" {
		t.Fatalf("declare: %v %q", err, out)
	}
	out, err := run("-f", "raw_json", "list", "parameters")
	if err != nil {
		t.Fatalf("list: %v %s", err, out)
	}
	var ps []map[string]any
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("list parameters: %q", out)
	}
	found := false
	for _, p := range ps {
		if p["name"] == "adm1" {
			sapiEqualJSON(t, "listed", p, `{"value":`+value+`,"vhost":"sapi-adm-up","component":"shovel","name":"adm1"}`)
			found = true
		}
	}
	if !found {
		t.Fatalf("list parameters: no adm1 in %s", out)
	}
	// The table (rabbitmqadmin's default format) prints the value with the
	// keys sorted; RabbitMQ's row for the same value:
	// | so-probe | s1 | shovel | {"dest-queue": "dst", "dest-uri": "amqp:///so-probe", "src-queue": "src", "src-uri": "amqp:///so-probe"} |
	out, err = run("list", "parameters", "vhost", "name", "component", "value")
	want := []string{"sapi-adm-up", "adm1", "shovel", `{"dest-queue": "aq2", "dest-uri": "amqp:///sapi-adm-down", "src-queue": "aq", "src-uri": "amqp:///sapi-adm-up"}`}
	row := false
	for _, line := range strings.Split(out, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		row = row || reflect.DeepEqual(cells, want)
	}
	if err != nil || !row {
		t.Fatalf("list parameters (table): %v\n%s\nwant the row %q", err, out, want)
	}
	// Declared again with another value: RabbitMQ "parameter declared",
	// exit 0, and the shovel runs the new value.
	value2 := strings.Replace(value, `"aq2"`, `"aq3"`, 1)
	if out, err := run("declare", "parameter", "component=shovel", "name=adm1", "value="+value2); err != nil || out != "parameter declared\n" {
		t.Fatalf("declare again: %v %q", err, out)
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		s := sapiStatus(t, a, "sapi-adm-up", "adm1")
		return s != nil && s["state"] == "running" && s["dest_queue"] == "aq3"
	}, "adm1 running with its new value")
	// RabbitMQ: exit 1, "*** Not found: /api/parameters/shovel/nosuchvhost/s3\n\n".
	if out, err := runIn("sapi-adm-none", "declare", "parameter", "component=shovel", "name=adm3", "value="+value); err == nil || out != "*** Not found: /api/parameters/shovel/sapi-adm-none/adm3\n\n" {
		t.Fatalf("declare in a missing vhost: %v %q", err, out)
	}
	// RabbitMQ: exit 1, "*** Validation failed\n\ncomponent shovl not found\n\n\n".
	if out, err := run("declare", "parameter", "component=shovl", "name=adm3", "value={}"); err == nil || out != "*** Validation failed\n\ncomponent shovl not found\n\n\n" {
		t.Fatalf("declare of an unknown component: %v %q", err, out)
	}
	// RabbitMQ: exit 1, the reason HTML-escaped as its API sends it:
	// "*** Validation failed\n\nack-mode should be one of [&lt;&lt;\"no-ack\"&gt;&gt;,&lt;&lt;\"on-publish\"&gt;&gt;,&lt;&lt;\"on-confirm\"&gt;&gt;], actually was &lt;&lt;\"maybe\"&gt;&gt;\n\n\n".
	bad := strings.Replace(value, `}`, `,"ack-mode":"maybe"}`, 1)
	if out, err := run("declare", "parameter", "component=shovel", "name=adm3", "value="+bad); err == nil ||
		out != "*** Validation failed\n\nack-mode should be one of [&lt;&lt;\"no-ack\"&gt;&gt;,&lt;&lt;\"on-publish\"&gt;&gt;,&lt;&lt;\"on-confirm\"&gt;&gt;], actually was &lt;&lt;\"maybe\"&gt;&gt;\n\n\n" {
		t.Fatalf("declare with a bad ack-mode: %v %q", err, out)
	}
	// export and import (the vhost's definitions) carry the shovel: RabbitMQ
	// exports {"value":{...},"vhost":"so-probe","component":"shovel","name":"s1"}
	// under "parameters", and its import into another vhost runs the
	// shovel there (listed running by GET /api/shovels/so-imp).
	file := filepath.Join(t.TempDir(), "defs.json")
	if out, err := run("export", file); err != nil {
		t.Fatalf("export: %v %s", err, out)
	}
	var exp struct{ Parameters []map[string]any }
	if raw, err := os.ReadFile(file); err != nil || json.Unmarshal(raw, &exp) != nil || len(exp.Parameters) != 1 {
		t.Fatalf("exported: %v %+v", err, exp)
	}
	sapiEqualJSON(t, "exported", exp.Parameters[0], `{"value":`+value2+`,"vhost":"sapi-adm-up","component":"shovel","name":"adm1"}`)
	if out, err := runIn("sapi-adm-down", "import", file); err != nil {
		t.Fatalf("import: %v %s", err, out)
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		s := sapiStatus(t, a, "sapi-adm-down", "adm1")
		return s != nil && s["state"] == "running" && s["dest_queue"] == "aq3"
	}, "the imported adm1 running in sapi-adm-down")
	sapiWantStatus(t, a, "DELETE", "/api/parameters/shovel/sapi-adm-down/adm1", "", 204)
	// RabbitMQ: exit 1, "*** Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\nKey "dest-uri" not found in adm2\n" (plain text).
	out, err = run("declare", "parameter", "component=shovel", "name=adm2", `value={"src-uri":"amqp:///sapi-adm-up"}`)
	if err == nil || !strings.Contains(out, "*** Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in adm2\n") {
		t.Fatalf("invalid declare: %v %q", err, out)
	}
	if out, err := run("delete", "parameter", "component=shovel", "name=adm1"); err != nil || out != "parameter deleted\n" {
		t.Fatalf("delete: %v %q", err, out)
	}
	// RabbitMQ: exit 1, "*** Not found: /api/parameters/shovel/sr-up/adm1".
	if out, err := run("delete", "parameter", "component=shovel", "name=adm1"); err == nil || !strings.Contains(out, "*** Not found: /api/parameters/shovel/sapi-adm-up/adm1") {
		t.Fatalf("second delete: %v %q", err, out)
	}
}

// Definitions import: a shovel parameter in POST /api/definitions starts
// the shovel; an invalid one fails the import with the validation text
// followed by " (vhost/component/name)" (the per-vhost import wraps the
// same text as an Erlang binary, printed with ~p).
func TestShovelDefinitionsImport(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "sapi-di")
	// RabbitMQ: 204, then GET /api/shovels/di-a [{"node":"rabbit@vm",...,"name":"imp","vhost":"di-a","type":"dynamic","state":"running","src_uri":"amqp:///di-a","src_protocol":"amqp091","dest_protocol":"amqp091","dest_uri":"amqp:///di-a","src_queue":"q","dest_queue":"d"}]
	sapiWantStatus(t, a, "POST", "/api/definitions", `{"parameters":[{"value":{"src-uri":"amqp:///sapi-di","src-queue":"q","dest-uri":"amqp:///sapi-di","dest-queue":"d"},"vhost":"sapi-di","component":"shovel","name":"imp"}]}`, 204)
	var imp map[string]any
	poll.Eventually(t, 30*time.Second, func() bool {
		imp = sapiStatus(t, a, "sapi-di", "imp")
		return imp != nil && imp["state"] == "running"
	}, "imported shovel running")
	sapiEqualJSON(t, "imported", sapiWithoutTimestamp(t, imp),
		`{"node":"`+sapiClusterName(t, a)+`","name":"imp","vhost":"sapi-di","type":"dynamic","state":"running","src_uri":"amqp:///sapi-di","src_protocol":"amqp091","dest_protocol":"amqp091","dest_uri":"amqp:///sapi-di","src_queue":"q","dest_queue":"d"}`)
	// RabbitMQ: 400 {"error":"bad_request","reason":"Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in bad\n (di-a/shovel/bad)"}
	sapiWantErr(t, a, "guest", "guest", "POST", "/api/definitions", `{"parameters":[{"value":{"src-uri":"amqp:///sapi-di"},"vhost":"sapi-di","component":"shovel","name":"bad"}]}`,
		400, "bad_request", sapiValidation+"Must specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in bad\n (sapi-di/shovel/bad)")
	// RabbitMQ: 400 {"error":"bad_request","reason":"<<\"Validation failed\\n\\nMust specify 'src-exchange' or 'src-queue'\\nKey \\\"dest-uri\\\" not found in bad\\n (di-a/shovel/bad)\">>"}
	sapiWantErr(t, a, "guest", "guest", "POST", "/api/definitions/sapi-di", `{"parameters":[{"value":{"src-uri":"amqp:///sapi-di"},"component":"shovel","name":"bad"}]}`,
		400, "bad_request", `<<"Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in bad\n (sapi-di/shovel/bad)">>`)
	// RabbitMQ: 400 "Validation failed\n\nuri should be list, actually was 5\n (di-a/federation-upstream/bad)"
	sapiWantErr(t, a, "guest", "guest", "POST", "/api/definitions", `{"parameters":[{"value":{"uri":5},"vhost":"sapi-di","component":"federation-upstream","name":"bad"}]}`,
		400, "bad_request", sapiValidation+"uri should be list, actually was 5\n (sapi-di/federation-upstream/bad)")
	sapiWantErr(t, a, "guest", "guest", "GET", "/api/parameters/shovel/sapi-di/bad", "", 404, "Object Not Found", "Not Found")
}
