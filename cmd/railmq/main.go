package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // served on --debug-listen only
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/metrics"
	mgmtapi "github.com/railmq/railmq/mgmt" // the management API; mgmt is the --management-listen flag
)

var version = "0.1.0"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("railmq", flag.ContinueOnError)
	listen := fs.String("listen", ":5672", "addresses to listen on for AMQP 0-9-1, comma-separated (e.g. 127.0.0.1:5672,[::1]:5672); the default is every interface, IPv4 and IPv6")
	dataDir := fs.String("data-dir", "./data", "directory of the message store")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "console", "log format: console or json")
	usersFlag := fs.String("users", "", "administrators as name:password[,name:password...], made with a fresh store instead of the default user and stored (password reset) on an existing one")
	usersFile := fs.String("users-file", "", "file of users, one name:password a line (# comments); as --users")
	defUser := fs.String("default-user", "guest", "the user a fresh store gets (an administrator with every permission in the default vhost), as RabbitMQ's default_user")
	defPass := fs.String("default-pass", "guest", "the default user's password")
	defVHost := fs.String("default-vhost", "/", "the vhost a fresh store gets")
	loopback := fs.String("loopback-users", "guest", "users allowed to connect only from loopback (comma-separated; empty for none)")
	channelMax := fs.Uint("channel-max", broker.DefaultChannelMax, "channel_max proposed in connection.tune")
	frameMax := fs.Uint("frame-max", broker.DefaultFrameMax, "frame_max proposed in connection.tune (bytes)")
	heartbeat := fs.Duration("heartbeat", broker.DefaultHeartbeat, "heartbeat proposed in connection.tune (0 disables)")
	handshake := fs.Duration("handshake-timeout", broker.DefaultHandshakeTimeout, "drop clients that have not opened a connection in this time")
	consumerTimeout := fs.Duration("consumer-timeout", broker.DefaultConsumerTimeout, "close a channel whose delivery stays unacked this long (negative disables)")
	debugAddr := fs.String("debug-listen", "", "address for Go's pprof endpoints (/debug/pprof/); empty disables them")
	loadDefs := fs.String("load-definitions", "", "a definitions file (RabbitMQ's format, as GET /api/definitions exports it) imported at start, as RabbitMQ's load_definitions")
	mgmt := fs.String("management-listen", "", "address for the HTTP management API subset (e.g. 127.0.0.1:15672); empty disables it")
	promListen := fs.String("prometheus-listen", "", "address for Prometheus metrics under RabbitMQ's names, GET /metrics and /metrics/per-object (RabbitMQ's port is 15692, e.g. :15692); empty disables it")
	window := fs.Int("queue-window", 4096, "ready messages a durable queue keeps in memory; the rest are read from the store ahead of consumers")
	coalesce := fs.Bool("coalesce-acks", true, "read a consumer's acks in batches, at the latest when its consumers reach half their prefetch unacked or after 10 ms (false: each ack wakes the broker as it arrives)")
	pace := fs.Bool("pace-publishers", true, "slow a publisher to the consumers' pace while they drain a queue's backlog beyond its window (false: the backlog grows as fast as publishers send)")
	windowBytes := fs.Int64("queue-window-bytes", 16<<20, "bytes of message bodies a durable queue keeps in memory (ready and unacked); beyond, messages wait in the store")
	gcEvery := fs.Duration("store-gc-interval", time.Minute, "how often the store's value log is garbage-collected (disk reclaimed after a backlog drains)")
	maxMessage := fs.Uint64("max-message-size", broker.DefaultMaxMessageSize, "largest accepted message body (bytes)")
	memStrategy := fs.String("vm-memory-calculation-strategy", "held", "what the memory alarm measures: held (memory held for clients: bodies queued, assembled, in transactions) or rss (the process's resident memory when more, RabbitMQ's default)")
	pagingRatio := fs.Float64("vm-memory-high-watermark-paging-ratio", 0.5, "above this fraction of the memory watermark queues keep only a small window in memory and page the rest (1 or more: off)")
	watermark := fs.String("vm-memory-high-watermark", "0.4", "block publishers while queues hold more message bodies than this: a fraction of memory (0.4, 40%; of the cgroup's limit when lower) or a size (512MiB, 2GB, 1073741824); 0 blocks them always")
	diskLimit := fs.String("disk-free-limit", "50MB", "block publishers while the data directory's filesystem has less free: a size (50MB, 1GiB, 50000000) or mem_relative:F, F times memory; 0 turns the check off")
	tlsListen := fs.String("tls-listen", "", "addresses to listen on for AMQP 0-9-1 over TLS, comma-separated as --listen (RabbitMQ's TLS port is 5671); empty disables it")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (then any intermediates) served on --tls-listen and --management-tls-listen; reloaded on SIGHUP")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert; reloaded on SIGHUP")
	tlsCA := fs.String("tls-ca", "", "PEM CA certificates that client certificates are verified against (needed by verify_peer); reloaded on SIGHUP")
	tlsVerify := fs.String("tls-verify", "verify_none", "client certificates: verify_none (none is asked for) or verify_peer (peer: a certificate the client sends must verify against --tls-ca, and EXTERNAL logs it in as its CN)")
	tlsFail := fs.Bool("tls-fail-if-no-peer-cert", false, "with verify_peer, also refuse a client that sends no certificate")
	mgmtTLS := fs.String("management-tls-listen", "", "address for the management API over HTTPS with --tls-cert (e.g. :15671); empty disables it")
	nodeName := fs.String("node-name", "", "this node's name in a cluster (as RabbitMQ's rabbit@host); needed with --cluster-listen")
	clusterListen := fs.String("cluster-listen", "", "address for the other cluster nodes (RabbitMQ's inter-node port is 25672), e.g. 127.0.0.1:25672; empty: not clustered")
	clusterPeers := fs.String("cluster-peers", "", "every node of the cluster, this one too, as name=host:port,name=host:port (the first start bootstraps the cluster from it)")
	clusterSecret := fs.String("cluster-secret-file", "", "file holding the cluster's shared secret (RabbitMQ's Erlang cookie); every node needs the same")
	clusterTLS := fs.Bool("cluster-tls", false, "TLS between cluster nodes, both ways, with --tls-cert and --tls-key (valid for server and client auth) verified against --tls-ca")
	clusterJoin := fs.Bool("cluster-join", false, "start to join a running cluster instead of bootstrapping one: a member adds this node (railmqctl cluster join)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "railmq %s: an AMQP 0-9-1 message broker.\n\nUsage: railmq [flags]\n\nFlags (each also read from RAILMQ_<NAME>, e.g. RAILMQ_LISTEN, RAILMQ_DATA_DIR):\n", version)
		fs.PrintDefaults()
	}
	if err := applyEnv(fs); err != nil {
		fmt.Fprintln(os.Stderr, "railmq:", err)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	log, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "railmq:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	fullProcs, adapt := setProcs(log)

	users, err := loadUsers(*usersFlag, *usersFile)
	if err != nil {
		log.Error("bad users", zap.Error(err))
		return 2
	}
	if *memStrategy != "held" && *memStrategy != "rss" {
		log.Error("vm-memory-calculation-strategy must be held or rss")
		return 2
	}
	if *channelMax == 0 || *channelMax > 65535 {
		log.Error("channel-max must be 1..65535")
		return 2
	}
	wm, disk, err := resourceLimits(*watermark, *diskLimit, broker.TotalMemory())
	if err != nil {
		log.Error("bad resource limit", zap.Error(err))
		return 2
	}
	if (*tlsListen != "" || *mgmtTLS != "") && (*tlsCert == "" || *tlsKey == "") {
		log.Error("--tls-listen and --management-tls-listen need --tls-cert and --tls-key")
		return 2
	}
	var clusterCfg *cluster.NodeConfig
	if *clusterListen != "" {
		if *nodeName == "" || *clusterPeers == "" || *clusterSecret == "" {
			log.Error("--cluster-listen needs --node-name, --cluster-peers and --cluster-secret-file")
			return 2
		}
		peers, err := cluster.ParsePeers(*clusterPeers)
		if err != nil {
			log.Error("bad --cluster-peers", zap.Error(err))
			return 2
		}
		secret, err := os.ReadFile(*clusterSecret)
		if err != nil || len(bytes.TrimSpace(secret)) == 0 {
			log.Error("cannot read the cluster secret", zap.String("file", *clusterSecret), zap.Error(err))
			return 2
		}
		clusterCfg = &cluster.NodeConfig{Name: *nodeName, Listen: *clusterListen, Peers: peers, Secret: bytes.TrimSpace(secret),
			Join: *clusterJoin, Logger: log}
		if *clusterTLS {
			cfg, err := clusterTLSConfig(*tlsCert, *tlsKey, *tlsCA)
			if err != nil {
				log.Error("bad --cluster-tls", zap.Error(err))
				return 2
			}
			clusterCfg.TLS = cfg
		}
	}
	// The management listener comes up first: while the store recovers,
	// the console shows how far it has got.
	errc := make(chan error, 16)
	startup := mgmtapi.NewStartup()
	if *mgmt != "" {
		ln, err := net.Listen("tcp", *mgmt)
		if err != nil {
			log.Error("cannot listen for the management API", zap.Error(err))
			return 1
		}
		hs := &http.Server{Handler: startup, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- hs.Serve(ln) }()
		defer hs.Close()
		log.Info("management API listening", zap.String("addr", *mgmt))
	}
	// One P while nearly idle (procs.go); not in a cluster, whose Raft log
	// writes and fsyncs are not the store's.
	var procs *procsAdapter
	var diskWork func()
	if adapt && clusterCfg == nil {
		procs = newProcsAdapter(fullProcs, log)
		diskWork = procs.diskWork
	}
	srv, err := broker.New(broker.Options{
		BeforeDiskWork:      diskWork,
		RecoveryProgress:    startup.Progress,
		Cluster:             clusterCfg,
		DataDir:             *dataDir,
		Users:               users,
		DefaultUser:         *defUser,
		DefaultPass:         *defPass,
		DefaultVHost:        *defVHost,
		LoopbackUsers:       splitList(*loopback),
		ChannelMax:          uint16(*channelMax),
		FrameMax:            uint32(*frameMax),
		Heartbeat:           orNegative(*heartbeat),
		HandshakeTimeout:    *handshake,
		ConsumerTimeout:     *consumerTimeout,
		MaxMessageSize:      *maxMessage,
		MemoryHighWatermark: wm,
		PagingRatio:         orOff(*pagingRatio),
		MemoryStrategy:      *memStrategy,
		DiskFreeLimit:       disk,
		QueueWindow:         *window,
		QueueWindowBytes:    int64(*windowBytes),
		NoPublisherPacing:   !*pace,
		NoAckCoalescing:     !*coalesce,
		StoreGCInterval:     *gcEvery,
		Logger:              log,
		Version:             version,
		TLSCertFile:         *tlsCert,
		TLSKeyFile:          *tlsKey,
		TLSCAFile:           *tlsCA,
		TLSVerify:           *tlsVerify,
		TLSFailIfNoPeerCert: *tlsFail,
	})
	if err != nil {
		log.Error("cannot start broker", zap.Error(err))
		return 1
	}
	if procs != nil {
		procs.start()
		defer procs.stop()
	}
	api := mgmtapi.New(srv, mgmtapi.Options{})
	defer api.Close()
	if *loadDefs != "" {
		if err := mgmtapi.LoadDefinitions(srv, *loadDefs); err != nil {
			log.Error("cannot start broker: loading definitions", zap.Error(err))
			shutdown(srv)
			return 1
		}
	}

	lns, err := listenAll(splitList(*listen))
	if err != nil {
		log.Error("cannot listen", zap.Error(err))
		shutdown(srv)
		return 1
	}
	var tlsLns []net.Listener // RabbitMQ's listeners.ssl.N
	if *tlsListen != "" {
		if tlsLns, err = listenAll(splitList(*tlsListen)); err != nil {
			log.Error("cannot listen", zap.Error(err))
			for _, ln := range lns {
				ln.Close()
			}
			shutdown(srv)
			return 1
		}
	}
	for _, ln := range lns {
		go func() { errc <- srv.Serve(ln) }()
	}
	for _, ln := range tlsLns {
		go func() { errc <- srv.ServeTLS(ln) }()
	}
	if *debugAddr != "" {
		// The mutex profile samples one contention event in 20 (a few
		// nanoseconds per contended unlock); only with pprof served.
		runtime.SetMutexProfileFraction(20)
		ds := &http.Server{Addr: *debugAddr, Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- ds.ListenAndServe() }()
		defer ds.Close()
		log.Info("pprof listening", zap.String("addr", *debugAddr))
	}
	startup.Ready(api.Handler())
	if *promListen != "" { // rabbitmq_prometheus's prometheus.tcp.port
		ps := &http.Server{Addr: *promListen, Handler: metrics.Handler(srv, metrics.Options{Utilisation: api.ConsumerUtilisation}), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- ps.ListenAndServe() }()
		defer ps.Close()
		log.Info("prometheus metrics listening", zap.String("addr", *promListen))
	}
	if *mgmtTLS != "" { // rabbitmq_management's management.ssl.port
		hs := &http.Server{Addr: *mgmtTLS, Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: srv.ManagementTLSConfig()}
		go func() { errc <- hs.ListenAndServeTLS("", "") }() // the certificate comes from TLSConfig
		defer hs.Close()
		log.Info("management API listening", zap.String("addr", *mgmtTLS), zap.Bool("tls", true))
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // reloads the TLS certificates
	defer signal.Stop(hup)
wait:
	for {
		select {
		case err := <-errc:
			log.Error("listener failed", zap.Error(err))
			shutdown(srv)
			return 1
		case sig := <-sigc:
			log.Info("signal received, shutting down", zap.String("signal", sig.String()))
			break wait
		case <-hup:
			_ = srv.ReloadTLS() // logs what it did
		}
	}
	signal.Stop(sigc)
	shutdown(srv)
	return 0
}

// listenAll opens a TCP listener on each address (RabbitMQ's
// listeners.tcp.N), or none and an error if any of them fails.
func listenAll(addrs []string) ([]net.Listener, error) {
	if len(addrs) == 0 {
		return nil, errors.New("--listen: no address")
	}
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func shutdown(srv *broker.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// resourceLimits reads --vm-memory-high-watermark and --disk-free-limit
// against total memory into the Options' figures, where 0 is the default:
// a watermark of 0 (always blocked) becomes negative, and so does a disk
// limit of 0 (no check; free space is never below 0).
func resourceLimits(watermark, diskLimit string, total int64) (wm, disk int64, err error) {
	wm, err = broker.ParseWatermark(watermark, total)
	if err != nil {
		return 0, 0, fmt.Errorf("--vm-memory-high-watermark: %w", err)
	}
	disk, err = broker.ParseDiskFreeLimit(diskLimit, total)
	if err != nil {
		return 0, 0, fmt.Errorf("--disk-free-limit: %w", err)
	}
	if wm == 0 {
		wm = -1
	}
	if disk == 0 {
		disk = -1
	}
	return wm, disk, nil
}

// orNegative maps an explicit 0 (heartbeats off) to the Options' "off".
func orNegative(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// applyEnv sets each flag from RAILMQ_<NAME> when that variable is set;
// flags on the command line are parsed afterwards and win.
func applyEnv(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RAILMQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
		f.Usage += " [" + name + "]"
	})
	return err
}

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("unknown log format %q (console or json)", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	return cfg.Build()
}

func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loadUsers reads name:password pairs from the flag and the file. With
// neither, nil: the broker's default guest/guest.
func loadUsers(list, file string) (map[string]string, error) {
	var lines []string
	lines = append(lines, splitList(list)...)
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	if len(lines) == 0 {
		return nil, nil
	}
	users := make(map[string]string, len(lines))
	for _, l := range lines {
		name, pass, ok := strings.Cut(l, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("user %q is not name:password", l)
		}
		users[name] = pass
	}
	return users, nil
}

// orOff maps a paging ratio of 0 (no paging before the alarm) to 1, which
// Options reads as off (its 0 means the default).
func orOff(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
}

// clusterTLSConfig is the TLS between nodes: the node's certificate, as
// server and as client, and peers verified against the CA both ways.
func clusterTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("--cluster-tls needs --tls-cert, --tls-key and --tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert}, nil
}
