package cluster_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

func nodeTLS(t *testing.T, ca *testutil.CA, cn string) *tls.Config {
	kp := ca.Node(t, cn)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp.TLS(t)},
		RootCAs: ca.Pool(), ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
}

// TestNodesOverTLS: nodes with certificates from the cluster's CA form a
// cluster over TLS; a node whose certificate another CA signed, even
// with the right secret, gets no connection.
func TestNodesOverTLS(t *testing.T) {
	ca, other := testutil.NewCA(t, "cluster CA"), testutil.NewCA(t, "another CA")
	peers := map[string]string{}
	for i := 0; i < 3; i++ {
		peers[fmt.Sprintf("n%d", i)] = testutil.FreePort(t)
	}
	var nodes []*cluster.Node
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("n%d", i)
		n, err := cluster.StartNode(cluster.NodeConfig{Name: name, Listen: peers[name], Peers: peers, Secret: []byte("s"),
			DataDir: t.TempDir(), TLS: nodeTLS(t, ca, name), HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		defer n.Close()
	}
	var leader *cluster.Node
	poll.Eventually(t, 15*time.Second, func() bool {
		for _, n := range nodes {
			if n.Status().State == "Leader" {
				leader = n
				return true
			}
		}
		return false
	}, "no leader over TLS")
	if err := leader.Put("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		poll.Eventually(t, 5*time.Second, func() bool { v, _ := n.Get("k"); return string(v) == "v" }, "a node lacks the write")
	}

	// A stranger: right secret, wrong CA.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stranger := cluster.NewMux(ln, []byte("s"), nodeTLS(t, other, "stranger"))
	defer stranger.Close()
	l, err := stranger.Layer("meta")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := l.Dial(raft.ServerAddress(peers["n0"]), 2*time.Second); err == nil {
		c.Close()
		t.Fatal("a node with another CA's certificate connected")
	}
}
