package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/mgmt"
)

// options are railmq's flags as given, on the command line, in the
// RAILMQ_<NAME> (or RabbitMQ's) variables or in the config file
// (conf*.go); brokerOptions checks them and clusterConfig reads the
// cluster's.
type options struct {
	config                                                   string
	showVersion                                              bool
	listen, tlsListen                                        string
	dataDir                                                  string
	logLevel, logFormat                                      string
	users, usersFile                                         string
	defaultUser, defaultPass, defaultVHost, loopbackUsers    string
	channelMax, frameMax                                     uint
	heartbeat, handshakeTimeout, consumerTimeout             time.Duration
	debugListen, loadDefinitions                             string
	managementListen, managementTLSListen, prometheusListen  string
	queueWindow                                              int
	queueWindowBytes, managementMaxBody                      int64
	coalesceAcks, pacePublishers                             bool
	storeGCInterval                                          time.Duration
	maxMessageSize                                           uint64
	memoryStrategy, watermark, diskFreeLimit                 string
	pagingRatio                                              float64
	tlsCert, tlsKey, tlsCA, tlsVerify                        string
	tlsFailIfNoPeerCert                                      bool
	nodeName, clusterListen, clusterPeers, clusterSecretFile string
	clusterTLS, clusterJoin                                  bool
	dataKeyFile, dataOldKeyFiles                             string        // crypt.go
	dataKeyRotation                                          time.Duration // crypt.go
}

// defineFlags defines railmq's flags, and its usage text, on fs; parsing
// fs fills the options returned.
func defineFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.listen, "listen", ":5672", "addresses to listen on for AMQP 0-9-1, comma-separated (e.g. 127.0.0.1:5672,[::1]:5672); the default is every interface, IPv4 and IPv6")
	fs.StringVar(&o.dataDir, "data-dir", "./data", "directory of the message store")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format: console or json")
	fs.StringVar(&o.users, "users", "", "administrators as name:password[,name:password...], made with a fresh store instead of the default user and stored (password reset) on an existing one")
	fs.StringVar(&o.usersFile, "users-file", "", "file of users, one name:password a line (# comments); as --users")
	fs.StringVar(&o.defaultUser, "default-user", "guest", "the user a fresh store gets (an administrator with every permission in the default vhost), as RabbitMQ's default_user")
	fs.StringVar(&o.defaultPass, "default-pass", "guest", "the default user's password")
	fs.StringVar(&o.defaultVHost, "default-vhost", "/", "the vhost a fresh store gets")
	fs.StringVar(&o.loopbackUsers, "loopback-users", "guest", "users allowed to connect only from loopback (comma-separated; empty for none)")
	fs.UintVar(&o.channelMax, "channel-max", broker.DefaultChannelMax, "channel_max proposed in connection.tune")
	fs.UintVar(&o.frameMax, "frame-max", broker.DefaultFrameMax, "frame_max proposed in connection.tune (bytes)")
	fs.DurationVar(&o.heartbeat, "heartbeat", broker.DefaultHeartbeat, "heartbeat proposed in connection.tune (0 disables)")
	fs.DurationVar(&o.handshakeTimeout, "handshake-timeout", broker.DefaultHandshakeTimeout, "drop clients that have not opened a connection in this time")
	fs.DurationVar(&o.consumerTimeout, "consumer-timeout", broker.DefaultConsumerTimeout, "close a channel whose delivery stays unacked this long (negative disables)")
	fs.StringVar(&o.debugListen, "debug-listen", "", "address for Go's pprof endpoints (/debug/pprof/); empty disables them")
	fs.StringVar(&o.loadDefinitions, "load-definitions", "", "a definitions file (RabbitMQ's format, as GET /api/definitions exports it) imported at start, as RabbitMQ's load_definitions")
	fs.StringVar(&o.managementListen, "management-listen", "", "address for the HTTP management API subset (e.g. 127.0.0.1:15672); empty disables it")
	fs.Int64Var(&o.managementMaxBody, "management-max-body-size", mgmt.DefaultMaxBodySize, "largest HTTP request body the management API reads, in bytes (RabbitMQ's management.http_max_body_size); a definitions import must fit")
	fs.StringVar(&o.prometheusListen, "prometheus-listen", "", "address for Prometheus metrics under RabbitMQ's names, GET /metrics and /metrics/per-object (RabbitMQ's port is 15692, e.g. :15692); empty disables it")
	fs.IntVar(&o.queueWindow, "queue-window", 4096, "ready messages a durable queue keeps in memory; the rest are read from the store ahead of consumers")
	fs.BoolVar(&o.coalesceAcks, "coalesce-acks", true, "read a consumer's acks in batches, at the latest when its consumers reach half their prefetch unacked or after 10 ms (false: each ack wakes the broker as it arrives)")
	fs.BoolVar(&o.pacePublishers, "pace-publishers", true, "slow a publisher to the consumers' pace while they drain a queue's backlog beyond its window (false: the backlog grows as fast as publishers send)")
	fs.Int64Var(&o.queueWindowBytes, "queue-window-bytes", 16<<20, "bytes of message bodies a durable queue keeps in memory (ready and unacked); beyond, messages wait in the store")
	fs.DurationVar(&o.storeGCInterval, "store-gc-interval", time.Minute, "how often the store's value log is garbage-collected (disk reclaimed after a backlog drains)")
	fs.Uint64Var(&o.maxMessageSize, "max-message-size", broker.DefaultMaxMessageSize, "largest accepted message body (bytes)")
	fs.StringVar(&o.memoryStrategy, "vm-memory-calculation-strategy", "held", "what the memory alarm measures: held (memory held for clients: bodies queued, assembled, in transactions) or rss (the process's resident memory when more, RabbitMQ's default)")
	fs.Float64Var(&o.pagingRatio, "vm-memory-high-watermark-paging-ratio", 0.5, "above this fraction of the memory watermark queues keep only a small window in memory and page the rest (1 or more: off)")
	fs.StringVar(&o.watermark, "vm-memory-high-watermark", "0.4", "block publishers while queues hold more message bodies than this: a fraction of memory (0.4, 40%; of the cgroup's limit when lower) or a size (512MiB, 2GB, 1073741824); 0 blocks them always")
	fs.StringVar(&o.diskFreeLimit, "disk-free-limit", "50MB", "block publishers while the data directory's filesystem has less free: a size (50MB, 1GiB, 50000000) or mem_relative:F, F times memory; 0 turns the check off")
	fs.StringVar(&o.tlsListen, "tls-listen", "", "addresses to listen on for AMQP 0-9-1 over TLS, comma-separated as --listen (RabbitMQ's TLS port is 5671); empty disables it")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (then any intermediates) served on --tls-listen and --management-tls-listen; reloaded on SIGHUP")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert; reloaded on SIGHUP")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA certificates that client certificates are verified against (needed by verify_peer); reloaded on SIGHUP")
	fs.StringVar(&o.tlsVerify, "tls-verify", "verify_none", "client certificates: verify_none (none is asked for) or verify_peer (peer: a certificate the client sends must verify against --tls-ca, and EXTERNAL logs it in as its CN)")
	fs.BoolVar(&o.tlsFailIfNoPeerCert, "tls-fail-if-no-peer-cert", false, "with verify_peer, also refuse a client that sends no certificate")
	fs.StringVar(&o.managementTLSListen, "management-tls-listen", "", "address for the management API over HTTPS with --tls-cert (e.g. :15671); empty disables it")
	fs.StringVar(&o.nodeName, "node-name", "", "this node's name in a cluster (as RabbitMQ's rabbit@host); needed with --cluster-listen")
	fs.StringVar(&o.clusterListen, "cluster-listen", "", "address for the other cluster nodes (RabbitMQ's inter-node port is 25672), e.g. 127.0.0.1:25672; empty: not clustered")
	fs.StringVar(&o.clusterPeers, "cluster-peers", "", "every node of the cluster, this one too, as name=host:port,name=host:port (the first start bootstraps the cluster from it)")
	fs.StringVar(&o.clusterSecretFile, "cluster-secret-file", "", "file holding the cluster's shared secret (RabbitMQ's Erlang cookie); every node needs the same")
	fs.BoolVar(&o.clusterTLS, "cluster-tls", false, "TLS between cluster nodes, both ways, with --tls-cert and --tls-key (valid for server and client auth) verified against --tls-ca")
	fs.BoolVar(&o.clusterJoin, "cluster-join", false, "start to join a running cluster instead of bootstrapping one: a member adds this node (railmqctl cluster join)")
	defineCryptFlags(fs, o) // crypt.go
	fs.StringVar(&o.config, "config", "", "a config file in RabbitMQ's rabbitmq.conf format (key = value); flags and variables win over it (docs/configuration.md). Without it, RABBITMQ_CONFIG_FILE's, if that file exists")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() { printUsage(fs) }
	return o
}

// parseFlags defines railmq's flags on fs and sets them: from the
// config file, then the RabbitMQ variables, then the RAILMQ_ variables,
// then args, each winning over the ones before (parseOptions). A
// variable or a config file that does not parse is reported on
// fs.Output(); a flag that does not, by fs. The error is flag.ErrHelp
// after -h.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o, _, err := parseOptions(fs, args, os.Getenv)
	return o, err
}

// parseOptions is parseFlags, also returning the lines to log once the
// logger exists (the config file's warnings).
func parseOptions(fs *flag.FlagSet, args []string, getenv func(string) string) (*options, []note, error) {
	o := defineFlags(fs)
	set := map[string]bool{} // flags the environment or args set: they win over the file
	err := applyEnv(fs, set)
	if err == nil {
		err = applyRabbitEnv(fs, set, getenv)
	}
	if err != nil {
		fmt.Fprintln(fs.Output(), "railmq:", err)
		return nil, nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if o.showVersion {
		return o, nil, nil
	}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	notes, err := applyConf(fs, o, set, getenv)
	if err != nil {
		fmt.Fprintln(fs.Output(), "railmq:", err)
		return nil, nil, err
	}
	return o, notes, nil
}

// applyEnv sets each flag from RAILMQ_<NAME> when that variable is set,
// and adds it to set; flags on the command line are parsed afterwards
// and win.
func applyEnv(fs *flag.FlagSet, set map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return // RAILMQ_VERSION may well name a version
		}
		name := "RAILMQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
			set[f.Name] = true
		}
		f.Usage += " [" + name + "]"
	})
	return err
}

// refusal is options the broker will not start with: logged as an error,
// msg with fields and err, and the process exits 2.
type refusal struct {
	msg    string
	fields []zap.Field
	err    error // may be nil
}

func (r *refusal) Error() string {
	if r.err == nil {
		return r.msg
	}
	return r.msg + ": " + r.err.Error()
}

func (r *refusal) Unwrap() error { return r.err }

// logRefusal logs why the options are refused, as railmq always has: the
// message, its fields, then the error.
func logRefusal(log *zap.Logger, err error) {
	var r *refusal
	if !errors.As(err, &r) {
		r = &refusal{msg: "bad options", err: err}
	}
	log.Error(r.msg, append(r.fields[:len(r.fields):len(r.fields)], zap.Error(r.err))...)
}

// brokerOptions checks o and turns it into the broker's options, with
// totalMemory (broker.TotalMemory) the base of the memory and disk
// limits. The cluster and the hooks are the caller's to set. An error is
// a *refusal.
func (o *options) brokerOptions(totalMemory int64, log *zap.Logger) (broker.Options, error) {
	users, err := loadUsers(o.users, o.usersFile)
	if err != nil {
		return broker.Options{}, &refusal{msg: "bad users", err: err}
	}
	if o.memoryStrategy != "held" && o.memoryStrategy != "rss" {
		return broker.Options{}, &refusal{msg: "vm-memory-calculation-strategy must be held or rss"}
	}
	if o.channelMax == 0 || o.channelMax > 65535 {
		return broker.Options{}, &refusal{msg: "channel-max must be 1..65535"}
	}
	wm, disk, err := resourceLimits(o.watermark, o.diskFreeLimit, totalMemory)
	if err != nil {
		return broker.Options{}, &refusal{msg: "bad resource limit", err: err}
	}
	if (o.tlsListen != "" || o.managementTLSListen != "") && (o.tlsCert == "" || o.tlsKey == "") {
		return broker.Options{}, &refusal{msg: "--tls-listen and --management-tls-listen need --tls-cert and --tls-key"}
	}
	keys, err := o.dataKeys() // crypt.go
	if err != nil {
		return broker.Options{}, err
	}
	return broker.Options{
		DataDir:             o.dataDir,
		DataKeys:            keys,
		Users:               users,
		DefaultUser:         o.defaultUser,
		DefaultPass:         o.defaultPass,
		DefaultVHost:        o.defaultVHost,
		LoopbackUsers:       splitList(o.loopbackUsers),
		ChannelMax:          uint16(o.channelMax),
		FrameMax:            uint32(o.frameMax),
		Heartbeat:           orNegative(o.heartbeat),
		HandshakeTimeout:    o.handshakeTimeout,
		ConsumerTimeout:     o.consumerTimeout,
		MaxMessageSize:      o.maxMessageSize,
		MemoryHighWatermark: wm,
		PagingRatio:         orOff(o.pagingRatio),
		MemoryStrategy:      o.memoryStrategy,
		DiskFreeLimit:       disk,
		QueueWindow:         o.queueWindow,
		QueueWindowBytes:    o.queueWindowBytes,
		NoPublisherPacing:   !o.pacePublishers,
		NoAckCoalescing:     !o.coalesceAcks,
		StoreGCInterval:     o.storeGCInterval,
		Logger:              log,
		Version:             version,
		NodeName:            o.nodeName,
		TLSCertFile:         o.tlsCert,
		TLSKeyFile:          o.tlsKey,
		TLSCAFile:           o.tlsCA,
		TLSVerify:           o.tlsVerify,
		TLSFailIfNoPeerCert: o.tlsFailIfNoPeerCert,
	}, nil
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

// orOff maps a paging ratio of 0 (no paging before the alarm) to 1, which
// Options reads as off (its 0 means the default).
func orOff(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
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
