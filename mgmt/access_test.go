package mgmt_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// The management API's access rules, route by route, for each kind of
// user (RabbitMQ's tags): administrators manage everything; monitoring
// users also see every vhost in the list, every connection and the nodes,
// but the queues and exchanges only of the vhosts they have permissions
// in, and change only what their permissions allow; policymakers also manage the policies of the vhosts
// they have permissions in; management users see the vhosts they have
// permissions in; a user without a management tag, a wrong password and
// no credentials get 401 on every API route (the console's files are
// public). Declares and deletes of queues and exchanges go by the user's
// own permissions (the management user here may configure only "mgr-"
// names). The codes are RabbitMQ 3.10.8's, as conformance/access_test.go
// and authz_test.go check them against RabbitMQ.

// kinds of user, in the order of the want columns.
var kinds = []struct {
	name, user, pass string // user "" sends no credentials
}{
	{"administrator", "guest", "guest"},
	{"monitoring", "mon", "pw"},
	{"policymaker", "pol", "pw"},
	{"management", "mgr", "pw"},
	{"no tags", "plain", "pw"},
	{"wrong password", "guest", "not-the-password"},
	{"no credentials", "", ""},
}

// refused is every column for the users the API turns away (no tags,
// wrong password, no credentials).
const refused = 401

func TestAccessRules(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	// Its wrong passwords are answered at once (not held 3 s each).
	b.Management(mgmt.Options{FailedLoginDelay: time.Millisecond})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, user, pass string, body any) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			j, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(j)
		}
		req, err := http.NewRequest(method, hs.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	setup := func(method, path string, body any) {
		t.Helper()
		if code, out := call(method, path, "guest", "guest", body); code/100 != 2 {
			t.Fatalf("setup: %s %s: %d %s", method, path, code, out)
		}
	}
	all := map[string]string{"configure": ".*", "write": ".*", "read": ".*"}
	for _, u := range []struct{ name, tags string }{{"mon", "monitoring"}, {"pol", "policymaker"}, {"mgr", "management"}, {"plain", ""}} {
		setup("PUT", "/api/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags})
		perm := all
		if u.name == "mgr" {
			perm = map[string]string{"configure": "^mgr-", "write": ".*", "read": ".*"}
		}
		setup("PUT", "/api/permissions/%2F/"+u.name, perm)
	}
	setup("PUT", "/api/vhosts/other", map[string]any{})
	setup("PUT", "/api/queues/other/oq", map[string]any{"durable": false})
	setup("PUT", "/api/queues/%2F/q1", map[string]any{"durable": false})
	setup("PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "direct", "durable": false})
	setup("POST", "/api/bindings/%2F/e/x1/q/q1", map[string]any{"routing_key": "k"})
	for _, k := range kinds[:4] {
		setup("PUT", "/api/queues/%2F/qdel-"+k.user, map[string]any{"durable": false})
		setup("PUT", "/api/exchanges/%2F/xdel-"+k.user, map[string]any{"type": "fanout", "durable": false})
		setup("POST", "/api/bindings/%2F/e/x1/q/q1", map[string]any{"routing_key": "kdel-" + k.user})
	}

	publish := map[string]any{"routing_key": "q1", "properties": map[string]any{}, "payload": "hello", "payload_encoding": "string"}
	get := map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
	for _, tc := range []struct {
		method, path string // {u} is the user's name
		body         any
		// The codes for administrator, monitoring, policymaker and
		// management; the others get refused.
		want [4]int
		// public: every user gets want[0], even without credentials.
		public bool
	}{
		{"GET", "/", nil, [4]int{200, 200, 200, 200}, true},
		{"GET", "/console/console.js", nil, [4]int{200, 200, 200, 200}, true},
		{"GET", "/api/whoami", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/overview", nil, [4]int{200, 200, 200, 200}, false},
		{"HEAD", "/api/overview", nil, [4]int{200, 200, 200, 200}, false},
		{"POST", "/api/overview", nil, [4]int{405, 405, 405, 405}, false},
		{"GET", "/api/no-such-route", nil, [4]int{404, 404, 404, 404}, false},
		{"GET", "/api/nodes", nil, [4]int{200, 200, 401, 401}, false},
		{"PUT", "/api/vm-memory-high-watermark", map[string]any{"value": 0.4}, [4]int{204, 401, 401, 401}, false},
		{"GET", "/api/cluster", nil, [4]int{200, 200, 401, 401}, false},
		{"PUT", "/api/cluster/members/n2", map[string]any{"address": "127.0.0.1:1"}, [4]int{400, 401, 401, 401}, false},
		// vhosts: listed by all (filtered), shown to those with
		// permissions in them (and monitoring), made and deleted by
		// administrators.
		{"GET", "/api/vhosts", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/vhosts/%2F", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/vhosts/other", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/vhosts/no-such-vhost", nil, [4]int{404, 401, 401, 401}, false},
		{"PUT", "/api/vhosts/new-{u}", map[string]any{}, [4]int{201, 401, 401, 401}, false},
		{"DELETE", "/api/vhosts/no-such-vhost", nil, [4]int{404, 401, 401, 401}, false},
		// users, permissions and topic permissions: administrators only.
		{"GET", "/api/users", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/users/mon", nil, [4]int{200, 401, 401, 401}, false},
		{"PUT", "/api/users/new-{u}", map[string]any{"password": "pw", "tags": ""}, [4]int{201, 401, 401, 401}, false},
		{"DELETE", "/api/users/no-such-user", nil, [4]int{404, 401, 401, 401}, false},
		{"GET", "/api/permissions", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/permissions/%2F/mon", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/vhosts/%2F/permissions", nil, [4]int{200, 401, 401, 401}, false},
		{"PUT", "/api/permissions/%2F/plain", all, [4]int{204, 401, 401, 401}, false},
		{"DELETE", "/api/permissions/other/plain", nil, [4]int{404, 401, 401, 401}, false},
		{"GET", "/api/topic-permissions", nil, [4]int{200, 401, 401, 401}, false},
		{"PUT", "/api/topic-permissions/%2F/plain", map[string]any{"exchange": "amq.topic", "write": ".*", "read": ".*"}, [4]int{201, 401, 401, 401}, false},
		{"DELETE", "/api/topic-permissions/other/plain", nil, [4]int{404, 401, 401, 401}, false},
		{"GET", "/api/user-limits", nil, [4]int{200, 200, 200, 200}, false},
		{"PUT", "/api/user-limits/plain/max-channels", map[string]any{"value": 100}, [4]int{204, 401, 401, 401}, false},
		{"GET", "/api/vhost-limits", nil, [4]int{200, 200, 200, 200}, false},
		{"PUT", "/api/vhost-limits/other/max-queues", map[string]any{"value": 100}, [4]int{204, 401, 401, 401}, false},
		{"DELETE", "/api/vhost-limits/other/max-queues", nil, [4]int{204, 401, 401, 401}, false},
		// policies: administrators, and policymakers in their vhosts.
		{"GET", "/api/policies", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/policies/%2F", nil, [4]int{200, 200, 200, 200}, false},
		{"PUT", "/api/policies/%2F/p-{u}", map[string]any{"pattern": "^no-match$", "definition": map[string]any{"max-length": 10}}, [4]int{201, 401, 201, 401}, false},
		{"PUT", "/api/policies/other/p-{u}", map[string]any{"pattern": "^no-match$", "definition": map[string]any{"max-length": 10}}, [4]int{201, 401, 401, 401}, false},
		{"DELETE", "/api/policies/%2F/no-such-policy", nil, [4]int{404, 401, 404, 401}, false},
		{"GET", "/api/operator-policies", nil, [4]int{200, 200, 200, 200}, false},
		// queues, exchanges, bindings: seen in the vhosts one may see,
		// changed as one's permissions allow.
		{"GET", "/api/queues", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/queues/%2F/q1", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/queues/other/oq", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/queues/%2F/no-such-queue", nil, [4]int{404, 404, 404, 404}, false},
		{"PUT", "/api/queues/%2F/qput-{u}", map[string]any{"durable": false}, [4]int{201, 201, 201, 401}, false},
		{"PUT", "/api/queues/%2F/mgr-q-{u}", map[string]any{"durable": false}, [4]int{201, 201, 201, 201}, false},
		{"DELETE", "/api/queues/%2F/qdel-{u}", nil, [4]int{204, 204, 204, 401}, false},
		{"DELETE", "/api/queues/%2F/q1/contents", nil, [4]int{204, 204, 204, 204}, false},
		{"POST", "/api/exchanges/%2F/amq.default/publish", publish, [4]int{200, 200, 200, 200}, false},
		{"POST", "/api/queues/%2F/q1/get", get, [4]int{200, 200, 200, 200}, false},
		{"POST", "/api/queues/%2F/q1/peek", map[string]any{"count": 1}, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/exchanges", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/exchanges/%2F/x1", nil, [4]int{200, 200, 200, 200}, false},
		{"PUT", "/api/exchanges/%2F/xput-{u}", map[string]any{"type": "direct"}, [4]int{201, 201, 201, 401}, false},
		{"DELETE", "/api/exchanges/%2F/xdel-{u}", nil, [4]int{204, 204, 204, 401}, false},
		{"GET", "/api/bindings", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/bindings/%2F/e/x1/q/q1", nil, [4]int{200, 200, 200, 200}, false},
		{"POST", "/api/bindings/%2F/e/x1/q/q1", map[string]any{"routing_key": "k-{u}"}, [4]int{201, 201, 201, 201}, false},
		{"DELETE", "/api/bindings/%2F/e/x1/q/q1/kdel-{u}", nil, [4]int{204, 204, 204, 204}, false},
		// connections, channels, consumers: one's own, or all for
		// monitoring and administrators.
		{"GET", "/api/connections", nil, [4]int{200, 200, 200, 200}, false},
		{"DELETE", "/api/connections/no-such-connection", nil, [4]int{404, 404, 404, 404}, false},
		{"GET", "/api/channels", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/consumers", nil, [4]int{200, 200, 200, 200}, false},
		// definitions: administrators only.
		{"GET", "/api/definitions", nil, [4]int{200, 401, 401, 401}, false},
		{"GET", "/api/definitions/%2F", nil, [4]int{200, 401, 401, 401}, false},
		{"POST", "/api/definitions", map[string]any{}, [4]int{204, 401, 401, 401}, false},
		// health checks.
		{"GET", "/api/health/checks/alarms", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/health/checks/local-alarms", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/health/checks/virtual-hosts", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/health/checks/protocol-listener/amqp", nil, [4]int{200, 200, 200, 200}, false},
		{"GET", "/api/health/checks/port-listener/1", nil, [4]int{503, 503, 503, 503}, false},
		{"GET", "/api/aliveness-test/%2F", nil, [4]int{200, 200, 200, 401}, false},
		{"GET", "/api/aliveness-test/other", nil, [4]int{200, 401, 401, 401}, false},
	} {
		for i, k := range kinds {
			want := refused
			switch {
			case tc.public:
				want = tc.want[0]
			case i < len(tc.want):
				want = tc.want[i]
			}
			path := strings.ReplaceAll(tc.path, "{u}", k.user)
			body := tc.body
			if m, ok := body.(map[string]any); ok {
				j, _ := json.Marshal(m)
				_ = json.Unmarshal([]byte(strings.ReplaceAll(string(j), "{u}", k.user)), &body)
			}
			code, out := call(tc.method, path, k.user, k.pass, body)
			if code != want {
				t.Errorf("%s %s as %s: %d, want %d (%s)", tc.method, path, k.name, code, want, strings.TrimSpace(out))
			}
		}
	}
}
