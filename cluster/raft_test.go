package cluster

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/internal/poll"
)

// member is one node of a test group: its raft, its state machine, and
// the stores it restarts from.
type member struct {
	id    raft.ServerID
	fsm   *QueueFSM
	r     *raft.Raft
	trans *raft.InmemTransport
	logs  *raft.InmemStore
	snaps *raft.InmemSnapshotStore
}

func testConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	// Short enough for elections to be quick, long enough that a leader
	// on a loaded machine (race detector, busy loops beside) keeps its
	// lease: at 50 ms a leader stepped down in the middle of a test's
	// Apply ("leadership lost while committing log").
	c.HeartbeatTimeout = 400 * time.Millisecond
	c.ElectionTimeout = 400 * time.Millisecond
	c.LeaderLeaseTimeout = 400 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotThreshold = 64 // snapshots, and restores from them, happen in the test
	c.SnapshotInterval = 100 * time.Millisecond
	c.TrailingLogs = 16
	c.Logger = hclog.NewNullLogger()
	return c
}

func (m *member) start(t *testing.T) {
	t.Helper()
	r, err := raft.NewRaft(testConfig(m.id), m.fsm, m.logs, m.logs, m.snaps, m.trans)
	if err != nil {
		t.Fatal(err)
	}
	m.r = r
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	if err := m.r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
}

// newGroup starts a 3-member group on in-memory transports, connected.
func newGroup(t *testing.T, cfg FifoConfig) []*member {
	t.Helper()
	var ms []*member
	var servers []raft.Server
	for i := 0; i < 3; i++ {
		id := raft.ServerID(fmt.Sprintf("node%d", i))
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		ms = append(ms, &member{id: id, fsm: NewQueueFSM(cfg), trans: trans, logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()})
		servers = append(servers, raft.Server{ID: id, Address: addr})
	}
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	for _, m := range ms {
		if err := raft.BootstrapCluster(testConfig(m.id), m.logs, m.logs, m.snaps, m.trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		m.start(t)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			if m.r != nil {
				_ = m.r.Shutdown().Error()
			}
		}
	})
	return ms
}

func leader(t *testing.T, ms []*member) *member {
	t.Helper()
	var l *member
	poll.Eventually(t, 10*time.Second, func() bool {
		for _, m := range ms {
			if m.r != nil && m.r.State() == raft.Leader {
				l = m
				return true
			}
		}
		return false
	}, "no leader elected")
	return l
}

func apply(t *testing.T, m *member, c Command) Effects {
	t.Helper()
	f := m.r.Apply(c.Encode(nil), 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("apply on %s: %v", m.id, err)
	}
	e, ok := f.Response().(Effects)
	if !ok {
		t.Fatalf("apply on %s answered %v", m.id, f.Response())
	}
	return e
}

// TestGroupSurvivesLeaderLoss: a 3-member quorum queue on hashicorp/raft.
// What the leader committed is on every member; the leader stopped, the
// others elect one that has it all and go on; the old leader restarted
// from its stores catches up (from a snapshot, as its log was compacted)
// to the same state.
func TestGroupSurvivesLeaderLoss(t *testing.T) {
	ms := newGroup(t, FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	l := leader(t, ms)
	for i := 0; i < 100; i++ {
		if e := apply(t, l, Enqueue(int64(i), msg(fmt.Sprint(i)))); !e.Accepted {
			t.Fatalf("enqueue %d refused", i)
		}
	}
	e := apply(t, l, Checkout("c1", 10))
	if len(e.Deliveries) != 10 || string(e.Deliveries[0].Msg.Body) != "0" {
		t.Fatalf("checkout delivered %v", bodies(e.Deliveries))
	}
	apply(t, l, Settle("c1", e.Deliveries[0].ID, e.Deliveries[1].ID))
	for _, m := range ms {
		poll.Eventually(t, 5*time.Second, func() bool { n, _, _ := m.fsm.Stats(); return n == 98 }, "%s did not apply the committed entries", m.id)
	}

	l.stop(t)
	old := l
	l = leader(t, ms)
	if l == old {
		t.Fatal("the stopped member is still leader")
	}
	// The new leader has the consumer's assignment: its unsettled 8 are
	// still checked out to c1; the consumer is gone with the old node, so
	// its node is downed and they come back, redelivered, first.
	apply(t, l, Down("c1", ""))
	e = apply(t, l, Checkout("c2", 3))
	if got := bodies(e.Deliveries); fmt.Sprint(got) != "[c2:2 c2:3 c2:4]" || !e.Deliveries[0].Redelivered {
		t.Fatalf("after the failover c2 got %v (redelivered %v), want 2 3 4 redelivered", got, e.Deliveries[0].Redelivered)
	}
	for i := 100; i < 200; i++ {
		apply(t, l, Enqueue(int64(i), msg(fmt.Sprint(i))))
	}
	// Raft's shutdown closed its transport: a new one, at its address.
	_, old.trans = raft.NewInmemTransport(raft.ServerAddress(old.id))
	for _, m := range ms {
		if m != old {
			m.trans.Connect(old.trans.LocalAddr(), old.trans)
			old.trans.Connect(m.trans.LocalAddr(), m.trans)
		}
	}
	// As after a process restart: the state machine starts empty and raft
	// rebuilds it from the member's snapshot and log.
	old.fsm = NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	old.start(t)
	for _, m := range ms {
		poll.Eventually(t, 10*time.Second, func() bool { n, _, _ := m.fsm.Stats(); return n == 198 }, "%s has not caught up: %v %v", m.id, fmt.Sprint(m.fsm.Stats()), m.r.Stats())
	}
	if snaps, _ := old.snaps.List(); len(snaps) == 0 {
		t.Error("the restarted member has no snapshot: restore went untested")
	}
	var want string
	for i, m := range ms {
		n, ready, b := m.fsm.Stats()
		got := fmt.Sprint(n, ready, b)
		if i == 0 {
			want = got
		} else if got != want {
			t.Errorf("%s holds %s, node0 %s", m.id, got, want)
		}
	}
}

// TestFSMSkipsWhatItApplied: hashicorp/raft restores any snapshot a
// leader sends, even one older than what the member applied, and then
// applies the entries after it again. The state machine keeps its newer
// state and skips the entries it has: no message is handed out twice.
func TestFSMSkipsWhatItApplied(t *testing.T) {
	q := NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	var got []uint64
	q.OnApply = func(_ uint64, _ *Command, e *Effects) {
		for _, d := range e.Deliveries {
			got = append(got, d.ID)
		}
	}
	restores := 0
	q.OnRestore = func() { restores++ }
	entries := []Command{
		Checkout("c1", 10),
		Enqueue(1, Message{Body: []byte("a")}),
		Enqueue(2, Message{Body: []byte("b")}),
		Enqueue(3, Message{Body: []byte("c")}),
		Enqueue(4, Message{Body: []byte("d")}),
	}
	apply := func(i int) {
		t.Helper()
		if e, ok := q.Apply(&raft.Log{Index: uint64(i + 1), Data: entries[i].Encode(nil)}).(Effects); !ok {
			t.Fatalf("entry %d: no effects", i+1)
		} else if i >= len(got) && len(e.Deliveries) > 1 {
			t.Fatalf("entry %d: %d deliveries", i+1, len(e.Deliveries))
		}
	}
	for i := 0; i < 3; i++ {
		apply(i)
	}
	snap, err := q.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < len(entries); i++ {
		apply(i)
	}
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("first deliveries %v, want [1 2 3 4]", got)
	}
	// The older snapshot (index 3) arrives; raft then applies 4 and 5 again.
	if err := q.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < len(entries); i++ {
		apply(i)
	}
	if fmt.Sprint(got) != "[1 2 3 4]" || restores != 0 {
		t.Fatalf("after the older snapshot: deliveries %v (want [1 2 3 4]), %d restores (want 0)", got, restores)
	}
	if _, ready, _ := q.Stats(); ready != 0 {
		t.Fatalf("%d ready, want 0", ready)
	}
	// A fresh member restored from it starts at index 3 and applies on.
	q2 := NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
	if err := q2.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	e, _ := q2.Apply(&raft.Log{Index: 4, Data: entries[3].Encode(nil)}).(Effects)
	if len(e.Deliveries) != 1 || e.Deliveries[0].ID != 3 {
		t.Fatalf("a member restored at index 3 applying entry 4: %+v", e.Deliveries)
	}
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }
