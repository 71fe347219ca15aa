package broker

// The admin API: everything the management plane (package mgmt) and the
// metrics (package metrics) may ask of a running node, and nothing else.
// It returns plain Go data (no JSON, no HTTP); the callers decide what
// a user may see and how it is shown.
//
// The node:
//   - NodeName, Version, Logger: who answers, and where it logs.
//   - Status: memory (held, resident, watermark, paging), disk free and
//     its limit, the alarms, file descriptors, the AMQP listeners' ports,
//     uptime. SetMemoryHighWatermark (alarm.go) changes the watermark.
//   - Cluster: the cluster node, or nil (membership, its status).
//   - Done: closed when Shutdown begins (a caller's goroutines stop).
//   - Totals, Churn, Store: the counters and histograms the metrics read.
//
// Clients:
//   - Login: a user's credentials, as connection.open checks them.
//   - Connections, CloseConnection, Channels (with their consumers).
//
// Definitions (stored, and replicated in a cluster):
//   - VHosts, LookupVHost, PutVHost, DeleteVHost: vhosts with their
//     stored record (description, tags, limits); VHostInfo embeds the
//     vhost's registry (*vhost.VHost: queues, exchanges, bindings,
//     policies in force), which is also VHost(name) (server.go).
//   - Access: the users, permissions and topic permissions, to read;
//     PutAccess, DeleteUser, ClearPermission, ClearTopicPermissions
//     change them.
//   - PutPolicy: policies and operator policies.
//
// Queues:
//   - DescribeQueue, QueueReplica: what replication makes of a queue
//     (quorum queues, classic queues homed on another node).

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/replica"
	"github.com/railmq/railmq/vhost"
)

// CompatVersion is the RabbitMQ version whose management API, metrics and
// definitions format railmq follows (tools pick features by it).
const CompatVersion = "3.10.8"

// NodeName is the node's name, as RabbitMQ's rabbit@host: the management
// API's and the metrics' node and cluster name.
func (s *Server) NodeName() string { return s.nodeName() }

func (s *Server) nodeName() string {
	if c := s.opts.Cluster; c != nil {
		return c.Name
	}
	if s.opts.NodeName != "" {
		return s.opts.NodeName
	}
	return "railmq@" + hostname
}

// Version is railmq's version (Options.Version).
func (s *Server) Version() string { return s.opts.Version }

// Logger is the broker's logger (Options.Logger).
func (s *Server) Logger() *zap.Logger { return s.log }

// Done is closed when Shutdown begins.
func (s *Server) Done() <-chan struct{} { return s.stop }

// Cluster is the node's cluster node, or nil when it is not clustered.
func (s *Server) Cluster() *cluster.Node { return s.node }

// Totals are the broker's message and queue counters.
func (s *Server) Totals() *queue.Totals { return &s.totals }

// Store is the broker's message store (its size and metrics).
func (s *Server) Store() *persist.Store { return s.store }

// Churn counts the connections and channels opened and closed since start.
type Churn struct {
	ConnectionsOpened, ConnectionsClosed int64
	ChannelsOpened, ChannelsClosed       int64
}

// Churn reads the counts.
func (s *Server) Churn() Churn {
	return Churn{s.connOpened.Load(), s.connClosed.Load(), s.chOpened.Load(), s.chClosed.Load()}
}

// NodeStatus is the node's resources, as /api/nodes and the metrics show
// them.
type NodeStatus struct {
	Started     time.Time
	DataDir     string
	ConfigFiles []string // Options.ConfigFiles
	MemoryHeld  int64    // bytes held for clients: what the memory alarm compares (MemoryUsed)
	RSS         int64    // the process's resident memory, or 0
	Watermark   int64    // the memory high watermark in force
	Paging      bool     // above the paging ratio of the watermark
	DiskFree    uint64   // the disk check's last figure
	DiskLimit   int64    // Options.DiskFreeLimit
	MemoryAlarm bool
	DiskAlarm   bool
	FDUsed      int
	FDTotal     int
	Listeners   []int // the AMQP listeners' ports (plain and TLS), sorted
}

// Status reads the node's resources.
func (s *Server) Status() NodeStatus {
	bits := s.alarms.Load()
	fdUsed, fdTotal := fdCounts()
	return NodeStatus{Started: s.startedAt, DataDir: s.opts.DataDir, ConfigFiles: s.opts.ConfigFiles, MemoryHeld: s.memory.Load(), RSS: processRSS(),
		Watermark: s.watermark.Load(), Paging: s.paging.Load(), DiskFree: s.diskFreeNow.Load(), DiskLimit: s.opts.DiskFreeLimit,
		MemoryAlarm: bits&alarmMemory != 0, DiskAlarm: bits&alarmDisk != 0, FDUsed: fdUsed, FDTotal: fdTotal,
		Listeners: s.listenerPorts()}
}

// listenerPorts are the ports the AMQP listeners (plain and TLS) serve.
func (s *Server) listenerPorts() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ports []int
	for _, ln := range s.lns {
		if _, p, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports = append(ports, n)
			}
		}
	}
	sort.Ints(ports)
	return ports
}

// processRSS is the broker's resident memory (bytes), or 0.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var pages int64
	for i, f := range strings.Fields(string(b)) {
		if i == 1 {
			pages, _ = strconv.ParseInt(f, 10, 64)
		}
	}
	return pages * int64(os.Getpagesize())
}

func fdCounts() (used, total int) {
	if es, err := os.ReadDir("/proc/self/fd"); err == nil {
		used = len(es)
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		total = int(rl.Cur)
	}
	return used, total
}

// Login checks a user's credentials for a client at remote, as
// connection.open does (loopback-only users from loopback only).
func (s *Server) Login(user, pass string, remote net.Addr) (*auth.User, bool) {
	return s.login(user, pass, remote)
}

// --- connections and channels ----------------------------------------------

// connInfo is what is shown of an open connection; set once the
// handshake is done.
type connInfo struct {
	Name             string
	User             string
	VHost            string
	PeerHost         string
	PeerPort         int
	ConnectedAt      int64 // unix ms
	ClientProperties amqp.Table
	Node             string
	Protocol         string
	Type             string
}

// connectionName is RabbitMQ's name for a connection: "peer -> local".
func connectionName(nc net.Conn) string {
	return nc.RemoteAddr().String() + " -> " + nc.LocalAddr().String()
}

// peer splits a connection's remote address.
func peer(nc net.Conn) (string, int) {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String(), a.Port
	}
	return strings.Split(nc.RemoteAddr().String(), ":")[0], 0
}

// Connection is an open connection (its handshake done).
type Connection struct {
	ID               uint64
	Name             string // RabbitMQ's: "peer -> local"
	User, VHost      string
	PeerHost         string
	PeerPort         int
	ConnectedAt      int64      // unix ms
	ClientProperties amqp.Table // as the client sent them: not to be changed
	Node             string
	Protocol         string // "AMQP 0-9-1"
	Type             string // "network"
	// State is RabbitMQ's: "blocked" while an alarm keeps it from being
	// read (it published during the alarm), "blocking" while an alarm is
	// on and it has not published since (it will be blocked if it does),
	// "flow" within a second of flow control holding it back (waitFlow),
	// else "running".
	State    string
	Blocked  bool // held back by an alarm
	InFlow   bool // held back by flow control within the last second
	Channels int  // open
	Net      ConnNet
}

// openConns are the connections whose handshake is done, by id.
func (s *Server) openConns() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c.info.Load() != nil {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
	return cs
}

// Connections lists the open connections, by id.
func (s *Server) Connections() []Connection {
	now := time.Now()
	cs := s.openConns()
	out := make([]Connection, 0, len(cs))
	for _, c := range cs {
		out = append(out, s.connection(c, now))
	}
	return out
}

func (s *Server) connection(c *conn, now time.Time) Connection {
	ci := c.info.Load()
	blocked, flow := c.blocked.Load(), c.inFlow(now)
	state := "running"
	switch {
	case blocked:
		state = "blocked"
	case s.alarms.Load() != 0:
		state = "blocking"
	case flow:
		state = "flow"
	}
	return Connection{ID: c.id, Name: ci.Name, User: ci.User, VHost: ci.VHost, PeerHost: ci.PeerHost, PeerPort: ci.PeerPort,
		ConnectedAt: ci.ConnectedAt, ClientProperties: ci.ClientProperties, Node: ci.Node, Protocol: ci.Protocol, Type: ci.Type,
		State: state, Blocked: blocked, InFlow: flow, Channels: int(c.nchan.Load()), Net: c.netInfo()}
}

// CloseConnection closes connection id with 320 CONNECTION_FORCED and
// reason, as RabbitMQ's management API does; false if it is not open.
func (s *Server) CloseConnection(id uint64, reason string) bool {
	for _, c := range s.openConns() {
		if c.id == id {
			c.closeWith(&amqp.Error{Code: amqp.ConnectionForced, Text: "CONNECTION_FORCED - " + reason}, "closed via management API")
			return true
		}
	}
	return false
}

// Channel is an open channel of an open connection.
type Channel struct {
	Conn                     Connection
	Number                   uint16
	Consumers                []Consumer
	Unacked, Unconfirmed     int
	Prefetch, GlobalPrefetch int
	Confirm                  bool
	Stats                    ChannelStats // its message counts (connstats.go)
}

// Consumer is a channel's consumer.
type Consumer struct {
	Tag, Queue string
	NoAck      bool
	Exclusive  bool
	Prefetch   int
	Args       amqp.Table // basic.consume's arguments
}

// Channels lists the open channels, by connection id then number.
func (s *Server) Channels() []Channel {
	now := time.Now()
	var out []Channel
	for _, c := range s.openConns() {
		cn := s.connection(c, now)
		c.snapMu.Lock()
		for n, ch := range c.snap {
			in := ch.Info()
			x := Channel{Conn: cn, Number: n, Unacked: in.Unacked, Unconfirmed: in.Unconfirmed, Prefetch: in.Prefetch,
				GlobalPrefetch: in.GlobalPrefetch, Confirm: in.Confirm, Stats: ChannelStats(in.Stats)}
			for _, k := range in.Consumers {
				x.Consumers = append(x.Consumers, Consumer{Tag: k.Tag, Queue: k.Queue, NoAck: k.NoAck, Exclusive: k.Exclusive, Prefetch: k.Prefetch, Args: k.Args})
			}
			out = append(out, x)
		}
		c.snapMu.Unlock()
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Conn.ID != out[j].Conn.ID {
			return out[i].Conn.ID < out[j].Conn.ID
		}
		return out[i].Number < out[j].Number
	})
	return out
}

// --- vhosts ----------------------------------------------------------------

// VHostInfo is a vhost: its registry and its stored record.
type VHostInfo struct {
	*vhost.VHost
	Rec VHostRecord
}

// VHosts lists the vhosts by name.
func (s *Server) VHosts() []*VHostInfo {
	sts := s.allVHosts()
	out := make([]*VHostInfo, len(sts))
	for i, st := range sts {
		out[i] = &VHostInfo{st.v, st.rec}
	}
	return out
}

// LookupVHost returns a vhost, or nil.
func (s *Server) LookupVHost(name string) *VHostInfo {
	if st := s.vhostByName(name); st != nil {
		return &VHostInfo{st.v, st.rec}
	}
	return nil
}

// PutVHost adds a vhost, or updates its description, tags and limits; it
// reports whether the vhost is new.
func (s *Server) PutVHost(name string, rec VHostRecord) (created bool, err error) {
	return s.putVHost(name, rec)
}

// DeleteVHost closes the vhost's connections (320), then deletes
// everything in it, its permissions and policies; it reports whether
// there was one.
func (s *Server) DeleteVHost(name string) (found bool, err error) { return s.deleteVHost(name) }

// PutPolicy adds or replaces (p), or removes (p nil) a policy or an
// operator policy of vhost vh; it reports whether one of that name was
// there.
func (s *Server) PutPolicy(vh string, operator bool, name string, p *vhost.PolicyDef) (had bool, err error) {
	st := s.vhostByName(vh)
	if st == nil {
		return false, fmt.Errorf("broker: no vhost %q", vh)
	}
	return s.putPolicy(st, operator, name, p)
}

// --- users and permissions -------------------------------------------------

// Access is the users, their permissions and topic permissions. Read
// it; change it with PutAccess, DeleteUser, ClearPermission and
// ClearTopicPermissions, which store the change (and replicate it in a
// cluster).
func (s *Server) Access() *auth.Registry { return s.reg }

// PutAccess stores users (added or replaced), permissions and topic
// permissions in one commit, then puts them in force.
func (s *Server) PutAccess(users []*auth.User, perms []auth.PermissionEntry, topics []auth.TopicPermissionEntry) error {
	b := &persist.Batch{}
	for _, u := range users {
		putUserDef(b, u)
	}
	for _, p := range perms {
		putPermDef(b, p.VHost, p.User, p.Permission)
	}
	for _, t := range topics {
		putTopicDef(b, t.VHost, t.User, t.TopicPermission)
	}
	return s.commitDefs(b, func() {
		for _, u := range users {
			s.reg.PutUser(u)
		}
		for _, p := range perms {
			s.reg.SetPermission(p.VHost, p.User, p.Permission)
		}
		for _, t := range topics {
			s.reg.SetTopicPermission(t.VHost, t.User, t.TopicPermission)
		}
	})
}

// DeleteUser deletes a user with its permissions, and closes its
// connections (320).
func (s *Server) DeleteUser(name string) error {
	b := &persist.Batch{}
	b.DeleteDef(defUser, vhost.DefName(name))
	for _, p := range s.reg.Permissions() {
		if p.User == name {
			b.DeleteDef(defPerm, vhost.DefName(p.VHost, name))
		}
	}
	for _, t := range s.reg.TopicPermissions() {
		if t.User == name {
			b.DeleteDef(defTopicPerm, vhost.DefName(t.VHost, name, t.Exchange))
		}
	}
	return s.commitDefs(b, func() {
		s.reg.DeleteUser(name)
		s.closeConnsWhere(func(c *conn) bool { return c.user == name },
			amqp.Errorf(amqp.ConnectionForced, "user '%s' is deleted", name), "user deleted")
	})
}

// ClearPermission removes user's permissions in vh.
func (s *Server) ClearPermission(vh, user string) error {
	b := &persist.Batch{}
	b.DeleteDef(defPerm, vhost.DefName(vh, user))
	return s.commitDefs(b, func() { s.reg.ClearPermission(vh, user) })
}

// ClearTopicPermissions removes user's topic permissions in vh, on every
// exchange.
func (s *Server) ClearTopicPermissions(vh, user string) error {
	b := &persist.Batch{}
	for _, t := range s.reg.TopicPermissions() {
		if t.VHost == vh && t.User == user {
			b.DeleteDef(defTopicPerm, vhost.DefName(vh, user, t.Exchange))
		}
	}
	return s.commitDefs(b, func() { s.reg.ClearTopicPermission(vh, user, "") })
}

// --- queues ----------------------------------------------------------------

// QueueReplica is what replication makes of a queue on this node.
type QueueReplica struct {
	// Kind is "" (a classic queue of this node), "quorum", or "remote"
	// (a classic queue homed on node Home: this node forwards).
	Kind string
	Home string
	// A quorum queue's Raft figures, as this node knows them, and
	// whether this node leads it.
	Term, Commit, Applied uint64
	Leader                bool
}

// QueueReplica says what replication makes of q.
func (s *Server) QueueReplica(q *queue.Queue) QueueReplica {
	if st, ok := replica.Raft(q); ok {
		return QueueReplica{Kind: "quorum", Term: st.Term, Commit: st.Commit, Applied: st.Applied, Leader: st.Leader}
	}
	if home := replica.Home(q); home != "" {
		return QueueReplica{Kind: "remote", Home: home}
	}
	return QueueReplica{}
}

// DescribeQueue adds to m, a queue as the management API shows it, what
// replication makes of q: a quorum queue's type, leader, members and
// Raft figures (with members, each member's progress through the log,
// asked of the members: up to 300 ms); the home node of a queue homed
// on another node.
func (s *Server) DescribeQueue(q *queue.Queue, m map[string]any, members bool) {
	replica.Describe(q, m)
	if members {
		replica.DescribeMembers(q, m)
	}
}
