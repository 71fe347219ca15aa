package conformance

import (
	"fmt"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestClusterAPISeesDeclareAtOnce: a queue declared through one node is
// found by GET /api/queues/{vhost}/{name} on every other node as soon as
// declare-ok has come, as with RabbitMQ, whose declares are synchronous
// cluster-wide (a tool that declares through one node and reads through
// a load balancer must not see 404). A missing queue is still a 404.
func TestClusterAPISeesDeclareAtOnce(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	ch := clusterChannels(t, nodes[:1])[0]
	for i := range 10 {
		for _, args := range []rmq.Table{quorumArgs, nil} {
			q := fmt.Sprintf("seen-%d-%v", i, args != nil)
			_, err := ch.QueueDeclare(q, true, false, false, false, args)
			must(t, err)
			for _, n := range nodes[1:] {
				var v map[string]any
				if code := (&api{t: t, url: n.api}).call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &v); code != 200 {
					t.Fatalf("GET %s on %s right after its declare-ok: %d", q, n.name, code)
				}
			}
		}
	}
	if code := (&api{t: t, url: nodes[2].api}).call("GET", "/api/queues/%2F/never-declared", "guest", "guest", nil, nil); code != 404 {
		t.Fatalf("GET of a missing queue: %d, want 404", code)
	}
}
