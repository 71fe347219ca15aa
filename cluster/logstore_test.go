package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/internal/poll"
)

func TestLogStore(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty store's first index %d", f)
	}
	at := time.Unix(1700000000, 5)
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/5, Type: raft.LogCommand, Data: []byte(fmt.Sprint(i)), AppendedAt: at})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("LastVoteCand")); err == nil || err.Error() != "not found" {
		t.Errorf("a missing stable key: %v, want raft's \"not found\"", err)
	}
	if err := s.DeleteRange(1, 3); err != nil { // compaction
		t.Fatal(err)
	}
	if err := s.DeleteRange(9, 10); err != nil { // a conflicting tail
		t.Fatal(err)
	}
	check := func(s *LogStore, when string) {
		t.Helper()
		f, _ := s.FirstIndex()
		l, _ := s.LastIndex()
		if f != 4 || l != 8 {
			t.Errorf("%s: first %d last %d, want 4 and 8", when, f, l)
		}
		var got raft.Log
		if err := s.GetLog(5, &got); err != nil || string(got.Data) != "5" || got.Term != 2 || !got.AppendedAt.Equal(at) || got.Type != raft.LogCommand {
			t.Errorf("%s: entry 5 = %+v, %v", when, got, err)
		}
		if err := s.GetLog(2, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Errorf("%s: a deleted entry: %v", when, err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); v != 7 || err != nil {
			t.Errorf("%s: term %d, %v", when, v, err)
		}
	}
	check(s, "open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "reopened")
}

// TestGroupRestartsFromDisk: a 3-member group with its logs in Badger and
// its snapshots in files, all stopped at once and started again with
// empty state machines, comes back with the state it had committed.
func TestGroupRestartsFromDisk(t *testing.T) {
	type disk struct {
		logs  *LogStore
		snaps *raft.FileSnapshotStore
	}
	var ms []*member
	var disks []disk
	var servers []raft.Server
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	open := func(i int) disk {
		logs, err := OpenLogStore(dirs[i] + "/log")
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(dirs[i], 2, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		return disk{logs, snaps}
	}
	for i := 0; i < 3; i++ {
		id := raft.ServerID(fmt.Sprintf("node%d", i))
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		ms = append(ms, &member{id: id, fsm: NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit}), trans: trans})
		servers = append(servers, raft.Server{ID: id, Address: addr})
		disks = append(disks, open(i))
	}
	connect := func() {
		for _, a := range ms {
			for _, b := range ms {
				if a != b {
					a.trans.Connect(b.trans.LocalAddr(), b.trans)
				}
			}
		}
	}
	connect()
	startAll := func() {
		for i, m := range ms {
			r, err := raft.NewRaft(testConfig(m.id), m.fsm, disks[i].logs, disks[i].logs, disks[i].snaps, m.trans)
			if err != nil {
				t.Fatal(err)
			}
			m.r = r
		}
	}
	for i, m := range ms {
		if err := raft.BootstrapCluster(testConfig(m.id), disks[i].logs, disks[i].logs, disks[i].snaps, m.trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
	}
	startAll()
	l := leader(t, ms)
	for i := 0; i < 150; i++ {
		apply(t, l, Enqueue(int64(i), msg(fmt.Sprint(i))))
	}
	e := apply(t, l, Checkout("c", 5))
	apply(t, l, Settle("c", e.Deliveries[0].ID))
	for _, m := range ms {
		poll.Eventually(t, 5*time.Second, func() bool { n, _, _ := m.fsm.Stats(); return n == 149 }, "%s did not apply", m.id)
	}
	stopAll := func() {
		for i, m := range ms {
			if m.r != nil {
				_ = m.r.Shutdown().Error()
				m.r = nil
			}
			_ = disks[i].logs.Close()
		}
	}
	stopAll()
	// Started again from disk, with new transports and empty state.
	for i, m := range ms {
		_, m.trans = raft.NewInmemTransport(raft.ServerAddress(m.id))
		m.fsm = NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit})
		disks[i] = open(i)
	}
	connect()
	startAll()
	t.Cleanup(stopAll)
	l = leader(t, ms)
	apply(t, l, Enqueue(1000, msg("after")))
	for _, m := range ms {
		poll.Eventually(t, 10*time.Second, func() bool { n, _, _ := m.fsm.Stats(); return n == 150 }, "%s: %v after the restart, want 150", m.id, fmt.Sprint(m.fsm.Stats()))
	}
	// No node cancelled the consumer: the 5 messages checked out to it
	// (its prefetch, refilled after its settle) still are.
	if _, ready, _ := l.fsm.Stats(); ready != 145 {
		t.Errorf("ready %d after the restart, want 145 (150 less 5 checked out)", ready)
	}
}
