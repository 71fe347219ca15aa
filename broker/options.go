package broker

import (
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/crypt"
)

// Options configure a Server. The zero value of a field means its default.
type Options struct {
	// DataDir holds the store.
	DataDir string
	// DataKeys, if set, encrypt what the node writes under DataDir
	// (--data-encryption-key-file; docs/encryption.md).
	DataKeys *crypt.Keys
	// ConfigFiles are the config files the node was started with, as
	// /api/nodes (config_files) and rabbitmq-diagnostics status list them.
	ConfigFiles []string
	// Cluster, when set, makes the broker a node of a railmq cluster
	// (--node-name, --cluster-listen, --cluster-peers,
	// --cluster-secret-file): its DataDir is the broker's.
	Cluster *cluster.NodeConfig
	// Users maps user names to passwords: administrators with every
	// permission in DefaultVHost, created with a fresh store instead of
	// DefaultUser, and added (or their passwords reset) on a store that
	// has users. Users are otherwise managed through the HTTP API and
	// kept in the store.
	Users map[string]string
	// DefaultUser and DefaultPass (guest/guest) and DefaultVHost ("/")
	// are created with a fresh store, as RabbitMQ's default_user,
	// default_pass and default_vhost (RABBITMQ_DEFAULT_USER ...).
	DefaultUser, DefaultPass, DefaultVHost string
	// LoopbackUsers may connect only from a loopback address (RabbitMQ's
	// loopback_users); nil means {"guest"}.
	LoopbackUsers []string
	// ChannelMax, FrameMax and Heartbeat are what connection.tune proposes.
	ChannelMax uint16
	FrameMax   uint32
	Heartbeat  time.Duration
	// HandshakeTimeout drops a client that has not opened its connection
	// in time.
	HandshakeTimeout time.Duration
	// ConsumerTimeout closes a channel whose deliveries stay unacked longer
	// (RabbitMQ's consumer_timeout); a negative value disables it.
	ConsumerTimeout time.Duration
	// MaxMessageSize bounds a message body (RabbitMQ's max_message_size).
	MaxMessageSize uint64
	// MemoryHighWatermark is the bytes of message bodies queues may hold in
	// memory before publishing connections are blocked (RabbitMQ's memory
	// alarm). 0 means 40% of TotalMemory (the machine's, or the cgroup's
	// limit when lower); negative keeps the alarm on, as RabbitMQ's
	// watermark 0 does. ParseWatermark reads RabbitMQ's forms.
	MemoryHighWatermark int64
	// PagingRatio is RabbitMQ's vm_memory_high_watermark_paging_ratio:
	// above this fraction of the watermark queues keep a small window in
	// memory and page the rest, so that the alarm is the last resort. 0
	// means 0.5 (RabbitMQ's default); 1 or more turns it off.
	PagingRatio float64
	// MemoryStrategy is what the memory alarm compares with the
	// watermark (RabbitMQ's vm_memory_calculation_strategy): "held" (the
	// default), the memory held for clients (bodies queued, assembled,
	// in uncommitted transactions); or "rss", the whole process's resident
	// memory when that is more, as RabbitMQ's default measures it (checked
	// by the alarm monitor, every AlarmCheckInterval).
	MemoryStrategy string
	// DiskFreeLimit is the free space on DataDir's filesystem under which
	// publishing connections are blocked (RabbitMQ's disk alarm). 0 means
	// DefaultDiskFreeLimit (50 MB); negative turns the disk alarm off.
	// ParseDiskFreeLimit reads RabbitMQ's forms.
	DiskFreeLimit int64
	// DiskFree, if set, replaces the statfs of DataDir that reports the
	// bytes free to the broker (a test hook).
	DiskFree func() (uint64, error)
	// AlarmCheckInterval is how often the alarms are checked: the memory
	// alarm clears (it is set as soon as a publishing connection's reader
	// sees queues over the watermark) and the disk is checked at most this
	// far apart, sooner as free space nears the limit. 0 means 1s.
	AlarmCheckInterval time.Duration
	// QueueWindow is how many ready messages a durable queue keeps in
	// memory; the rest wait in the store (0: 4096).
	QueueWindow int
	// QueueWindowBytes bounds the bytes of bodies a durable queue keeps in
	// memory, ready and unacked (0: 16 MiB): large messages page too.
	QueueWindowBytes int64
	// NoPublisherPacing turns off pacing: by default a publisher into a
	// queue whose consumers drain a backlog beyond its window is slowed
	// to their pace once the backlog has grown by another window
	// (queue.Queue.Behind).
	NoPublisherPacing bool
	// NoAckCoalescing turns off ack coalescing: by default a consumer's
	// connection whose wake-ups bring a few acks each, with prefetch to
	// spare, has them read with the next delivery to it or within 10 ms
	// instead of one wake-up each (lowat.go).
	NoAckCoalescing bool
	// AckCoalescingWait is the longest coalesced acks wait in the socket
	// (0: 10 ms). Tests lengthen it to see the states between.
	AckCoalescingWait time.Duration
	// AfterStoreSync, if set, runs after each store fsync, and on a
	// standalone node after each fsync of a quorum queue's log, before
	// the confirms it makes due are sent (a test hook).
	AfterStoreSync func()
	// BeforeDiskWork, if set, runs before each round of disk work: the
	// store's commits and reads, its value-log garbage collection, the
	// page files' writes and reads. It
	// runs on the goroutine doing that work, which it delays: keep it
	// short.
	BeforeDiskWork func()
	// MemoryLimitBase is the Go heap target (runtime/debug.SetMemoryLimit)
	// when queues hold nothing in memory, beyond what the store's Badger
	// keeps on the heap (persist.Store.HeapFixed); the target follows
	// what queues hold (base + store + twice that). 0 means 64 MiB;
	// negative leaves the Go runtime's default (or GOMEMLIMIT) alone.
	MemoryLimitBase int64
	// StoreGCInterval is how often the value log is garbage-collected.
	StoreGCInterval time.Duration
	// StoreFault, if set, can fail store commits (a test hook for a full
	// disk).
	StoreFault func() error
	// TimeoutCheckInterval is how often consumer timeouts are checked.
	TimeoutCheckInterval time.Duration
	// Logger receives the broker's logs; nil discards them.
	Logger *zap.Logger
	// RecoveryProgress, when set, is called as recovery rebuilds each
	// stored queue: the vhost, its queues done of total, and the messages
	// found in it so far (mgmt.Startup.Progress shows it on the console).
	RecoveryProgress func(vhost string, done, total, messages int)

	// Version is reported in the server properties.
	Version string
	// NodeName names a standalone node (RabbitMQ's RABBITMQ_NODENAME);
	// empty: railmq@HOST. A cluster node's name is Cluster.Name.
	NodeName string

	// TLS (tls.go), as RabbitMQ's ssl_options: TLSCertFile (the
	// certificate, then any intermediates) and TLSKeyFile, PEM, are what
	// ServeTLS listeners and ManagementTLSConfig serve; without them
	// there is no TLS. TLSCAFile (PEM) holds the CAs client certificates
	// are verified against. TLSVerify is "verify_none" (the default: no
	// client certificate is asked for) or "verify_peer" (a certificate
	// the client sends must verify); TLSFailIfNoPeerCert, with
	// verify_peer, also refuses a client that sends none.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	TLSVerify                          string
	TLSFailIfNoPeerCert                bool
}

// Defaults as RabbitMQ ships them.
const (
	DefaultChannelMax       = 2047
	DefaultFrameMax         = 131072
	DefaultHeartbeat        = 60 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultConsumerTimeout  = 30 * time.Minute
	DefaultMaxMessageSize   = 128 << 20
	// MinFrameMax is the smallest frame_max a client may ask for. RabbitMQ
	// 4.1 raised its minimum to 8192; old amqplib asks for 4096, which
	// RabbitMQ up to 4.0 accepted, and so do we.
	MinFrameMax = 4096
)

func (o Options) withDefaults() Options {
	if o.DataDir == "" {
		o.DataDir = "./data"
	}
	if o.DefaultUser == "" {
		o.DefaultUser, o.DefaultPass = "guest", "guest"
	}
	if o.DefaultVHost == "" {
		o.DefaultVHost = "/"
	}
	if o.LoopbackUsers == nil {
		o.LoopbackUsers = []string{"guest"}
	}
	if o.ChannelMax == 0 {
		o.ChannelMax = DefaultChannelMax
	}
	if o.FrameMax == 0 {
		o.FrameMax = DefaultFrameMax
	}
	if o.FrameMax < MinFrameMax {
		o.FrameMax = MinFrameMax
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Heartbeat < 0 {
		o.Heartbeat = 0
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ConsumerTimeout == 0 {
		o.ConsumerTimeout = DefaultConsumerTimeout
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MemoryHighWatermark == 0 {
		o.MemoryHighWatermark = int64(DefaultWatermark * float64(TotalMemory()))
	}
	if o.DiskFreeLimit == 0 {
		o.DiskFreeLimit = DefaultDiskFreeLimit
	}
	if o.AckCoalescingWait <= 0 {
		o.AckCoalescingWait = 10 * time.Millisecond
	}
	if o.AlarmCheckInterval <= 0 {
		o.AlarmCheckInterval = time.Second
	}
	if o.PagingRatio == 0 {
		o.PagingRatio = 0.5
	}
	if o.MemoryLimitBase == 0 {
		o.MemoryLimitBase = 64 << 20
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		o.MemoryLimitBase = -1
	}
	if o.TimeoutCheckInterval == 0 {
		o.TimeoutCheckInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Version == "" {
		o.Version = "0.1.0"
	}
	if o.TLSVerify == "" {
		o.TLSVerify = "verify_none"
	}
	return o
}
