package cluster

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkQueueGroupOnDisk: what a quorum queue's Raft group costs as
// railmq runs it: three members in one process over real TCP (the
// secret-checked Mux), logs in Badger fsynced per append, 1 KiB enqueues
// from 64 concurrent writers (raft batches the entries that arrive while
// it writes), one message per entry or 64 (EnqueueBatch, a group
// commit's worth). An op is one message. Reports committed enqueues per
// second and the CPU per enqueue of all three members.
//
//	go test ./cluster -run '^$' -bench QueueGroupOnDisk -benchtime 20000x
func BenchmarkQueueGroupOnDisk(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchQueueGroup(b, batch) })
	}
}

func benchQueueGroup(b *testing.B, batch int) {
	type node struct {
		r    *raft.Raft
		mux  *Mux
		logs *LogStore
	}
	var nodes []*node
	var servers []raft.Server
	var lns []net.Listener
	for i := 0; i < 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: raft.ServerAddress(ln.Addr().String())})
	}
	for i := 0; i < 3; i++ {
		dir := b.TempDir()
		m := NewMux(lns[i], []byte("s"), nil)
		layer, err := m.Layer("q")
		if err != nil {
			b.Fatal(err)
		}
		trans := raft.NewNetworkTransportWithLogger(layer, 3, 10*time.Second, hclog.NewNullLogger())
		logs, err := OpenLogStore(filepath.Join(dir, "log"))
		if err != nil {
			b.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
		if err != nil {
			b.Fatal(err)
		}
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.Logger = hclog.NewNullLogger()
		c.SnapshotThreshold = 1 << 30
		if err := raft.BootstrapCluster(c, logs, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			b.Fatal(err)
		}
		r, err := raft.NewRaft(c, NewQueueFSM(FifoConfig{DeliveryLimit: DefaultDeliveryLimit}), logs, logs, snaps, trans)
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, &node{r, m, logs})
	}
	defer func() {
		for _, n := range nodes {
			_ = n.r.Shutdown().Error()
			_ = n.mux.Close()
			_ = n.logs.Close()
		}
	}()
	var leader *raft.Raft
	for leader == nil {
		for _, n := range nodes {
			if n.r.State() == raft.Leader {
				leader = n.r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	ms := make([]Message, batch)
	for i := range ms {
		ms[i] = Message{RoutingKey: "q", Body: make([]byte, 1024)}
	}
	cmd := EnqueueBatch(1, ms)
	data := cmd.Encode(nil)
	entries := (b.N + batch - 1) / batch
	b.ReportAllocs()
	b.SetBytes(1024)
	cpu0 := cpuNanos()
	start := time.Now()
	b.ResetTimer()
	applyParallel(b, leader, data, entries)
	b.StopTimer()
	b.ReportMetric(float64(entries*batch)/time.Since(start).Seconds(), "enqueues/s")
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
}
