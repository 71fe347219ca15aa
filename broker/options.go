package broker

import (
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Options configure a Server. The zero value of a field means its default.
type Options struct {
	// DataDir holds the store.
	DataDir string
	// Users maps user names to passwords. Nil means the default guest/guest.
	Users map[string]string
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
	// alarm). 0 means 40% of the machine's memory.
	MemoryHighWatermark int64
	// QueueWindow is how many ready messages a durable queue keeps in
	// memory; the rest wait in the store (0: 4096).
	QueueWindow int
	// AfterStoreSync, if set, runs after each store fsync, before the
	// confirms it makes due are sent (a test hook).
	AfterStoreSync func()
	// MemoryLimitBase is the Go heap target (runtime/debug.SetMemoryLimit)
	// when queues hold nothing in memory; the target follows what they
	// hold (base + twice that). 0 means 128 MiB; negative leaves the Go
	// runtime's default (or GOMEMLIMIT) alone.
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
	// Version is reported in the server properties.
	Version string
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
	if o.Users == nil {
		o.Users = map[string]string{"guest": "guest"}
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
		o.MemoryHighWatermark = defaultWatermark()
	}
	if o.MemoryLimitBase == 0 {
		o.MemoryLimitBase = 128 << 20
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
	return o
}

// defaultWatermark is 40% of physical memory (RabbitMQ's default
// vm_memory_high_watermark), or 1 GiB when that cannot be read.
func defaultWatermark() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return kb * 1024 * 4 / 10
				}
			}
		}
	}
	return 1 << 30
}
