package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/railmq/railmq/crypt"
	"go.uber.org/zap"
)

// A standalone node's quorum queues: the same groups, state machine and
// log store as a cluster's (group.go, fifo.go, logstore.go), each a
// group of one member over raft's in-memory transport. The node has no
// listener and no metadata group: a standalone broker keeps its
// definitions, the quorum queues' among them, in its own store.
//
// Its data is a cluster node's: the groups' logs and snapshots under
// DataDir/cluster/queues, their member named as the node is. Started
// later as a cluster node (StartNode), the node finds them there and its
// queues go on, still of one member, which grow as any quorum queue's
// do (Group.AddMember).

// localAddr is a standalone node's address in its groups' configurations.
const localAddr = "local"

// localTimeout is a standalone group's heartbeat, election and lease
// timeout: with no peer to miss, it only delays the first election, so
// that a queue serves within it of a start.
const localTimeout = 50 * time.Millisecond

// LocalConfig configures a standalone node.
type LocalConfig struct {
	Name    string // the node's name: its groups' member
	DataDir string // the groups live under DataDir/cluster/queues
	Logger  *zap.Logger
	// AfterLogSync: NodeConfig's.
	AfterLogSync func()
	// Keys: NodeConfig's.
	Keys *crypt.Keys
}

// StartLocal starts a standalone node: quorum queues only.
func StartLocal(cfg LocalConfig) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("cluster: a node needs a name")
	}
	hl := hclog.NewNullLogger()
	if cfg.Logger != nil {
		hl = newHCLog(cfg.Logger.Named("raft"), hclog.Warn) // hclog.go
	}
	renamed, err := noteLocalName(cfg.DataDir, cfg.Name)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: NodeConfig{Name: cfg.Name, DataDir: cfg.DataDir, Peers: map[string]string{cfg.Name: localAddr}, Logger: cfg.Logger, AfterLogSync: cfg.AfterLogSync, Keys: cfg.Keys},
		local: true, renamed: renamed, hl: hl, meta: NewMetaFSM(), groups: map[string]*Group{}, metaLinks: newLinkSet(), groupLinks: newLinkSet()}
	return n, nil
}

// noteLocalName records a standalone node's name in
// DataDir/cluster/node-name and reports whether its quorum queues may
// know it by another: the name changed (a container recreated gets a
// new host name, and railmq@HOST with it), or queues exist from before
// the name was recorded. Their groups' one member is then renamed
// (adoptLocal); without that it is not a voter of its own group and the
// queue never serves.
func noteLocalName(dataDir, name string) (bool, error) {
	dir := filepath.Join(dataDir, "cluster")
	path := filepath.Join(dir, "node-name")
	prev, err := os.ReadFile(path)
	switch {
	case err == nil && string(prev) == name:
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	_, qerr := os.Stat(filepath.Join(dir, "queues"))
	renamed := err == nil || qerr == nil
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	return renamed, os.WriteFile(path, []byte(name), 0o644)
}

// Local reports whether the node is standalone (StartLocal).
func (n *Node) Local() bool { return n.local }

// groupTransport is a new group's raft transport: over the Mux, or in
// memory on a standalone node.
func (n *Node) groupTransport(id string, hl hclog.Logger) (*watchedTransport, error) {
	self := n.cfg.Peers[n.cfg.Name]
	if n.local {
		_, t := raft.NewInmemTransport(raft.ServerAddress(self))
		return watchTransport(t), nil
	}
	layer, err := n.mux.Layer("q/" + id)
	if err != nil {
		return nil, err
	}
	return watchTransport(raft.NewNetworkTransportWithLogger(&advertised{layer, self}, 2, 10*time.Second, hl)), nil
}

// groupRaftConfig is a group's raft configuration.
func (n *Node) groupRaftConfig(hl hclog.Logger) *raft.Config {
	rc := n.raftConfig()
	rc.Logger = hl
	if n.local {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = localTimeout, localTimeout, localTimeout
	}
	return rc
}

// Recovered reports whether a standalone node's group serves: it leads,
// and has applied the log it started with (raft applies a log only once
// a leader commits it, so a queue would show none of its messages until
// then).
//
// raft counts an entry applied once it is handed to the state machine's
// goroutine, not once that has applied it (a passive declare read 15 of
// 50 messages so): a barrier, once it leads, waits for the state
// machine itself.
func (g *Group) Recovered() bool {
	if g.recovered.Load() {
		return true
	}
	if g.r.State() != raft.Leader || g.r.AppliedIndex() < g.startLast {
		return false
	}
	if g.r.Barrier(localTimeout*10).Error() != nil {
		return false
	}
	g.recovered.Store(true)
	return true
}

// adoptLocal gives a cluster node the groups it made while standalone:
// a group whose configuration is a standalone node's (one member, at
// localAddr) gets, once, this node as its one voter, named and addressed
// as the cluster knows it (raft.RecoverCluster: with one member, every
// entry of its log was committed, so committing them all loses nothing).
// The group then serves as any of one member; the other nodes follow it
// (SyncMembers) and it grows as any quorum queue does (AddMember).
//
// On a standalone node renamed since (noteLocalName), the same renames
// the member of a group made under the old name.
func (n *Node) adoptLocal(cfg GroupConfig, rc *raft.Config, logs *LogStore, snaps raft.SnapshotStore) error {
	if n.local && !n.renamed {
		return nil
	}
	_, t := raft.NewInmemTransport("")
	defer t.Close()
	c := *rc
	conf, err := raft.GetConfiguration(&c, NewQueueFSM(cfg.Fifo), logs, logs, snaps, t)
	if err != nil {
		return err
	}
	if len(conf.Servers) != 1 || conf.Servers[0].Address != localAddr || n.local && conf.Servers[0].ID == raft.ServerID(n.cfg.Name) {
		return nil
	}
	self := raft.Server{ID: raft.ServerID(n.cfg.Name), Address: raft.ServerAddress(n.cfg.Peers[n.cfg.Name])}
	c = *rc
	if err := raft.RecoverCluster(&c, NewQueueFSM(cfg.Fifo), logs, logs, snaps, t, raft.Configuration{Servers: []raft.Server{self}}); err != nil {
		return err
	}
	what := "quorum queue of this node's standalone life adopted"
	if n.local {
		what = "quorum queue of this node's earlier name adopted"
	}
	n.log().Info(what, zap.String("group", cfg.ID), zap.String("was", string(conf.Servers[0].ID)))
	return nil
}

// stopAware makes f's Error return raft.ErrRaftShutdown once stop (the
// group's) is closed. hashicorp/raft v1.8 answers no future still in its
// apply queue when it shuts down (ApplyLog sets no ShutdownCh), so
// waitLocal, waiting for a round applied just as its queue was deleted,
// waited for ever and the delete with it (queue.delete never answered:
// seen in conformance). The field is exported on raft's future; it is
// set before anyone waits on f.
func stopAware(f raft.ApplyFuture, stop chan struct{}) raft.ApplyFuture {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return f
	}
	if fv := v.Elem().FieldByName("ShutdownCh"); fv.IsValid() && fv.CanSet() && fv.Type() == reflect.TypeOf(stop) {
		fv.Set(reflect.ValueOf(stop))
	}
	return f
}
