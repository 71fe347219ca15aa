package conformance

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/crypt"
	"github.com/railmq/railmq/internal/testutil"
)

// TestEncryptionCluster: three nodes with a data encryption key (each
// its own; nothing requires the same) replicate a quorum queue; once
// every member shows the messages, the nodes stop, and no file under
// any node's data dir (raft logs and snapshots, metadata log, store)
// holds a body. The control, the same cluster without keys, finds the
// bodies in the nodes' raft logs.
func TestEncryptionCluster(t *testing.T) {
	testutil.InProcess(t)
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", enc), func(t *testing.T) {
			peers := map[string]string{}
			for i := 1; i <= 3; i++ {
				peers[fmt.Sprintf("rabbit%d@localhost", i)] = testutil.FreePort(t)
			}
			var nodes []*clusterNode
			for i := 1; i <= 3; i++ {
				var keys *crypt.Keys
				if enc {
					keys = &crypt.Keys{Key: bytes.Repeat([]byte{byte(i)}, 32), KeyFile: "key"}
				}
				nodes = append(nodes, startCryptNode(t, t.TempDir(), fmt.Sprintf("rabbit%d@localhost", i), peers, keys))
			}
			marker := newMarker()
			declareQuorum(t, nodes[0].b.URL, "crypt-cq", rmq.Table{"x-queue-type": "quorum"})
			ch := clusterChannels(t, nodes[:1])[0]
			must(t, ch.Confirm(false))
			for i := range 30 {
				c, err := ch.PublishWithDeferredConfirm("", "crypt-cq", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: cryptBody(marker, i)})
				must(t, err)
				if !c.Wait() {
					t.Fatalf("publish %d nacked", i)
				}
			}
			for _, n := range nodes {
				a := &api{t: t, url: n.api}
				testutil.Eventually(t, 30*time.Second, func() bool { return qqStats(t, a, "crypt-cq").Messages == 30 },
					"%s does not show the 30 messages", n.name)
			}
			for _, n := range nodes {
				n.stop()
			}
			held := 0
			for _, n := range nodes {
				files := filesHolding(t, n.dir, []byte(marker))
				t.Logf("%s: files holding a body: %v", n.name, files)
				if enc && len(files) > 0 {
					t.Errorf("%s: bodies in the clear in %v", n.name, files)
				}
				if anyUnder(files, "cluster") {
					held++
				}
			}
			if !enc && held < 2 {
				t.Fatalf("plain cluster: only %d nodes' raft logs hold a body: the search would miss them", held)
			}
			if !enc {
				return
			}
			// A rolling restart with a new key: the two other nodes first,
			// as they were, then node 1 with key 9 and its old key 1, then
			// with key 9 alone; it finds its member's messages each time.
			for i := 1; i < 3; i++ {
				nodes[i] = startCryptNode(t, nodes[i].dir, nodes[i].name, peers, &crypt.Keys{Key: bytes.Repeat([]byte{byte(i + 1)}, 32), KeyFile: "key"})
			}
			newKey := bytes.Repeat([]byte{9}, 32)
			for _, keys := range []*crypt.Keys{
				{Key: newKey, KeyFile: "new", Old: []crypt.OldKey{{Key: bytes.Repeat([]byte{1}, 32), File: "old"}}},
				{Key: newKey, KeyFile: "new"},
			} {
				n := startCryptNode(t, nodes[0].dir, nodes[0].name, peers, keys)
				a := &api{t: t, url: n.api}
				testutil.Eventually(t, 30*time.Second, func() bool {
					var st qqDLXStats
					return a.call("GET", "/api/queues/%2F/crypt-cq", "guest", "guest", nil, &st) == 200 && st.Messages == 30
				}, "%s restarted with a new key (old keys: %d) does not show the 30 messages", n.name, len(keys.Old))
				n.stop()
			}
			if files := filesHolding(t, nodes[0].dir, []byte(marker)); len(files) > 0 {
				t.Fatalf("bodies in the clear after the rotation: %v", files)
			}
		})
	}
}

// startCryptNode starts an in-process cluster node on dir under keys.
func startCryptNode(t *testing.T, dir, name string, peers map[string]string, keys *crypt.Keys) *clusterNode {
	t.Helper()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir, DataKeys: keys, Cluster: &cluster.NodeConfig{
		Name: name, Listen: peers[name], Peers: peers, Secret: []byte("test-cookie"),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond}})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	return &clusterNode{name: name, addr: peers[name], b: b, stop: stop, api: hs.URL, dir: dir, peers: peers}
}
