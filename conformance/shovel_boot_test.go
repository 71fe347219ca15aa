package conformance

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// Shovels at boot from a definitions file: the shovel parameters of a
// file given to `railmq --load-definitions` run as soon as the broker is
// up, as RabbitMQ's load_definitions at boot imports them
// (rabbit_definitions.erl add_parameter -> rabbit_runtime_parameters:set
// -> rabbit_shovel_parameters:notify -> rabbit_shovel_dyn_worker_sup_sup:
// adjust, rabbitmq-server v4.0.0; the same in 3.10.8, where an imported
// shovel is listed "running" by GET /api/shovels: TestShovelDefinitionsImport).
// One shovel takes the local path (host-less URIs), the other the
// broker's own AMQP listener over TCP, which is not yet open while the
// file is imported: it connects once the listener is (reconnect-delay).
// Started again with the same file (the Docker pattern: the file is given
// at every start), the broker still runs each shovel once, and what was
// moved before is still at the destinations, none lost.
func TestShovelsAtBootFromDefinitions(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	addr, mgmtAddr := testutil.FreePort(t), testutil.FreePort(t)
	defs := `{
  "rabbit_version": "3.10.8",
  "vhosts": [{"name": "boot"}],
  "permissions": [{"user": "guest", "vhost": "boot", "configure": ".*", "write": ".*", "read": ".*"}],
  "queues": [
    {"name": "src1", "vhost": "boot", "durable": true, "auto_delete": false, "arguments": {}},
    {"name": "dst1", "vhost": "boot", "durable": true, "auto_delete": false, "arguments": {}},
    {"name": "src2", "vhost": "boot", "durable": true, "auto_delete": false, "arguments": {}},
    {"name": "dst2", "vhost": "boot", "durable": true, "auto_delete": false, "arguments": {}}
  ],
  "parameters": [
    {"value": {"src-uri": "amqp:///boot", "src-queue": "src1", "dest-uri": "amqp:///boot", "dest-queue": "dst1", "ack-mode": "on-confirm"},
     "vhost": "boot", "component": "shovel", "name": "local"},
    {"value": {"src-uri": "amqp://guest:guest@` + addr + `/boot", "src-queue": "src2", "dest-uri": "amqp://guest:guest@` + addr + `/boot", "dest-queue": "dst2", "ack-mode": "on-confirm", "reconnect-delay": 1},
     "vhost": "boot", "component": "shovel", "name": "tcp"}
  ]
}`
	file := filepath.Join(dir, "defs.json")
	must(t, os.WriteFile(file, []byte(defs), 0o644))
	a := &api{t: t, url: "http://" + mgmtAddr}
	moved := map[string]map[string]int{"dst1": {}, "dst2": {}}
	for life := 1; life <= 2; life++ {
		cmd := exec.Command(bin, "--listen", addr, "--management-listen", mgmtAddr, "--data-dir", filepath.Join(dir, "data"),
			"--log-level", "warn", "--load-definitions", file)
		var logs bytes.Buffer
		cmd.Stderr = &logs
		must(t, cmd.Start())
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
			}
		}
		t.Cleanup(stop)
		testutil.WaitListening(t, addr, 30*time.Second) // after the import; the API answers 503 until then
		poll.Eventually(t, 30*time.Second, func() bool {
			l := sapiShovels(t, a, "/api/shovels/boot")
			running := 0
			for _, s := range l {
				if s["state"] == "running" {
					running++
				}
			}
			return len(l) == 2 && running == 2
		}, "life %d: both shovels of the file listed once and running (log: %s)", life, &logs)
		c := dial(t, "amqp://guest:guest@"+addr+"/boot")
		ch := openChannel(t, c)
		must(t, ch.Confirm(false))
		for _, q := range []string{"1", "2"} {
			for i := range 10 {
				dc, err := ch.PublishWithDeferredConfirm("", "src"+q, false, false,
					rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("life%d-%d", life, i))})
				if err != nil || !dc.Wait() {
					t.Fatalf("publish to src%s: %v", q, err)
				}
			}
		}
		// Count what reached the destinations (taking it, so that the
		// second life sees its own and any duplicate of the first's).
		for dst, seen := range moved {
			poll.Eventually(t, 30*time.Second, func() bool {
				for {
					m, ok, err := ch.Get(dst, true)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					seen[string(m.Body)]++
				}
				return len(seen) == 10*life
			}, "life %d: the messages at %s (have %v)", life, dst, seen)
		}
		c.Close()
		stop()
	}
	// At least once: a message whose source ack the first life's stop
	// overtook comes again in the second (on-confirm acks the source
	// after the destination's confirm).
	for dst, seen := range moved {
		var again []string
		for b, k := range seen {
			if k > 1 {
				again = append(again, b)
			}
		}
		t.Logf("%s: %d distinct, again: %s", dst, len(seen), strings.Join(again, " "))
	}
}
