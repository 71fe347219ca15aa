package main

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rabbitmqadmin v2's remaining groups (rabbitmqadmin-ng src/cli/mod.rs)
// send RabbitMQ's management API requests and print what they did.
func TestMoreGroupRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string // after --url
		replies map[string]reply
		want    []request
		out     string
		code    int
		stderr  string // stderr holds it
	}{
		// parameters
		{name: "parameters set", args: []string{"-V", "v", "parameters", "set", "--component", "federation-upstream", "--name", "up", "--value", `{"uri":"amqp://h"}`},
			want: []request{guest("PUT", "/api/parameters/federation-upstream/v/up", j(t, `{"vhost":"v","component":"federation-upstream","name":"up","value":{"uri":"amqp://h"}}`))},
			out:  "set runtime parameter 'up' of component 'federation-upstream' in vhost 'v'\n"},
		{name: "parameters declare (alias)", args: []string{"parameters", "declare", "--component", "c", "--name", "n", "--value", `7`},
			want: []request{guest("PUT", "/api/parameters/c/%2F/n", j(t, `{"vhost":"/","component":"c","name":"n","value":7}`))},
			out:  "set runtime parameter 'n' of component 'c' in vhost '/'\n"},
		{name: "parameters set bad JSON", args: []string{"parameters", "set", "--component", "c", "--name", "n", "--value", `{x`}, code: 1,
			stderr: `--value "{x": not JSON`},
		{name: "parameters set without component", args: []string{"parameters", "set", "--name", "n", "--value", `1`}, code: 1,
			stderr: "railmqctl parameters set: [--component] required"},
		{name: "parameters list in the vhost", args: []string{"parameters", "list"},
			replies: map[string]reply{"GET /api/parameters": {200, `[{"name":"a","vhost":"/","component":"c","value":1},{"name":"b","vhost":"other","component":"c","value":2}]`}},
			want:    []request{guest("GET", "/api/parameters", nil)}, out: "name  vhost  component  value\na     /      c          1\n"},
		{name: "parameters list --component", args: []string{"parameters", "list", "--component", "shovel"},
			want: []request{guest("GET", "/api/parameters/shovel/%2F", nil)}, out: "name  vhost  component  value\n"},
		{name: "parameters list_all", args: []string{"parameters", "list_all"}, want: []request{guest("GET", "/api/parameters", nil)}, out: "name  vhost  component  value\n"},
		{name: "parameters list_in", args: []string{"parameters", "list_in", "--component", "c"}, want: []request{guest("GET", "/api/parameters/c/%2F", nil)},
			out: "name  vhost  component  value\n"},
		{name: "parameters clear", args: []string{"parameters", "clear", "--component", "c", "--name", "n"},
			want: []request{guest("DELETE", "/api/parameters/c/%2F/n", nil)}, out: "cleared runtime parameter 'n' of component 'c' in vhost '/'\n"},
		{name: "parameters delete missing", args: []string{"parameters", "delete", "--component", "c", "--name", "n"},
			replies: map[string]reply{"DELETE /api/parameters/c/%2F/n": {404, `{"error":"Object Not Found","reason":"Not Found"}`}},
			want:    []request{guest("DELETE", "/api/parameters/c/%2F/n", nil)}, code: 1,
			stderr: "no runtime parameter 'n' of component 'c' in vhost '/': 404 Not Found: Not Found"},
		{name: "parameters delete missing, idempotently", args: []string{"parameters", "delete", "--component", "c", "--name", "n", "--idempotently"},
			replies: map[string]reply{"DELETE /api/parameters/c/%2F/n": {404, `{}`}},
			want:    []request{guest("DELETE", "/api/parameters/c/%2F/n", nil)}, out: "no runtime parameter 'n' of component 'c' in vhost '/': nothing to delete\n"},

		// global_parameters
		{name: "global_parameters list", args: []string{"global_parameters", "list"},
			replies: map[string]reply{"GET /api/global-parameters": {200, `[{"name":"cluster_name","value":"prod"}]`}},
			want:    []request{guest("GET", "/api/global-parameters", nil)}, out: "name          value\ncluster_name  prod\n"},
		{name: "global_parameters set string", args: []string{"global_parameters", "set", "--name", "cluster_name", "--value", "prod"},
			want: []request{guest("PUT", "/api/global-parameters/cluster_name", j(t, `{"name":"cluster_name","value":"prod"}`))},
			out:  "set global runtime parameter 'cluster_name'\n"},
		{name: "global_parameters declare JSON", args: []string{"global_parameters", "declare", "--name", "g", "--value", `{"a":1}`},
			want: []request{guest("PUT", "/api/global-parameters/g", j(t, `{"name":"g","value":{"a":1}}`))}, out: "set global runtime parameter 'g'\n"},
		{name: "global_parameters clear", args: []string{"global_parameters", "clear", "--name", "g"},
			want: []request{guest("DELETE", "/api/global-parameters/g", nil)}, out: "cleared global runtime parameter 'g'\n"},

		// feature_flags
		{name: "feature_flags list", args: []string{"feature_flags", "list"},
			replies: map[string]reply{"GET /api/feature-flags": {200, `[{"name":"quorum_queue","state":"enabled","stability":"stable","provided_by":"rabbit","desc":"Support queues of type quorum"}]`}},
			want:    []request{guest("GET", "/api/feature-flags", nil)},
			out:     "name          state    stability  provided_by  desc\nquorum_queue  enabled  stable     rabbit       Support queues of type quorum\n"},
		{name: "feature_flags enable", args: []string{"feature_flags", "enable", "--name", "stream_queue"},
			want: []request{guest("PUT", "/api/feature-flags/stream_queue/enable", j(t, `{}`))}, out: "enabled feature flag 'stream_queue'\n"},
		{name: "feature_flags enable unknown", args: []string{"feature_flags", "enable", "--name", "nope"},
			replies: map[string]reply{"PUT /api/feature-flags/nope/enable": {404, `{"error":"Object Not Found","reason":"Not Found"}`}},
			want:    []request{guest("PUT", "/api/feature-flags/nope/enable", j(t, `{}`))}, code: 1, stderr: "no feature flag 'nope': 404 Not Found"},
		{name: "feature_flags enable_all", args: []string{"feature_flags", "enable_all"},
			replies: map[string]reply{"GET /api/feature-flags": {200, `[{"name":"a","state":"enabled","stability":"stable"},{"name":"b","state":"disabled","stability":"stable"},{"name":"c","state":"disabled","stability":"experimental"}]`}},
			want:    []request{guest("GET", "/api/feature-flags", nil), guest("PUT", "/api/feature-flags/b/enable", j(t, `{}`))},
			out:     "enabled 1 feature flag(s); every stable feature flag is enabled\n"},

		// operator_policies
		{name: "operator_policies declare", args: []string{"-V", "v", "operator_policies", "declare", "--name", "cap", "--pattern", "^q", "--apply-to", "queues", "--priority", "2", "--definition", `{"max-length":10}`},
			want: []request{guest("PUT", "/api/operator-policies/v/cap", j(t, `{"pattern":"^q","apply-to":"queues","priority":2,"definition":{"max-length":10}}`))},
			out:  "declared operator policy 'cap' in vhost 'v'\n"},
		{name: "operator_policies list", args: []string{"operator_policies", "list"}, want: []request{guest("GET", "/api/operator-policies/%2F", nil)},
			out: "vhost  name  pattern  apply-to  priority  definition\n"},
		{name: "operator_policies delete", args: []string{"operator_policies", "delete", "--name", "cap"},
			want: []request{guest("DELETE", "/api/operator-policies/%2F/cap", nil)}, out: "deleted operator policy 'cap' in vhost '/'\n"},

		// vhost_limits, user_limits
		{name: "vhost_limits declare", args: []string{"-V", "v", "vhost_limits", "declare", "--name", "max-queues", "--value", "10"},
			want: []request{guest("PUT", "/api/vhost-limits/v/max-queues", j(t, `{"value":10}`))}, out: "set limit max-queues = 10 on vhost 'v'\n"},
		{name: "vhost_limits declare not a number", args: []string{"vhost_limits", "declare", "--name", "max-queues", "--value", "ten"}, code: 1,
			stderr: "'ten' is not a valid integer value"},
		{name: "vhost_limits list", args: []string{"vhost_limits", "list"},
			replies: map[string]reply{"GET /api/vhost-limits": {200, `[{"vhost":"v","value":{"max-queues":10,"max-connections":5}}]`}},
			want:    []request{guest("GET", "/api/vhost-limits", nil)}, out: "vhost  name             value\nv      max-connections  5\nv      max-queues       10\n"},
		{name: "vhost_limits delete", args: []string{"vhost_limits", "delete", "--name", "max-queues"},
			want: []request{guest("DELETE", "/api/vhost-limits/%2F/max-queues", nil)}, out: "cleared limit max-queues on vhost '/'\n"},
		// --username after the command is the limit's user; before it,
		// the login's (v2's global flags come first).
		{name: "user_limits declare", args: []string{"-u", "admin", "-p", "pw", "user_limits", "declare", "--username", "bob", "--name", "max-channels", "--value", "3"},
			want: []request{{Method: "PUT", Path: "/api/user-limits/bob/max-channels", User: "admin", Pass: "pw", Body: j(t, `{"value":3}`)}},
			out:  "set limit max-channels = 3 on user 'bob'\n"},
		{name: "user_limits list one user", args: []string{"user_limits", "list", "--user", "bob"},
			replies: map[string]reply{"GET /api/user-limits/bob": {200, `[{"user":"bob","value":{"max-channels":3}}]`}},
			want:    []request{guest("GET", "/api/user-limits/bob", nil)}, out: "user  name          value\nbob   max-channels  3\n"},
		{name: "user_limits delete", args: []string{"user_limits", "delete", "--username=bob", "--name", "max-channels"},
			want: []request{guest("DELETE", "/api/user-limits/bob/max-channels", nil)}, out: "cleared limit max-channels on user 'bob'\n"},

		// permissions
		{name: "permissions declare", args: []string{"-V", "v", "permissions", "declare", "--username", "bob", "--configure", "^$", "--write", ".*", "--read", ".*"},
			want: []request{guest("PUT", "/api/permissions/v/bob", j(t, `{"configure":"^$","write":".*","read":".*"}`))},
			out:  "set permissions of user 'bob' in vhost 'v': configure '^$', write '.*', read '.*'\n"},
		{name: "permissions delete", args: []string{"permissions", "delete", "--user", "bob"},
			want: []request{guest("DELETE", "/api/permissions/%2F/bob", nil)}, out: "deleted permissions of user 'bob' in vhost '/'\n"},
		{name: "permissions list", args: []string{"permissions", "list"}, want: []request{guest("GET", "/api/permissions", nil)},
			out: "vhost  user  configure  write  read\n"},

		// streams
		{name: "streams declare", args: []string{"streams", "declare", "--name", "s", "--expiration", "7D", "--max-length-bytes", "1000000", "--stream-max-segment-size-bytes", "5000", "--arguments", `{"x-initial-cluster-size":1}`},
			want: []request{guest("PUT", "/api/queues/%2F/s", j(t, `{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"stream","x-max-age":"7D","x-max-length-bytes":1000000,"x-stream-max-segment-size-bytes":5000,"x-initial-cluster-size":1}}`))},
			out:  "declared stream 's' in vhost '/'\n"},
		{name: "streams declare without expiration", args: []string{"streams", "declare", "--name", "s"}, code: 1, stderr: "[--expiration] required"},
		{name: "streams list", args: []string{"streams", "list"},
			replies: map[string]reply{"GET /api/queues/%2F": {200, `[{"vhost":"/","name":"q","type":"classic"},{"vhost":"/","name":"s","type":"stream","messages":4}]`}},
			want:    []request{guest("GET", "/api/queues/%2F", nil)}, out: "vhost  name  type    messages  consumers  arguments\n/      s     stream  4                    \n"},
		{name: "streams delete", args: []string{"streams", "delete", "--name", "s"}, want: []request{guest("DELETE", "/api/queues/%2F/s", nil)},
			out: "deleted stream 's' in vhost '/'\n"},

		// shovels
		{name: "shovels declare_amqp091 queues", args: []string{"shovels", "declare_amqp091", "--name", "mv", "--source-uri", "amqp://", "--destination-uri", "amqp://h2",
			"--source-queue", "a", "--destination-queue", "b", "--ack-mode", "on-publish", "--predeclared-source"},
			want: []request{guest("PUT", "/api/parameters/shovel/%2F/mv", j(t, `{"vhost":"/","component":"shovel","name":"mv","value":{"src-protocol":"amqp091","src-uri":"amqp://","src-queue":"a","src-predeclared":true,"dest-protocol":"amqp091","dest-uri":"amqp://h2","dest-queue":"b","ack-mode":"on-publish","reconnect-delay":5}}`))},
			out:  "declared shovel 'mv' in vhost '/'\n"},
		{name: "shovels declare_amqp091 exchanges", args: []string{"-V", "v", "shovels", "declare_amqp091", "-n", "x", "--source-uri", "amqp://", "--destination-uri", "amqp://",
			"--source-exchange", "in", "--source-exchange-routing-key", "k", "--destination-exchange", "out", "--destination-exchange-routing-key", "k2",
			"--reconnect-delay", "2", "--publish-properties", `{"delivery_mode":2}`},
			want: []request{guest("PUT", "/api/parameters/shovel/v/x", j(t, `{"vhost":"v","component":"shovel","name":"x","value":{"src-protocol":"amqp091","src-uri":"amqp://","src-exchange":"in","src-exchange-key":"k","dest-protocol":"amqp091","dest-uri":"amqp://","dest-exchange":"out","dest-exchange-key":"k2","ack-mode":"on-confirm","reconnect-delay":2,"dest-publish-properties":{"delivery_mode":2}}}`))},
			out:  "declared shovel 'x' in vhost 'v'\n"},
		{name: "shovels declare_amqp091 no source", args: []string{"shovels", "declare_amqp091", "--name", "x", "--source-uri", "amqp://", "--destination-uri", "amqp://", "--destination-queue", "b"},
			code: 1, stderr: "one of --source-queue and --source-exchange is required"},
		{name: "shovels list", args: []string{"shovels", "list"}, want: []request{guest("GET", "/api/shovels/%2F", nil)},
			out: "name  vhost  type  state  src_uri  src_queue  src_exchange  dest_uri  dest_queue  dest_exchange\n"},
		{name: "shovels list_all", args: []string{"shovels", "list_all"}, want: []request{guest("GET", "/api/shovels", nil)},
			out: "name  vhost  type  state  src_uri  src_queue  src_exchange  dest_uri  dest_queue  dest_exchange\n"},
		{name: "shovels delete", args: []string{"shovels", "delete", "--name", "mv"}, want: []request{guest("DELETE", "/api/parameters/shovel/%2F/mv", nil)},
			out: "deleted shovel 'mv' in vhost '/'\n"},

		// federation
		{name: "federation declare_upstream", args: []string{"federation", "declare_upstream", "--name", "up", "--uri", "amqp://h", "--exchange-name", "x", "--max-hops", "2", "--trust-user-id", "false"},
			want: []request{guest("PUT", "/api/parameters/federation-upstream/%2F/up", j(t, `{"vhost":"/","component":"federation-upstream","name":"up","value":{"uri":"amqp://h","reconnect-delay":5,"trust-user-id":false,"prefetch-count":1000,"ack-mode":"on-confirm","exchange":"x","max-hops":2}}`))},
			out:  "declared federation upstream 'up' in vhost '/'\n"},
		{name: "federation list_all_upstreams", args: []string{"federation", "list_upstreams"},
			replies: map[string]reply{"GET /api/parameters/federation-upstream": {200, `[{"name":"up","vhost":"/","component":"federation-upstream","value":{"uri":"amqp://h","ack-mode":"on-confirm","prefetch-count":1000,"reconnect-delay":5}}]`}},
			want:    []request{guest("GET", "/api/parameters/federation-upstream", nil)},
			out:     "name  vhost  value.uri  value.ack-mode  value.prefetch-count  value.reconnect-delay\nup    /      amqp://h   on-confirm      1000                  5\n"},
		{name: "federation delete_upstream", args: []string{"federation", "delete_upstream", "--name", "up", "--idempotently"},
			replies: map[string]reply{"DELETE /api/parameters/federation-upstream/%2F/up": {404, `{}`}},
			want:    []request{guest("DELETE", "/api/parameters/federation-upstream/%2F/up", nil)}, out: "no federation upstream 'up' in vhost '/': nothing to delete\n"},
		{name: "federation list_all_links", args: []string{"federation", "list_all_links"}, want: []request{guest("GET", "/api/federation-links", nil)},
			out: "vhost  upstream  type  exchange  queue  status  uri\n"},

		// v2's verb-first spellings.
		{name: "list vhost_limits", args: []string{"list", "vhost_limits"}, want: []request{guest("GET", "/api/vhost-limits", nil)}, out: "vhost  name  value\n"},
		{name: "list parameters", args: []string{"list", "parameters", "--component", "c"}, want: []request{guest("GET", "/api/parameters/c/%2F", nil)},
			out: "name  vhost  component  value\n"},
		{name: "list operator_policies", args: []string{"-V", "v", "list", "operator_policies"}, want: []request{guest("GET", "/api/operator-policies/v", nil)},
			out: "vhost  name  pattern  apply-to  priority  definition\n"},
		{name: "declare parameter", args: []string{"declare", "parameter", "--component", "c", "--name", "n", "--value", "1"},
			want: []request{guest("PUT", "/api/parameters/c/%2F/n", j(t, `{"vhost":"/","component":"c","name":"n","value":1}`))}, out: "set runtime parameter 'n' of component 'c' in vhost '/'\n"},
		{name: "declare vhost_limit", args: []string{"declare", "vhost_limit", "--name", "max-connections", "--value", "-1"},
			want: []request{guest("PUT", "/api/vhost-limits/%2F/max-connections", j(t, `{"value":-1}`))}, out: "set limit max-connections = -1 on vhost '/'\n"},
		{name: "declare user_limit", args: []string{"declare", "user_limit", "--user", "bob", "--name", "max-connections", "--value", "2"},
			want: []request{guest("PUT", "/api/user-limits/bob/max-connections", j(t, `{"value":2}`))}, out: "set limit max-connections = 2 on user 'bob'\n"},
		{name: "declare permissions", args: []string{"declare", "permissions", "--username", "bob", "--configure", ".*", "--write", ".*", "--read", ".*"},
			want: []request{guest("PUT", "/api/permissions/%2F/bob", j(t, `{"configure":".*","write":".*","read":".*"}`))},
			out:  "set permissions of user 'bob' in vhost '/': configure '.*', write '.*', read '.*'\n"},
		{name: "declare stream", args: []string{"declare", "stream", "--name", "s", "--expiration", "1h"},
			want: []request{guest("PUT", "/api/queues/%2F/s", j(t, `{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"stream","x-max-age":"1h"}}`))},
			out:  "declared stream 's' in vhost '/'\n"},
		{name: "delete operator_policy", args: []string{"delete", "operator_policy", "--name", "p"}, want: []request{guest("DELETE", "/api/operator-policies/%2F/p", nil)},
			out: "deleted operator policy 'p' in vhost '/'\n"},
		{name: "delete user_limit", args: []string{"delete", "user_limit", "--username", "bob", "--name", "max-connections"},
			want: []request{guest("DELETE", "/api/user-limits/bob/max-connections", nil)}, out: "cleared limit max-connections on user 'bob'\n"},
		{name: "delete shovel", args: []string{"delete", "shovel", "--name", "s"}, want: []request{guest("DELETE", "/api/parameters/shovel/%2F/s", nil)},
			out: "deleted shovel 's' in vhost '/'\n"},
		{name: "delete permissions", args: []string{"delete", "permissions", "--user", "bob"}, want: []request{guest("DELETE", "/api/permissions/%2F/bob", nil)},
			out: "deleted permissions of user 'bob' in vhost '/'\n"},

		// --timeout: seconds, above 0.
		{name: "timeout", args: []string{"--timeout", "5", "list", "users"}, want: []request{guest("GET", "/api/users", nil)}, out: "name  tags\n"},
		{name: "timeout 0", args: []string{"--timeout", "0", "list", "users"}, code: 1, stderr: "--timeout 0: a number of seconds greater than 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.replies)
			code, out, errOut := ctl(t, "railmqctl", nil, append([]string{"--url", api.URL}, tc.args...)...)
			if code != tc.code || (tc.stderr == "" && errOut != "") || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("%v: exit %d (want %d), stderr %q (want it to hold %q)", tc.args, code, tc.code, errOut, tc.stderr)
			}
			if got := api.requests(); !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("%v: requests\n got %+v\nwant %+v", tc.args, got, tc.want)
			}
			if out != tc.out {
				t.Errorf("%v: printed\n%q\nwant\n%q", tc.args, out, tc.out)
			}
		})
	}
}

// move_messages' own --timeout takes the global one's seconds as well
// as a duration.
func TestMoveTimeoutFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "2m": 2 * time.Minute, "0": 0} {
		var d time.Duration
		if err := (secondsOrDuration{&d}).Set(in); err != nil || d != want {
			t.Errorf("%q: %v, %v; want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"-1", "soon", "-2s"} {
		var d time.Duration
		if err := (secondsOrDuration{&d}).Set(in); err == nil {
			t.Errorf("%q accepted as %v", in, d)
		}
	}
}

// --timeout bounds a request: an API that does not answer is given up
// on after it (exit 69, as for a node that cannot be reached).
func TestTimeoutFlag(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // answers only when the client has left, or after a minute
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	t.Cleanup(hs.Close)
	start := time.Now()
	code, _, errOut := ctl(t, "railmqctl", nil, "--url", hs.URL, "--timeout", "0.5", "list", "users")
	if code != exitUnavailable || !strings.Contains(errOut, "Timeout") {
		t.Fatalf("exit %d, stderr %q; want 69 and a timeout", code, errOut)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}
