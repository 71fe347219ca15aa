package conformance

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// GET /api/health/checks/node-is-quorum-critical in a cluster
// (rabbit_mgmt_wm_health_check_node_is_quorum_critical.erl): 200
// {"status":"ok"} while every quorum queue with a member on the node
// would keep its majority without it; once a member is down, 503
// {"status":"failed","reason":"There are quorum queues that would lose
// their quorum if the target node is shut down","queues":[{"name",
// "virtual_host","type":"quorum","readable_name"}]} (amqqueue:to_printable).
// node-is-mirror-sync-critical stays ok: there is no mirroring.
func TestMgmtQuorumCriticalInCluster(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	check := func(n *clusterNode, path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("GET", n.api+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	var err error
	testutil.Eventually(t, 30*time.Second, func() bool {
		conn, e := rmq.Dial(nodes[0].b.URL)
		if e != nil {
			err = e
			return false
		}
		defer conn.Close()
		ch, e := conn.Channel()
		if e != nil {
			err = e
			return false
		}
		_, err = ch.QueueDeclare("qc-q", true, false, false, false, quorumArgs)
		return err == nil
	}, "declare the quorum queue: %v", err)
	var body map[string]any
	testutil.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, body = check(nodes[0], "/api/health/checks/node-is-quorum-critical")
		return code == 200 && body["status"] == "ok" && body["reason"] == nil
	}, "all three members up: %v", body)
	nodes[2].stop()
	testutil.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, body = check(nodes[0], "/api/health/checks/node-is-quorum-critical")
		return code == 503
	}, "a member down: %v", body)
	qs, _ := body["queues"].([]any)
	if body["status"] != "failed" || body["reason"] != "There are quorum queues that would lose their quorum if the target node is shut down" || len(qs) != 1 {
		t.Fatalf("quorum critical: %v", body)
	}
	q, _ := qs[0].(map[string]any)
	if q["name"] != "qc-q" || q["virtual_host"] != "/" || q["type"] != "quorum" || q["readable_name"] != "queue 'qc-q' in vhost '/'" {
		t.Errorf("critical queue %v", q)
	}
	if code, m := check(nodes[0], "/api/health/checks/node-is-mirror-sync-critical"); code != 200 || m["status"] != "ok" {
		t.Errorf("mirror sync critical: %d %v", code, m)
	}
}
