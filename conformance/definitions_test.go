package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// A definitions file as RabbitMQ 3.x exports one: 3.8's tags as a
// string, a SHA-256 password hash (of "test12"), a vhost with limits, a
// server-named queue, an exchange with an alternate, bindings to a queue
// and to an exchange.
const rabbitDefs = `{
 "rabbit_version": "3.8.9",
 "users": [{"name": "app", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
            "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "monitoring,custom"}],
 "vhosts": [{"name": "defs"}],
 "permissions": [{"user": "app", "vhost": "defs", "configure": ".*", "write": ".*", "read": ".*"}],
 "topic_permissions": [{"user": "app", "vhost": "defs", "exchange": "orders", "write": "^eu\\.", "read": ".*"}],
 "parameters": [{"vhost": "defs", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 100}}],
 "global_parameters": [{"name": "cluster_name", "value": "rabbit@old"}],
 "policies": [{"vhost": "defs", "name": "cap", "pattern": "^jobs$", "apply-to": "queues", "priority": 0, "definition": {"max-length-bytes": 1048576}}],
 "queues": [
   {"name": "jobs", "vhost": "defs", "durable": true, "auto_delete": false, "arguments": {"x-max-length": 1000, "x-queue-type": "classic"}},
   {"name": "amq.gen-abc", "vhost": "defs", "durable": false, "auto_delete": false, "arguments": {}}
 ],
 "exchanges": [
   {"name": "orders", "vhost": "defs", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {"alternate-exchange": "spill"}},
   {"name": "spill", "vhost": "defs", "type": "fanout", "durable": true, "auto_delete": false, "internal": false, "arguments": {}}
 ],
 "bindings": [
   {"source": "orders", "vhost": "defs", "destination": "jobs", "destination_type": "queue", "routing_key": "eu.#", "arguments": {}},
   {"source": "spill", "vhost": "defs", "destination": "amq.gen-abc", "destination_type": "queue", "routing_key": "", "arguments": {}},
   {"source": "amq.topic", "vhost": "defs", "destination": "orders", "destination_type": "exchange", "routing_key": "#", "arguments": {"x-a": 1}}
 ]
}`

func (a *api) postDefinitions(body string) (int, string) {
	a.t.Helper()
	req, _ := http.NewRequest("POST", a.url+"/api/definitions", strings.NewReader(body))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Reason string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Reason
}

// Importing RabbitMQ's definitions makes every object in them, usable
// over AMQP, and exporting gives the same objects back; they survive a
// restart.
func TestDefinitionsImportExport(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	a := newAPI(t, r.b)
	if code, reason := a.postDefinitions(rabbitDefs); code != 204 {
		t.Fatalf("import: %d %s", code, reason)
	}
	check := func(when string) {
		t.Helper()
		c, err := rmq.Dial("amqp://app:test12@" + r.b.Addr + "/defs")
		if err != nil {
			t.Fatalf("%s: the imported user in the imported vhost: %v", when, err)
		}
		defer c.Close()
		ch, _ := c.Channel()
		if _, err := ch.QueueDeclarePassive("jobs", true, false, false, false, nil); err != nil {
			t.Fatalf("%s: jobs: %v", when, err)
		}
		must(t, ch.Confirm(false))
		// eu.* is routed to jobs through the topic permission and binding.
		dc, err := ch.PublishWithDeferredConfirm("amq.topic", "eu.1", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("x")})
		if err != nil || !dc.Wait() {
			t.Fatalf("%s: publish: %v", when, err)
		}
		testutil.Eventually(t, 5*time.Second, func() bool {
			q, err := ch.QueueDeclarePassive("jobs", true, false, false, false, nil)
			return err == nil && q.Messages >= 1
		}, "%s: routed through amq.topic -> orders -> jobs", when)
	}
	check("after the import")
	var out map[string]json.RawMessage
	a.call("GET", "/api/definitions", "guest", "guest", nil, &out)
	names := func(key, field string) []string {
		var xs []map[string]any
		_ = json.Unmarshal(out[key], &xs)
		var ns []string
		for _, x := range xs {
			if x["vhost"] == "defs" || key == "users" || key == "vhosts" {
				ns = append(ns, x[field].(string))
			}
		}
		sort.Strings(ns)
		return ns
	}
	for _, c := range []struct{ key, field, want string }{
		{"queues", "name", "amq.gen-abc,jobs"},
		{"exchanges", "name", "orders,spill"},
		{"bindings", "destination", "amq.gen-abc,jobs,orders"},
		{"vhosts", "name", "/,defs"},
		{"users", "name", "app,guest"},
	} {
		if got := strings.Join(names(c.key, c.field), ","); got != c.want {
			t.Errorf("exported %s: %s, want %s", c.key, got, c.want)
		}
	}
	var users []struct {
		Name string
		Tags []string
	}
	_ = json.Unmarshal(out["users"], &users)
	for _, u := range users {
		if u.Name == "app" && strings.Join(u.Tags, ",") != "monitoring,custom" {
			t.Errorf("app's tags %v", u.Tags)
		}
	}
	if !bytes.Contains(out["policies"], []byte(`"max-length-bytes":1048576`)) {
		t.Errorf("policy not exported: %s", out["policies"])
	}
	if !bytes.Contains(out["parameters"], []byte(`"max-queues":100`)) {
		t.Errorf("vhost limits not exported: %s", out["parameters"])
	}
	// Importing the export again changes nothing.
	b, _ := json.Marshal(out)
	if code, reason := a.postDefinitions(string(b)); code != 204 {
		t.Fatalf("re-import of the export: %d %s", code, reason)
	}
	r.restart()
	check("after a restart")
	a = newAPI(t, r.b)
	var q struct {
		Policy string `json:"policy"`
	}
	if a.call("GET", "/api/queues/defs/jobs", "guest", "guest", nil, &q); q.Policy != "cap" {
		t.Fatalf("after a restart jobs shows policy %q, want cap", q.Policy)
	}
}

// An import is all or nothing: a file whose last entry is wrong changes
// nothing, and the answer names the entry.
func TestDefinitionsImportIsAllOrNothing(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, tc := range []struct{ file, reason string }{
		{strings.Replace(rabbitDefs, `"destination": "jobs"`, `"destination": "missing"`, 1), `bindings[0]: no destination queue "missing" in vhost "defs"`},
		{strings.Replace(rabbitDefs, `"configure": ".*"`, `"configure": "("`, 1), `permission of "app" in "defs": invalid regular expression`},
		{strings.Replace(rabbitDefs, `"type": "fanout"`, `"type": "bogus"`, 1), `exchange "spill" in "defs": unknown exchange type 'bogus'`},
		{strings.Replace(rabbitDefs, `"x-max-length": 1000`, `"x-max-length": "many"`, 1), `queue "jobs" in "defs"`},
		{strings.Replace(rabbitDefs, `"policies": [{"vhost": "defs", "name": "cap", "pattern": "^jobs$", "apply-to": "queues", "priority": 0, "definition": {"max-length-bytes": 1048576}}]`, `"policies": [{"name":"p","vhost":"defs","pattern":".*","definition":{"bogus":1}}]`, 1), `policy "p" in "defs": [{<<"bogus">>,1}] are not recognised policy settings`},
		{`{not json`, `failed_to_parse_json`},
	} {
		code, reason := a.postDefinitions(tc.file)
		if code != 400 || !strings.Contains(reason, tc.reason) {
			t.Errorf("import: %d %q, want 400 with %q", code, reason, tc.reason)
		}
		if s := b.Server.VHost("defs"); s != nil {
			t.Fatalf("a refused import made vhost defs (%q)", tc.reason)
		}
		if code := a.call("GET", "/api/users/app", "guest", "guest", nil, nil); code != 404 {
			t.Fatalf("a refused import made user app: %d", code)
		}
	}
}

// --load-definitions imports a file at start (the Docker pattern); a file
// that cannot be imported stops the broker with exit code 1 and the reason.
func TestLoadDefinitionsAtStart(t *testing.T) {
	bin := testutil.Binary(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "defs.json")
	must(t, os.WriteFile(good, []byte(rabbitDefs), 0o644))
	bad := filepath.Join(dir, "bad.json")
	must(t, os.WriteFile(bad, []byte(strings.Replace(rabbitDefs, `"destination": "jobs"`, `"destination": "missing"`, 1)), 0o644))

	out, err := exec.Command(bin, "--data-dir", filepath.Join(dir, "d1"), "--listen", "127.0.0.1:0", "--load-definitions", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "no destination queue") {
		t.Fatalf("bad file: %v\n%s", err, out)
	}
	addr := testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--data-dir", filepath.Join(dir, "d2"), "--listen", addr, "--load-definitions", good)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var c *rmq.Connection
	testutil.Eventually(t, 20*time.Second, func() bool {
		var err error
		c, err = rmq.Dial("amqp://app:test12@" + addr + "/defs")
		return err == nil
	}, "the loaded user connecting (log: %s)", &log)
	defer c.Close()
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclarePassive("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// With a RabbitMQ to compare with (RAILMQ_TEST_URL and its management API
// at RAILMQ_TEST_MGMT_URL): its export, imported into railmq, exports
// back the same objects. Skipped without one.
func TestDefinitionsRoundTripFromRabbitMQ(t *testing.T) {
	if testutil.ExternalURL() == "" {
		t.Skip("needs RabbitMQ: RAILMQ_TEST_URL and RAILMQ_TEST_MGMT_URL")
	}
	rabbit := newAPI(t, nil)
	var theirs map[string]json.RawMessage
	if code := rabbit.call("GET", "/api/definitions", "guest", "guest", nil, &theirs); code != 200 {
		t.Fatalf("RabbitMQ's export: %d", code)
	}
	b, _ := testutil.StartStoppable(t, broker.Options{DataDir: t.TempDir()})
	hs := httptest.NewServer(b.ManagementHandler())
	defer hs.Close()
	rail := &api{t: t, url: hs.URL}
	file, _ := json.Marshal(theirs)
	if code, reason := rail.postDefinitions(string(file)); code != 204 {
		t.Fatalf("importing RabbitMQ's export: %d %s", code, reason)
	}
	var ours map[string]json.RawMessage
	rail.call("GET", "/api/definitions", "guest", "guest", nil, &ours)
	// railmq exports a vhost in RabbitMQ 3.13's shape (name, description,
	// tags, metadata and any default_queue_type): each of RabbitMQ's vhost
	// entries (3.10 to 3.12: the name alone) is in railmq's, field by
	// field.
	ourVHosts := map[string]map[string]any{}
	var vs []map[string]any
	_ = json.Unmarshal(ours["vhosts"], &vs)
	for _, v := range vs {
		ourVHosts[v["name"].(string)] = v
	}
	var theirVHosts []map[string]any
	_ = json.Unmarshal(theirs["vhosts"], &theirVHosts)
	for _, v := range theirVHosts {
		o := ourVHosts[v["name"].(string)]
		for k, val := range v {
			a, _ := json.Marshal(val)
			b, _ := json.Marshal(o[k])
			if o == nil || string(a) != string(b) {
				t.Errorf("vhosts: RabbitMQ's %v not exported back (%s: ours %s)", v, k, b)
			}
		}
		delete(ourVHosts, v["name"].(string))
	}
	for n := range ourVHosts {
		t.Errorf("vhosts: railmq exported vhost %q, not in RabbitMQ's", n)
	}
	for _, key := range []string{"users", "permissions", "topic_permissions", "policies", "queues", "exchanges", "bindings", "parameters"} {
		set := func(raw json.RawMessage) map[string]bool {
			var xs []map[string]any
			_ = json.Unmarshal(raw, &xs)
			out := map[string]bool{}
			for _, x := range xs {
				b, _ := json.Marshal(x) // map keys sorted
				out[string(b)] = true
			}
			return out
		}
		a, o := set(theirs[key]), set(ours[key])
		for k := range a {
			if !o[k] && !(key == "users" && strings.Contains(k, `"name":"guest"`)) { // railmq's own guest differs in its hash
				t.Errorf("%s: RabbitMQ's %s not exported back", key, k)
			}
		}
		for k := range o {
			if !a[k] && !(key == "users" && strings.Contains(k, `"name":"guest"`)) {
				t.Errorf("%s: railmq exported %s, not in RabbitMQ's", key, k)
			}
		}
	}
}
