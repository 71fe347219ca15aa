package cluster

import (
	"fmt"
	"io"
	"log"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The choice of Raft engine, measured: the cost per committed entry of
// hashicorp/raft and of etcd's raft, under the same conditions (three
// members in one process, in-memory logs and transport, 1 KiB entries
// proposed 64 at a time, the leader's state machine counting), so that
// only the libraries differ. Reported: ns/op (wall) and cpu-ns/op (the
// process's user+system CPU per committed entry, all members counted).
//
//	go test ./cluster -run '^$' -bench Engine -benchtime 20000x -count 3

func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any { f.mu.Lock(); f.n++; f.mu.Unlock(); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return fsmSnapshot(nil), nil
}
func (f *countFSM) Restore(r io.ReadCloser) error { return r.Close() }

func BenchmarkEngineHashicorp(b *testing.B) {
	var rs []*raft.Raft
	var trans []*raft.InmemTransport
	var servers []raft.Server
	for i := 0; i < 3; i++ {
		id := raft.ServerID(fmt.Sprintf("n%d", i))
		addr, t := raft.NewInmemTransport(raft.ServerAddress(id))
		trans = append(trans, t)
		servers = append(servers, raft.Server{ID: id, Address: addr})
	}
	for _, a := range trans {
		for _, c := range trans {
			if a != c {
				a.Connect(c.LocalAddr(), c)
			}
		}
	}
	for i := 0; i < 3; i++ {
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
		c.Logger = hclog.NewNullLogger()
		c.SnapshotThreshold = 1 << 30
		logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		if err := raft.BootstrapCluster(c, logs, logs, snaps, trans[i], raft.Configuration{Servers: servers}); err != nil {
			b.Fatal(err)
		}
		r, err := raft.NewRaft(c, &countFSM{}, logs, logs, snaps, trans[i])
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, r)
	}
	defer func() {
		for _, r := range rs {
			_ = r.Shutdown().Error()
		}
	}()
	var leader *raft.Raft
	for leader == nil {
		for _, r := range rs {
			if r.State() == raft.Leader {
				leader = r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	data := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(1024)
	cpu0 := cpuNanos()
	b.ResetTimer()
	applyParallel(b, leader, data, b.N)
	b.StopTimer()
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
}

// applyParallel applies data n times on leader from 64 writers at once
// (raft batches what arrives while it writes).
func applyParallel(b *testing.B, leader *raft.Raft, data []byte, n int) {
	var wg sync.WaitGroup
	const par = 64
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += par {
				if err := leader.Apply(data, 10*time.Second).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

func BenchmarkEngineEtcd(b *testing.B) {
	type node struct {
		rn      *etcdraft.RawNode
		storage *etcdraft.MemoryStorage
		applied int
	}
	peers := []etcdraft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}
	var ns []*node
	for i := uint64(1); i <= 3; i++ {
		st := etcdraft.NewMemoryStorage()
		rn, err := etcdraft.NewRawNode(&etcdraft.Config{ID: i, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
			MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, Logger: &etcdraft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := rn.Bootstrap(peers); err != nil {
			b.Fatal(err)
		}
		ns = append(ns, &node{rn: rn, storage: st})
	}
	// One goroutine drives the three members: each Ready is persisted to
	// the member's storage, its messages stepped into their recipients,
	// its committed entries applied.
	step := func() {
		for _, n := range ns {
			if !n.rn.HasReady() {
				continue
			}
			rd := n.rn.Ready()
			if !etcdraft.IsEmptyHardState(rd.HardState) {
				_ = n.storage.SetHardState(rd.HardState)
			}
			_ = n.storage.Append(rd.Entries)
			for _, m := range rd.Messages {
				_ = ns[m.GetTo()-1].rn.Step(m)
			}
			for _, e := range rd.CommittedEntries {
				if e.GetType() == pb.EntryConfChange {
					cc := &pb.ConfChange{}
					_ = proto.Unmarshal(e.GetData(), cc)
					n.rn.ApplyConfChange(cc)
				} else if len(e.GetData()) > 0 {
					n.applied++
				}
			}
			n.rn.Advance(rd)
		}
	}
	for i := 0; i < 10; i++ {
		step() // the bootstrap's configuration entries are applied first
	}
	_ = ns[0].rn.Campaign()
	for i := 0; i < 100 && ns[0].rn.Status().RaftState != etcdraft.StateLeader; i++ {
		step()
	}
	if ns[0].rn.Status().RaftState != etcdraft.StateLeader {
		b.Fatal("no leader")
	}
	data := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(1024)
	cpu0 := cpuNanos()
	b.ResetTimer()
	proposed := 0
	for ns[0].applied < b.N {
		for k := 0; k < 64 && proposed < b.N && proposed-ns[0].applied < 256; k++ {
			if err := ns[0].rn.Propose(data); err != nil {
				b.Fatal(err)
			}
			proposed++
		}
		step()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
}
