package main

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
)

// cleanEnv unsets every RAILMQ_ and RABBITMQ_ variable for the test
// (restored after it): they set the flags.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "RAILMQ_") || strings.HasPrefix(k, "RABBITMQ_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// parse runs parseFlags on args with env as the only RAILMQ_ variables;
// it returns what parseFlags wrote too.
func parse(t *testing.T, env map[string]string, args ...string) (*options, string, error) {
	t.Helper()
	cleanEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := flag.NewFlagSet("railmq", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	o, err := parseFlags(fs, args)
	return o, out.String(), err
}

// defaults are the options with no flag and no variable set.
func defaults() options {
	return options{
		listen: ":5672", dataDir: "./data", logLevel: "info", logFormat: "console",
		defaultUser: "guest", defaultPass: "guest", defaultVHost: "/", loopbackUsers: "guest",
		channelMax: 2047, frameMax: 131072,
		heartbeat: 60 * time.Second, handshakeTimeout: 10 * time.Second, consumerTimeout: 30 * time.Minute,
		queueWindow: 4096, queueWindowBytes: 16 << 20, managementMaxBody: 20000000, coalesceAcks: true, pacePublishers: true,
		storeGCInterval: time.Minute, maxMessageSize: 128 << 20,
		memoryStrategy: "held", pagingRatio: 0.5, watermark: "0.4", diskFreeLimit: "50MB",
		tlsVerify: "verify_none",
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	o, out, err := parse(t, nil)
	if err != nil || out != "" {
		t.Fatalf("no flags: %v, wrote %q", err, out)
	}
	if *o != defaults() {
		t.Fatalf("defaults:\n got %+v\nwant %+v", *o, defaults())
	}
}

// Each flag, on the command line and in its RAILMQ_ variable, sets its
// option and nothing else.
func TestParseFlagsEachFlag(t *testing.T) {
	emptyConf := filepath.Join(t.TempDir(), "rabbitmq.conf")
	if err := os.WriteFile(emptyConf, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		flag, value string
		set         func(o *options)
	}{
		{"listen", "127.0.0.1:1,[::1]:1", func(o *options) { o.listen = "127.0.0.1:1,[::1]:1" }},
		{"data-dir", "/var/lib/railmq", func(o *options) { o.dataDir = "/var/lib/railmq" }},
		{"log-level", "debug", func(o *options) { o.logLevel = "debug" }},
		{"log-format", "json", func(o *options) { o.logFormat = "json" }},
		{"users", "a:b,c:d", func(o *options) { o.users = "a:b,c:d" }},
		{"users-file", "/etc/users", func(o *options) { o.usersFile = "/etc/users" }},
		{"default-user", "admin", func(o *options) { o.defaultUser = "admin" }},
		{"default-pass", "secret", func(o *options) { o.defaultPass = "secret" }},
		{"default-vhost", "/prod", func(o *options) { o.defaultVHost = "/prod" }},
		{"loopback-users", "", func(o *options) { o.loopbackUsers = "" }},
		{"channel-max", "100", func(o *options) { o.channelMax = 100 }},
		{"frame-max", "4096", func(o *options) { o.frameMax = 4096 }},
		{"heartbeat", "0s", func(o *options) { o.heartbeat = 0 }},
		{"handshake-timeout", "3s", func(o *options) { o.handshakeTimeout = 3 * time.Second }},
		{"consumer-timeout", "-1s", func(o *options) { o.consumerTimeout = -time.Second }},
		{"debug-listen", ":6060", func(o *options) { o.debugListen = ":6060" }},
		{"load-definitions", "defs.json", func(o *options) { o.loadDefinitions = "defs.json" }},
		{"management-listen", ":15672", func(o *options) { o.managementListen = ":15672" }},
		{"prometheus-listen", ":15692", func(o *options) { o.prometheusListen = ":15692" }},
		{"queue-window", "10", func(o *options) { o.queueWindow = 10 }},
		{"coalesce-acks", "false", func(o *options) { o.coalesceAcks = false }},
		{"pace-publishers", "false", func(o *options) { o.pacePublishers = false }},
		{"queue-window-bytes", "1024", func(o *options) { o.queueWindowBytes = 1024 }},
		{"management-max-body-size", "1048576", func(o *options) { o.managementMaxBody = 1 << 20 }},
		{"store-gc-interval", "5m", func(o *options) { o.storeGCInterval = 5 * time.Minute }},
		{"max-message-size", "1000", func(o *options) { o.maxMessageSize = 1000 }},
		{"vm-memory-calculation-strategy", "rss", func(o *options) { o.memoryStrategy = "rss" }},
		{"vm-memory-high-watermark-paging-ratio", "0.75", func(o *options) { o.pagingRatio = 0.75 }},
		{"vm-memory-high-watermark", "512MiB", func(o *options) { o.watermark = "512MiB" }},
		{"disk-free-limit", "mem_relative:1.5", func(o *options) { o.diskFreeLimit = "mem_relative:1.5" }},
		{"tls-listen", ":5671", func(o *options) { o.tlsListen = ":5671" }},
		{"tls-cert", "c.pem", func(o *options) { o.tlsCert = "c.pem" }},
		{"tls-key", "c.key", func(o *options) { o.tlsKey = "c.key" }},
		{"tls-ca", "ca.pem", func(o *options) { o.tlsCA = "ca.pem" }},
		{"tls-verify", "verify_peer", func(o *options) { o.tlsVerify = "verify_peer" }},
		{"tls-fail-if-no-peer-cert", "true", func(o *options) { o.tlsFailIfNoPeerCert = true }},
		{"management-tls-listen", ":15671", func(o *options) { o.managementTLSListen = ":15671" }},
		{"node-name", "rabbit@a", func(o *options) { o.nodeName = "rabbit@a" }},
		{"cluster-listen", ":25672", func(o *options) { o.clusterListen = ":25672" }},
		{"cluster-peers", "a=h:1,b=h:2", func(o *options) { o.clusterPeers = "a=h:1,b=h:2" }},
		{"cluster-secret-file", "cookie", func(o *options) { o.clusterSecretFile = "cookie" }},
		{"cluster-tls", "true", func(o *options) { o.clusterTLS = true }},
		{"cluster-join", "true", func(o *options) { o.clusterJoin = true }},
		{"data-encryption-key-file", "/etc/railmq/key", func(o *options) { o.dataKeyFile = "/etc/railmq/key" }},
		{"data-encryption-old-key-file", "a,b", func(o *options) { o.dataOldKeyFiles = "a,b" }},
		{"data-encryption-key-rotation", "24h", func(o *options) { o.dataKeyRotation = 24 * time.Hour }},
		{"config", emptyConf, func(o *options) { o.config = emptyConf }},
		{"version", "true", func(o *options) { o.showVersion = true }}, // no variable: RAILMQ_VERSION may name a version
	}
	// Every flag has its case here.
	tested := map[string]bool{}
	for _, tc := range cases {
		tested[tc.flag] = true
	}
	checkEveryFlag(t, tested)

	for _, tc := range cases {
		want := defaults()
		tc.set(&want)
		env := "RAILMQ_" + strings.ToUpper(strings.ReplaceAll(tc.flag, "-", "_"))
		t.Run(tc.flag, func(t *testing.T) {
			o, out, err := parse(t, nil, "--"+tc.flag+"="+tc.value)
			if err != nil || out != "" || *o != want {
				t.Errorf("--%s=%s: %v, wrote %q\n got %+v\nwant %+v", tc.flag, tc.value, err, out, *o, want)
			}
			if tc.flag == "version" {
				want = defaults()
			}
			o, out, err = parse(t, map[string]string{env: tc.value})
			if err != nil || out != "" || *o != want {
				t.Errorf("%s=%s: %v, wrote %q\n got %+v\nwant %+v", env, tc.value, err, out, *o, want)
			}
		})
	}
}

// checkEveryFlag fails unless every flag defined is in tested.
func checkEveryFlag(t *testing.T, tested map[string]bool) {
	t.Helper()
	fs := flag.NewFlagSet("railmq", flag.ContinueOnError)
	defineFlags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !tested[f.Name] {
			t.Errorf("--%s has no case", f.Name)
		}
	})
	if n != len(tested) {
		t.Errorf("%d flags defined, %d tested", n, len(tested))
	}
}

func TestParseFlags(t *testing.T) {
	usage := "railmq 0.1.0: an AMQP 0-9-1 message broker.\n\nUsage: railmq [flags]\n\nFlags (each also read from RAILMQ_<NAME>, e.g. RAILMQ_LISTEN, RAILMQ_DATA_DIR):\n"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		set  func(o *options) // nil: an error is expected
		err  string           // the error's text
		out  string           // what is written first (the usage follows a flag's error)
	}{
		{name: "flag beats variable", env: map[string]string{"RAILMQ_DATA_DIR": "/env"}, args: []string{"--data-dir", "/flag"},
			set: func(o *options) { o.dataDir = "/flag" }},
		{name: "several", env: map[string]string{"RAILMQ_LISTEN": ":1", "RAILMQ_COALESCE_ACKS": "false"}, args: []string{"-heartbeat", "5s", "--users=a:b"},
			set: func(o *options) { o.listen, o.coalesceAcks, o.heartbeat, o.users = ":1", false, 5*time.Second, "a:b" }},
		{name: "bool without value", args: []string{"--cluster-join"}, set: func(o *options) { o.clusterJoin = true }},
		{name: "arguments after flags are ignored", args: []string{"--data-dir", "d", "extra", "--listen", ":1"},
			set: func(o *options) { o.dataDir = "d" }},
		{name: "help", args: []string{"-h"}, err: "flag: help requested", out: usage},
		{name: "help long", args: []string{"--help"}, err: "flag: help requested", out: usage},
		{name: "unknown flag", args: []string{"--bogus"}, err: "flag provided but not defined: -bogus",
			out: "flag provided but not defined: -bogus\n" + usage},
		{name: "missing value", args: []string{"--data-dir"}, err: "flag needs an argument: -data-dir",
			out: "flag needs an argument: -data-dir\n" + usage},
		{name: "uint not a number", args: []string{"--channel-max", "abc"}, err: `invalid value "abc" for flag -channel-max: parse error`,
			out: "invalid value \"abc\" for flag -channel-max: parse error\n" + usage},
		{name: "uint negative", args: []string{"--frame-max=-1"}, err: `invalid value "-1" for flag -frame-max: parse error`},
		{name: "uint64 out of range", args: []string{"--max-message-size=99999999999999999999"},
			err: `invalid value "99999999999999999999" for flag -max-message-size: value out of range`},
		{name: "int not a number", args: []string{"--queue-window=1.5"}, err: `invalid value "1.5" for flag -queue-window: parse error`},
		{name: "duration without unit", args: []string{"--heartbeat=5"}, err: `invalid value "5" for flag -heartbeat: parse error`},
		{name: "bool", args: []string{"--coalesce-acks=maybe"}, err: `invalid boolean value "maybe" for -coalesce-acks: parse error`},
		{name: "float", args: []string{"--vm-memory-high-watermark-paging-ratio=half"},
			err: `invalid value "half" for flag -vm-memory-high-watermark-paging-ratio: parse error`},
		{name: "bad variable", env: map[string]string{"RAILMQ_CHANNEL_MAX": "abc"}, err: `RAILMQ_CHANNEL_MAX="abc": parse error`,
			out: "railmq: RAILMQ_CHANNEL_MAX=\"abc\": parse error\n"},
		{name: "bad variable, good flag", env: map[string]string{"RAILMQ_HEARTBEAT": "5"}, args: []string{"--heartbeat=5s"},
			err: `RAILMQ_HEARTBEAT="5": parse error`, out: "railmq: RAILMQ_HEARTBEAT=\"5\": parse error\n"},
		// The variables are read in the flags' order; the first bad one is reported.
		{name: "two bad variables", env: map[string]string{"RAILMQ_QUEUE_WINDOW": "x", "RAILMQ_CHANNEL_MAX": "y"},
			err: `RAILMQ_CHANNEL_MAX="y": parse error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, out, err := parse(t, tc.env, tc.args...)
			if tc.set != nil {
				want := defaults()
				tc.set(&want)
				if err != nil || out != "" || *o != want {
					t.Fatalf("%v: %v, wrote %q\n got %+v\nwant %+v", tc.args, err, out, o, want)
				}
				return
			}
			if err == nil || err.Error() != tc.err {
				t.Fatalf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			if !strings.HasPrefix(out, tc.out) {
				t.Fatalf("%v wrote:\n%s\nwant it to start:\n%s", tc.args, out, tc.out)
			}
		})
	}
}

// The usage names each flag's variable, once.
func TestUsageNamesVariables(t *testing.T) {
	_, out, _ := parse(t, nil, "-h")
	for _, want := range []string{"  -listen string\n", "[RAILMQ_LISTEN]", "[RAILMQ_VM_MEMORY_HIGH_WATERMARK_PAGING_RATIO]", "(default \":5672\")"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "[RAILMQ_DATA_DIR]"); n != 1 {
		t.Errorf("[RAILMQ_DATA_DIR] %d times", n)
	}
}

const totalMemory = 10 << 30

// defaultBrokerOptions are the broker's options from the default flags
// with 10 GiB of memory.
func defaultBrokerOptions(log *zap.Logger) broker.Options {
	return broker.Options{
		DataDir: "./data", DefaultUser: "guest", DefaultPass: "guest", DefaultVHost: "/", LoopbackUsers: []string{"guest"},
		ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60 * time.Second, HandshakeTimeout: 10 * time.Second,
		ConsumerTimeout: 30 * time.Minute, MaxMessageSize: 128 << 20,
		MemoryHighWatermark: 4 << 30, PagingRatio: 0.5, MemoryStrategy: "held", DiskFreeLimit: 50_000_000,
		QueueWindow: 4096, QueueWindowBytes: 16 << 20, StoreGCInterval: time.Minute,
		Logger: log, Version: "0.1.0", TLSVerify: "verify_none",
	}
}

func TestBrokerOptions(t *testing.T) {
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users")
	if err := os.WriteFile(usersFile, []byte("# admins\n\n  ann:pw1  \nbob:pw:with:colons\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := zap.NewNop()
	for _, tc := range []struct {
		name string
		args []string
		set  func(o *broker.Options)
	}{
		{"defaults", nil, func(*broker.Options) {}},
		{"heartbeat 0 is off", []string{"--heartbeat=0"}, func(o *broker.Options) { o.Heartbeat = -1 }},
		{"heartbeat", []string{"--heartbeat=5s"}, func(o *broker.Options) { o.Heartbeat = 5 * time.Second }},
		{"paging ratio 0 is off", []string{"--vm-memory-high-watermark-paging-ratio=0"}, func(o *broker.Options) { o.PagingRatio = 1 }},
		{"paging ratio negative is off", []string{"--vm-memory-high-watermark-paging-ratio=-1"}, func(o *broker.Options) { o.PagingRatio = 1 }},
		{"paging ratio", []string{"--vm-memory-high-watermark-paging-ratio=2"}, func(o *broker.Options) { o.PagingRatio = 2 }},
		{"watermark 0 blocks always", []string{"--vm-memory-high-watermark=0"}, func(o *broker.Options) { o.MemoryHighWatermark = -1 }},
		{"watermark size", []string{"--vm-memory-high-watermark=1GiB"}, func(o *broker.Options) { o.MemoryHighWatermark = 1 << 30 }},
		{"watermark above memory", []string{"--vm-memory-high-watermark=20GiB"}, func(o *broker.Options) { o.MemoryHighWatermark = totalMemory }},
		{"watermark percent", []string{"--vm-memory-high-watermark=50%"}, func(o *broker.Options) { o.MemoryHighWatermark = 5 << 30 }},
		{"disk limit 0 is off", []string{"--disk-free-limit=0"}, func(o *broker.Options) { o.DiskFreeLimit = -1 }},
		{"disk limit relative", []string{"--disk-free-limit=mem_relative:1.5"}, func(o *broker.Options) { o.DiskFreeLimit = 15 << 30 }},
		{"disk limit size", []string{"--disk-free-limit=1GiB"}, func(o *broker.Options) { o.DiskFreeLimit = 1 << 30 }},
		{"users", []string{"--users", " a:b , c: ,d:e:f"}, func(o *broker.Options) { o.Users = map[string]string{"a": "b", "c": "", "d": "e:f"} }},
		{"users file", []string{"--users-file", usersFile}, func(o *broker.Options) { o.Users = map[string]string{"ann": "pw1", "bob": "pw:with:colons"} }},
		{"users and file", []string{"--users-file", usersFile, "--users", "ann:flag,cy:x"},
			func(o *broker.Options) { o.Users = map[string]string{"ann": "pw1", "bob": "pw:with:colons", "cy": "x"} }},
		{"no loopback users", []string{"--loopback-users="}, func(o *broker.Options) { o.LoopbackUsers = []string{} }},
		{"loopback users", []string{"--loopback-users= a, ,b "}, func(o *broker.Options) { o.LoopbackUsers = []string{"a", "b"} }},
		{"channel-max", []string{"--channel-max=65535"}, func(o *broker.Options) { o.ChannelMax = 65535 }},
		{"channel-max 1", []string{"--channel-max=1"}, func(o *broker.Options) { o.ChannelMax = 1 }},
		{"frame-max", []string{"--frame-max=4096"}, func(o *broker.Options) { o.FrameMax = 4096 }},
		{"no ack coalescing", []string{"--coalesce-acks=false"}, func(o *broker.Options) { o.NoAckCoalescing = true }},
		{"no publisher pacing", []string{"--pace-publishers=false"}, func(o *broker.Options) { o.NoPublisherPacing = true }},
		{"rss", []string{"--vm-memory-calculation-strategy=rss"}, func(o *broker.Options) { o.MemoryStrategy = "rss" }},
		{"plain", []string{"--data-dir=d", "--default-user=u", "--default-pass=p", "--default-vhost=v", "--handshake-timeout=1s",
			"--consumer-timeout=-1s", "--max-message-size=10", "--queue-window=7", "--queue-window-bytes=8", "--store-gc-interval=1h"},
			func(o *broker.Options) {
				o.DataDir, o.DefaultUser, o.DefaultPass, o.DefaultVHost = "d", "u", "p", "v"
				o.HandshakeTimeout, o.ConsumerTimeout, o.MaxMessageSize = time.Second, -time.Second, 10
				o.QueueWindow, o.QueueWindowBytes, o.StoreGCInterval = 7, 8, time.Hour
			}},
		{"tls", []string{"--tls-listen=:5671", "--tls-cert=c", "--tls-key=k", "--tls-ca=ca", "--tls-verify=verify_peer", "--tls-fail-if-no-peer-cert"},
			func(o *broker.Options) {
				o.TLSCertFile, o.TLSKeyFile, o.TLSCAFile, o.TLSVerify, o.TLSFailIfNoPeerCert = "c", "k", "ca", "verify_peer", true
			}},
		{"management tls", []string{"--management-tls-listen=:15671", "--tls-cert=c", "--tls-key=k"},
			func(o *broker.Options) { o.TLSCertFile, o.TLSKeyFile = "c", "k" }},
		// Serving's flags are not the broker's options.
		{"serving", []string{"--listen=:1", "--management-listen=:2", "--prometheus-listen=:3", "--debug-listen=:4", "--load-definitions=f"},
			func(*broker.Options) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(t, nil, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := o.brokerOptions(totalMemory, log)
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			want := defaultBrokerOptions(log)
			tc.set(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v:\n got %+v\nwant %+v", tc.args, got, want)
			}
		})
	}
}

// Options the broker refuses, with the error logged as before the split.
func TestBrokerOptionsRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		args []string
		msg  string // the log message
		err  string // the error's text after msg, or its start when it ends in "..."
		is   error  // when set, the error wraps it
	}{
		{name: "user without password", args: []string{"--users", "a:b,nocolon"}, msg: "bad users", err: `user "nocolon" is not name:password`},
		{name: "user without name", args: []string{"--users", ":pw"}, msg: "bad users", err: `user ":pw" is not name:password`},
		{name: "users file missing", args: []string{"--users-file", missing}, msg: "bad users", err: "open " + missing + ": no such file or directory", is: fs.ErrNotExist},
		{name: "memory strategy", args: []string{"--vm-memory-calculation-strategy=allocated"}, msg: "vm-memory-calculation-strategy must be held or rss"},
		{name: "channel-max 0", args: []string{"--channel-max=0"}, msg: "channel-max must be 1..65535"},
		{name: "channel-max too big", args: []string{"--channel-max=65536"}, msg: "channel-max must be 1..65535"},
		{name: "watermark", args: []string{"--vm-memory-high-watermark=lots"}, msg: "bad resource limit", err: `--vm-memory-high-watermark: invalid size "lots"...`, is: broker.ErrSize},
		{name: "watermark over 100%", args: []string{"--vm-memory-high-watermark=150%"}, msg: "bad resource limit", err: "--vm-memory-high-watermark: invalid size...", is: broker.ErrSize},
		{name: "disk limit", args: []string{"--disk-free-limit=mem_relative:x"}, msg: "bad resource limit", err: "--disk-free-limit: invalid size...", is: broker.ErrSize},
		{name: "tls without certificate", args: []string{"--tls-listen=:5671"}, msg: "--tls-listen and --management-tls-listen need --tls-cert and --tls-key"},
		{name: "tls without key", args: []string{"--tls-listen=:5671", "--tls-cert=c"}, msg: "--tls-listen and --management-tls-listen need --tls-cert and --tls-key"},
		{name: "management tls without certificate", args: []string{"--management-tls-listen=:15671", "--tls-key=k"}, msg: "--tls-listen and --management-tls-listen need --tls-cert and --tls-key"},
		// The checks run in this order: the first refusal is reported.
		{name: "first refusal", args: []string{"--channel-max=0", "--users=x", "--disk-free-limit=x"}, msg: "bad users", err: `user "x" is not name:password`},
		{name: "second refusal", args: []string{"--channel-max=0", "--vm-memory-calculation-strategy=x"}, msg: "vm-memory-calculation-strategy must be held or rss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(t, nil, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = o.brokerOptions(totalMemory, zap.NewNop())
			checkRefusal(t, err, tc.msg, tc.err, tc.is)
		})
	}
}

// checkRefusal fails unless err is a refusal logged as msg, with an error
// whose text is wantErr (or starts so, when wantErr ends in "...") and
// that wraps is; no error when wantErr is empty.
func checkRefusal(t *testing.T, err error, msg, wantErr string, is error) {
	t.Helper()
	var r *refusal
	if !errors.As(err, &r) {
		t.Fatalf("got %v, want a refusal %q", err, msg)
	}
	if r.msg != msg {
		t.Errorf("message %q, want %q", r.msg, msg)
	}
	switch prefix, cut := strings.CutSuffix(wantErr, "..."); {
	case wantErr == "":
		if r.err != nil {
			t.Errorf("error %v, want none", r.err)
		} else if err.Error() != msg {
			t.Errorf("Error() %q, want %q", err.Error(), msg)
		}
	case r.err == nil:
		t.Errorf("no error, want %q", wantErr)
	case cut && !strings.HasPrefix(r.err.Error(), prefix), !cut && r.err.Error() != wantErr:
		t.Errorf("error %q, want %q", r.err.Error(), wantErr)
	case err.Error() != msg+": "+r.err.Error():
		t.Errorf("Error() %q", err.Error())
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("%v does not wrap %v", err, is)
	}
}
