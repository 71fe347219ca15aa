package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/channel"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/replica"
	"github.com/railmq/railmq/vhost"
)

// Server is a railmq broker: it accepts AMQP 0-9-1 connections and serves
// them until Shutdown.
type Server struct {
	opts Options
	log  *zap.Logger
	reg  *auth.Registry // users and their permissions (auth.go)

	mu       sync.Mutex     // guards lns, conns, shutdown
	lns      []net.Listener // in the order Serve was called
	conns    map[*conn]struct{}
	shutdown bool
	wg       sync.WaitGroup // one per connection goroutine

	nextID atomic.Uint64

	vhMu       sync.Mutex // serializes vhost creation and deletion
	vhosts     vhostMap   // by name
	queueIDs   atomic.Uint64
	delayed    delayedCloses // refused logins' sockets, closed after silentCloseDelay
	memory     atomic.Int64  // bytes held for clients: queued bodies, bodies being assembled, uncommitted transactions
	replies    channel.ReplyRegistry
	store      *persist.Store
	spill      *persist.Spill
	startFrame []byte        // connection.start, encoded once
	tls        tlsState      // TLS listeners' certificates (tls.go)
	stop       chan struct{} // closed by Shutdown: stops the sweeper and the alarm monitor
	swept      chan struct{} // closed when the sweeper has exited

	// Resource alarms (alarm.go): the alarms in force (alarmMemory,
	// alarmDisk), the bytes held when a reader set the memory alarm, a
	// one-slot wake-up for the monitor, and the monitor's own state.
	alarms      atomic.Uint32
	memTrip     atomic.Int64
	paging      atomic.Bool // memory above PagingRatio of the watermark (checkMemory)
	alarmWake   chan struct{}
	mon         alarmMonitor
	watched     chan struct{} // closed when the alarm monitor has exited
	diskFreeNow atomic.Uint64 // the disk check's last figure, for /api/nodes
	watermark   atomic.Int64  // the memory high watermark in force (SetMemoryHighWatermark)
	startedAt   time.Time

	node *cluster.Node // nil: not clustered
	// local: a standalone node's quorum queues' node (cluster.StartLocal);
	// nil in a cluster.
	local *cluster.Node
	// The cluster's quorum queues and classic queues homed on other
	// nodes (replica.go); nil: not clustered.
	rep *replica.Manager

	shv shovelSet // runtime parameters and the shovels they run (shovels.go)
	fed fedSet    // the federation links this node runs (federation.go)

	// Counted for the metrics (admin.go: Totals, Churn).
	totals                 queue.Totals
	connOpened, connClosed atomic.Int64
	chOpened, chClosed     atomic.Int64
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("railmq: server closed")

// New builds a server from opts.
func New(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		reg:   auth.NewRegistry(),
		conns: make(map[*conn]struct{}),
		stop:  make(chan struct{}),
		swept: make(chan struct{}),

		alarmWake: make(chan struct{}, 1),
		watched:   make(chan struct{}),
		startedAt: time.Now(),
	}
	s.watermark.Store(opts.MemoryHighWatermark)
	if err := s.initTLS(); err != nil {
		return nil, err
	}
	seal, err := streamSealer(opts.DataKeys) // crypt.go
	if err != nil {
		return nil, err
	}
	store, err := persist.Open(persist.Options{Dir: opts.DataDir, Logger: s.log.Named("store"), AfterSync: opts.AfterStoreSync, BeforeRound: opts.BeforeDiskWork, Fault: opts.StoreFault, GCInterval: opts.StoreGCInterval,
		ValueLogFileSize: valueLogFileSize(opts), Keys: opts.DataKeys})
	if err != nil {
		return nil, err
	}
	s.store = store
	// Non-durable queues page beyond their window to plain files, dropped
	// at every start (transient messages do not outlive a restart).
	spill, err := openSpill(opts.DataKeys)(filepath.Join(opts.DataDir, "spill"), store.Reserve(), &s.memory, opts.BeforeDiskWork, s.log.Named("spill"))
	if err != nil {
		store.Close()
		return nil, err
	}
	s.spill = spill
	if opts.Cluster == nil {
		// A standalone node's quorum queues: groups of one member
		// (cluster.StartLocal), started as their vhosts recover.
		local, err := cluster.StartLocal(cluster.LocalConfig{Name: s.nodeName(), DataDir: opts.DataDir, Logger: s.log, AfterLogSync: opts.AfterStoreSync, Keys: opts.DataKeys})
		if err != nil {
			spill.Close()
			store.Close()
			return nil, err
		}
		s.local = local
		s.rep = replica.New(replica.Options{Host: replicaHost{s}, Logger: s.log, Memory: &s.memory, StreamDir: filepath.Join(opts.DataDir, "streams"), StreamSeal: seal})
		s.rep.Attach(local)
	}
	recs, err := s.loadAccess()
	var pols storedPolicies
	if err == nil {
		pols, err = s.readPolicies()
	}
	if err == nil {
		err = s.recoverVHosts(recs, pols)
	}
	if err == nil {
		err = s.loadParameters()
	}
	if err != nil {
		s.closeLocal()
		spill.Close()
		store.Close()
		return nil, fmt.Errorf("recovering from %s: %w", opts.DataDir, err)
	}
	if s.local != nil {
		s.rep.AwaitRecovered(time.Minute)
	}
	s.startFrame = amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionStart{
		VersionMajor: 0, VersionMinor: 9, ServerProperties: s.serverProperties(),
		Mechanisms: "AMQPLAIN PLAIN", Locales: "en_US",
	})
	if c := opts.Cluster; c != nil {
		cfg := *c
		cfg.DataDir = opts.DataDir
		cfg.Keys = opts.DataKeys
		if cfg.Logger == nil {
			cfg.Logger = s.log // the cluster's lines and raft's (cluster/hclog.go)
		}
		cfg.OnApply = s.applyReplicated
		s.rep = replica.New(replica.Options{Host: replicaHost{s}, Logger: s.log, Memory: &s.memory, StreamDir: filepath.Join(opts.DataDir, "streams"), StreamSeal: seal})
		cfg.OnNode = func(n *cluster.Node) { s.node = n; n.SetQueryHandler(s.answerQuery); s.rep.Attach(n) }
		for _, st := range s.allVHosts() {
			st.v.SetQuorum(s.rep)
			st.v.ReplicateTo(replicator{s})
		}
		node, err := cluster.StartNode(cfg)
		if err != nil {
			s.rep.Close()
			spill.Close()
			store.Close()
			return nil, err
		}
		s.node = node
		if err := s.rep.Listen(); err != nil {
			s.rep.Close()
			_ = node.Close()
			spill.Close()
			store.Close()
			return nil, err
		}
		for _, st := range s.allVHosts() {
			st.v.ReplicateTo(replicator{s})
		}
		go s.adoptLocal()
		s.log.Info("cluster node started", zap.String("node", cfg.Name), zap.String("cluster_listen", cfg.Listen), zap.Int("peers", len(cfg.Peers)), zap.Bool("join", cfg.Join))
	}
	s.tuneMemoryLimit()
	s.startAlarms()
	go s.sweep()
	go s.monitor()
	s.startFederation()
	s.startShovels()
	return s, nil
}

// Serve accepts connections on ln until Shutdown; it then returns
// ErrServerClosed. It may be called for several listeners at once, as
// RabbitMQ's listeners.tcp.N.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	s.log.Info("listening", zap.String("addr", ln.Addr().String()), zap.Bool("tls", isTLS(ln)))
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			down := s.shutdown
			s.mu.Unlock()
			if down {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off, as
				// net/http's Serve does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed, retrying", zap.Error(err), zap.Duration("delay", delay))
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := newConn(s, nc, s.nextID.Add(1))
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Addr returns the first listener's address, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lns) == 0 {
		return nil
	}
	return s.lns[0].Addr()
}

func (s *Server) forget(c *conn) {
	if c.info.Load() != nil {
		s.connClosed.Add(1)
	}
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops accepting, sends every client connection.close 320
// CONNECTION_FORCED, and waits for the connections to end or ctx to be
// done (then it closes what is left).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	already := s.shutdown
	s.shutdown = true
	if !already {
		close(s.stop)
	}
	for _, ln := range s.lns {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.stopShovels() // before the connections close: their unacked messages go back to their queues
	s.waitFederation()
	s.delayed.closeAll()
	s.log.Info("shutting down", zap.Int("connections", len(conns)))
	forced := &amqp.Error{Code: amqp.ConnectionForced, Text: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"}
	for _, c := range conns {
		c.closeWith(forced, "broker shutdown")
		c.endLinger() // a connection already done closes now
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		// Closed outside s.mu: a Close waits for a reader inside its
		// push-mode callback (push.go), which may want s.mu.
		s.mu.Lock()
		left := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			left = append(left, c)
		}
		s.mu.Unlock()
		for _, c := range left {
			c.nc.Close()
		}
		<-done
	}
	<-s.swept
	<-s.watched
	for _, v := range s.allVHosts() {
		v.v.Close()
	}
	if err := s.spill.Close(); err != nil {
		s.log.Error("closing the page files of non-durable queues", zap.Error(err))
	}
	if s.node != nil {
		s.rep.Close()
		if err := s.node.Close(); err != nil {
			s.log.Error("leaving the cluster", zap.Error(err))
		}
	}
	s.closeLocal()
	if err := s.store.Close(); err != nil {
		s.log.Error("closing store", zap.Error(err))
	}
	s.log.Info("shut down")
	return ctx.Err()
}

// VHost returns a virtual host by name, or nil (tests, metrics).
func (s *Server) VHost(name string) *vhost.VHost {
	if st := s.vhostByName(name); st != nil {
		return st.v
	}
	return nil
}

// MemoryUsed is the bytes held for clients (the memory alarm's figure).
func (s *Server) MemoryUsed() int64 { return s.memory.Load() }

// alarmed reports whether a resource alarm is on: memory (queues
// hold more than the watermark) or disk (alarm.go). The reader of a
// connection that has just published asks before its next frame.
func (s *Server) alarmed() bool { return s.alarmBits() != 0 }

// startAlarms logs the limits, as RabbitMQ does at start, and checks the
// disk once, so that a broker started on a full disk blocks its first
// publisher. Before the monitor starts.
func (s *Server) startAlarms() {
	total := TotalMemory()
	wm := max(s.watermark.Load(), 0)
	s.log.Info("memory high watermark", zap.String("limit", humanBytes(wm)), zap.String("total", humanBytes(total)),
		zap.Int64("limit_bytes", wm), zap.Int64("total_bytes", total))
	s.mon.diskOn = s.opts.DiskFreeLimit > 0
	if !s.mon.diskOn {
		s.log.Info("disk free limit off")
		return
	}
	s.log.Info("disk free limit", zap.String("limit", humanBytes(s.opts.DiskFreeLimit)), zap.Int64("limit_bytes", s.opts.DiskFreeLimit),
		zap.String("dir", s.opts.DataDir))
	s.checkDisk()
	s.logAlarms()
}

// tuneMemoryLimit keeps the Go heap target close to what the broker
// needs: a small base (64 MiB), what the store's Badger keeps on the heap
// whatever it holds (its memtables and caches, and room for its
// compactions: 106 MiB; a cluster node's
// raft logs add 66 MiB each), plus the message bodies
// queues hold in memory. With backlogs paged to the store, the heap (and
// RSS) stays small; with large in-memory queues the target grows with
// them, so the GC does not thrash. (Without the store's part, a busy
// store left the heap within a few MiB of the target: 47 collections a
// second, a third of the broker's CPU, in a run of delayed messages.)
//
// The target is never below minMemoryLimit: a small heap is collected at
// twice what is live (GOGC) long before the target matters, and a busy
// store's transient heap (a memtable being flushed, compactions' table
// builders) pushed a lower target into the GC running back to back and
// the runtime giving memory back to the kernel at every allocation:
// routing a million delayed messages, p99 lateness 18 ms with the formula's
// 170 MiB, 7.4-8.2 ms with 256 MiB (3 Ps, see cmd/railmq setProcs).
func (s *Server) tuneMemoryLimit() {
	if base := s.opts.MemoryLimitBase; base > 0 {
		fixed := s.store.HeapFixed()
		if s.node != nil {
			fixed += s.node.HeapFixed()
		}
		debug.SetMemoryLimit(max(base+fixed+2*max(s.memory.Load(), 0), minMemoryLimit))
	}
}

// minMemoryLimit is the lowest Go heap target tuneMemoryLimit sets.
const minMemoryLimit = 256 << 20

// sweep checks consumer timeouts on every connection until Shutdown.
func (s *Server) sweep() {
	defer close(s.swept)
	t := time.NewTicker(s.opts.TimeoutCheckInterval)
	defer t.Stop()
	var lastQuorumTick time.Time
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.tuneMemoryLimit()
			s.mu.Lock()
			conns := make([]*conn, 0, len(s.conns))
			for c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
			for _, c := range conns {
				c.checkTimeouts()
			}
			if s.rep != nil && now.Sub(lastQuorumTick) >= time.Second {
				lastQuorumTick = now
				s.rep.Tick()
			}
		}
	}
}

// serverProperties are what connection.start advertises. A capability is
// listed only once it works.
func (s *Server) serverProperties() amqp.Table {
	return amqp.Table{
		"product":      "railmq",
		"version":      s.opts.Version,
		"platform":     platform(),
		"cluster_name": s.clusterName(),
		"copyright":    "Copyright (c) the railmq authors",
		"information":  "Licensed under the Apache License 2.0",
		"capabilities": amqp.Table{
			"publisher_confirms":           true,
			"exchange_exchange_bindings":   true,
			"basic.nack":                   true,
			"consumer_cancel_notify":       true,
			"connection.blocked":           true,
			"consumer_priorities":          true,
			"authentication_failure_close": true,
			"per_consumer_qos":             true,
			"direct_reply_to":              true,
		},
	}
}

// valueLogFileSize is the store's value-log file size for these options:
// Badger refuses a value larger than a file, and a persistent message is
// one value (its body, its properties in a content header of at most a
// frame, and its routing), so the files hold the largest message the
// broker takes; with a --max-message-size under 32 MiB they stay at the
// store's 32 MiB, which give space back sooner (0: the store's default).
func valueLogFileSize(o Options) int64 {
	need := int64(o.MaxMessageSize) + int64(o.FrameMax) + 64<<10
	if need <= 32<<20 {
		return 0
	}
	return min(need, 2<<30-1) // Badger's bound on a file
}
