package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// leasePika is a pika (1.2) worker as docs/leases.md shows one: it
// extends a delivery's lease past the queue's consumer timeout, then
// schedules a retry, receives the redelivery after x-delay and acks it;
// a lease of an unknown tag is nacked (pika's NackError) and the channel
// stays open. It prints "ok" or raises.
const leasePika = `
import sys, time
import pika
from pika.exceptions import NackError

conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare("lease-pika", arguments={"x-consumer-timeout": 1000})
ch.basic_publish("", "lease-pika", b"job")

def next_delivery(timeout):
    for m, p, body in ch.consume("lease-pika", inactivity_timeout=timeout):
        if m is not None:
            return m, p, body
        raise SystemExit("no delivery within %ss" % timeout)

m, _, body = next_delivery(5)
assert body == b"job" and not m.redelivered, (body, m.redelivered)
start = time.time()
ch.basic_publish("amq.railmq.lease", str(m.delivery_tag), b"",
                 pika.BasicProperties(headers={"x-lease-ms": 3000}))
time.sleep(2)  # past the 1 s consumer timeout
assert ch.is_open, "channel closed despite the lease"
ch.basic_publish("amq.railmq.lease", str(m.delivery_tag), b"")  # default: the timeout again
try:
    ch.basic_publish("amq.railmq.lease", "999", b"")
    raise SystemExit("lease of an unknown tag confirmed")
except NackError:
    pass
assert ch.is_open, "channel closed by a refused lease"
at = time.time()
ch.basic_publish("amq.railmq.retry", str(m.delivery_tag), b"",
                 pika.BasicProperties(headers={"x-delay": 1200}))
m2, _, body = next_delivery(10)
waited = time.time() - at
assert body == b"job" and m2.redelivered, (body, m2.redelivered)
assert waited >= 1.2, "redelivered after %.3fs, want 1.2s" % waited
ch.basic_ack(m2.delivery_tag)
ch.cancel()
ch.queue_delete("lease-pika")
conn.close()
print("ok")
`

func TestLeasePika(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	script := filepath.Join(t.TempDir(), "lease_pika.py")
	must(t, os.WriteFile(script, []byte(leasePika), 0o600))
	out, err := exec.Command("/usr/bin/python3", script, b.URL).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("pika worker: %v\n%s", err, out)
	}
}
