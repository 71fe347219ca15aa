package conformance

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// The fault suite's stream rounds (make cluster-test): the same three
// railmq processes behind the fault-injecting proxy as TestClusterFaults
// (cluster_fault_test.go), a replicated stream (x-initial-cluster-size
// 3) under publishers with confirms that hop from node to node as nodes
// fail, and one fault per round: kill -9 the stream's leader, kill -9 a
// follower, restart a node with its data, restart one with an empty data
// dir, cut one node off from the other two for a few seconds. After
// every round the cluster must confirm again on the majority within
// maxService, and the node hit must catch up. At the end the history
// decides, on every node's copy read from its first offset: every
// confirmed message is in it exactly once; nothing in it was never
// published; offsets are dense and rising; the three copies are the same
// records at the same offsets.

// startFaultCluster starts the suite's three processes, each one's
// inter-node traffic through the fault proxy.
func startFaultCluster(t *testing.T, bin string) ([]*faultNode, *faultNet) {
	secret := filepath.Join(t.TempDir(), "cookie")
	testutil.WriteFile(t, secret, []byte("fault-suite-secret"))
	fn := &faultNet{cut: map[int]bool{}, quiet: map[int]bool{}, conns: map[net.Conn][2]int{}, ips: map[string]int{}}
	fn.wake = sync.NewCond(&fn.mu)
	t.Cleanup(fn.close)
	nodes := make([]*faultNode, 3)
	var proxies []*faultProxy
	var peers []string
	for i := range nodes {
		ip := fmt.Sprintf("127.0.0.%d", 21+i)
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		listen := l.Addr().String()
		l.Close()
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fn.lns = append(fn.lns, pl)
		fn.ips[ip] = i
		p := &faultProxy{ln: pl, dst: i, target: listen, net: fn}
		proxies = append(proxies, p)
		nodes[i] = &faultNode{i: i, name: fmt.Sprintf("rabbit%d@localhost", i+1), dir: t.TempDir(),
			amqp: testutil.FreePort(t), mgmt: testutil.FreePort(t), listen: listen, secret: secret}
		peers = append(peers, nodes[i].name+"="+pl.Addr().String())
	}
	for _, p := range proxies {
		fn.wg.Add(1)
		go fn.serve(p)
	}
	for _, n := range nodes {
		n.peers = strings.Join(peers, ",")
		n.start(t, bin, false)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	return nodes, fn
}

// streamCount is how many records the stream holds on n (its
// management API's messages), -1 if n does not answer.
func streamCount(n *faultNode, q string) int {
	v, ok := n.queue(q)
	if !ok {
		return -1
	}
	return v.Messages
}

func TestClusterFaultsStream(t *testing.T) {
	testutil.InProcess(t)
	if testing.Short() {
		t.Skip("starts three broker processes")
	}
	bin := testutil.Binary(t)
	rounds := clusterRounds()
	nodes, fn := startFaultCluster(t, bin)
	const qname = "fault-stream"
	declareStreamOn(t, nodes[0].url(), qname, 3)
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, n := range nodes {
			if v, ok := n.queue(qname); !ok || v.Leader == "" {
				return false
			}
		}
		return true
	}, "the stream is not on every node with a leader")

	h := &history{published: map[uint64]bool{}, confirmed: map[uint64]bool{}, refused: map[uint64]bool{},
		acked: map[uint64]bool{}, returned: map[uint64]bool{}, delivered: map[uint64]int{},
		t0: time.Now(), first: map[uint64]string{}}
	var upMu sync.Mutex
	down := map[int]bool{}
	up := func() []int {
		upMu.Lock()
		defer upMu.Unlock()
		var out []int
		for i := range nodes {
			if !down[i] {
				out = append(out, i)
			}
		}
		return out
	}
	setDown := func(i int, d bool) {
		upMu.Lock()
		down[i] = d
		upMu.Unlock()
	}
	load := &faultLoad{h: h, nodes: nodes, up: up, stop: make(chan struct{}), queue: qname}
	for p := range 2 {
		load.wg.Add(1)
		go load.publisher(p)
	}
	stopLoad := sync.OnceFunc(func() { close(load.stop); load.wg.Wait() })
	defer stopLoad()
	leaderOf := func() int {
		for _, i := range up() {
			if v, ok := nodes[i].queue(qname); ok && v.Leader != "" {
				for j, n := range nodes {
					if n.name == v.Leader {
						return j
					}
				}
			}
		}
		return -1
	}
	// caughtUp: the node back holds as many records as the leader held
	// when it came back.
	caughtUp := func(i int, within time.Duration) bool {
		want := -1
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if l := leaderOf(); want < 0 && l >= 0 {
				want = streamCount(nodes[l], qname)
			}
			if want >= 0 && streamCount(nodes[i], qname) >= want {
				return true
			}
			time.Sleep(200 * time.Millisecond)
		}
		return false
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 21))
	kinds := []string{"kill-leader", "kill-follower", "restart", "wipe", "partition"}
	for round := 0; round < rounds; round++ {
		kind := kinds[round%len(kinds)]
		leader := leaderOf()
		if leader < 0 {
			t.Fatalf("round %d: no stream leader known", round)
		}
		victim := leader
		switch kind {
		case "kill-follower":
			victim = (leader + 1 + rng.IntN(2)) % 3
		case "restart", "wipe", "partition":
			victim = rng.IntN(3)
		}
		n := nodes[victim]
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond) // load runs
		at := time.Now()
		h.event("round %d: %s of %s (leader %s)", round, kind, n.name, nodes[leader].name)
		setDown(victim, true)
		switch kind {
		case "kill-leader", "kill-follower":
			n.kill()
		case "restart":
			n.stop(t)
		case "wipe":
			n.kill()
			if err := os.RemoveAll(n.dir); err != nil {
				t.Fatal(err)
			}
		case "partition":
			fn.isolate(victim, true)
		}
		// The majority confirms again: a probe there gets a confirm (the
		// load's publishers may be on the victim: a cut-off node's
		// connections stay open, and its publishes wait).
		if !probeServed(h, load, nodes, victim, qname, at.Add(maxService)) {
			dumpLogs(nodes, fmt.Sprintf("stream%d", round))
			t.Fatalf("round %d (%s of %s): the majority confirmed nothing within %v\n%s", round, kind, n.name, maxService, describeNodes(nodes, qname))
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		switch kind {
		case "partition":
			fn.isolate(victim, false)
		case "wipe":
			n.start(t, bin, true)
		default:
			n.start(t, bin, false)
		}
		h.event("round %d: %s back", round, n.name)
		setDown(victim, false)
		if !caughtUp(victim, 60*time.Second) {
			dumpLogs(nodes, fmt.Sprintf("stream%d", round))
			t.Fatalf("round %d (%s of %s): the node did not catch up within 60 s\n%s", round, kind, n.name, describeNodes(nodes, qname))
		}
	}
	stopLoad()
	checkStreamHistory(t, h, nodes, qname)
}

// probeServed publishes one message at a time on the nodes other than
// victim, in turn, until one is confirmed (true) or deadline passes.
func probeServed(h *history, load *faultLoad, nodes []*faultNode, victim int, q string, deadline time.Time) bool {
	for k := 0; time.Now().Before(deadline); k++ {
		n := nodes[(victim+1+k%2)%3]
		c, err := rmq.DialConfig(n.url(), rmq.Config{Dial: rmq.DefaultDial(time.Second)})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ok := func() bool {
			defer c.Close()
			ch, err := c.Channel()
			if err != nil || ch.Confirm(false) != nil {
				return false
			}
			id := load.next.Add(1)
			h.mu.Lock()
			h.published[id] = true
			h.mu.Unlock()
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: crashBody(id, 64)})
			if err != nil {
				return false
			}
			select {
			case <-dc.Done():
			case <-time.After(2 * time.Second):
				return false // its outcome stays unknown: neither confirmed nor refused
			}
			acked := dc.Acked()
			h.mu.Lock()
			if acked {
				h.confirmed[id] = true
			} else {
				h.refused[id] = true
			}
			h.mu.Unlock()
			return acked
		}()
		if ok {
			return true
		}
	}
	return false
}

// checkStreamHistory reads every node's copy of the stream from its
// first offset, once all hold as many records, and checks them against
// the history.
func checkStreamHistory(t *testing.T, h *history, nodes []*faultNode, q string) {
	t.Helper()
	var total int
	testutil.Eventually(t, 60*time.Second, func() bool {
		total = streamCount(nodes[0], q)
		for _, n := range nodes[1:] {
			if streamCount(n, q) != total {
				return false
			}
		}
		return total > 0
	}, "the copies do not reach the same length:\n%s", describeNodes(nodes, q))
	var copies [][]streamMsg
	for _, n := range nodes {
		got, err := readStream(n.url(), q, total, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: reading the stream: %v", n.name, err)
		}
		if len(got) != total {
			t.Fatalf("%s: read %d records, its count is %d", n.name, len(got), total)
		}
		seen := map[uint64]int64{}
		for i, m := range got {
			if i > 0 && m.offset != got[i-1].offset+1 {
				t.Fatalf("%s: offset %d after %d", n.name, m.offset, got[i-1].offset)
			}
			id, ok := parseCrashBody([]byte(m.body))
			if !ok {
				t.Fatalf("%s: record at offset %d is corrupt", n.name, m.offset)
			}
			h.mu.Lock()
			pub := h.published[id]
			h.mu.Unlock()
			if !pub {
				t.Fatalf("%s: record at offset %d (id %d) was never published", n.name, m.offset, id)
			}
			if at, dup := seen[id]; dup {
				t.Fatalf("%s: id %d at offsets %d and %d", n.name, id, at, m.offset)
			}
			seen[id] = m.offset
		}
		h.mu.Lock()
		var lost []uint64
		for id := range h.confirmed {
			if _, ok := seen[id]; !ok {
				lost = append(lost, id)
			}
		}
		confirmed, refused := len(h.confirmed), len(h.refused)
		h.mu.Unlock()
		if len(lost) > 0 {
			h.mu.Lock()
			events := strings.Join(h.events, "\n")
			h.mu.Unlock()
			t.Fatalf("%s: %d confirmed messages lost (e.g. %v)\n%s", n.name, len(lost), lost[:min(len(lost), 10)], events)
		}
		t.Logf("%s: %d records, %d confirmed (all there), %d refused", n.name, total, confirmed, refused)
		copies = append(copies, got)
	}
	for k := 1; k < len(copies); k++ {
		for i := range copies[0] {
			if copies[k][i] != copies[0][i] {
				t.Fatalf("%s has %+v at index %d where %s has %+v", nodes[k].name, copies[k][i], i, nodes[0].name, copies[0][i])
			}
		}
	}
}
