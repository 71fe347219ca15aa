package conformance

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Definitions files exported by RabbitMQ 3.12 to 4.3 import on a single
// node. The files are in conformance/testdata/definitions (README.md
// there says where each comes from): RabbitMQ's own import fixtures
// (deps/rabbit/test/definition_import_SUITE_data at v4.3.5) and exports
// built in the shapes each version's export code writes.

func defsFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "definitions", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func importDefs(t *testing.T, a *api, name string) {
	t.Helper()
	if code, reason := a.postDefinitions(defsFile(t, name)); code != 204 {
		t.Fatalf("importing %s: %d %s", name, code, reason)
	}
}

// queueType is the type of queue vh/q as GET /api/queues shows it, and as
// a redeclare with its arguments proves it (amqpType).
func queueType(t *testing.T, a *api, amqpURL, vh, q string) string {
	t.Helper()
	var out struct {
		Type      string
		Arguments map[string]any
	}
	if code := a.call("GET", "/api/queues/"+url.PathEscape(vh)+"/"+url.PathEscape(q), "guest", "guest", nil, &out); code != 200 {
		t.Fatalf("queue %s in %s: %d", q, vh, code)
	}
	if code := a.call("PUT", "/api/permissions/"+url.PathEscape(vh)+"/guest", "guest", "guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil); code/100 != 2 {
		t.Fatalf("guest's permissions in %s: %d", vh, code)
	}
	if got := amqpType(t, amqpURL, vh, q, out.Arguments); got != out.Type {
		t.Errorf("%s in %s shows type %s, and is equivalent to a declare of type %s", q, vh, out.Type, got)
	}
	return out.Type
}

// amqpType is the type a redeclare of queue vh/q (durable, not
// auto-delete, as every queue of these files) with arguments args (JSON
// values) is equivalent to: the one naming its type is, the other is
// not.
func amqpType(t *testing.T, amqpURL, vh, q string, args map[string]any) string {
	t.Helper()
	c := dial(t, amqpURL+url.PathEscape(vh))
	defer c.Close()
	var types []string
	for _, typ := range []string{"classic", "quorum", "stream"} {
		tbl := rmq.Table{"x-queue-type": typ}
		for k, v := range args {
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				v = int64(f)
			}
			if k != "x-queue-type" {
				tbl[k] = v
			}
		}
		ch, err := c.Channel()
		must(t, err)
		if _, err := ch.QueueDeclare(q, true, false, false, false, tbl); err == nil {
			types = append(types, typ)
			_ = ch.Close()
		}
	}
	if len(types) != 1 {
		t.Fatalf("%s in %s is equivalent to declares of types %v", q, vh, types)
	}
	return types[0]
}

// takes publishes a persistent message through exchange x with key as
// user/pass in vhost vh, confirmed, and gets it from queue q.
func takes(t *testing.T, addr, user, pass, vh, x, key, q string) {
	t.Helper()
	c, err := rmq.Dial("amqp://" + user + ":" + pass + "@" + addr + "/" + url.PathEscape(vh))
	if err != nil {
		t.Fatalf("%s in %s: %v", user, vh, err)
	}
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	body := "via " + x + " " + key
	dc, err := ch.PublishWithDeferredConfirm(x, key, true, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(body)})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish to %s %s in %s: %v", x, key, vh, err)
	}
	// The queue may hold messages published before (through its other
	// bindings): they go.
	testutil.Eventually(t, 10*time.Second, func() bool {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		return ok && string(d.Body) == body
	}, "the message in %s", q)
}

func TestImportRabbitMQ312Export(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	importDefs(t, a, "rabbitmq-3.12.json")
	for q, want := range map[string]string{"orders.created": "quorum", "orders.dead": "quorum", "orders.audit": "classic"} {
		if got := queueType(t, a, b.URL, "orders", q); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
	if got := queueType(t, a, b.URL, "/", "legacy"); got != "classic" {
		t.Errorf("legacy: %s", got)
	}
	// The topic permission lets orders-svc publish order.* only; the
	// binding takes it to the quorum queue, and to the classic audit
	// queue.
	takes(t, b.Addr, "orders-svc", "s3cret", "orders", "orders.events", "order.created", "orders.created")
	takes(t, b.Addr, "orders-svc", "s3cret", "orders", "orders.events", "order.paid", "orders.audit")
	c, err := rmq.Dial("amqp://orders-svc:s3cret@" + b.Addr + "/orders")
	must(t, err)
	ch, _ := c.Channel()
	err = ch.Publish("orders.events", "invoice.x", false, false, rmq.Publishing{})
	if err == nil {
		_, err = ch.QueueDeclarePassive("orders.audit", true, false, false, false, nil)
	}
	expectErr(t, err, 403, "ACCESS_REFUSED - access to topic 'invoice.x' in exchange 'orders.events' in vhost 'orders' refused for user 'orders-svc'")
	c.Close()
	var lim []struct{ Value map[string]int64 }
	a.call("GET", "/api/user-limits/orders-svc", "guest", "guest", nil, &lim)
	if len(lim) != 1 || lim[0].Value["max-connections"] != 50 || lim[0].Value["max-channels"] != 200 {
		t.Errorf("orders-svc's limits: %+v", lim)
	}
	a.call("GET", "/api/vhost-limits/orders", "guest", "guest", nil, &lim)
	if len(lim) != 1 || lim[0].Value["max-queues"] != 500 {
		t.Errorf("orders' limits: %+v", lim)
	}
	if code := a.call("GET", "/api/operator-policies/orders/tmp-caps", "guest", "guest", nil, nil); code != 200 {
		t.Errorf("the operator_policy parameter: %d", code)
	}
	var pol struct{ Policy string }
	a.call("GET", "/api/queues/orders/orders.created", "guest", "guest", nil, &pol)
	if pol.Policy != "orders-dlx" {
		t.Errorf("orders.created's policy %q", pol.Policy)
	}
}

// RabbitMQ 3.13's vhost metadata: the billing vhost's default queue type
// is quorum, so "payments", exported with no x-queue-type (declared by a
// client naming none before the default was set, or written by hand), is
// made a quorum queue by the import, as RabbitMQ's does
// (rabbit_definitions.erl add_queue_int calls augment_declare_args,
// v3.12.14 to v4.3.5); "payments.scratch", auto-delete, stays classic.
func TestImportRabbitMQ313Export(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	importDefs(t, a, "rabbitmq-3.13.json")
	v := a.vhost("billing")
	if v.DefaultQueueType != "quorum" || v.Description != "Billing, quorum queues by default" || strings.Join(v.Tags, ",") != "payments,eu" {
		t.Fatalf("billing: %+v", v)
	}
	for q, want := range map[string]string{"invoices": "quorum", "payments": "quorum", "reports": "classic"} {
		if got := queueType(t, a, b.URL, "billing", q); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
	var sc struct {
		Type       string
		AutoDelete bool `json:"auto_delete"`
	}
	a.call("GET", "/api/queues/billing/payments.scratch", "guest", "guest", nil, &sc)
	if sc.Type != "classic" || !sc.AutoDelete {
		t.Errorf("payments.scratch: %+v, want an auto-delete classic queue", sc)
	}
	takes(t, b.Addr, "billing", "s3cret", "billing", "billing", "payment", "payments")
	takes(t, b.Addr, "billing", "s3cret", "billing", "billing", "invoice", "invoices")
	// The policy applies to quorum queues only (apply-to quorum_queues).
	var pol struct{ Policy any }
	a.call("GET", "/api/queues/billing/invoices", "guest", "guest", nil, &pol)
	if pol.Policy != "invoices-limit" {
		t.Errorf("invoices' policy %v", pol.Policy)
	}
	// One for classic queues only, of a higher priority, leaves it
	// (rabbit_policy.erl matches_queue_type, v3.12.14 to v4.3.5) and
	// applies to the classic queue.
	a.admin("PUT", "/api/policies/billing/classic-only", map[string]any{"pattern": "^(invoices|reports)$", "apply-to": "classic_queues",
		"definition": map[string]any{"max-length": 5}, "priority": 9}, 201)
	for q, want := range map[string]string{"invoices": "invoices-limit", "reports": "classic-only"} {
		testutil.Eventually(t, 10*time.Second, func() bool {
			a.call("GET", "/api/queues/billing/"+q, "guest", "guest", nil, &pol)
			return pol.Policy == want
		}, "%s's policy %s", q, want)
	}
	// A client declaring in billing with no type gets a quorum queue.
	c := dial(t, b.URL+"billing")
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("new", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if got := queueType(t, a, b.URL, "billing", "new"); got != "quorum" {
		t.Errorf("a queue declared in billing naming no type: %s", got)
	}
}

// RabbitMQ 4.2: a SHA-512 user with limits, vhosts whose metadata alone
// carries the default queue type, quorum queues with a delivery limit
// and a dead-letter target.
func TestImportRabbitMQ42Export(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	importDefs(t, a, "rabbitmq-4.2.json")
	if v := a.vhost("jobs"); v.DefaultQueueType != "quorum" {
		t.Errorf("jobs: %+v", v)
	}
	if v := a.vhost("/"); v.DefaultQueueType != "classic" {
		t.Errorf("/: %+v", v)
	}
	for q, want := range map[string]string{"celery": "quorum", "celery.retry": "quorum", "results": "classic"} {
		if got := queueType(t, a, b.URL, "jobs", q); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
	takes(t, b.Addr, "worker", "s3cret", "jobs", "celery", "celery", "celery")
	// celery.retry's messages expire into celery (x-message-ttl 30 s is
	// too long to wait for: the path is proved by a direct publish).
	takes(t, b.Addr, "worker", "s3cret", "jobs", "", "celery.retry", "celery.retry")
}

// RabbitMQ 4.3: the export's new top-level fields, vhosts as name,
// limits and metadata, queues with "type", exchanges without "internal".
// Loaded at start (--load-definitions) as well as through the API.
func TestImportRabbitMQ43Export(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	importDefs(t, a, "rabbitmq-4.3.json")
	check := func(a *api, url, addr string) {
		t.Helper()
		v := a.vhost("events")
		if v.DefaultQueueType != "quorum" || v.Description != "event fan-out" || strings.Join(v.Tags, ",") != "events" {
			t.Errorf("events: %+v", v)
		}
		for _, q := range []string{"events.audit", "events.email"} {
			if got := queueType(t, a, url, "events", q); got != "quorum" {
				t.Errorf("%s: %s, want quorum", q, got)
			}
		}
		takes(t, addr, "events", "s3cret", "events", "events", "user.signup", "events.email")
		takes(t, addr, "events", "s3cret", "events", "events", "order.x", "events.audit")
	}
	check(a, b.URL, b.Addr)

	// --load-definitions, on a real binary (the Docker pattern).
	args43 := map[string]map[string]any{
		"events.audit": {"x-quorum-initial-group-size": 3.0, "x-queue-leader-locator": "balanced"},
		"events.email": {"x-single-active-consumer": true},
	}
	bin := testutil.Binary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "defs.json")
	must(t, os.WriteFile(file, []byte(defsFile(t, "rabbitmq-4.3.json")), 0o644))
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", filepath.Join(dir, "data"), "--log-level", "warn", "--load-definitions", file)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.WaitListening(t, addr, 30*time.Second)
	for _, q := range []string{"events.audit", "events.email"} {
		if got := amqpType(t, "amqp://events:s3cret@"+addr+"/", "events", q, args43[q]); got != "quorum" {
			t.Errorf("--load-definitions: %s is %s (log: %s)", q, got, &logs)
		}
	}
	takes(t, addr, "events", "s3cret", "events", "events", "user.signup", "events.email")
}

// A file with a stream imports it as a stream, with its retention (as
// RabbitMQ 4.2 exported it); a plugin's parameter is refused whole.
func TestImportRabbitMQStream(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	if code, reason := a.postDefinitions(defsFile(t, "rabbitmq-4.2-stream.json")); code >= 300 {
		t.Fatalf("import: %d %q", code, reason)
	}
	a.admin("PUT", "/api/permissions/telemetry/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	raw := map[string]any{"x-max-length-bytes": float64(20000000000), "x-stream-max-segment-size-bytes": float64(100000000)}
	if got := amqpType(t, b.URL, "telemetry", "telemetry.raw", raw); got != "stream" {
		t.Errorf("telemetry.raw is %s, want stream", got)
	}
	if got := amqpType(t, b.URL, "telemetry", "telemetry.alerts", nil); got != "quorum" {
		t.Errorf("telemetry.alerts is %s, want quorum", got)
	}
	// A federation plugin's parameter (RabbitMQ's federation fixture):
	// imported, exported as given, and the export imports again, as
	// RabbitMQ's own suite asserts with the plugin enabled
	// (deps/rabbitmq_exchange_federation/test/definition_import_SUITE.erl
	// export_import_round_trip, v4.3.5).
	if code, reason := a.postDefinitions(defsFile(t, "rabbitmq-federation-case1.json")); code != 204 {
		t.Fatalf("federation fixture: %d %q, want 204", code, reason)
	}
	var exported map[string]any
	if got := a.call("GET", "/api/definitions", "guest", "guest", nil, &exported); got != 200 {
		t.Fatalf("export: %d", got)
	}
	found := false
	for _, p := range exported["parameters"].([]any) {
		m := p.(map[string]any)
		if m["component"] == "federation-upstream-set" && m["name"] == "location-1" && m["vhost"] == "/" {
			found = reflect.DeepEqual(m["value"], []any{map[string]any{"upstream": "up-1"}, map[string]any{"upstream": "up-2"}})
		}
	}
	if !found {
		t.Fatalf("export: no federation-upstream-set location-1 as imported in %v", exported["parameters"])
	}
	b2, _ := json.Marshal(exported)
	if code, reason := a.postDefinitions(string(b2)); code != 204 {
		t.Fatalf("re-import of the export: %d %q", code, reason)
	}
}

// RabbitMQ's own import fixtures (deps/rabbit/test/definition_import_SUITE
// at v4.3.5), with what that suite asserts of each.
func TestImportRabbitMQFixtures(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)

	// import_case13: the quorum queue is imported as a quorum queue with
	// its arguments, [{x-max-length,991},{x-queue-type,quorum}].
	importDefs(t, a, "rabbitmq-case13.json")
	if got := queueType(t, a, b.URL, "/", "definitions.import.case13.qq.1"); got != "quorum" {
		t.Errorf("case13: %s", got)
	}
	args := a.queueArgs("/", "definitions.import.case13.qq.1")
	if args["x-max-length"] != float64(991) || args["x-queue-type"] != "quorum" || len(args) != 3 {
		t.Errorf("case13's arguments: %v", args)
	}
	// import_case13a: the same queue again, as a stream with other
	// arguments and properties, is a no-op.
	importDefs(t, a, "rabbitmq-case13a.json")
	if args := a.queueArgs("/", "definitions.import.case13.qq.1"); args["x-max-length"] != float64(991) || args["(type)"] != "quorum" {
		t.Errorf("case13a changed the queue: %v", args)
	}

	// import_case16: the tagged vhost's description, default queue type
	// and tags come from its metadata.
	importDefs(t, a, "rabbitmq-case16.json")
	if v := a.vhost("tagged"); v.Description != "A case16 description" || v.DefaultQueueType != "quorum" ||
		strings.Join(v.Tags, ",") != "multi_dc_replication,ab,cde" {
		t.Errorf("case16: %+v", v)
	}

	// import_case18: the user's limits.
	importDefs(t, a, "rabbitmq-case18.json")
	var lim []struct{ Value map[string]int64 }
	a.call("GET", "/api/user-limits/limited_guest", "guest", "guest", nil, &lim)
	if len(lim) != 1 || lim[0].Value["max-connections"] != 2 {
		t.Errorf("case18: %+v", lim)
	}

	// case22 (RabbitMQ 4.0.5): vhosts with the top-level fields and the
	// metadata; the protected one's default queue type is quorum.
	importDefs(t, a, "rabbitmq-case22.json")
	if v := a.vhost("protected"); v.DefaultQueueType != "quorum" {
		t.Errorf("case22 protected: %+v", v)
	}
	if v := a.vhost("non-protected"); v.DefaultQueueType != "classic" {
		t.Errorf("case22 non-protected: %+v", v)
	}

	// case23 (RabbitMQ 4.2.0): an operator policy, as a parameter.
	importDefs(t, a, "rabbitmq-case23.json")
	var op struct {
		Pattern    string
		Definition map[string]any
	}
	if code := a.call("GET", "/api/operator-policies/%2F/transient-queue-ttl", "guest", "guest", nil, &op); code != 200 ||
		op.Pattern != `^amq\.` || op.Definition["max-length"] != float64(1000) {
		t.Errorf("case23's operator policy: %d %+v", code, op)
	}

	// failing_case21 (RabbitMQ 3.12.8): queues with no vhost, a file for
	// one vhost's import, cannot be imported whole (RabbitMQ:
	// invalid_definitions_file).
	code, reason := a.postDefinitions(defsFile(t, "rabbitmq-failing_case21.json"))
	if code != 400 || !strings.Contains(reason, `no vhost ""`) {
		t.Errorf("failing_case21: %d %q", code, reason)
	}
}
