package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/railmq/railmq/broker"
)

var version = "0.1.0"

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is railmq with args: flags (options.go), the cluster's
// configuration (cluster.go), then serving (serve.go). It returns the
// exit code: 0 after a signal (or -h), 1 when the broker fails to start
// or a listener fails, 2 for options it will not start with.
func run(args []string) int {
	o, notes, err := parseOptions(flag.NewFlagSet("railmq", flag.ContinueOnError), args, os.Getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.showVersion {
		printVersion(os.Stdout)
		return 0
	}
	log, err := newLogger(o.logLevel, o.logFormat, o.node())
	if err != nil {
		fmt.Fprintln(os.Stderr, "railmq:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	for _, n := range notes {
		log.Log(n.level, n.msg, n.fields...)
	}
	fullProcs, adapt := setProcs(log)

	opts, err := o.brokerOptions(broker.TotalMemory(), log)
	if err == nil {
		opts.ConfigFiles = configFilesRead(o, os.Getenv)
		opts.Cluster, err = o.clusterConfig(log)
	}
	if err != nil {
		logRefusal(log, err)
		return 2
	}
	// One P while nearly idle (procs.go); not in a cluster, whose Raft log
	// writes and fsyncs are not the store's.
	var procs *procsAdapter
	if adapt && opts.Cluster == nil {
		procs = newProcsAdapter(fullProcs, log)
	}
	return serve(o, opts, procs, log)
}

// newLogger is the logger for level and format. JSON lines carry the
// node's name (node, last: logfields.go) and an ISO-8601 time (time), as
// RabbitMQ's JSON log lines do.
func newLogger(level, format, node string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("unknown log format %q (console or json)", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	if format == "json" {
		return cfg.Build(withNode(node))
	}
	return cfg.Build()
}
