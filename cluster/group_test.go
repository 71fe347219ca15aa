package cluster

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/internal/poll"
)

// groupNode is one node's member of a test group, with what it applied.
type groupNode struct {
	g  *Group
	mu sync.Mutex
	// delivered: the deliveries this node's consumers (tag prefix its
	// name) got when it applied them.
	delivered []Delivery
}

func (gn *groupNode) got() []Delivery {
	gn.mu.Lock()
	defer gn.mu.Unlock()
	return append([]Delivery(nil), gn.delivered...)
}

func startGroup(t *testing.T, nodes []*Node, id string, voters []string) []*groupNode {
	t.Helper()
	out := make([]*groupNode, len(nodes))
	for i, nd := range nodes {
		gn := &groupNode{}
		name := nd.Name()
		cfg := GroupConfig{ID: id, Voters: voters, Bootstrap: name == voters[0], Fifo: FifoConfig{DeliveryLimit: DefaultDeliveryLimit},
			OnApply: func(_ *Command, e *Effects, _ bool) {
				gn.mu.Lock()
				defer gn.mu.Unlock()
				for _, d := range e.Deliveries {
					if len(d.Consumer) > len(name) && d.Consumer[:len(name)+1] == name+"/" {
						gn.delivered = append(gn.delivered, d)
					}
				}
			}}
		g, err := nd.StartGroup(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gn.g = g
		out[i] = gn
	}
	return out
}

// submitRetry is submitWait for a test's setup: a command whose leader
// lost its leadership before answering (its fate unknown, as on a loaded
// machine whose raft misses a heartbeat) is submitted again, so it may
// be applied twice.
func submitRetry(t *testing.T, g *Group, c Command) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ch := make(chan error, 1)
		g.Submit(c, func(_ Effects, err error) { ch <- err })
		var err error
		select {
		case err = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("submit: no answer")
		}
		if err == nil {
			return
		}
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, ErrUnknownOutcome) && !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			t.Fatalf("submit: %v", err)
		}
	}
}

func submitWait(t *testing.T, g *Group, c Command) Effects {
	t.Helper()
	type res struct {
		e   Effects
		err error
	}
	ch := make(chan res, 1)
	g.Submit(c, func(e Effects, err error) { ch <- res{e, err} })
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("submit: %v", r.err)
		}
		return r.e
	case <-time.After(10 * time.Second):
		t.Fatal("submit: no answer")
	}
	return Effects{}
}

// TestGroupServesFromEveryNode: a quorum queue's group on three nodes,
// bootstrapped by its first voter; a follower's publishes are forwarded
// to the leader and answered once committed; a consumer on another
// follower gets its deliveries when its own node applies them; acks
// from there settle them; a get from the third node takes the next one.
func TestGroupServesFromEveryNode(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	nodeLeader(t, nodes)
	gs := startGroup(t, nodes, "q1", []string{"rabbit1", "rabbit0", "rabbit2"})
	poll.Eventually(t, 10*time.Second, func() bool { return gs[0].g.Leader() != "" }, "no group leader")
	if l := gs[0].g.Leader(); l != "rabbit1" {
		t.Fatalf("leader %s, want the bootstrapping voter rabbit1", l)
	}
	// Publishes from a follower, many at once: they batch.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		gs[0].g.Submit(Enqueue(time.Now().UnixMilli(), msg(fmt.Sprint(i))), func(e Effects, err error) {
			if err == nil && !e.Accepted {
				err = fmt.Errorf("refused")
			}
			if err != nil {
				errs <- err
			}
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	submitWait(t, gs[2].g, Checkout("rabbit2/c1", 10))
	poll.Eventually(t, 5*time.Second, func() bool { return len(gs[2].got()) == 10 }, "rabbit2's consumer got %d, want 10", len(gs[2].got()))
	var ids []uint64
	for _, d := range gs[2].got() {
		ids = append(ids, d.ID)
	}
	submitWait(t, gs[2].g, Settle("rabbit2/c1", ids...))
	poll.Eventually(t, 5*time.Second, func() bool { return len(gs[2].got()) == 20 }, "after the acks, %d, want 20", len(gs[2].got()))
	if b := string(gs[2].got()[10].Msg.Body); b != "10" {
		t.Fatalf("11th delivery %q, want 10", b)
	}
	submitWait(t, gs[2].g, Cancel("rabbit2/c1"))
	submitWait(t, gs[2].g, Down("rabbit2/", "")) // what c1 had out returns
	e := submitWait(t, gs[0].g, Dequeue("rabbit0/get", true))
	if !e.Got || len(e.Deliveries) != 1 || string(e.Deliveries[0].Msg.Body) != "10" || !e.Deliveries[0].Redelivered {
		t.Fatalf("get: %+v, want message 10, redelivered", e)
	}
	if e.Remaining != 89 {
		t.Fatalf("remaining %d, want 89", e.Remaining)
	}
	for _, gn := range gs {
		poll.Eventually(t, 5*time.Second, func() bool {
			var n int
			gn.g.View(func(f *Fifo) { n = f.Len() })
			return n == 89
		}, "a member holds the wrong count")
	}
}

// TestGroupDownReturnsANodesMessages: a node's consumers go (Down) and
// their messages return, but the ones kept.
func TestGroupDownReturnsANodesMessages(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	nodeLeader(t, nodes)
	gs := startGroup(t, nodes, "q2", []string{"rabbit0", "rabbit1", "rabbit2"})
	for i := 0; i < 4; i++ {
		submitWait(t, gs[1].g, Enqueue(time.Now().UnixMilli(), msg(fmt.Sprint(i))))
	}
	submitWait(t, gs[1].g, Checkout("rabbit1/old/c", 1))
	submitWait(t, gs[1].g, Checkout("rabbit1/new/c", 1))
	submitWait(t, gs[1].g, Down("rabbit1/", "rabbit1/new/"))
	var cons, unacked int
	poll.Eventually(t, 5*time.Second, func() bool {
		gs[1].g.View(func(f *Fifo) { cons, unacked = f.Consumers(), f.Unacked() })
		return cons == 1 && unacked == 1
	}, "after down: %d consumers, %d unacked, want 1 and 1", cons, unacked)
}

// TestGroupLagCountsTheLeadersCommit: a member that joins late catches
// up an append (64 entries) at a time; Lag, seen as it applies the first
// of them, counts what the leader has committed, not only what the
// member has received so far (a quorum queue holds its consumers'
// deliveries while it is that far behind).
func TestGroupLagCountsTheLeadersCommit(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	nodeLeader(t, nodes)
	voters := []string{"rabbit0", "rabbit1", "rabbit2"}
	gs := startGroup(t, nodes[:2], "q3", voters)
	poll.Eventually(t, 10*time.Second, func() bool { return gs[0].g.Leader() != "" }, "no group leader")
	// The backlog. On a loaded machine the group's leader may lose its
	// leadership (a heartbeat missed) with an enqueue's fate unknown: it
	// is submitted again, and n is what the two members then hold.
	for i := 0; i < 1000; i++ {
		submitRetry(t, gs[0].g, Enqueue(time.Now().UnixMilli(), msg(fmt.Sprint(i))))
	}
	var n int
	poll.Eventually(t, 10*time.Second, func() bool {
		var a, b int
		gs[0].g.View(func(f *Fifo) { a = f.Len() })
		gs[1].g.View(func(f *Fifo) { b = f.Len() })
		n = a
		return a == b && a >= 1000
	}, "the two members hold %d messages, want the same, at least 1000", n)
	var mu sync.Mutex
	var lags []uint64
	var late *Group
	cfg := GroupConfig{ID: "q3", Voters: voters, Fifo: FifoConfig{DeliveryLimit: DefaultDeliveryLimit},
		OnCreate: func(g *Group) { late = g },
		OnApply: func(c *Command, _ *Effects, _ bool) {
			if c.Kind != cmdEnqueue {
				return
			}
			mu.Lock()
			lags = append(lags, late.Lag())
			mu.Unlock()
		}}
	if _, err := nodes[2].StartGroup(cfg); err != nil {
		t.Fatal(err)
	}
	applied := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(lags)
	}
	poll.Eventually(t, 60*time.Second, func() bool { return applied() >= n }, "the late member applied %d of %d", applied(), n)
	mu.Lock()
	defer mu.Unlock()
	if lags[0] < uint64(n/2) {
		t.Fatalf("Lag at the late member's first entry %d, want about %d (what the leader committed)", lags[0], n)
	}
	if last := lags[len(lags)-1]; last > 64 {
		t.Fatalf("Lag at its last entry %d, want near 0", last)
	}
}

// TestCatchUpTargetAfterASilence: the commit index of the first append
// after a silence of rejoinGap (a heartbeat, which brings none, does not
// set it) is the member's catch-up target; appends that keep coming set
// none, and a later silence sets a new one.
func TestCatchUpTargetAfterASilence(t *testing.T) {
	w := &watchedTransport{}
	g := &Group{trans: w}
	appendOf := func(commit uint64) raft.RPC {
		return raft.RPC{Command: &raft.AppendEntriesRequest{LeaderCommitIndex: commit}}
	}
	w.note(appendOf(10))
	w.note(appendOf(20))
	if got := g.CatchUpTarget(); got != 0 {
		t.Fatalf("target %d without a silence, want 0", got)
	}
	w.heard.Store(monoNanos() - int64(rejoinGap) - 1)
	w.note(appendOf(0)) // a heartbeat after the silence
	if got := g.CatchUpTarget(); got != 0 {
		t.Fatalf("target %d after a heartbeat, want 0 (it brings no commit index)", got)
	}
	w.note(appendOf(500))
	w.note(appendOf(600))
	if got := g.CatchUpTarget(); got != 500 {
		t.Fatalf("target %d, want 500 (the first append after the silence)", got)
	}
	if got := w.leaderCommit.Load(); got != 600 {
		t.Fatalf("leader's commit %d, want 600", got)
	}
	w.heard.Store(monoNanos() - int64(rejoinGap) - 1)
	w.note(appendOf(900))
	if got := g.CatchUpTarget(); got != 900 {
		t.Fatalf("target %d after a second silence, want 900", got)
	}
}

// TestReplicationResumesWhenAFollowerReturns: a follower gone for 11 s
// (its port closed: every append to it fails at once) is sent the log
// again as soon as it is back, not after raft's backoff (by then 10 s):
// the other follower gone next, the leader still commits, with the one
// that came back, within a few seconds.
func TestReplicationResumesWhenAFollowerReturns(t *testing.T) {
	nodes, cfgs := startNodes(t, 3)
	nodeLeader(t, nodes)
	voters := []string{"rabbit0", "rabbit1", "rabbit2"}
	gs := startGroup(t, nodes, "q4", voters)
	l := -1
	poll.Eventually(t, 10*time.Second, func() bool {
		for i, gn := range gs {
			if gn.g.IsLeader() {
				l = i
				return true
			}
		}
		return false
	}, "no group leader")
	back, next := (l+1)%3, (l+2)%3
	submitWait(t, gs[l].g, Enqueue(time.Now().UnixMilli(), msg("first")))

	if err := nodes[back].Close(); err != nil {
		t.Fatal(err)
	}
	for i, until := 0, time.Now().Add(11*time.Second); time.Now().Before(until); i++ {
		submitRetry(t, gs[l].g, Enqueue(time.Now().UnixMilli(), msg(fmt.Sprint(i)))) // a lost leadership under load is tried again
		time.Sleep(100 * time.Millisecond)
	}
	nd, err := StartNode(cfgs[back])
	if err != nil {
		t.Fatal(err)
	}
	nodes[back] = nd
	g, err := nd.StartGroup(GroupConfig{ID: "q4", Voters: voters, Fifo: FifoConfig{DeliveryLimit: DefaultDeliveryLimit}})
	if err != nil {
		t.Fatal(err)
	}
	leader := nodes[l].Name()
	poll.Eventually(t, 10*time.Second, func() bool { return g.Leader() == leader }, "the returned follower did not hear from its leader")

	if err := nodes[next].Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	gs[l].g.Submit(Enqueue(time.Now().UnixMilli(), msg("last")), func(_ Effects, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("publish with one follower back and the other gone: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no commit within 5 s with one follower back and the other gone: the leader is not sending to the one back")
	}
	t.Logf("committed %v after the other follower went", time.Since(start))
}

// TestSplitResendable: of a round whose outcome is unknown (its leader
// given up), a consumer's commands go again (applied twice they do what
// once does), publishes, gets, purges and returns fail.
func TestSplitResendable(t *testing.T) {
	items := []submitItem{
		{c: Enqueue(1, msg("a"))}, {c: Settle("c", 1)}, {c: Checkout("c", 10)}, {c: Dequeue("g", false)},
		{c: Down("n/", "")}, {c: Return("c", 2)}, {c: Tick(0)}, {c: Purge()},
	}
	again, failed := splitResendable(items)
	var a, f []byte
	for _, it := range again {
		a = append(a, it.c.Kind)
	}
	for _, it := range failed {
		f = append(f, it.c.Kind)
	}
	if string(a) != string([]byte{cmdSettle, cmdCheckout, cmdDown, cmdTick}) ||
		string(f) != string([]byte{cmdEnqueue, cmdDequeue, cmdReturn, cmdPurge}) {
		t.Fatalf("sent again %v, failed %v", a, f)
	}
}
