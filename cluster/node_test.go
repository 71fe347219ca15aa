package cluster

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/internal/poll"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMuxRefusesAWrongSecret: a peer that does not know the secret gets
// no connection to any group.
func TestMuxRefusesAWrongSecret(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(ln, []byte("right"), nil)
	defer m.Close()
	l, err := m.Layer("meta")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	bad := &Mux{secret: []byte("wrong")}
	if c, err := bad.dial(ln.Addr().String(), "meta", time.Second); err == nil || !errors.Is(err, io.EOF) {
		if c != nil {
			c.Close()
		}
		t.Errorf("the wrong secret's dial: %v, want EOF (the listener hangs up)", err)
	}
	select {
	case <-accepted:
		t.Fatal("a connection with the wrong secret was accepted")
	case <-time.After(200 * time.Millisecond):
	}
	good := &Mux{secret: []byte("right")}
	c, err := good.dial(ln.Addr().String(), "meta", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case a := <-accepted:
		a.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the right secret's connection was not accepted")
	}

	// The other way: a listener with the wrong secret gets no connection
	// either (it hangs up on the dialler's proof; a listener that answers
	// with a proof of its own is refused: TestFakeListenerGetsNothingBeyondTheHandshake).
	wln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wrong := NewMux(wln, []byte("wrong"), nil)
	defer wrong.Close()
	if _, err := wrong.Layer("meta"); err != nil {
		t.Fatal(err)
	}
	if c, err := good.dial(wln.Addr().String(), "meta", time.Second); err == nil {
		c.Close()
		t.Error("dialling a listener with the wrong secret succeeded")
	}
}

func startNodes(t *testing.T, n int) ([]*Node, []NodeConfig) {
	t.Helper()
	peers := map[string]string{}
	for i := 0; i < n; i++ {
		peers[fmt.Sprintf("rabbit%d", i)] = freeAddr(t)
	}
	var nodes []*Node
	var cfgs []NodeConfig
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("rabbit%d", i)
		// Raft's timeouts at 1 s (its default): shorter ones lost the
		// leadership under -race beside two busy loops ("leadership lost
		// while committing log" failed a submit).
		cfg := NodeConfig{Name: name, Listen: peers[name], Peers: peers, Secret: []byte("cookie"), DataDir: t.TempDir(),
			HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, WriteTimeout: 3 * time.Second}
		nd, err := StartNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
		cfgs = append(cfgs, cfg)
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd != nil {
				_ = nd.Close()
			}
		}
	})
	return nodes, cfgs
}

func nodeLeader(t *testing.T, nodes []*Node) (int, *Node) {
	t.Helper()
	i := -1
	poll.Eventually(t, 15*time.Second, func() bool {
		for j, nd := range nodes {
			if nd != nil && nd.Status().State == "Leader" {
				i = j
				return true
			}
		}
		return false
	}, "no leader elected")
	return i, nodes[i]
}

// TestNodesReplicateMetadata: three nodes over real TCP elect a leader;
// a definition put on it is on every node; the leader stopped, another
// takes over and writes go on; the stopped node started again from its
// data dir catches up.
func TestNodesReplicateMetadata(t *testing.T) {
	nodes, cfgs := startNodes(t, 3)
	li, l := nodeLeader(t, nodes)
	for _, nd := range nodes {
		st := nd.Status()
		if len(st.Members) != 3 {
			t.Fatalf("%s sees members %v", st.Name, st.Members)
		}
	}
	if err := l.Put("queue//orders", []byte(`{"durable":true}`)); err != nil {
		t.Fatal(err)
	}
	// A follower forwards a write to the leader, and has applied it when
	// Put returns.
	follower := nodes[(li+1)%3]
	if err := follower.Put("user/ops", []byte("x")); err != nil {
		t.Fatalf("put on a follower: %v", err)
	}
	if v, ok := follower.Get("user/ops"); !ok || string(v) != "x" {
		t.Errorf("the follower does not read its own write: %q %v", v, ok)
	}
	for _, nd := range nodes {
		poll.Eventually(t, 5*time.Second, func() bool { v, ok := nd.Get("queue//orders"); return ok && strings.Contains(string(v), "durable") }, "%s lacks the definition", nd.cfg.Name)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	nodes[li] = nil
	_, l2 := nodeLeader(t, nodes)
	if l2.Status().Name == cfgs[li].Name {
		t.Fatal("the stopped node leads")
	}
	if err := l2.Put("queue//invoices", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := l2.Delete("queue//orders"); err != nil {
		t.Fatal(err)
	}
	back, err := StartNode(cfgs[li])
	if err != nil {
		t.Fatal(err)
	}
	nodes[li] = back
	poll.Eventually(t, 10*time.Second, func() bool {
		_, gone := back.Get("queue//orders")
		_, here := back.Get("queue//invoices")
		return here && !gone
	}, "the restarted node did not catch up")

	// Alone, a node writes nothing: the minority refuses.
	var alone *Node
	for i, nd := range nodes {
		if i == li {
			alone = nd
			continue
		}
		_ = nd.Close()
		nodes[i] = nil
	}
	start := time.Now()
	if err := alone.Put("queue//lost", []byte("{}")); err == nil {
		t.Fatal("a node without a quorum accepted a write")
	}
	if _, ok := alone.Get("queue//lost"); ok {
		t.Error("the refused write is visible")
	}
	t.Logf("the lone node refused the write after %v", time.Since(start).Round(time.Millisecond))
}

// TestMetaFSMSnapshot: a restored store has the keys and knows the index
// it is at (what a follower's read-your-write waits for).
func TestMetaFSMSnapshot(t *testing.T) {
	f := NewMetaFSM()
	for i, c := range []metaCmd{{Op: metaPut, Key: "a", Val: []byte("1")}, {Op: metaPut, Key: "b", Val: []byte("2")}, {Op: metaDelete, Key: "a"}} {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(&c); err != nil {
			t.Fatal(err)
		}
		if err := f.Apply(&raft.Log{Index: uint64(10 + i), Data: buf.Bytes()}); err != nil {
			t.Fatal(err)
		}
	}
	if e := f.Apply(&raft.Log{Index: 13, Data: []byte("junk")}); e == nil {
		t.Error("a command that does not decode applied")
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := NewMetaFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap.(fsmSnapshot)))); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Get("a"); ok {
		t.Error("a deleted key came back")
	}
	if v, _ := g.Get("b"); string(v) != "2" || g.applied.Load() != 13 {
		t.Errorf("restored b=%q at index %d, want 2 at 13", v, g.applied.Load())
	}
}
