package main

import (
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbitmqadmin v2's parameters, federation, shovels, limits, operator
// policies, permissions and streams groups against a real broker (the
// routes main serves; global_parameters and feature_flags are tested on
// the requests they send, groups2_test.go).
func TestMoreGroupsAgainstBroker(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)
	ok := func(want string, args ...string) string {
		t.Helper()
		out := ctlOK(t, "railmqctl", api, args...)
		if !strings.Contains(out, want) {
			t.Errorf("%v printed %q, want it to hold %q", args, out, want)
		}
		return out
	}
	has := func(list []map[string]any, key, val string) bool {
		for _, m := range list {
			if m[key] == val {
				return true
			}
		}
		return false
	}

	// Runtime parameters, federation upstreams (a component railmq knows).
	ok("set runtime parameter 'up1' of component 'federation-upstream' in vhost '/'",
		"parameters", "set", "--component", "federation-upstream", "--name", "up1", "--value", `{"uri":"amqp://localhost:1"}`)
	if !has(ctlJSON(t, api, "parameters", "list", "--component", "federation-upstream"), "name", "up1") {
		t.Error("parameters list --component: no up1")
	}
	if out := ok("up1", "parameters", "list_all"); !hasRow(out, "up1", "/", "federation-upstream", `{"uri":"amqp://localhost:1"}`) {
		t.Errorf("parameters list_all:\n%s", out)
	}
	ok("cleared runtime parameter 'up1'", "parameters", "clear", "--component", "federation-upstream", "--name", "up1")
	code, _, errOut := ctl(t, "railmqctl", map[string]string{"RAILMQ_MANAGEMENT_URL": api}, "parameters", "clear", "--component", "federation-upstream", "--name", "up1")
	if code != 1 || !strings.Contains(errOut, "no runtime parameter 'up1'") {
		t.Errorf("clearing a missing parameter: exit %d, %q", code, errOut)
	}
	ok("nothing to delete", "parameters", "delete", "--component", "federation-upstream", "--name", "up1", "--idempotently")

	ok("declared federation upstream 'up2' in vhost '/'", "federation", "declare_upstream", "--name", "up2", "--uri", "amqp://localhost:1",
		"--exchange-name", "x", "--max-hops", "2", "--ack-mode", "on-publish")
	ups := ctlJSON(t, api, "federation", "list_all_upstreams")
	if len(ups) != 1 || ups[0]["name"] != "up2" {
		t.Fatalf("list_all_upstreams: %v", ups)
	}
	if v, _ := ups[0]["value"].(map[string]any); v["ack-mode"] != "on-publish" || v["max-hops"] != float64(2) || v["exchange"] != "x" || v["prefetch-count"] != float64(1000) {
		t.Errorf("upstream value %v", v)
	}
	ok("", "federation", "list_all_links")
	ok("deleted federation upstream 'up2'", "federation", "delete_upstream", "--name", "up2")

	// A shovel from one queue to another on this broker moves a message.
	ok("declared queue 'sh-a'", "declare", "queue", "--name", "sh-a")
	ok("declared queue 'sh-b'", "declare", "queue", "--name", "sh-b")
	ok("", "publish", "--routing-key", "sh-a", "--payload", "moved")
	ok("declared shovel 'mv' in vhost '/'", "shovels", "declare_amqp091", "--name", "mv", "--source-uri", "amqp://", "--destination-uri", "amqp://",
		"--source-queue", "sh-a", "--destination-queue", "sh-b")
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, q := range ctlJSON(t, api, "list", "queues") {
			if q["name"] == "sh-b" && q["messages"] == float64(1) {
				return true
			}
		}
		return false
	}, "the shovel moved the message to sh-b")
	if !has(ctlJSON(t, api, "shovels", "list"), "name", "mv") || !has(ctlJSON(t, api, "shovels", "list_all"), "name", "mv") {
		t.Error("shovels list: no mv")
	}
	ok("deleted shovel 'mv' in vhost '/'", "shovels", "delete", "--name", "mv")
	testutil.Eventually(t, 10*time.Second, func() bool { return !has(ctlJSON(t, api, "shovels", "list"), "name", "mv") }, "mv gone")

	// Limits.
	ok("set limit max-queues = 50 on vhost '/'", "vhost_limits", "declare", "--name", "max-queues", "--value", "50")
	if out := ok("", "vhost_limits", "list"); !hasRow(out, "/", "max-queues", "50") {
		t.Errorf("vhost_limits list:\n%s", out)
	}
	ok("cleared limit max-queues on vhost '/'", "vhost_limits", "delete", "--name", "max-queues")
	if out := ok("", "vhost_limits", "list"); hasRow(out, "/", "max-queues", "50") {
		t.Errorf("vhost_limits list after delete:\n%s", out)
	}
	ok("set limit max-channels = 7 on user 'guest'", "user_limits", "declare", "--username", "guest", "--name", "max-channels", "--value", "7")
	if out := ok("", "user_limits", "list", "--user", "guest"); !hasRow(out, "guest", "max-channels", "7") {
		t.Errorf("user_limits list:\n%s", out)
	}
	ok("cleared limit max-channels on user 'guest'", "user_limits", "delete", "--username", "guest", "--name", "max-channels")

	// Operator policies.
	ok("declared operator policy 'cap' in vhost '/'", "operator_policies", "declare", "--name", "cap", "--pattern", "^sh-", "--apply-to", "queues",
		"--definition", `{"max-length":100}`)
	if out := ok("", "operator_policies", "list"); !hasRow(out, "/", "cap", "^sh-", "queues", "0", `{"max-length":100}`) {
		t.Errorf("operator_policies list:\n%s", out)
	}
	ok("deleted operator policy 'cap' in vhost '/'", "operator_policies", "delete", "--name", "cap")

	// Permissions: declare is set_permissions; --username after the
	// command is the user's, the login stays guest.
	ok("declared user 'ann'", "declare", "user", "--name", "ann", "--password", "pw")
	ok("set permissions of user 'ann' in vhost '/'", "permissions", "declare", "--username", "ann", "--configure", "^$", "--write", "^w", "--read", ".*")
	var found bool
	for _, p := range ctlJSON(t, api, "permissions", "list") {
		found = found || (p["user"] == "ann" && p["configure"] == "^$" && p["write"] == "^w" && p["read"] == ".*")
	}
	if !found {
		t.Error("permissions list: no ann")
	}
	ok("deleted permissions of user 'ann' in vhost '/'", "permissions", "delete", "--username", "ann")
	for _, p := range ctlJSON(t, api, "permissions", "list") {
		if p["user"] == "ann" {
			t.Errorf("ann's permissions left: %v", p)
		}
	}

	// Streams: queues of type stream.
	ok("declared stream 'st' in vhost '/'", "streams", "declare", "--name", "st", "--expiration", "7D", "--max-length-bytes", "1000000")
	streams := ctlJSON(t, api, "streams", "list")
	if len(streams) != 1 || streams[0]["name"] != "st" || streams[0]["type"] != "stream" {
		t.Fatalf("streams list: %v", streams)
	}
	if a, _ := streams[0]["arguments"].(map[string]any); a["x-max-age"] != "7D" || a["x-max-length-bytes"] != float64(1000000) {
		t.Errorf("stream arguments %v", a)
	}
	ok("deleted stream 'st' in vhost '/'", "streams", "delete", "--name", "st")
	if s := ctlJSON(t, api, "streams", "list"); len(s) != 0 {
		t.Errorf("streams after delete: %v", s)
	}
}

// global_parameters and feature_flags against a real broker.
func TestGlobalParametersAndFeatureFlagsAgainstBroker(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)
	env := map[string]string{"RAILMQ_MANAGEMENT_URL": api}

	if out := ctlOK(t, "railmqctl", api, "global_parameters", "set", "--name", "cluster_name", "--value", "prod-eu"); out != "set global runtime parameter 'cluster_name'\n" {
		t.Errorf("set printed %q", out)
	}
	ctlOK(t, "railmqctl", api, "global_parameters", "declare", "--name", "ctl-g", "--value", `{"a":1}`)
	if out := ctlOK(t, "railmqctl", api, "global_parameters", "list"); !hasRow(out, "cluster_name", "prod-eu") || !hasRow(out, "ctl-g", `{"a":1}`) {
		t.Errorf("global_parameters list:\n%s", out)
	}
	if out := ctlOK(t, "railmqctl", api, "show", "overview"); !strings.Contains(out, "railmq") {
		t.Errorf("show overview:\n%s", out)
	}
	ctlOK(t, "railmqctl", api, "global_parameters", "clear", "--name", "ctl-g")
	if code, _, errOut := ctl(t, "railmqctl", env, "global_parameters", "clear", "--name", "ctl-g"); code != 1 || !strings.Contains(errOut, "no global runtime parameter 'ctl-g'") {
		t.Errorf("clearing a missing global parameter: exit %d, %q", code, errOut)
	}
	if out := ctlOK(t, "railmqctl", api, "global_parameters", "clear", "--name", "ctl-g", "--idempotently"); !strings.Contains(out, "nothing to delete") {
		t.Errorf("idempotent clear printed %q", out)
	}

	if out := ctlOK(t, "railmqctl", api, "feature_flags", "list"); !hasRow(out, "quorum_queue", "enabled", "stable", "rabbit", "Support", "queues", "of", "type", "`quorum`") {
		t.Errorf("feature_flags list:\n%s", out)
	}
	if out := ctlOK(t, "railmqctl", api, "feature_flags", "enable", "--name", "stream_queue"); out != "enabled feature flag 'stream_queue'\n" {
		t.Errorf("enable printed %q", out)
	}
	// RabbitMQ 3.10.8 answers an unknown flag 400 "unsupported".
	if code, _, errOut := ctl(t, "railmqctl", env, "feature_flags", "enable", "--name", "nope"); code != 1 || !strings.Contains(errOut, "unsupported") {
		t.Errorf("enable nope: exit %d, %q", code, errOut)
	}
	if out := ctlOK(t, "railmqctl", api, "feature_flags", "enable_all"); out != "enabled 0 feature flag(s); every stable feature flag is enabled\n" {
		t.Errorf("enable_all printed %q", out)
	}
}
