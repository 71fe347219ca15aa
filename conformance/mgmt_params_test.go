package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Runtime parameters of any component, global parameters and the cluster
// name, as RabbitMQ 3.10.8 answered each call (also run against it:
// RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL; the cluster name is put back):
//
//	PUT /api/parameters/foo/%2F/x {"value":{"a":1}} → 400 {"error":"bad_request",
//	    "reason":"Validation failed\n\ncomponent foo not found\n"}
//	GET /api/parameters/foo → 200 []; GET /api/parameters/foo/%2F/x → 404
//	GET /api/global-parameters → [{"name":"internal_cluster_id","value":"rabbitmq-cluster-id-..."}]
//	PUT /api/global-parameters/api-probe {"value":"v1"} → 201, again → 204
//	GET /api/global-parameters/api-probe → {"value":"v2","name":"api-probe"}
//	PUT /api/global-parameters/api-probe {"x":"v2"} → 400 "[{key_missing,value}]"
//	DELETE → 204, again → 404
//	GET /api/cluster-name → {"name":"rabbit@vm"} (the node's name until set)
//	PUT /api/cluster-name {"name":"api-probe-cluster"} → 204; then GET →
//	    {"name":"api-probe-cluster"}, and GET /api/global-parameters and the
//	    definitions' global_parameters list {"name":"cluster_name","value":"api-probe-cluster"}
//	PUT /api/cluster-name {} → 400 "[{key_missing,name}]"
func TestMgmtGlobalParametersAndClusterName(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	code, _, e := a.callWithHeaders("PUT", "/api/parameters/mgmt-foo/%2F/x", map[string]any{"value": map[string]any{"a": 1}})
	if code != 400 || e.Reason != "Validation failed\n\ncomponent mgmt-foo not found\n" {
		t.Errorf("unknown component: %d %q", code, e.Reason)
	}
	var l []any
	if code := a.call("GET", "/api/parameters/mgmt-foo", "guest", "guest", nil, &l); code != 200 || len(l) != 0 {
		t.Errorf("GET /api/parameters/mgmt-foo: %d %v", code, l)
	}
	if code := a.call("GET", "/api/parameters/mgmt-foo/%2F/x", "guest", "guest", nil, nil); code != 404 {
		t.Errorf("GET /api/parameters/mgmt-foo/%%2F/x: %d", code)
	}
	type gp struct {
		Name  string `json:"name"`
		Value any    `json:"value"`
	}
	var gps []gp
	a.call("GET", "/api/global-parameters", "guest", "guest", nil, &gps)
	id := ""
	for _, g := range gps {
		if g.Name == "internal_cluster_id" {
			id, _ = g.Value.(string)
		}
	}
	if !strings.HasPrefix(id, "rabbitmq-cluster-id-") {
		t.Errorf("internal_cluster_id: %v", gps)
	}
	a.admin("PUT", "/api/global-parameters/mgmt-g", map[string]any{"value": "v1"}, 201)
	a.admin("PUT", "/api/global-parameters/mgmt-g", map[string]any{"value": map[string]any{"k": []any{1, "two"}}}, 204)
	var g gp
	if code := a.call("GET", "/api/global-parameters/mgmt-g", "guest", "guest", nil, &g); code != 200 || g.Name != "mgmt-g" || fmt.Sprint(g.Value) != "map[k:[1 two]]" {
		t.Errorf("GET /api/global-parameters/mgmt-g: %d %+v", code, g)
	}
	if code, _, e := a.callWithHeaders("PUT", "/api/global-parameters/mgmt-g", map[string]any{"x": "v2"}); code != 400 || e.Reason != "[{key_missing,value}]" {
		t.Errorf("PUT without value: %d %q", code, e.Reason)
	}
	// Not among the vhosts' runtime parameters.
	var ps []map[string]any
	a.call("GET", "/api/parameters", "guest", "guest", nil, &ps)
	for _, p := range ps {
		if p["name"] == "mgmt-g" {
			t.Errorf("a global parameter listed as a runtime parameter: %v", p)
		}
	}
	a.admin("DELETE", "/api/global-parameters/mgmt-g", nil, 204)
	a.admin("DELETE", "/api/global-parameters/mgmt-g", nil, 404)

	var cn struct{ Name string }
	a.call("GET", "/api/cluster-name", "guest", "guest", nil, &cn)
	orig := cn.Name
	var before gp
	hadName := a.call("GET", "/api/global-parameters/cluster_name", "guest", "guest", nil, &before) == 200
	t.Cleanup(func() {
		if hadName {
			a.call("PUT", "/api/cluster-name", "guest", "guest", map[string]any{"name": orig}, nil)
		} else {
			a.call("DELETE", "/api/global-parameters/cluster_name", "guest", "guest", nil, nil)
		}
	})
	if orig == "" {
		t.Fatal("GET /api/cluster-name: no name")
	}
	a.admin("PUT", "/api/cluster-name", map[string]any{"name": "mgmt-cluster"}, 204)
	a.call("GET", "/api/cluster-name", "guest", "guest", nil, &cn)
	if cn.Name != "mgmt-cluster" {
		t.Errorf("cluster name after PUT: %q", cn.Name)
	}
	var ov struct {
		ClusterName string `json:"cluster_name"`
	}
	a.call("GET", "/api/overview", "guest", "guest", nil, &ov)
	if ov.ClusterName != "mgmt-cluster" {
		t.Errorf("overview cluster_name %q", ov.ClusterName)
	}
	var defs struct {
		GlobalParameters []gp `json:"global_parameters"`
	}
	a.call("GET", "/api/definitions", "guest", "guest", nil, &defs)
	if !hasGlobal(defs.GlobalParameters, "cluster_name", "mgmt-cluster") || !hasGlobal(defs.GlobalParameters, "internal_cluster_id", id) {
		t.Errorf("definitions global_parameters %+v", defs.GlobalParameters)
	}
	if code, _, e := a.callWithHeaders("PUT", "/api/cluster-name", map[string]any{}); code != 400 || e.Reason != "[{key_missing,name}]" {
		t.Errorf("PUT /api/cluster-name {}: %d %q", code, e.Reason)
	}
}

func sorted(s []string) []string { sort.Strings(s); return s }

func hasGlobal[T any](l []T, name string, value any) bool {
	b, _ := json.Marshal(l)
	var gs []struct {
		Name  string `json:"name"`
		Value any    `json:"value"`
	}
	_ = json.Unmarshal(b, &gs)
	for _, g := range gs {
		if g.Name == name && g.Value == value {
			return true
		}
	}
	return false
}

// A definitions file's global parameters are imported, and a vhost's
// export has exactly the keys RabbitMQ 3.10.8's has (GET
// /api/definitions/%2F: rabbit_version, parameters, policies, queues,
// exchanges, bindings; its queues, exchanges and bindings without a vhost
// key, its parameters and policies with one).
func TestMgmtDefinitionsGlobalsAndVHostExport(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	t.Cleanup(func() {
		a.call("DELETE", "/api/global-parameters/mgmt-imported", "guest", "guest", nil, nil)
		a.call("DELETE", "/api/vhosts/mgmt-dv", "guest", "guest", nil, nil)
	})
	a.admin("PUT", "/api/vhosts/mgmt-dv", map[string]any{}, 201)
	// The vhost's maker has permissions in it already (204 in RabbitMQ
	// too).
	a.admin("PUT", "/api/permissions/mgmt-dv/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 204)
	a.admin("PUT", "/api/queues/mgmt-dv/dq", map[string]any{"durable": true}, 201)
	a.admin("PUT", "/api/exchanges/mgmt-dv/dx", map[string]any{"type": "fanout"}, 201)
	a.admin("POST", "/api/bindings/mgmt-dv/e/dx/q/dq", map[string]any{"routing_key": "k"}, 201)
	a.admin("PUT", "/api/policies/mgmt-dv/dp", map[string]any{"pattern": "^dq$", "definition": map[string]any{"max-length": 5}}, 201)
	a.admin("POST", "/api/definitions", map[string]any{"global_parameters": []any{map[string]any{"name": "mgmt-imported", "value": map[string]any{"n": 1}}}}, 204)
	var g struct {
		Value map[string]any `json:"value"`
	}
	if code := a.call("GET", "/api/global-parameters/mgmt-imported", "guest", "guest", nil, &g); code != 200 || fmt.Sprint(g.Value["n"]) != "1" {
		t.Errorf("imported global parameter: %d %+v", code, g)
	}
	var d map[string]any
	a.call("GET", "/api/definitions/mgmt-dv", "guest", "guest", nil, &d)
	var keys []string
	for k := range d {
		keys = append(keys, k)
	}
	want := "bindings exchanges parameters policies queues rabbit_version"
	if got := strings.Join(sorted(keys), " "); got != want {
		t.Errorf("vhost export keys %q, want %q", got, want)
	}
	for kind, vhostKey := range map[string]bool{"queues": false, "exchanges": false, "bindings": false, "policies": true} {
		l, _ := d[kind].([]any)
		if len(l) != 1 {
			t.Errorf("vhost export %s: %v", kind, d[kind])
			continue
		}
		if _, has := l[0].(map[string]any)["vhost"]; has != vhostKey {
			t.Errorf("vhost export %s[0] has vhost: %v, want %v (%v)", kind, has, vhostKey, l[0])
		}
	}
}

// Feature flags, the health checks and queue actions, and one exchange's
// topic permission, as RabbitMQ 3.10.8 answered them:
//
//	GET /api/feature-flags → [{"name":"classic_mirrored_queue_version",
//	    "desc":"Support setting version for classic mirrored queues","doc_url":"",
//	    "state":"enabled","stability":"stable","provided_by":"rabbit"}, ... 9 flags]
//	PUT /api/feature-flags/quorum_queue/enable → 204; .../nope/enable → 400 "unsupported"
//	GET /api/health/checks/certificate-expiration/1/weeks → 200 {"status":"ok"}
//	    .../1/fortnights → 400 "Time unit not recognised. Supported units: days, weeks, months, years."
//	    .../x/weeks → 400 "Invalid expiration value."
//	GET /api/health/checks/node-is-quorum-critical → {"status":"ok","reason":"single node cluster"}
//	GET /api/health/checks/node-is-mirror-sync-critical → {"status":"ok","reason":"single node cluster"}
//	POST /api/queues/%2F/q/actions {"action":"sync"} → 204, {"action":"cancel_sync"} → 204,
//	    {"action":"foo"} → 400 {"error":"bad_request","reason":["unknown","foo"]},
//	    {} → 400 "[{key_missing,action}]"
//	DELETE /api/topic-permissions/%2F/u/x2 → 204 (u's amq.topic entry stays), again → 204;
//	    for a user that does not exist → 404
func TestMgmtFeatureFlagsHealthChecksAndActions(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	var ffs []map[string]any
	a.call("GET", "/api/feature-flags", "guest", "guest", nil, &ffs)
	names := map[string]bool{}
	for _, f := range ffs {
		names[fmt.Sprint(f["name"])] = true
		for _, k := range []string{"desc", "doc_url", "state", "stability", "provided_by"} {
			if _, ok := f[k].(string); !ok {
				t.Errorf("feature flag %v: no %s", f["name"], k)
			}
		}
		if f["stability"] != "stable" {
			t.Errorf("feature flag %v: stability %v", f["name"], f["stability"])
		}
	}
	for _, n := range []string{"classic_mirrored_queue_version", "drop_unroutable_metric", "empty_basic_get_metric", "implicit_default_bindings",
		"maintenance_mode_status", "quorum_queue", "stream_queue", "user_limits", "virtual_host_metadata"} {
		if !names[n] {
			t.Errorf("feature flag %s not listed", n)
		}
	}
	a.admin("PUT", "/api/feature-flags/quorum_queue/enable", map[string]any{}, 204)
	if code, _, e := a.callWithHeaders("PUT", "/api/feature-flags/mgmt-nope/enable", map[string]any{}); code != 400 || e.Reason != "unsupported" {
		t.Errorf("enable an unknown flag: %d %q", code, e.Reason)
	}
	for path, want := range map[string]string{
		"/api/health/checks/certificate-expiration/1/weeks":      `200 {"status":"ok"}`,
		"/api/health/checks/certificate-expiration/1/fortnights": `400 {"error":"bad_request","reason":"Time unit not recognised. Supported units: days, weeks, months, years."}`,
		"/api/health/checks/certificate-expiration/x/weeks":      `400 {"error":"bad_request","reason":"Invalid expiration value."}`,
		"/api/health/checks/node-is-quorum-critical":             `200 {"reason":"single node cluster","status":"ok"}`,
		"/api/health/checks/node-is-mirror-sync-critical":        `200 {"reason":"single node cluster","status":"ok"}`,
	} {
		code, body := a.raw("GET", path)
		var v any
		_ = json.Unmarshal([]byte(body), &v)
		norm, _ := json.Marshal(v)
		if got := fmt.Sprintf("%d %s", code, norm); got != want {
			t.Errorf("GET %s: %s, want %s", path, got, want)
		}
	}
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("mgmt-act", false, true, false, false, nil)
	must(t, err)
	t.Cleanup(func() { a.call("DELETE", "/api/queues/%2F/mgmt-act", "guest", "guest", nil, nil) })
	a.admin("POST", "/api/queues/%2F/mgmt-act/actions", map[string]any{"action": "sync"}, 204)
	a.admin("POST", "/api/queues/%2F/mgmt-act/actions", map[string]any{"action": "cancel_sync"}, 204)
	code, body := a.rawBody("POST", "/api/queues/%2F/mgmt-act/actions", `{"action":"foo"}`)
	if code != 400 || !strings.Contains(body, `"reason":["unknown","foo"]`) {
		t.Errorf("action foo: %d %s", code, body)
	}
	if code, _, e := a.callWithHeaders("POST", "/api/queues/%2F/mgmt-act/actions", map[string]any{}); code != 400 || e.Reason != "[{key_missing,action}]" {
		t.Errorf("no action: %d %q", code, e.Reason)
	}

	a.admin("PUT", "/api/users/mgmt-tp", map[string]any{"password": "pw", "tags": ""}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/mgmt-tp", "guest", "guest", nil, nil) })
	// 201 for the user's first topic permission in the vhost, 204 for a
	// second exchange's (RabbitMQ 3.10.8).
	for _, x := range []struct {
		exchange string
		code     int
	}{{"amq.topic", 201}, {"x2", 204}} {
		a.admin("PUT", "/api/topic-permissions/%2F/mgmt-tp", map[string]any{"exchange": x.exchange, "write": ".*", "read": ".*"}, x.code)
	}
	a.admin("DELETE", "/api/topic-permissions/%2F/mgmt-tp/x2", nil, 204)
	var tps []map[string]any
	a.call("GET", "/api/topic-permissions/%2F/mgmt-tp", "guest", "guest", nil, &tps)
	if len(tps) != 1 || tps[0]["exchange"] != "amq.topic" {
		t.Errorf("after deleting x2's entry: %v", tps)
	}
	a.admin("DELETE", "/api/topic-permissions/%2F/mgmt-tp/x2", nil, 204)
	a.admin("DELETE", "/api/topic-permissions/%2F/mgmt-nouser/x2", nil, 404)
}

// rawBody sends body as JSON and returns the status and the answer.
func (a *api) rawBody(method, path, body string) (int, string) {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.url+path, strings.NewReader(body))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A policy with classic mirroring keys (ha-mode, ha-params,
// ha-sync-mode, ...), from a 3.x definitions file or a PUT written for
// 3.x, is accepted (RabbitMQ 4.x, without mirroring, refuses it: "[...]
// are not recognised policy settings"), reads back as written, does
// nothing, and a warning names the keys; its other keys apply.
func TestMgmtMirroringPolicyKeysIgnored(t *testing.T) {
	testutil.InProcess(t)
	core, logs := observer.New(zapcore.WarnLevel)
	b := testutil.Start(t, broker.Options{Logger: zap.New(core)})
	a := newAPI(t, b)
	a.admin("PUT", "/api/policies/%2F/mgmt-ha", map[string]any{"pattern": "^ha-", "apply-to": "queues",
		"definition": map[string]any{"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic", "max-length": 1}}, 201)
	var p struct {
		Definition map[string]any `json:"definition"`
	}
	a.call("GET", "/api/policies/%2F/mgmt-ha", "guest", "guest", nil, &p)
	if p.Definition["ha-mode"] != "exactly" || fmt.Sprint(p.Definition["ha-params"]) != "2" || len(p.Definition) != 4 {
		t.Errorf("policy read back: %v", p.Definition)
	}
	warned := func(policy string) bool {
		for _, e := range logs.All() {
			if strings.Contains(e.Message, "classic queue mirroring are ignored") && e.ContextMap()["policy"] == policy {
				return true
			}
		}
		return false
	}
	if !warned("mgmt-ha") {
		t.Errorf("no warning for the ha-* keys: %v", logs.All())
	}
	// The policy's max-length applies; the ha keys do nothing.
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("ha-q", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 3; i++ {
		must(t, ch.Publish("", "ha-q", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		var q struct {
			Messages  int    `json:"messages"`
			Policy    string `json:"policy"`
			EffPolicy any    `json:"effective_policy_definition"`
		}
		a.call("GET", "/api/queues/%2F/ha-q", "guest", "guest", nil, &q)
		return q.Messages == 1 && q.Policy == "mgmt-ha"
	}, "max-length 1 of the policy with ha keys not applied")
	// The same from a 3.x definitions file.
	a.admin("POST", "/api/definitions", map[string]any{"policies": []any{map[string]any{"vhost": "/", "name": "mgmt-ha-defs", "pattern": "^mirrored\\.",
		"apply-to": "all", "priority": 0, "definition": map[string]any{"ha-mode": "all", "ha-promote-on-shutdown": "always"}}}}, 204)
	if code := a.call("GET", "/api/policies/%2F/mgmt-ha-defs", "guest", "guest", nil, nil); code != 200 {
		t.Errorf("imported policy with ha keys: %d", code)
	}
	if !warned("mgmt-ha-defs") {
		t.Error("no warning for the imported policy's ha-* keys")
	}
}
