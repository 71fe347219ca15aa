package conformance

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// railmqctl drives a broker through its management API, and its
// rabbitmqctl shim takes RabbitMQ's commands.
func TestRailmqctl(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Command(t, "railmqctl")
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	defer hs.Close()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"--url", hs.URL}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("railmqctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("declare", "exchange", "name=ctl-x", "type=topic", "durable=true")
	run("declare", "queue", "name=ctl-q", "durable=true", `arguments={"x-max-length":100}`)
	run("declare", "binding", "source=ctl-x", "destination=ctl-q", "routing_key=a.*")
	run("publish", "--exchange", "ctl-x", "--routing-key", "a.b", "--payload", "hello")
	if out := run("list", "queues", "name", "messages"); !strings.Contains(out, "ctl-q") || !strings.Contains(out, "1") {
		t.Fatalf("list queues:\n%s", out)
	}
	var qs []map[string]any
	if err := json.Unmarshal([]byte(run("list", "queues", "--format", "json")), &qs); err != nil || len(qs) != 1 {
		t.Fatalf("list queues --format json: %v %v", qs, err)
	}
	if out := run("peek", "ctl-q"); !strings.Contains(out, "hello") {
		t.Fatalf("peek:\n%s", out)
	}
	if out := run("get", "ctl-q", "--ackmode", "ack_requeue_false"); !strings.Contains(out, "hello") {
		t.Fatalf("get:\n%s", out)
	}
	run("add_user", "ctl-u", "pw", "--tags", "management")
	run("set_permissions", "ctl-u", "^ctl-", ".*", ".*")
	run("set_user_tags", "ctl-u", "monitoring", "management")
	if out := run("list", "users"); !strings.Contains(out, "monitoring") {
		t.Fatalf("list users:\n%s", out)
	}
	c, err := rmq.Dial("amqp://ctl-u:pw@" + b.Addr + "/")
	if err != nil {
		t.Fatalf("the user railmqctl made (its password kept by set_user_tags): %v", err)
	}
	c.Close()
	// add_vhost, as rabbitmqctl's: a default queue type, then the vhost
	// changed (railmq's: RabbitMQ's add_vhost leaves a vhost that
	// exists as it is), keeping the type.
	run("add_vhost", "ctl-v", "--description", "made by railmqctl", "--default-queue-type", "quorum")
	run("add_vhost", "ctl-v", "--tags", "a,b")
	if out := run("list", "vhosts", "name", "default_queue_type", "tags", "description"); !strings.Contains(strings.Join(strings.Fields(out), " "), `ctl-v quorum ["a","b"] made by railmqctl`) {
		t.Fatalf("list vhosts:\n%s", out)
	}
	run("set_policy", "ctl-cap", "^ctl-", `{"max-length":5}`, "--apply-to", "queues")
	if out := run("list", "policies"); !strings.Contains(out, "ctl-cap") {
		t.Fatalf("list policies:\n%s", out)
	}
	run("clear_policy", "ctl-cap")
	file := filepath.Join(t.TempDir(), "defs.json")
	run("export", file)
	run("delete", "queue", "ctl-q")
	run("import", file)
	if out := run("list", "bindings"); !strings.Contains(out, "a.*") {
		t.Fatalf("the imported binding:\n%s", out)
	}
	if out := run("status"); !strings.Contains(out, "railmq@") {
		t.Fatalf("status:\n%s", out)
	}
	if out, err := exec.Command(bin, "--url", hs.URL, "delete", "queue", "nope").CombinedOutput(); err == nil || !strings.Contains(string(out), "404") {
		t.Fatalf("deleting a missing queue: %v\n%s", err, out)
	}

	// The rabbitmqctl shim, as client test suites call it.
	shim := filepath.Join(t.TempDir(), "rabbitmqctl")
	must(t, os.Symlink(bin, shim))
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(shim, args...)
		cmd.Env = append(os.Environ(), "RAILMQ_MANAGEMENT_URL="+hs.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := ctl("list_queues", "name", "messages"); !strings.Contains(out, "ctl-q") {
		t.Fatalf("rabbitmqctl list_queues:\n%s", out)
	}
	ctl("set_vm_memory_high_watermark", "0.5")
	ctl("ping")
}
