package replica

import (
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/stream"
	"github.com/railmq/railmq/vhost"
)

// Host is what the manager needs of the node it serves (the broker).
type Host interface {
	// VHost returns a virtual host by name, or nil: the link's requests
	// name the queues homed here by vhost and name.
	VHost(name string) *vhost.VHost
	// DropQueue proposes, through the cluster's metadata store, the
	// deletion of a quorum queue's definition and of the bindings to it;
	// every node then drops its handle of the queue (Stop).
	DropQueue(vhost, name string) error
}

// Options configure a Manager.
type Options struct {
	Host   Host
	Logger *zap.Logger // nil: none
	// Memory, when set, counts the bytes waiting to be written on the
	// links to other nodes (and the frames waiting for a link being
	// dialled), as the node's memory figure counts queued bodies: a link
	// whose peer falls behind raises the memory alarm rather than
	// growing unseen (link.go).
	Memory *atomic.Int64
	// StreamDir holds the streams' logs, one directory each (stream.go);
	// "": this node keeps no streams.
	StreamDir string
	// StreamSeal, if set, encrypts the streams' chunks (stream.Options.Seal).
	StreamSeal stream.Sealer
}

// Manager owns this node's replicated queue kinds: its quorum queues and
// the groups it is creating, its handles of classic queues homed on other
// nodes (and the links to their homes), and the links other nodes opened
// to the classic queues homed here. It is the vhosts' vhost.Quorum.
//
// Its goroutines (the link's accept loop; each link's owner, which dials
// it when it is this node's, and its reader and writer; the home's purge,
// delete and stats requests; the proxies' counts' refreshes) are started
// only while it is open; Close stops them and waits for them.
type Manager struct {
	host Host
	log  *zap.Logger
	mem  *atomic.Int64
	node *cluster.Node // Attach
	// incarnation tells this life's consumer tags from earlier ones'.
	incarnation string
	spread      atomic.Uint64 // rotates the followers of new groups (voters)

	// Quorum queues (quorum.go): this node's, for the ticker.
	quorumMu sync.Mutex
	quorum   map[*quorumQueue]struct{}
	creating map[string]bool // groups this node proposed, to bootstrap when applied
	// Streams (stream.go): this node's, for the ticker and Close.
	streams    map[*streamQueue]struct{}
	streamDir  string
	streamSeal stream.Sealer // Options.StreamSeal

	// Classic queues homed on other nodes (proxy.go, home.go): the links
	// to their homes, this node's handles of them, the other nodes'
	// links to the queues homed here.
	linkMu   sync.Mutex
	links    map[string]*peerLink
	proxies  map[*classicProxy]struct{}
	sessions map[*linkSession]struct{}
	layer    cluster.Link
	closed   bool           // Close began: no link, session or goroutine starts
	quit     chan struct{}  // closed by Close: every link's owner closes it
	wg       sync.WaitGroup // the goroutines Close waits for
}

// New makes a manager. Attach gives it its cluster node before the node
// applies anything; Listen then serves the other nodes' links.
func New(opts Options) *Manager {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Manager{host: opts.Host, log: log, mem: opts.Memory,
		incarnation: strconv.FormatInt(time.Now().UnixNano(), 36),
		quorum:      map[*quorumQueue]struct{}{}, creating: map[string]bool{},
		streams: map[*streamQueue]struct{}{}, streamDir: opts.StreamDir, streamSeal: opts.StreamSeal,
		links: map[string]*peerLink{}, proxies: map[*classicProxy]struct{}{}, sessions: map[*linkSession]struct{}{},
		quit: make(chan struct{})}
}

// count adds n bytes to the memory figure (Options.Memory), if any.
func (m *Manager) count(n int) {
	if m.mem != nil && n != 0 {
		m.mem.Add(int64(n))
	}
}

// Attach gives the manager its cluster node (cluster.NodeConfig.OnNode:
// before the node's raft starts, so before it applies the definitions of
// the queues the manager makes).
func (m *Manager) Attach(n *cluster.Node) { m.node = n }

// Listen registers the link service ("cq-rpc") and accepts the other
// nodes' links to the classic queues homed here, until Close.
func (m *Manager) Listen() error {
	layer, err := m.node.Link("cq-rpc")
	if err != nil {
		return err
	}
	m.linkMu.Lock()
	if m.closed {
		m.linkMu.Unlock()
		return layer.Close()
	}
	m.layer = layer
	m.wg.Add(1)
	m.linkMu.Unlock()
	go func() {
		defer m.wg.Done()
		m.serveLinks(layer)
	}()
	return nil
}

// spawn runs f on a goroutine Close waits for; false (f not run) once
// Close has begun.
func (m *Manager) spawn(f func()) bool {
	m.linkMu.Lock()
	if m.closed {
		m.linkMu.Unlock()
		return false
	}
	m.wg.Add(1)
	m.linkMu.Unlock()
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// Close ends every link, both ways, and waits for the manager's
// goroutines (at shutdown, before the node closes: the quorum queues'
// groups are the node's).
func (m *Manager) Close() {
	m.linkMu.Lock()
	already := m.closed
	m.closed = true
	layer := m.layer
	m.linkMu.Unlock()
	if !already {
		close(m.quit) // each link's owner closes it, and fails it
		if layer != nil {
			_ = layer.Close()
		}
	}
	m.wg.Wait()
	m.closeStreams()
}

// Tick runs the once-a-second work (the broker's sweeper calls it): on
// the quorum queues (tickQuorum) and the classic queues homed elsewhere
// (tickProxies).
func (m *Manager) Tick() {
	m.tickQuorum()
	m.tickProxies()
	m.tickStreams()
}

// --- vhost.Quorum -----------------------------------------------------------

// NewGroup picks a new quorum queue's group: an id and size voters, this
// node first.
func (m *Manager) NewGroup(size int) (string, []string) {
	id := vhost.GenerateName("")
	m.quorumMu.Lock()
	m.creating[id] = true
	m.quorumMu.Unlock()
	return id, m.voters(size)
}

func (m *Manager) voters(size int) []string {
	switch {
	case size == 0:
		size = defaultGroupSize
	case size < 0: // every node
		size = len(m.node.Addrs())
	}
	self := m.node.Name()
	var others []string
	for name := range m.node.Addrs() {
		if name != self {
			others = append(others, name)
		}
	}
	sort.Strings(others)
	// The followers are spread too: rotate who comes after this node.
	if len(others) > 0 {
		k := int(m.spread.Add(1) % uint64(len(others)))
		others = append(others[k:], others[:k]...)
	}
	out := append([]string{self}, others...)
	if size < len(out) {
		out = out[:size]
	}
	return out
}

// Self is this node's name.
func (m *Manager) Self() string { return m.node.Name() }

// Stop stops this node's handle of a deleted quorum queue, or of a
// classic queue homed elsewhere, and drops its state here.
func (m *Manager) Stop(q *queue.Queue) {
	switch r := q.Config().Replica.(type) {
	case *classicProxy:
		r.stop()
	case *quorumQueue:
		r.stop()
	case *streamQueue:
		r.stop()
	}
}

// --- the management API's views ---------------------------------------------

// Describe adds what RabbitMQ's management API shows of a replicated
// queue's handle on this node: a quorum queue's type, leader, members and
// Raft indexes (quorumQueue.describe); a classic queue homed elsewhere,
// its home as its node. Other queues are left as they are.
func Describe(q *queue.Queue, m map[string]any) {
	switch r := q.Config().Replica.(type) {
	case *quorumQueue:
		r.describe(m)
	case *classicProxy:
		m["node"] = r.home // its messages are there; this node forwards
	case *streamQueue:
		if rs := streamRepl(r); rs != nil {
			rs.describe(m)
		}
	}
}

// DescribeMembers adds a quorum queue's members' progress through its
// log, asked of the members themselves (within 300 ms); other queues are
// left as they are.
func DescribeMembers(q *queue.Queue, m map[string]any) {
	if qq, ok := q.Config().Replica.(*quorumQueue); ok {
		qq.describeMembers(m)
	}
}

// Home is the node a classic queue homed elsewhere lives on, or "" if q
// is not this node's handle of one.
func Home(q *queue.Queue) string {
	if p, ok := q.Config().Replica.(*classicProxy); ok {
		return p.home
	}
	return ""
}

// RaftStatus is a quorum queue's group as this node sees it (metrics).
type RaftStatus struct {
	Term, Commit, Applied uint64
	Leader                bool // this node leads the group
}

// Raft reports a quorum queue's group; false if q is not a quorum queue.
func Raft(q *queue.Queue) (RaftStatus, bool) {
	qq, ok := q.Config().Replica.(*quorumQueue)
	if !ok {
		return RaftStatus{}, false
	}
	st := qq.g.Status()
	return RaftStatus{Term: st.Term, Commit: st.Commit, Applied: st.Applied, Leader: qq.g.IsLeader()}, true
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// AwaitRecovered waits, on a standalone node, until every quorum queue
// started so far serves: it leads its group of one and has applied the
// log it had (cluster.Group.Recovered), so that the first client sees
// its messages. It logs progress every 5 s; it gives up after within.
func (m *Manager) AwaitRecovered(within time.Duration) {
	m.quorumMu.Lock()
	qs := make([]*quorumQueue, 0, len(m.quorum))
	for qq := range m.quorum {
		qs = append(qs, qq)
	}
	m.quorumMu.Unlock()
	if len(qs) == 0 {
		return
	}
	start := time.Now()
	last := start
	for {
		left := 0
		for _, qq := range qs {
			if !qq.recovered() {
				left++
			}
		}
		if left == 0 {
			m.log.Info("quorum queues recovered", zap.Int("queues", len(qs)), zap.Duration("took", time.Since(start)))
			return
		}
		if time.Since(start) > within {
			m.log.Warn("quorum queues still recovering", zap.Int("queues", len(qs)), zap.Int("recovering", left))
			return
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			m.log.Info("recovering quorum queues", zap.Int("queues", len(qs)), zap.Int("recovering", left), zap.Duration("took_so_far", time.Since(start)))
		}
		time.Sleep(2 * time.Millisecond)
	}
}
