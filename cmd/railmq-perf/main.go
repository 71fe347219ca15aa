package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // connection or setup error, or a connection lost mid-run
	exitUsage  = 2
	exitVerify = 3 // --verify found lost or duplicated messages
)

// config is the parsed command line; it is echoed in the JSON report.
type config struct {
	Engine          string        `json:"engine"`
	URI             string        `json:"uri"`
	QueueType       string        `json:"queue_type,omitempty"`
	QueueArgs       string        `json:"queue_args,omitempty"`
	StreamOffset    string        `json:"stream_offset,omitempty"`
	Replay          bool          `json:"replay,omitempty"`
	ReplayTimeout   time.Duration `json:"-"`
	Producers       int           `json:"producers"`
	Consumers       int           `json:"consumers"`
	Size            int           `json:"size"`
	Duration        time.Duration `json:"-"`
	DurationS       float64       `json:"duration_s"` // 0 when --pmessages alone bounds the run
	PMessages       uint64        `json:"pmessages"`
	Persistent      bool          `json:"persistent"`
	Confirm         int           `json:"confirm"`
	Prefetch        int           `json:"prefetch"`
	AutoAck         bool          `json:"autoack"`
	MultiAckEvery   int           `json:"multi_ack_every"`
	Queues          int           `json:"queues"`
	ExchangeType    string        `json:"exchange_type"`
	FanoutQueues    int           `json:"fanout_queues"`
	Rate            float64       `json:"rate"`
	IdleConnections int           `json:"idle_connections"`
	Heartbeat       time.Duration `json:"-"`
	HeartbeatS      float64       `json:"heartbeat_s"`
	BrokerPID       int           `json:"broker_pid,omitempty"`
	QueuePrefix     string        `json:"queue_prefix"`
	Keep            bool          `json:"keep"`
	Predeclared     bool          `json:"predeclared"`
	Drain           bool          `json:"drain"`
	JSON            bool          `json:"json"`
	Verify          bool          `json:"verify"`

	// timed is set when the run has a time limit: --duration given, or no
	// --pmessages.
	timed bool
	// queueArgs is --queue-args parsed.
	queueArgs amqp.Table
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "railmq-perf:", err)
		return exitUsage
	}
	r := newRunner(cfg, stdout, stderr)
	return r.run()
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("railmq-perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Engine, "engine", engineAMQP091, "client engine: amqp091 (amqp091-go, what applications use) or frames (raw sockets, pre-encoded frames, batched writes, no allocation per message; needs amqp:// URIs, no TLS)")
	fs.StringVar(&c.URI, "uri", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URI of the broker; several, comma-separated (a cluster's nodes): connections go to them in turn")
	fs.StringVar(&c.QueueType, "queue-type", "", "declare the queues with this x-queue-type (quorum or stream; empty: none); stream queues are durable, need a prefetch (default 500 then) and no --autoack, and every consumer of a stream receives every message")
	fs.StringVar(&c.QueueArgs, "queue-args", "", "more queue.declare arguments, comma-separated key=value (integers are sent as long, e.g. x-max-length-bytes=1000000000,x-stream-max-segment-size-bytes=50000000)")
	fs.StringVar(&c.StreamOffset, "stream-offset", "", "x-stream-offset of every consumer of a stream: first, last, next or an absolute offset (empty: none, the broker's default, next)")
	fs.BoolVar(&c.Replay, "replay", false, "streams: publish --pmessages per producer with confirms first, then start the consumers (from --stream-offset, default first) and time until each has every message")
	fs.DurationVar(&c.ReplayTimeout, "replay-timeout", 10*time.Minute, "with --replay: how long the consumers may take to read the stream")
	fs.IntVar(&c.Producers, "producers", 1, "number of producers, one connection each")
	fs.IntVar(&c.Consumers, "consumers", 1, "number of consumers, one connection each (0: publish only)")
	fs.IntVar(&c.Size, "size", 16, fmt.Sprintf("message body size in bytes (at least the %d-byte header)", headerSize))
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long producers publish (with --pmessages: only if given)")
	fs.Uint64Var(&c.PMessages, "pmessages", 0, "messages per producer; the run ends when all have been consumed (0: use --duration)")
	fs.BoolVar(&c.Persistent, "persistent", false, "publish with delivery mode 2 to durable queues")
	fs.IntVar(&c.Confirm, "confirm", 0, "publisher confirms: unconfirmed publishes allowed per producer (0: off)")
	fs.IntVar(&c.Prefetch, "prefetch", 0, "basic.qos prefetch count per consumer (0: none)")
	fs.BoolVar(&c.AutoAck, "autoack", false, "consume with no-ack")
	fs.IntVar(&c.MultiAckEvery, "multi-ack-every", 0, "ack with multiple=true every N messages (0 or 1: ack each)")
	fs.IntVar(&c.Queues, "queues", 1, "queues to spread producers and consumers over (direct)")
	fs.StringVar(&c.ExchangeType, "exchange-type", "direct", "direct (exchange perf.direct, one queue per routing key) or fanout (perf.fanout)")
	fs.IntVar(&c.FanoutQueues, "fanout-queues", 0, "queues bound to perf.fanout (0: --queues)")
	fs.Float64Var(&c.Rate, "rate", 0, "messages per second per producer (0: unlimited)")
	fs.IntVar(&c.IdleConnections, "idle-connections", 0, "extra connections with one channel each, idle for the run")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 10*time.Second, "heartbeat interval requested on every connection")
	fs.IntVar(&c.BrokerPID, "broker-pid", 0, "sample this process's CPU time and RSS from /proc")
	fs.StringVar(&c.QueuePrefix, "queue-prefix", "perf-q", "queue names are PREFIX-1 .. PREFIX-N")
	fs.BoolVar(&c.Keep, "keep", false, "do not delete the queues at the end")
	fs.BoolVar(&c.Predeclared, "predeclared", false, "use existing exchange, queues and bindings; do not declare or delete them")
	fs.BoolVar(&c.Drain, "drain", false, "consume until the queues are empty (with --producers 0); no loss check")
	fs.BoolVar(&c.JSON, "json", false, "print only the final JSON line on stdout")
	fs.BoolVar(&c.Verify, "verify", true, "exit 3 when messages were lost or duplicated")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "railmq-perf: AMQP 0-9-1 load generator.\n\nUsage: railmq-perf [flags]\n\n"+
			"--engine frames drives producers and consumers over raw sockets with its own\n"+
			"frame codec (control connection and idle connections still use amqp091-go).\n"+
			"It takes every flag below except amqps:// URIs in --uri (no TLS), which it\n"+
			"refuses; the JSON report is the same.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.timed = c.PMessages == 0 || set["duration"]
	if c.Drain && !set["duration"] {
		c.timed = false
	}
	if c.timed {
		c.DurationS = c.Duration.Seconds()
	}
	c.HeartbeatS = c.Heartbeat.Seconds()
	return c, c.validate()
}

// Engines (--engine).
const (
	engineAMQP091 = "amqp091"
	engineFrames  = "frames"
)

func (c *config) validate() error {
	if c.Engine != engineAMQP091 && c.Engine != engineFrames {
		return fmt.Errorf("--engine %q: want %s or %s", c.Engine, engineAMQP091, engineFrames)
	}
	for _, u := range strings.Split(c.URI, ",") {
		pu, err := amqp.ParseURI(u)
		if err != nil {
			return fmt.Errorf("--uri: %w", err)
		}
		if c.Engine == engineFrames && pu.Scheme != "amqp" {
			return fmt.Errorf("--uri %s://%s:%d: --engine frames does not support TLS; use --engine %s", pu.Scheme, pu.Host, pu.Port, engineAMQP091)
		}
	}
	switch {
	case c.Producers < 0, c.Consumers < 0, c.Confirm < 0, c.Prefetch < 0,
		c.MultiAckEvery < 0, c.IdleConnections < 0, c.FanoutQueues < 0, c.Size < 0:
		return errors.New("counts and sizes must not be negative")
	case c.Prefetch > 65535:
		return errors.New("--prefetch must be at most 65535")
	case c.Queues < 1:
		return errors.New("--queues must be at least 1")
	case c.Rate < 0:
		return errors.New("--rate must not be negative")
	case c.timed && c.Duration <= 0:
		return errors.New("--duration must be positive")
	case c.Heartbeat < 0:
		return errors.New("--heartbeat must not be negative")
	case c.ExchangeType != "direct" && c.ExchangeType != "fanout":
		return fmt.Errorf("--exchange-type %q: want direct or fanout", c.ExchangeType)
	case c.Drain && (c.Producers != 0 || c.Consumers == 0):
		return errors.New("--drain needs --producers 0 and at least one consumer")
	case c.Producers == 0 && c.Consumers == 0 && c.IdleConnections == 0:
		return errors.New("nothing to do: no producers, consumers or idle connections")
	case c.QueuePrefix == "":
		return errors.New("--queue-prefix must not be empty")
	}
	if err := c.validateStream(); err != nil {
		return err
	}
	if c.ExchangeType == "fanout" && c.FanoutQueues == 0 {
		c.FanoutQueues = c.Queues
	}
	if c.ExchangeType == "direct" {
		c.FanoutQueues = 0
	}
	return nil
}

// queueCount is the number of queues the run uses.
func (c *config) queueCount() int {
	if c.ExchangeType == "fanout" {
		return c.FanoutQueues
	}
	return c.Queues
}

// queueName names queue i (0-based) as PREFIX-(i+1).
func (c *config) queueName(i int) string {
	return fmt.Sprintf("%s-%d", c.QueuePrefix, i+1)
}

// exchange is where producers publish.
func (c *config) exchange() string {
	if c.ExchangeType == "fanout" {
		return "perf.fanout"
	}
	return "perf.direct"
}
