package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// A quorum queue is a Raft group of its own (as RabbitMQ's are: one ra
// cluster per queue). Its voters are the queue's members (the group
// size, x-quorum-initial-group-size); every other node of the cluster
// follows the log as a non-voter, so that every node holds every quorum
// queue's state and serves its consumers itself: a delivery is an effect
// of applying an entry (Fifo.Apply), and the node whose consumer it names
// writes it out when it applies that entry. Only commands travel to the
// leader (forwarded over the "qq-rpc" layer when this node does not
// lead); deliveries do not travel at all.
//
// Submit is the way in: commands queue up while a round is in flight and
// go as one log entry (Batch) in the next, so batching comes from load.
// A node's groups share one Badger for their logs (prefix per group).

// GroupConfig describes a quorum queue's group.
type GroupConfig struct {
	ID string // unique in the cluster, for the group's life: layer "q/"+ID
	// Label names what the group replicates in its log lines ("'q' in
	// vhost '/'"); the cluster package knows nothing of queues.
	Label string
	// Voters are the members' node names; other nodes follow as
	// non-voters.
	Voters []string
	// Bootstrap: this node makes the group (the node that declared the
	// queue: it leads first, as RabbitMQ's client-local leader locator).
	// The others, and this one when it starts again, wait for the
	// leader to reach them.
	Bootstrap bool
	Fifo      FifoConfig
	// DedupKey, if set, makes the queue deduplicate (fifo_dedup.go): the
	// id of a message with props, if it has one.
	DedupKey func(props []byte) ([]byte, bool)
	// GroupKey, if set, gives the queue message groups (fifo_groups.go):
	// the group id of a message with props, if it has one.
	GroupKey func(props []byte) ([]byte, bool)
	// GroupKeyFor makes the group id function of a header a policy names
	// (a GroupHeader command; fifo_groups.go).
	GroupKeyFor func(header string) func(props []byte) ([]byte, bool)
	// OnApply is told each applied command and its effects on this node,
	// in log order, on raft's FSM goroutine; leader says whether this node
	// leads the group (it carries out the effects meant for one node only:
	// dead-lettering). OnRestore: the state was replaced by a snapshot.
	OnApply   func(c *Command, e *Effects, leader bool)
	OnRestore func()
	// OnCreate, when set, gets the group before its raft starts (and so
	// before OnApply and OnRestore run, which may use it).
	OnCreate func(g *Group)
	// machine, when set (StartStreamGroup), is the state machine raft
	// applies the log to instead of the Fifo; snapEvery, trailing
	// and snapInterval then replace groupSnapshotEvery and its 10 s.
	machine             raft.FSM
	snapEvery, trailing uint64
	snapInterval        time.Duration
}

// Group is this node's member of a quorum queue's group.
type Group struct {
	n     *Node
	cfg   GroupConfig
	fsm   *QueueFSM
	nudge atomic.Bool // see Nudge
	// applying is the index of the entry OnApply is told of (see Lag).
	applying atomic.Uint64
	r        *raft.Raft
	// live is r once NewRaft returned: what the node's rpc server and
	// the FSM hook (which run before StartGroup returns) may use.
	live  atomic.Pointer[raft.Raft]
	trans *watchedTransport
	logs  *LogStore
	dir   string
	// startLast is the last index of the log this member started with:
	// on a standalone node, the group has recovered once it leads and has
	// applied it (Recovered).
	startLast uint64
	recovered atomic.Bool // Recovered's barrier returned

	mu      sync.Mutex   // guards pending, closed, seq, retries, fwd, fwdSeq
	pending []submitItem // by seq
	closed  bool
	seq     uint64
	// retries counts rounds waiting to be sent again: while any does,
	// nothing later is sent, so that commands reach the log in the
	// order they were submitted.
	retries int
	// fwd is the rounds forwarded to a leader and not yet answered, by
	// a number of their own: given up when another leader is seen
	// (observe) or after the write timeout (forwardedRound).
	fwd    map[uint64]*forwardedRound
	fwdSeq uint64
	wake   chan struct{}
	slots  chan struct{} // rounds in flight
	flight chan flight   // the local leader's rounds, waited in order
	stop   chan struct{}
	wg     sync.WaitGroup

	// Heartbeats the leader failed to send, by follower: since when
	// (raft's observations; guarded by mu).
	failing map[string]time.Time
	obs     *raft.Observer
	obsCh   chan raft.Observation
}

type submitItem struct {
	seq      uint64
	c        Command
	done     func(Effects, error)
	deadline time.Time
}

// roundSize is about the length of a round's encoding (the group's id,
// then items as one command), so that it is encoded into one buffer
// rather than one doubled a dozen times and copied each time (a round of
// S3's workload is some 200 KiB).
func roundSize(id string, items []submitItem) int {
	n := 16 + len(id)
	msg := func(m *Message) int { return 32 + len(m.Exchange) + len(m.RoutingKey) + len(m.Props) + len(m.Body) }
	for i := range items {
		c := &items[i].c
		n += 32 + len(c.Consumer) + len(c.Keep) + 8*len(c.IDs) + msg(&c.Msg)
		for j := range c.Msgs {
			n += msg(&c.Msgs[j])
		}
	}
	return n
}

// forwardedRound is a round sent to the leader at addr, waiting for its
// answer.
type forwardedRound struct {
	addr    string
	abandon func() // nil until the round is sent
	gaveUp  bool   // abandoned before abandon was set: abandon it once set
	timer   *time.Timer
}

type flight struct {
	f     raft.ApplyFuture
	items []submitItem
}

// Limits of a round: commands and encoded bytes per log entry, rounds in
// flight.
const (
	roundCmds    = 512
	roundBytes   = 4 << 20
	roundsFlying = 4
	// groupCommitTimeout is how often a leader sends its followers an
	// append when nothing new is to be sent (raft's CommitTimeout, its
	// default), which tells them the latest commit. A consumer on a
	// follower gets its delivery when its node applies the entry, so a
	// leader does not wait for it: it Nudges (below). Every such append
	// costs every member a round trip, idle queues too: 21 idle quorum
	// queues on three nodes took 1.65 cores at 2 ms, 0.5 at 50 ms with
	// Nudge; S3's workload on one of them delivered as much either way,
	// and 100 msg/s to a consumer on a follower arrived sooner (p50 5.4
	// ms against 9.5).
	groupCommitTimeout = 50 * time.Millisecond
	groupSnapshotEvery = 4096
)

// ErrGroupClosed is a command submitted to a group that was stopped.
var ErrGroupClosed = errors.New("cluster: quorum queue stopped on this node")

// errUnknownGroup is a forwarded command for a group the leader does not
// have (yet, or any more).
var errUnknownGroup = errors.New("cluster: no such quorum queue on the node")

// groupPrefix is a group's keys in the shared log Badger.
func groupPrefix(id string) []byte { return append([]byte("q"+id), 0) }

func (n *Node) queueDB() (*badger.DB, error) {
	n.gmu.Lock()
	defer n.gmu.Unlock()
	if n.qdb == nil {
		dir := filepath.Join(n.cfg.DataDir, "cluster", "queues", "log")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		db, err := openLogDB(dir, n.cfg.Keys)
		if err != nil {
			return nil, err
		}
		n.qdb = db
		n.qdbOpen.Store(true)
	}
	return n.qdb, nil
}

// Addrs are the nodes' inter-node addresses, as the metadata group's
// configuration has them.
func (n *Node) Addrs() map[string]string {
	out := map[string]string{}
	if n.r == nil { // starting: what it was started with
		for name, a := range n.cfg.Peers {
			out[name] = a
		}
		return out
	}
	f := n.r.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = string(s.Address)
	}
	return out
}

// StartGroup starts (or, after a restart, resumes) this node's member of
// a quorum queue's group.
func (n *Node) StartGroup(cfg GroupConfig) (*Group, error) {
	n.startMu.RLock()
	defer n.startMu.RUnlock()
	if n.closing {
		return nil, ErrGroupClosed
	}
	db, err := n.queueDB()
	if err != nil {
		return nil, err
	}
	g := &Group{n: n, cfg: cfg, fsm: NewQueueFSM(cfg.Fifo), wake: make(chan struct{}, 1), fwd: map[uint64]*forwardedRound{},
		slots: make(chan struct{}, roundsFlying), flight: make(chan flight, roundsFlying), stop: make(chan struct{})}
	if cfg.DedupKey != nil {
		g.fsm.SetDedupKey(cfg.DedupKey)
	}
	if cfg.GroupKey != nil || cfg.GroupKeyFor != nil {
		g.fsm.SetGroupKey(cfg.GroupKey, cfg.GroupKeyFor)
	}
	g.fsm.OnApply = func(index uint64, c *Command, e *Effects) {
		r := g.live.Load()
		leader := r != nil && r.State() == raft.Leader
		g.applying.Store(index)
		if cfg.OnApply != nil {
			cfg.OnApply(c, e, leader)
		}
		// A Nudge asked for while later entries were appended waits for
		// the last of them: its commit is what the followers need to hear.
		if leader && g.nudge.Load() && r.LastIndex() <= index {
			g.nudge.Store(false)
			if !IsNudge(c) {
				g.Submit(Tick(0), nil)
			}
		}
	}
	g.fsm.OnRestore = func() {
		// Lag counts from the snapshot's last entry: what it covers was
		// not applied here one by one, and what follows it is still to
		// come (a leader sends its last snapshot, often far behind).
		g.applying.Store(g.fsm.Index())
		if cfg.OnRestore != nil {
			cfg.OnRestore()
		}
	}
	n.gmu.Lock()
	if n.groups[cfg.ID] != nil {
		n.gmu.Unlock()
		return nil, fmt.Errorf("cluster: quorum queue group %s already started", cfg.ID)
	}
	n.groups[cfg.ID] = g
	n.gmu.Unlock()
	fail := func(err error) (*Group, error) {
		g.shutdown()
		return nil, err
	}
	hl := groupLog(n.hl, cfg.ID, cfg.Label) // raft's lines name the queue and its group (hclog.go)
	if g.trans, err = n.groupTransport(cfg.ID, hl); err != nil {
		return fail(err)
	}
	if g.logs, err = GroupLogStore(db, groupPrefix(cfg.ID)); err != nil {
		return fail(err)
	}
	g.logs.afterSync = n.cfg.AfterLogSync
	g.dir = filepath.Join(n.cfg.DataDir, "cluster", "queues", cfg.ID)
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return fail(err)
	}
	snaps, err := snapshotStore(g.dir, n.cfg.Keys, hl)
	if err != nil {
		return fail(err)
	}
	rc := n.groupRaftConfig(hl)
	rc.CommitTimeout = groupCommitTimeout
	// Snapshots every few thousand entries, checked every 10 s (raft's
	// defaults: 8192, 120 s): a member that restarts replays its log from
	// its last snapshot, and one that fell behind the leader's trailing
	// log gets a snapshot instead of every entry. A fault run (make
	// cluster-test) saw a follower restarted after kill -9 with 224,000
	// entries to replay, busy applying them too long to answer its
	// leader's appends within the transport's 10 s.
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = groupSnapshotEvery, 10*time.Second, groupSnapshotEvery
	var machine raft.FSM = g.fsm
	if cfg.machine != nil {
		machine, rc.SnapshotThreshold, rc.TrailingLogs, rc.SnapshotInterval = cfg.machine, cfg.snapEvery, cfg.trailing, cfg.snapInterval
	}
	if cfg.OnCreate != nil {
		cfg.OnCreate(g)
	}
	existing, err := raft.HasExistingState(g.logs, g.logs, snaps)
	if err != nil {
		return fail(err)
	}
	if existing && cfg.machine == nil {
		if err := n.adoptLocal(cfg, rc, g.logs, snaps); err != nil {
			return fail(err)
		}
	}
	if !existing && cfg.Bootstrap {
		if err := raft.BootstrapCluster(rc, g.logs, g.logs, snaps, g.trans, g.configuration()); err != nil {
			return fail(err)
		}
	}
	if g.r, err = raft.NewRaft(rc, machine, g.logs, g.logs, snaps, g.trans); err != nil {
		return fail(err)
	}
	g.live.Store(g.r)
	g.startLast = g.r.LastIndex()
	g.failing = map[string]time.Time{}
	g.obsCh = make(chan raft.Observation, 16)
	g.obs = raft.NewObserver(g.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	g.r.RegisterObserver(g.obs)
	g.wg.Add(3)
	go g.loop()
	go g.waitLocal()
	go g.observe()
	return g, nil
}

// configuration is the group's first configuration: its voters, and every
// other node as a non-voter.
func (g *Group) configuration() raft.Configuration {
	addrs := g.n.Addrs()
	voter := map[string]bool{}
	var c raft.Configuration
	for _, v := range g.cfg.Voters {
		voter[v] = true
		if a := addrs[v]; a != "" {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(v), Address: raft.ServerAddress(a)})
		}
	}
	names := make([]string, 0, len(addrs))
	for name := range addrs {
		if !voter[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(name), Address: raft.ServerAddress(addrs[name])})
	}
	return c
}

// ID is the group's id.
func (g *Group) ID() string { return g.cfg.ID }

// Leader is the name of the member that leads the group, "" if none.
func (g *Group) Leader() string {
	_, id := g.r.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this node leads the group.
func (g *Group) IsLeader() bool { return g.r.State() == raft.Leader }

// GroupMember is one member of a group, as this node's view has it.
type GroupMember struct {
	Name  string
	Voter bool
}

// GroupStatus is this node's view of its group.
type GroupStatus struct {
	Leader          string
	Members         []GroupMember
	Term            uint64
	Commit, Applied uint64
}

// Status reports the group as this node sees it.
func (g *Group) Status() GroupStatus {
	st := GroupStatus{Leader: g.Leader(), Term: g.r.CurrentTerm(), Applied: g.r.AppliedIndex(), Commit: g.r.CommitIndex()}
	if f := g.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			st.Members = append(st.Members, GroupMember{Name: string(s.ID), Voter: s.Suffrage == raft.Voter})
		}
	}
	return st
}

// View runs fn on the queue's state as this node has applied it.
func (g *Group) View(fn func(f *Fifo)) { g.fsm.View(fn) }

// Submit proposes c; done learns its effects once the entry is committed
// and applied on the leader, or why it was not. It runs on another
// goroutine and must not block. A command that never reached a leader is
// retried until WriteTimeout; one whose fate is unknown (the leader went
// away meanwhile) fails with the error.
func (g *Group) Submit(c Command, done func(Effects, error)) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		if done != nil {
			done(Effects{}, ErrGroupClosed)
		}
		return
	}
	g.seq++
	g.pending = append(g.pending, submitItem{seq: g.seq, c: c, done: done, deadline: time.Now().Add(g.n.timeout())})
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Nudge, called by OnApply on the leader for an entry that delivers to a
// consumer on another node, makes the followers learn of its commit at
// once rather than at raft's next idle append: once the last entry
// appended so far is applied, an empty entry (a Tick at time 0, which
// expires nothing) is proposed, whose append carries the commit.
func (g *Group) Nudge() { g.nudge.Store(true) }

// Progress is the index of the entry being applied and the commit index
// Lag counts to (for logs).
func (g *Group) Progress() (applying, commit uint64) {
	applying = g.applying.Load()
	if r := g.live.Load(); r != nil {
		commit = max(r.CommitIndex(), g.trans.leaderCommit.Load())
	}
	return applying, commit
}

// Lag, called by OnApply, is how many committed entries this member
// has still to apply after the one it is told of: a member catching up
// (restarted, or back from a partition) applies entries whose effects
// later entries it has not applied yet may have undone. Committed is as
// the leader last said: raft's own commit index on a follower is no
// further than the last entry it received, which, while it catches up
// an append (64 entries) at a time, is never far ahead of what it
// applies.
func (g *Group) Lag() uint64 {
	r := g.live.Load()
	if r == nil {
		return 0
	}
	commit, at := max(r.CommitIndex(), g.trans.leaderCommit.Load()), g.applying.Load()
	if commit <= at {
		return 0
	}
	return commit - at
}

// CatchUpTarget is the commit index the first append after a silence of
// rejoinGap or more (a partition, a leader's loss) brought: a member
// back from being cut off holds its consumers' deliveries until it has
// applied that far (quorumQueue.applied). 0: never silent.
//
// A member cut off for downAfter was taken for gone by its leader, which
// gave what its consumers had to others; the entries that checked those
// messages out to this member's consumers, applied late, would write
// them again as first deliveries. The Down that took them back is among
// what the leader had committed when the member was heard from again:
// the target. Counting entries instead (Lag against catchUpLag) misses
// it when the entries are few (TestClusterFaults, -race: the queue's
// leader cut off for 13 s, the other two made 12 entries in all, and the
// Down was 7 entries before the commit index the member came back to).
func (g *Group) CatchUpTarget() uint64 { return g.trans.rejoinCommit.Load() }

// IsNudge reports whether c is a Nudge's entry.
func IsNudge(c *Command) bool { return c.Kind == cmdTick && c.Now == 0 }

func (g *Group) requeue(items []submitItem) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		finish(items, Effects{}, ErrGroupClosed)
		return
	}
	g.retries--
	// Back in submission order, before what came later.
	g.pending = append(append([]submitItem(nil), items...), g.pending...)
	sort.SliceStable(g.pending, func(i, j int) bool { return g.pending[i].seq < g.pending[j].seq })
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func finish(items []submitItem, e Effects, err error) {
	for i := range items {
		if items[i].done == nil {
			continue
		}
		switch {
		case err != nil:
			items[i].done(Effects{}, err)
		case len(items) == 1 && items[0].c.Kind != cmdBatch && e.Results == nil:
			items[i].done(e, nil)
		case i < len(e.Results):
			items[i].done(e.Results[i], nil)
		default:
			items[i].done(Effects{}, errors.New("cluster: a batch's result is missing"))
		}
	}
}

// loop sends the pending commands, a round at a time.
func (g *Group) loop() {
	defer g.wg.Done()
	for {
		select {
		case <-g.wake:
		case <-g.stop:
			return
		}
		for {
			g.mu.Lock()
			n, size := 0, 0
			for g.retries == 0 && n < len(g.pending) && n < roundCmds && size < roundBytes {
				it := &g.pending[n]
				n++
				size += 64 + len(it.c.Msg.Body)
				for i := range it.c.Msgs {
					size += 64 + len(it.c.Msgs[i].Body)
				}
			}
			items := g.takePending(n)
			g.mu.Unlock()
			if len(items) == 0 {
				break
			}
			if !g.takeSlot() {
				finish(items, Effects{}, ErrGroupClosed)
				return
			}
			g.send(items)
		}
	}
}

// takeSlot waits for a round's slot; false if the group stops. While it
// waits, every slotCheck, the rounds forwarded to a member that no
// longer leads are given up (their slots come back): raft's word of the
// change (observe) is an observation a busy observer channel may drop.
// takePending takes the first n pending commands out, in a slice of
// their own, and moves the rest to the front: pending keeps its array
// from round to round instead of growing a new one for every round (a
// round of S3's workload is a few hundred commands), unless a backlog
// made it large. g.mu held.
func (g *Group) takePending(n int) []submitItem {
	if n == 0 {
		return nil
	}
	items := make([]submitItem, n)
	copy(items, g.pending)
	rest := copy(g.pending, g.pending[n:])
	clear(g.pending[rest:]) // what the items hold (bodies, callbacks) is theirs now
	g.pending = g.pending[:rest]
	if rest == 0 && cap(g.pending) > 4*roundCmds {
		g.pending = nil
	}
	return items
}

func (g *Group) takeSlot() bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTicker(slotCheck)
	defer t.Stop()
	for {
		select {
		case g.slots <- struct{}{}:
			return true
		case <-g.stop:
			return false
		case <-t.C:
			addr, _ := g.r.LeaderWithID()
			g.abandonForwarded(string(addr))
		}
	}
}

// slotCheck is how often a round waiting for a slot checks that the
// rounds in flight went to the leader.
const slotCheck = 250 * time.Millisecond

// send proposes one round; a slot is held until it is answered.
func (g *Group) send(items []submitItem) {
	c := items[0].c
	if len(items) > 1 {
		cs := make([]Command, len(items))
		for i := range items {
			cs[i] = items[i].c
		}
		c = Batch(cs)
	}
	// The command's encoding follows the group's id: the log entry is
	// the command, a round forwarded to the leader both (grouprpc.go).
	head := make(Enc, 0, roundSize(g.cfg.ID, items)).Str(g.cfg.ID)
	round := c.Encode(head)
	data := round[len(head):]
	if g.r.State() == raft.Leader {
		g.flight <- flight{f: stopAware(g.r.Apply(data, g.n.timeout()), g.stop), items: items}
		return
	}
	addr, id := g.r.LeaderWithID()
	if id == "" {
		<-g.slots
		g.retryLater(items, ErrNoLeader)
		return
	}
	key := g.forwarding(string(addr))
	abandon := g.n.forwardGroup(string(addr), round, func(e Effects, err error) {
		g.forwarded(key)
		<-g.slots
		switch {
		case errors.Is(err, ErrNotLeader), errors.Is(err, errUnknownGroup), errors.Is(err, errNotSent):
			g.retryLater(items, err)
		case errors.Is(err, ErrUnknownOutcome):
			again, failed := splitResendable(items)
			finish(failed, Effects{}, err)
			if len(again) > 0 {
				g.retryLater(again, err)
			}
		default:
			finish(items, e, err)
		}
	})
	g.sent(key, abandon)
}

// splitResendable parts the commands of a round whose outcome is
// unknown: those that may be sent again (applied twice, they do what
// applying them once does: a consumer's checkout, cancel, settles,
// releases and discards of the ids it holds, a node's Down, a tick) and
// the others, which fail (a publish or a get applied twice would
// enqueue or take twice; a purge twice could purge what came in
// between; a return twice could count a delivery the consumer never
// had). Consumers' acks thus reach the new leader rather than being
// lost with the old one's link.
func splitResendable(items []submitItem) (again, failed []submitItem) {
	for _, it := range items {
		switch it.c.Kind {
		case cmdCheckout, cmdCancel, cmdSettle, cmdRelease, cmdDiscard, cmdDown, cmdTick:
			again = append(again, it)
		default:
			failed = append(failed, it)
		}
	}
	return again, failed
}

// Rounds forwarded to a leader that stops answering without closing the
// connection (paused by SIGSTOP or a long GC, a frozen VM, a network
// that drops its packets) would wait for as long as that lasts, holding
// the group's slots (roundsFlying), so that nothing else is sent, to the
// new leader either: the surviving majority would confirm nothing
// although it elected a new leader within seconds. So a forwarded round
// is given up, its commands failed with ErrUnknownOutcome (a publisher
// gets a nack: it may or may not have been enqueued), when this node
// sees another leader, or none (observe: raft's LeaderObservation, a
// heartbeat timeout after the leader's last word), or when the write
// timeout has passed since it was sent. Its slot comes back, and the
// commands after it go to the new leader. (Sending it again there
// instead could enqueue a message twice: the old leader may have
// replicated the entry before it stopped, and the new one commits it.)
// The link's own liveness (LinkDeadAfter) breaks the link to a peer that
// stays silent.

// forwarding notes a round about to be forwarded to addr; its number.
func (g *Group) forwarding(addr string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fwdSeq++
	g.fwd[g.fwdSeq] = &forwardedRound{addr: addr}
	return g.fwdSeq
}

// sent notes how to give up round key (nil: it was not sent, and is
// answered already), and gives it the write timeout.
func (g *Group) sent(key uint64, abandon func()) {
	if abandon == nil {
		return
	}
	g.mu.Lock()
	r := g.fwd[key]
	if r == nil { // answered already
		g.mu.Unlock()
		return
	}
	r.abandon = abandon
	gaveUp := r.gaveUp
	if !gaveUp {
		r.timer = time.AfterFunc(g.n.timeout(), abandon)
	}
	g.mu.Unlock()
	if gaveUp {
		abandon()
	}
}

// forwarded forgets round key: it was answered (or given up).
func (g *Group) forwarded(key uint64) {
	g.mu.Lock()
	r := g.fwd[key]
	delete(g.fwd, key)
	g.mu.Unlock()
	if r != nil && r.timer != nil {
		r.timer.Stop()
	}
}

// abandonForwarded gives up the rounds forwarded to a leader other than
// the one at leader. A member that knows no leader ("") gives nothing up:
// on a busy machine a follower's heartbeat timeout fires while the
// leader is sound, and its rounds are answered; a leader that stops for
// good is replaced within an election, and the new one's word gives them
// up (or the write timeout does).
func (g *Group) abandonForwarded(leader string) {
	if leader == "" {
		return
	}
	var give []func()
	g.mu.Lock()
	for _, r := range g.fwd {
		if r.addr == leader || r.gaveUp {
			continue
		}
		r.gaveUp = true
		if r.abandon != nil {
			give = append(give, r.abandon)
		}
	}
	g.mu.Unlock()
	for _, f := range give {
		f()
	}
}

// retryLater sends items again shortly, but those past their deadline,
// which fail with err.
func (g *Group) retryLater(items []submitItem, err error) {
	now := time.Now()
	var again []submitItem
	for _, it := range items {
		if now.After(it.deadline) {
			finish([]submitItem{it}, Effects{}, err)
			continue
		}
		again = append(again, it)
	}
	if len(again) == 0 {
		return
	}
	g.mu.Lock()
	g.retries++
	g.mu.Unlock()
	time.AfterFunc(20*time.Millisecond, func() { g.requeue(again) })
}

// waitLocal answers the rounds this node applied as leader, in order.
func (g *Group) waitLocal() {
	defer g.wg.Done()
	for {
		select {
		case fl := <-g.flight:
			err := fl.f.Error()
			var e Effects
			if err == nil {
				e, _ = fl.f.Response().(Effects)
			}
			<-g.slots
			switch {
			case errors.Is(err, raft.ErrNotLeader):
				g.retryLater(fl.items, ErrNotLeader) // never appended
			case err != nil:
				finish(fl.items, Effects{}, err)
			default:
				finish(fl.items, e, nil)
			}
		case <-g.stop:
			return
		}
	}
}

// observe keeps track of the followers the leader cannot reach.
func (g *Group) observe() {
	defer g.wg.Done()
	for {
		select {
		case o := <-g.obsCh:
			g.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				if _, ok := g.failing[string(d.PeerID)]; !ok {
					g.failing[string(d.PeerID)] = d.LastContact
				}
			case raft.ResumedHeartbeatObservation:
				delete(g.failing, string(d.PeerID))
			case raft.LeaderObservation:
				g.failing = map[string]time.Time{} // a new term: start afresh
			}
			g.mu.Unlock()
			if d, ok := o.Data.(raft.LeaderObservation); ok {
				g.logLeader(d, o.Raft) // clusterlog.go
				g.abandonForwarded(string(d.LeaderAddr))
			}
		case <-g.stop:
			return
		}
	}
}

// Unreachable lists the members this node, leading, has not reached
// for at least d.
func (g *Group) Unreachable(d time.Duration) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for p, since := range g.failing {
		if time.Since(since) >= d {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// IsUnreachable reports whether peer is among Unreachable(d).
func (g *Group) IsUnreachable(peer string, d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	since, ok := g.failing[peer]
	return ok && time.Since(since) >= d
}

// Close stops this node's member (the node shuts down); its state stays
// on disk for the next start.
func (g *Group) Close() error { return g.shutdown() }

// Remove stops the member and deletes its state (the queue was deleted).
func (g *Group) Remove() error {
	err := g.shutdown()
	if g.logs != nil {
		err = errors.Join(err, DropGroupLog(g.logs.db, groupPrefix(g.cfg.ID)))
	}
	if g.dir != "" {
		err = errors.Join(err, os.RemoveAll(g.dir))
	}
	return err
}

func (g *Group) shutdown() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	items := g.pending
	g.pending = nil
	g.mu.Unlock()
	var errs []error
	if g.r != nil {
		if g.obs != nil {
			g.r.DeregisterObserver(g.obs)
		}
		g.trans.release()
		errs = append(errs, g.r.Shutdown().Error())
	}
	close(g.stop)
	g.wg.Wait()
	// Rounds still in flight: their futures were answered by Shutdown.
	for {
		select {
		case fl := <-g.flight:
			finish(fl.items, Effects{}, ErrGroupClosed)
			continue
		default:
		}
		break
	}
	finish(items, Effects{}, ErrGroupClosed)
	if g.trans != nil {
		errs = append(errs, g.trans.Close())
	}
	g.n.gmu.Lock()
	if g.n.groups[g.cfg.ID] == g {
		delete(g.n.groups, g.cfg.ID)
	}
	g.n.gmu.Unlock()
	if err := errors.Join(errs...); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		g.n.log().Warn("quorum queue member stopped with an error", zap.String("group", g.cfg.ID), zap.Error(err))
	}
	return nil
}

// raft is the group's raft once started, nil before (or for a nil g).
func (g *Group) raft() *raft.Raft {
	if g == nil {
		return nil
	}
	return g.live.Load()
}
