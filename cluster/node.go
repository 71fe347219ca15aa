package cluster

import (
	"bytes"
	"crypto/tls"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/railmq/railmq/crypt"
	"go.uber.org/zap"
)

// A node of a railmq cluster: the inter-node listener (Mux) and the
// metadata store, one Raft group over every node that replicates the
// definitions (vhosts, users, permissions, exchanges, bindings, policies,
// queue definitions: RabbitMQ 4's Khepri model) as keys and values.

// NodeConfig configures a node.
type NodeConfig struct {
	Name    string            // this node's name (--node-name)
	Listen  string            // the inter-node address (--cluster-listen)
	Peers   map[string]string // every node's name and inter-node address, this one's too (--cluster-peers)
	Secret  []byte            // the cluster's shared secret (--cluster-secret-file)
	DataDir string            // the node's raft state lives under DataDir/cluster
	// TLS, when set, encrypts and authenticates the links between nodes
	// (--cluster-tls): its certificate is presented both as server and
	// as client, and peers' are verified against its RootCAs and
	// ClientCAs (ClientAuth should require them).
	TLS *tls.Config
	// Join: a node started to join a running cluster (--cluster-join)
	// does not bootstrap; it waits for a member to add it (AddMember).
	Join bool
	// Timing, for tests; zero: hashicorp/raft's defaults.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// WriteTimeout bounds a write (zero: 10 s).
	WriteTimeout time.Duration
	// OnApply, when set, is told every committed metadata change, in log
	// order, on raft's FSM goroutine; after the node restores a snapshot,
	// every key (as puts) and the keys gone (as deletes).
	OnApply func(ops []Op) error
	// OnNode, when set, gets the node before its raft starts (and so
	// before the first OnApply), for OnApply to start quorum queues.
	OnNode func(n *Node)
	// Logger gets raft's warnings and errors (nil: none).
	Logger *zap.Logger
	// AfterLogSync, if set, runs after each fsync of a quorum queue's
	// log, before raft counts the entries stored (tests).
	AfterLogSync func()
	// Keys, if set, encrypt the raft logs and snapshots (crypt.go).
	Keys *crypt.Keys
}

// Node is a running cluster node.
type Node struct {
	cfg   NodeConfig
	mux   *Mux
	trans *watchedTransport
	logs  *LogStore
	meta  *MetaFSM
	r     *raft.Raft
	hl    hclog.Logger
	// The link's services (link.go): followers' metadata writes,
	// forwarded to the leader ("meta-rpc"), and quorum queues' rounds
	// forwarded to a group's leader ("qq-rpc"); the links of each, both
	// ways.
	metaLayer, groupLayer raft.StreamLayer
	metaLinks, groupLinks *linkSet
	rpcWG                 sync.WaitGroup // the accept loops, the forwarded writes, the round answerers

	// Quorum queues (group.go, grouprpc.go).
	startMu sync.RWMutex // StartGroup read-holds it; close takes it, and sets closing
	closing bool
	gmu     sync.Mutex  // guards qdb, groups
	qdb     *badger.DB  // every group's log, opened with the first
	qdbOpen atomic.Bool // qdb is open (for HeapFixed, without gmu)
	groups  map[string]*Group
	queries queryHandler // answers other nodes' questions (query.go)
	local   bool         // standalone: no listener, no metadata group (local.go)
	// renamed: a standalone node whose name is not the one its groups
	// were made under (or not known to be): adoptLocal renames their
	// member.
	renamed bool
	// watchStop stops watchNodes (clusterlog.go), which obs feeds.
	watchStop chan struct{}
	obs       *raft.Observer
}

// ErrNotLeader is a change that only the leader makes (membership) asked
// of another node.
var ErrNotLeader = errors.New("cluster: not the leader")

// ErrNoLeader is a write while this node knows no leader: it is on the
// minority side of a partition, or an election is under way. Nothing was
// written.
var ErrNoLeader = errors.New("cluster: no leader (no quorum reachable)")

// ParsePeers reads --cluster-peers: name=host:port,name=host:port.
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, addr, ok := strings.Cut(p, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("cluster: peer %q: want name=host:port", p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("cluster: peer %q: %w", p, err)
		}
		out[name] = addr
	}
	return out, nil
}

// StartNode starts a node: it listens, opens its raft state (bootstrapping
// the metadata group with Peers on first start) and joins the election.
func StartNode(cfg NodeConfig) (*Node, error) {
	if cfg.Name == "" || len(cfg.Secret) == 0 {
		return nil, errors.New("cluster: a node needs a name and the cluster secret")
	}
	if cfg.Peers[cfg.Name] == "" {
		return nil, fmt.Errorf("cluster: the peers do not name this node, %q", cfg.Name)
	}
	hl := hclog.NewNullLogger()
	if cfg.Logger != nil {
		// Raft's warnings always; its elections and votes too at debug.
		level := hclog.Warn
		if cfg.Logger.Core().Enabled(zap.DebugLevel) {
			level = hclog.Debug
		}
		hl = newHCLog(cfg.Logger.Named("raft"), level) // hclog.go
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{cfg: cfg, mux: NewMux(ln, cfg.Secret, cfg.TLS), meta: NewMetaFSM(), hl: hl,
		groups: map[string]*Group{}, metaLinks: newLinkSet(), groupLinks: newLinkSet()}
	n.meta.onApply = cfg.OnApply
	if cfg.OnNode != nil {
		cfg.OnNode(n)
	}
	fail := func(err error) (*Node, error) {
		n.close()
		return nil, err
	}
	layer, err := n.mux.Layer("meta")
	if err != nil {
		return fail(err)
	}
	n.trans = watchTransport(raft.NewNetworkTransportWithLogger(&advertised{layer, cfg.Peers[cfg.Name]}, 3, 10*time.Second, hl))
	dir := filepath.Join(cfg.DataDir, "cluster", "meta")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	if n.logs, err = openLogStore(filepath.Join(dir, "log"), cfg.Keys); err != nil {
		return fail(err)
	}
	snaps, err := snapshotStore(dir, cfg.Keys, hl)
	if err != nil {
		return fail(err)
	}
	rc := n.raftConfig()
	existing, err := raft.HasExistingState(n.logs, n.logs, snaps)
	if err != nil {
		return fail(err)
	}
	if !existing && !cfg.Join {
		// Every node bootstraps with the same configuration: raft accepts
		// identical bootstraps, and whichever wins the first election leads.
		var servers []raft.Server
		names := make([]string, 0, len(cfg.Peers))
		for name := range cfg.Peers {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			servers = append(servers, raft.Server{ID: raft.ServerID(name), Address: raft.ServerAddress(cfg.Peers[name])})
		}
		if err := raft.BootstrapCluster(rc, n.logs, n.logs, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			return fail(err)
		}
	}
	if n.r, err = raft.NewRaft(rc, n.meta, n.logs, n.logs, snaps, n.trans); err != nil {
		return fail(err)
	}
	obsCh := make(chan raft.Observation, 16)
	n.obs = raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	n.r.RegisterObserver(n.obs)
	n.watchStop = make(chan struct{})
	n.rpcWG.Add(1)
	go n.watchNodes(obsCh, n.watchStop) // clusterlog.go
	if n.metaLayer, err = n.mux.Layer("meta-rpc"); err != nil {
		return fail(err)
	}
	if n.groupLayer, err = n.mux.Layer("qq-rpc"); err != nil {
		return fail(err)
	}
	n.rpcWG.Add(2)
	go n.acceptLinks(n.metaLayer, n.openMeta)
	go n.acceptLinks(n.groupLayer, n.openRounds)
	return n, nil
}

// raftConfig is the raft configuration of the node's groups.
func (n *Node) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.Name)
	rc.Logger = n.hl
	if n.cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout, rc.LeaderLeaseTimeout = n.cfg.HeartbeatTimeout, n.cfg.HeartbeatTimeout/2
	}
	if n.cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = n.cfg.ElectionTimeout
	}
	return rc
}

func (n *Node) log() *zap.Logger {
	if n.cfg.Logger == nil {
		return zap.NewNop()
	}
	return n.cfg.Logger
}

// Link is a service of the caller's on the node's cluster link
// (authenticated with the cluster secret, as raft's traffic is): the
// connections other nodes open for it, and a dialler of its peers. Run
// each connection, dialled or accepted, as a Conn (NewConn): requests,
// answers and one-way frames, with no socket I/O for the sender.
type Link interface {
	Accept() (net.Conn, error)
	Close() error
	Dial(addr string, timeout time.Duration) (net.Conn, error)
}

// Link registers the service name and returns its Link.
func (n *Node) Link(name string) (Link, error) {
	l, err := n.mux.Layer(name)
	if err != nil {
		return nil, err
	}
	return streamLink{l}, nil
}

type streamLink struct{ l raft.StreamLayer }

func (s streamLink) Accept() (net.Conn, error) { return s.l.Accept() }
func (s streamLink) Close() error              { return s.l.Close() }
func (s streamLink) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return s.l.Dial(raft.ServerAddress(addr), timeout)
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// HeapFixed is what the node's raft log Badgers keep on the Go heap
// however little they hold (LogDBHeap each: the metadata log, and the
// quorum queues' log once one is open), for the broker's heap target.
func (n *Node) HeapFixed() int64 {
	h := int64(LogDBHeap)
	if n.qdbOpen.Load() {
		h += LogDBHeap
	}
	return h
}

// zapWriter passes raft's log lines (hclog's text) to zap, at the level
// the line gives (hclog's "[DEBUG]" and "[INFO]" tags; warnings and
// errors as warnings).
// advertised is a stream layer whose Addr is the address peers know the
// node by (the listener may be on ":port").
type advertised struct {
	raft.StreamLayer
	addr string
}

func (a *advertised) Addr() net.Addr { return advertisedAddr(a.addr) }

type advertisedAddr string

func (advertisedAddr) Network() string  { return "tcp" }
func (a advertisedAddr) String() string { return string(a) }

// Close leaves the election and closes the listener and the state.
func (n *Node) Close() error { return n.close() }

func (n *Node) close() error {
	var errs []error
	n.startMu.Lock()
	n.closing = true
	n.startMu.Unlock()
	n.gmu.Lock()
	gs := make([]*Group, 0, len(n.groups))
	for _, g := range n.groups {
		gs = append(gs, g)
	}
	n.gmu.Unlock()
	for _, g := range gs {
		errs = append(errs, g.Close())
	}
	if n.metaLayer != nil {
		_ = n.metaLayer.Close()
	}
	if n.groupLayer != nil {
		_ = n.groupLayer.Close()
	}
	// Rounds waiting for a leader's answer fail with errNotSent (a
	// closed link's ErrClosed).
	n.groupLinks.close()
	if n.r != nil {
		n.trans.release()
		errs = append(errs, n.r.Shutdown().Error())
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.mux != nil {
		errs = append(errs, n.mux.Close())
	}
	// The forwarded writes being applied end with raft; their links are
	// closed before the wait, so that no new one starts during it.
	n.metaLinks.close()
	n.groupLinks.close()
	if n.watchStop != nil { // once: Close may be called again
		n.r.DeregisterObserver(n.obs)
		close(n.watchStop)
		n.watchStop = nil
	}
	n.rpcWG.Wait()
	if n.logs != nil {
		errs = append(errs, n.logs.Close())
	}
	if n.qdb != nil {
		errs = append(errs, n.qdb.Close())
	}
	return errors.Join(errs...)
}

// Member is a node as the metadata group's configuration has it.
type Member struct {
	Name, Addr string
	Voter      bool
}

// Status is what a node knows of the cluster.
type Status struct {
	Name, State, Leader string
	Term, Applied       uint64
	Commit, LastLog     uint64        // the commit index this node knows, its last log index
	LastContact         time.Duration // since a follower last heard from the leader (0 on the leader; -1: never)
	Members             []Member
}

// Status reports the node's view of the cluster.
func (n *Node) Status() Status {
	if n.r == nil { // standalone
		return Status{Name: n.cfg.Name, State: "Leader", Leader: n.cfg.Name, Members: []Member{{Name: n.cfg.Name, Addr: localAddr, Voter: true}}}
	}
	st := Status{Name: n.cfg.Name, State: n.r.State().String()}
	_, id := n.r.LeaderWithID()
	st.Leader = string(id)
	if f := n.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			st.Members = append(st.Members, Member{Name: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
		}
	}
	stats := n.r.Stats()
	fmt.Sscan(stats["term"], &st.Term)
	fmt.Sscan(stats["commit_index"], &st.Commit)
	fmt.Sscan(stats["last_log_index"], &st.LastLog)
	st.Applied = n.meta.applied.Load()
	switch lc := stats["last_contact"]; lc {
	case "0":
	case "never":
		st.LastContact = -1
	default:
		st.LastContact, _ = time.ParseDuration(lc)
	}
	return st
}

// Put stores a definition on every node; it returns once a quorum has it
// on disk and this node has applied it (a read here sees it). A follower
// forwards the write to the leader; with no leader known it fails with
// ErrNoLeader and writes nothing.
func (n *Node) Put(key string, val []byte) error {
	return n.write(metaCmd{Op: metaPut, Key: key, Val: val})
}

// Delete removes a definition, as Put writes one.
func (n *Node) Delete(key string) error { return n.write(metaCmd{Op: metaDelete, Key: key}) }

// Write applies ops together, on every node, as Put does one.
func (n *Node) Write(ops []Op) error { return n.write(metaCmd{Op: metaBatch, Ops: ops}) }

// writeTimeout is how long a write may take by default, forwarded or not
// (an election in between included).
const writeTimeout = 10 * time.Second

func (n *Node) timeout() time.Duration {
	if n.cfg.WriteTimeout > 0 {
		return n.cfg.WriteTimeout
	}
	return writeTimeout
}

func (n *Node) write(c metaCmd) error {
	deadline := time.Now().Add(n.timeout())
	for {
		index, err := n.writeOnce(c)
		var ae *ApplyError
		if errors.As(err, &ae) {
			// Committed, and refused by its application: the same here,
			// once this node has applied it.
			if werr := n.waitApplied(index, deadline); werr != nil {
				return werr
			}
			return err
		}
		if err == nil {
			return n.waitApplied(index, deadline)
		}
		// The leader changed under the write: try the new one.
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *Node) writeOnce(c metaCmd) (uint64, error) {
	if n.r.State() == raft.Leader {
		return n.applyMeta(c)
	}
	addr, _ := n.r.LeaderWithID()
	if addr == "" {
		return 0, ErrNoLeader
	}
	return n.forward(string(addr), c)
}

// waitApplied waits until this node's state machine has applied index
// (raft's AppliedIndex counts entries handed to it, which may not have
// been applied yet).
func (n *Node) waitApplied(index uint64, deadline time.Time) error {
	for n.meta.applied.Load() < index {
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: entry %d committed but not yet applied here", index)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func (n *Node) applyMeta(c metaCmd) (uint64, error) {
	data, err := encodeMetaEntry(&c)
	if err != nil {
		return 0, err
	}
	f := n.r.Apply(data, n.timeout())
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, ErrNotLeader
		}
		return 0, err
	}
	if err, ok := f.Response().(error); ok {
		return f.Index(), err
	}
	return f.Index(), nil
}

// Forwarding a follower's write to the leader, over the link (link.go,
// service "meta-rpc"): a kindMetaWrite request carries the command
// (appendMetaCmd), its answer an rpcReply.
const kindMetaWrite byte = 1

// metaDialTimeout bounds dialling the leader; the whole write is bounded
// by the node's write timeout.
const metaDialTimeout = 5 * time.Second

// maxMetaFrame bounds a forwarded metadata write (one commit of
// definitions: a vhost's deletion with all its queues, a definitions
// import's users and permissions). The peer is an authenticated node;
// the bound only keeps a corrupt length from allocating without end.
const maxMetaFrame = 1 << 30

// rpcReply answers a forwarded write: the index it was committed at, or
// why not.
type rpcReply struct {
	Index     uint64
	Err       string
	ErrCode   int // an ApplyError's code; 0: another error
	NotLeader bool
}

func (r *rpcReply) append(b Enc) Enc {
	return b.Bool(r.NotLeader).Uvarint(r.Index).Varint(int64(r.ErrCode)).Str(r.Err)
}

func decodeReply(p []byte) (rpcReply, error) {
	d := NewDec(p)
	r := rpcReply{NotLeader: d.Bool(), Index: d.Uvarint(), ErrCode: int(d.Varint()), Err: d.Str()}
	return r, d.End()
}

// forward sends a write to the leader at addr.
func (n *Node) forward(addr string, c metaCmd) (uint64, error) {
	body := appendMetaCmd(nil, &c)
	var p []byte
	var err error
	// A link found down before the write went out (the leader restarted,
	// and this node had not seen its link close yet) is dialled again:
	// the write was not sent.
	for range 2 {
		var l *Conn
		if l, err = n.metaLinks.dial(addr, n.metaLayer, metaDialTimeout, ConnConfig{MaxFrame: maxMetaFrame, WriteTimeout: n.timeout(), Heartbeat: LinkHeartbeat, DeadAfter: LinkDeadAfter}); err != nil {
			return 0, fmt.Errorf("cluster: forwarding to the leader at %s: %w", addr, err)
		}
		if p, err = l.CallWait(kindMetaWrite, body, n.timeout()); !errors.Is(err, ErrClosed) {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: the leader at %s: %w", addr, err)
	}
	r, err := decodeReply(p)
	if err != nil {
		return 0, fmt.Errorf("cluster: the leader at %s: %w", addr, err)
	}
	switch {
	case r.NotLeader:
		return 0, ErrNotLeader
	case r.ErrCode != 0:
		return r.Index, &ApplyError{Code: r.ErrCode, Text: r.Err}
	case r.Err != "":
		return 0, errors.New(r.Err)
	}
	return r.Index, nil
}

// acceptLinks serves a link service's connections with open, until its
// layer closes.
func (n *Node) acceptLinks(l raft.StreamLayer, open func(net.Conn)) {
	defer n.rpcWG.Done()
	for {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		open(nc)
	}
}

// openMeta serves a link another node opened to forward its writes.
func (n *Node) openMeta(nc net.Conn) {
	n.metaLinks.serve(nc, ConnConfig{MaxFrame: maxMetaFrame, WriteTimeout: n.timeout(), Heartbeat: LinkHeartbeat, DeadAfter: LinkDeadAfter, Handle: n.handleMeta})
}

// handleMeta applies a forwarded write, on a goroutine of its own (a
// write waits for its commit; the link's reader does not), and answers.
func (n *Node) handleMeta(l *Conn, f Frame) error {
	if f.Kind != kindMetaWrite {
		return errUnexpected
	}
	c, err := decodeMetaCmd(f.Body)
	if err != nil {
		return err
	}
	n.rpcWG.Add(1)
	go func() {
		defer n.rpcWG.Done()
		var r rpcReply
		if n.r.State() != raft.Leader {
			r.NotLeader = true
		} else if idx, err := n.applyMeta(c); errors.Is(err, ErrNotLeader) {
			r.NotLeader = true
		} else if err != nil {
			r.Index, r.Err = idx, err.Error()
			var ae *ApplyError
			if errors.As(err, &ae) {
				r.ErrCode = ae.Code
			}
		} else {
			r.Index = idx
		}
		_ = l.Answer(f.ID, r.append(nil))
	}()
	return nil
}

// AddMember adds a node (started with Join) to the cluster as a voter;
// on the leader only.
func (n *Node) AddMember(name, addr string) error {
	if n.r.State() != raft.Leader {
		return ErrNotLeader
	}
	return n.r.AddVoter(raft.ServerID(name), raft.ServerAddress(addr), 0, 30*time.Second).Error()
}

// RemoveMember removes a node from the cluster; on the leader only.
func (n *Node) RemoveMember(name string) error {
	if n.r.State() != raft.Leader {
		return ErrNotLeader
	}
	return n.r.RemoveServer(raft.ServerID(name), 0, 30*time.Second).Error()
}

// Keys lists the definitions whose keys start with prefix, as this node
// has applied them, in key order.
func (n *Node) Keys(prefix string) []Op { return n.meta.Keys(prefix) }

// Get reads a definition as this node has applied it.
func (n *Node) Get(key string) ([]byte, bool) { return n.meta.Get(key) }

// --- the metadata state machine ---------------------------------------------------

const (
	metaPut byte = iota + 1
	metaDelete
	metaBatch
)

// metaCmd is one metadata log entry: a single put or delete (Op, Key,
// Val), or a batch of them applied together (Ops).
type metaCmd struct {
	Op  byte
	Key string
	Val []byte
	Ops []Op
}

// The metadata log's entries and snapshots are gob-encoded metaCmds:
// that is their format on disk (the log store and raft's snapshot
// files), kept as it is so that a node reads the state it wrote before.
// Between nodes a command travels in the cluster's codec
// (appendMetaCmd).

// encodeMetaEntry is c as the metadata log holds it.
func encodeMetaEntry(c *metaCmd) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendMetaCmd appends c as a forwarded write carries it.
func appendMetaCmd(b Enc, c *metaCmd) Enc {
	b = b.U8(c.Op).Str(c.Key).Bytes(c.Val).Uvarint(uint64(len(c.Ops)))
	for i := range c.Ops {
		o := &c.Ops[i]
		b = b.Str(o.Key).Bytes(o.Val).Bool(o.Delete)
	}
	return b
}

// decodeMetaCmd reads what appendMetaCmd wrote.
func decodeMetaCmd(p []byte) (metaCmd, error) {
	d := NewDec(p)
	c := metaCmd{Op: d.U8(), Key: d.Str(), Val: d.Bytes()}
	n := d.Count(3) // an op takes 3 bytes at least
	if n > 0 {
		c.Ops = make([]Op, n)
		for i := range c.Ops {
			c.Ops[i] = Op{Key: d.Str(), Val: d.Bytes(), Delete: d.Bool()}
		}
	}
	return c, d.End()
}

// Op is one change of a metadata write: Key set to Val, or deleted.
type Op struct {
	Key    string
	Val    []byte
	Delete bool
}

// MetaFSM is the metadata store's state machine: keys and values.
type MetaFSM struct {
	mu      sync.RWMutex // guards m: raft applies, anyone reads
	m       map[string][]byte
	applied atomic.Uint64 // the last index applied (or restored)
	// onApply, when set, is told each committed change, in log order, on
	// raft's FSM goroutine (the broker applies them to its registry and
	// store). After a Restore it is told every key, as puts.
	onApply func(ops []Op) error
}

// ApplyError is a committed change that its application refused (a
// declare inequivalent to one committed before it): the same on every
// node, and the writer's answer. Code and Text are the broker's (an AMQP
// reply code and text).
type ApplyError struct {
	Code int
	Text string
}

func (e *ApplyError) Error() string { return e.Text }

// NewMetaFSM returns an empty store.
func NewMetaFSM() *MetaFSM { return &MetaFSM{m: map[string][]byte{}} }

// Apply applies a committed command.
func (f *MetaFSM) Apply(l *raft.Log) any {
	defer f.applied.Store(l.Index)
	var c metaCmd
	if err := gob.NewDecoder(bytes.NewReader(l.Data)).Decode(&c); err != nil {
		return fmt.Errorf("cluster: a metadata command does not decode: %w", err)
	}
	ops := c.Ops
	switch c.Op {
	case metaPut:
		ops = []Op{{Key: c.Key, Val: c.Val}}
	case metaDelete:
		ops = []Op{{Key: c.Key, Delete: true}}
	case metaBatch:
	default:
		return fmt.Errorf("cluster: unknown metadata operation %d", c.Op)
	}
	f.mu.Lock()
	for _, o := range ops {
		if o.Delete {
			delete(f.m, o.Key)
		} else {
			f.m[o.Key] = o.Val
		}
	}
	f.mu.Unlock()
	if f.onApply != nil {
		if err := f.onApply(ops); err != nil {
			return err
		}
	}
	return nil
}

// Get reads a key.
func (f *MetaFSM) Get(key string) ([]byte, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v, ok := f.m[key]
	return v, ok
}

// Snapshot copies the store out.
func (f *MetaFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	keys := make([]string, 0, len(f.m))
	for k := range f.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	// The index the snapshot is at (raft takes it between two applies),
	// then the keys.
	if err := enc.Encode(f.applied.Load()); err != nil {
		return nil, err
	}
	if err := enc.Encode(len(keys)); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := enc.Encode(metaCmd{Op: metaPut, Key: k, Val: f.m[k]}); err != nil {
			return nil, err
		}
	}
	return fsmSnapshot(buf.Bytes()), nil
}

// Restore replaces the store with a snapshot's.
func (f *MetaFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	dec := gob.NewDecoder(r)
	var at uint64
	var n int
	if err := dec.Decode(&at); err != nil {
		return err
	}
	if err := dec.Decode(&n); err != nil {
		return err
	}
	m := make(map[string][]byte, n)
	for i := 0; i < n; i++ {
		var c metaCmd
		if err := dec.Decode(&c); err != nil {
			return err
		}
		m[c.Key] = c.Val
	}
	f.mu.Lock()
	old := f.m
	f.m = m
	f.mu.Unlock()
	f.applied.Store(at)
	if f.onApply != nil {
		var ops []Op
		for k := range old {
			if _, ok := m[k]; !ok {
				ops = append(ops, Op{Key: k, Delete: true})
			}
		}
		for k, v := range m {
			ops = append(ops, Op{Key: k, Val: v})
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].Key < ops[j].Key })
		_ = f.onApply(ops) // a refusal was answered when first applied
	}
	return nil
}

// Keys lists the keys with prefix and their values, in key order.
func (f *MetaFSM) Keys(prefix string) []Op {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Op
	for k, v := range f.m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, Op{Key: k, Val: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
