package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// writeConf writes a config file into a fresh directory.
func writeConf(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rabbitmq.conf")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// parseWith runs parseOptions with env as the only RAILMQ_ and RABBITMQ_
// variables; it returns the notes and what was written too.
func parseWith(t *testing.T, env map[string]string, args ...string) (*options, []note, string, error) {
	t.Helper()
	cleanEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := flag.NewFlagSet("railmq", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	o, notes, err := parseOptions(fs, args, os.Getenv)
	return o, notes, out.String(), err
}

// The file format is cuttlefish's (conf_parse.peg): comments, blank
// lines, key = value with blanks around, a # ending a value unless it is
// quoted, \. in a key, include lines.
func TestReadConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("conf.d/10-a.conf", "a = 1\n")
	write("conf.d/20-b.conf", "b = 2\n")
	main := write("main.conf", "# comment\n\n   \t\n  # indented comment\nkey.one=v1\n\tkey.two   =   v 2   \n"+
		"pass = s3cr#et # a comment\nquoted = 'e9238-7_49%#sod7'  # kept\nloopback_users.a\\.b = true\r\n"+
		"include conf.d/*.conf\nlast = x")
	entries, err := readConf(main)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, strings.Join(e.words, "|")+"="+e.value+"@"+filepath.Base(e.file)+":"+strconv.Itoa(e.line))
	}
	want := []string{"key|one=v1@main.conf:5", "key|two=v 2@main.conf:6", "pass=s3cr@main.conf:7",
		"quoted=e9238-7_49%#sod7@main.conf:8", "loopback_users|a.b=true@main.conf:9",
		"a=1@10-a.conf:1", "b=2@20-b.conf:1", "last=x@main.conf:11"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, tc := range []struct{ text, err string }{
		{"a = 1\nlisteners.tcp.default 5672\n", `:2: "listeners.tcp.default 5672" is not key = value`},
		{"bad key! = 1\n", `:1: key "bad key!": a key is words of letters, digits, _ and - joined by dots`},
		{"a..b = 1\n", `:1: key "a..b": a key is words`},
		{"= 1\n", `:1: key "": a key is words`},
		{"a = \n", `:1: a: no value`},
		{"a = # nothing\n", `:1: a: no value`},
		{"a = 'open\n", `:1: a: a quoted value has no closing '`},
		{"a = 'x' y\n", `:1: a: "y" after the quoted value`},
		{"include missing.conf\n", `:1: include missing.conf: file does not exist: `},
	} {
		_, err := readConf(write("bad.conf", tc.text))
		if err == nil || !strings.Contains(err.Error(), "bad.conf"+tc.err) {
			t.Errorf("%q: error %v, want bad.conf%s", tc.text, err, tc.err)
		}
	}
	write("loop.conf", "include loop.conf\n")
	if _, err := readConf(filepath.Join(dir, "loop.conf")); err == nil || !strings.Contains(err.Error(), "nested more than 8 deep") {
		t.Errorf("include loop: %v", err)
	}
	if _, err := readConf(filepath.Join(dir, "missing.conf")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

// confCases are config files and the options they give over the
// defaults; TestConfKeys checks that every key railmq reads has one.
var confCases = []struct {
	name, conf string
	set        func(o *options)
}{
	{"tcp port", "listeners.tcp.default = 5673", func(o *options) { o.listen = ":5673" }},
	{"tcp ip:port", "listeners.tcp.1 = 127.0.0.1:5673\nlisteners.tcp.2 = ::1:5673\nlisteners.tcp.3 = [::1]:5674",
		func(o *options) { o.listen = "127.0.0.1:5673,[::1]:5673,[::1]:5674" }},
	{"tcp none", "listeners.tcp = none\nlisteners.tcp.default = 5672\nlisteners.ssl.default = 5671",
		func(o *options) { o.listen, o.tlsListen = "", ":5671" }},
	{"ssl", "listeners.ssl.default = 5671\nlisteners.ssl.v4 = 0.0.0.0:5675", func(o *options) { o.tlsListen = ":5671,0.0.0.0:5675" }},
	{"ssl none", "listeners.ssl = none", func(o *options) { o.tlsListen = "" }},
	{"ssl options", "ssl_options.cacertfile = /ca.pem\nssl_options.certfile = /c.pem\nssl_options.keyfile = /k.pem\n" +
		"ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true",
		func(o *options) {
			o.tlsCA, o.tlsCert, o.tlsKey, o.tlsVerify, o.tlsFailIfNoPeerCert = "/ca.pem", "/c.pem", "/k.pem", "verify_peer", true
		}},
	{"ssl verify none", "ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false", func(o *options) {}},
	{"default user", "default_user = admin\ndefault_pass = 'pa#ss'\ndefault_vhost = prod",
		func(o *options) { o.defaultUser, o.defaultPass, o.defaultVHost = "admin", "pa#ss", "prod" }},
	{"loopback none", "loopback_users = none", func(o *options) { o.loopbackUsers = "" }},
	{"loopback guest false", "loopback_users.guest = false", func(o *options) { o.loopbackUsers = "" }},
	{"loopback users", "loopback_users.guest = false\nloopback_users.admin = true\nloopback_users.ops = true\nloopback_users.ops = false",
		func(o *options) { o.loopbackUsers = "admin" }},
	{"loopback guest true", "loopback_users.guest = true", func(o *options) { o.loopbackUsers = "guest" }},
	{"watermark relative", "vm_memory_high_watermark.relative = 0.6", func(o *options) { o.watermark = "0.6" }},
	{"watermark relative 1", "vm_memory_high_watermark.relative = 1", func(o *options) { o.watermark = "1.0" }},
	{"watermark absolute GB", "vm_memory_high_watermark.absolute = 2GB", func(o *options) { o.watermark = "2000000000" }},
	{"watermark absolute MiB", "vm_memory_high_watermark.absolute = 1024MiB", func(o *options) { o.watermark = "1073741824" }},
	{"watermark absolute Gi", "vm_memory_high_watermark.absolute = 2Gi", func(o *options) { o.watermark = "2147483648" }},
	{"watermark absolute bytes", "vm_memory_high_watermark.absolute = 1073741824", func(o *options) { o.watermark = "1073741824" }},
	{"watermark both", "vm_memory_high_watermark.relative = 0.6\nvm_memory_high_watermark.absolute = 1kB", func(o *options) { o.watermark = "1000" }},
	{"paging ratio", "vm_memory_high_watermark_paging_ratio = 0.75", func(o *options) { o.pagingRatio = 0.75 }},
	{"strategy rss", "vm_memory_calculation_strategy = rss", func(o *options) { o.memoryStrategy = "rss" }},
	{"strategy allocated", "vm_memory_calculation_strategy = allocated", func(o *options) {}},
	{"disk absolute", "disk_free_limit.absolute = 1GB", func(o *options) { o.diskFreeLimit = "1000000000" }},
	{"disk absolute MB", "disk_free_limit.absolute = 50MB", func(o *options) { o.diskFreeLimit = "50000000" }},
	{"disk relative", "disk_free_limit.relative = 1.5", func(o *options) { o.diskFreeLimit = "mem_relative:1.5" }},
	{"disk relative 2", "disk_free_limit.relative = 2", func(o *options) { o.diskFreeLimit = "mem_relative:2.0" }},
	{"consumer timeout ms", "consumer_timeout = 900000", func(o *options) { o.consumerTimeout = 15 * time.Minute }},
	{"heartbeat s", "heartbeat = 30", func(o *options) { o.heartbeat = 30 * time.Second }},
	{"heartbeat off", "heartbeat = 0", func(o *options) { o.heartbeat = 0 }},
	{"handshake ms", "handshake_timeout = 5000", func(o *options) { o.handshakeTimeout = 5 * time.Second }},
	{"handshake infinity", "handshake_timeout = infinity", func(o *options) { o.handshakeTimeout = 876000 * time.Hour }},
	{"frame max", "frame_max = 8192", func(o *options) { o.frameMax = 8192 }},
	{"frame max KB", "frame_max = 128KB", func(o *options) { o.frameMax = 131072 }},
	{"channel max", "channel_max = 100", func(o *options) { o.channelMax = 100 }},
	{"channel max 0", "channel_max = 0", func(o *options) { o.channelMax = 65535 }},
	{"max message size", "max_message_size = 1000", func(o *options) { o.maxMessageSize = 1000 }},
	{"management port", "management.tcp.port = 15673", func(o *options) { o.managementListen = ":15673" }},
	{"management ip and port", "management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = 15673", func(o *options) { o.managementListen = "127.0.0.1:15673" }},
	{"management ip", "management.tcp.ip = ::1", func(o *options) { o.managementListen = "[::1]:15672" }},
	{"management listener", "management.listener.port = 15674\nmanagement.listener.ip = 0.0.0.0", func(o *options) { o.managementListen = "0.0.0.0:15674" }},
	{"management ssl", "management.ssl.port = 15671\nmanagement.ssl.ip = 127.0.0.1\nmanagement.ssl.certfile = /c.pem\n" +
		"management.ssl.keyfile = /k.pem\nmanagement.ssl.cacertfile = /ca.pem",
		func(o *options) {
			o.managementTLSListen, o.tlsCert, o.tlsKey, o.tlsCA = "127.0.0.1:15671", "/c.pem", "/k.pem", "/ca.pem"
		}},
	{"management ssl and ssl options", "management.ssl.port = 15671\nmanagement.ssl.certfile = /m.pem\nssl_options.certfile = /c.pem",
		func(o *options) { o.managementTLSListen, o.tlsCert = ":15671", "/c.pem" }},
	{"management body", "management.http.max_body_size = 1000000", func(o *options) { o.managementMaxBody = 1000000 }},
	{"prometheus port", "prometheus.tcp.port = 15693", func(o *options) { o.prometheusListen = ":15693" }},
	{"prometheus ip", "prometheus.tcp.ip = 127.0.0.1", func(o *options) { o.prometheusListen = "127.0.0.1:15692" }},
	{"load definitions", "load_definitions = /etc/rabbitmq/definitions.json", func(o *options) { o.loadDefinitions = "/etc/rabbitmq/definitions.json" }},
	{"definitions local path", "definitions.import_backend = local_filesystem\ndefinitions.local.path = /defs.json",
		func(o *options) { o.loadDefinitions = "/defs.json" }},
	{"management load definitions", "management.load_definitions = /m.json", func(o *options) { o.loadDefinitions = "/m.json" }},
	{"load definitions first", "management.load_definitions = /m.json\nload_definitions = /d.json", func(o *options) { o.loadDefinitions = "/d.json" }},
	{"definitions backend https", "definitions.import_backend = https", func(o *options) {}},
	{"log console level", "log.console.level = debug", func(o *options) { o.logLevel = "debug" }},
	{"log level warning", "log.console.level = warning", func(o *options) { o.logLevel = "warn" }},
	{"log level notice", "log.console.level = notice", func(o *options) { o.logLevel = "info" }},
	{"log level critical", "log.console.level = critical", func(o *options) { o.logLevel = "error" }},
	{"log level none", "log.console.level = none", func(o *options) { o.logLevel = "fatal" }},
	{"log default level", "log.default.level = error", func(o *options) { o.logLevel = "error" }},
	{"log console level first", "log.console.level = debug\nlog.default.level = error", func(o *options) { o.logLevel = "debug" }},
	{"log console", "log.console = true\nlog.console.stdio = stderr\nlog.file = false", func(o *options) {}},
	{"log console off", "log.console = false\nlog.console.stdio = stdout\nlog.file = /var/log/rabbitmq/rabbit.log", func(o *options) {}},
	{"log json", "log.console.formatter = json", func(o *options) { o.logFormat = "json" }},
	{"log plaintext", "log.console.formatter = plaintext", func(o *options) { o.logFormat = "console" }},
	{"classic config", "cluster_formation.peer_discovery_backend = classic_config\ncluster_formation.classic_config.nodes.1 = rabbit@a\n" +
		"cluster_formation.classic_config.nodes.2 = rabbit@b.example.com",
		func(o *options) {
			o.clusterPeers, o.clusterListen = "rabbit@a=a:25672,rabbit@b.example.com=b.example.com:25672", ":25672"
			o.nodeName = "rabbit@" + shortHostname()
		}},
	{"classic config listen", "cluster_formation.classic_config.nodes.1 = rabbit@a\nrailmq.cluster_listen = 127.0.0.1:25700\nrailmq.node_name = rabbit@a",
		func(o *options) {
			o.clusterPeers, o.clusterListen, o.nodeName = "rabbit@a=a:25700", "127.0.0.1:25700", "rabbit@a"
		}},
	{"distribution port", "cluster_formation.classic_config.nodes.1 = rabbit@a\ndistribution.listener.port_range.min = 25800\n" +
		"distribution.listener.port_range.max = 25800\ndistribution.listener.interface = 10.0.0.1\nrailmq.node_name = rabbit@a",
		func(o *options) {
			o.clusterPeers, o.clusterListen, o.nodeName = "rabbit@a=a:25800", "10.0.0.1:25800", "rabbit@a"
		}},
	{"distribution range", "cluster_formation.classic_config.nodes.1 = rabbit@a\ndistribution.listener.port_range.min = 25800\n" +
		"distribution.listener.port_range.max = 25810\nrailmq.node_name = rabbit@a",
		func(o *options) {
			o.clusterPeers, o.clusterListen, o.nodeName = "rabbit@a=a:25800", ":25800", "rabbit@a"
		}},
	{"distribution standalone", "distribution.listener.port_range.max = 25810", func(o *options) {}},
	{"peer discovery k8s", "cluster_formation.peer_discovery_backend = k8s", func(o *options) {}},
	{"cluster name", "cluster_name = prod", func(o *options) {}},
	{"deprecated features", "deprecated_features.permit.transient_nonexcl_queues = false\ndeprecated_features.permit.global_qos = true", func(o *options) {}},
	{"railmq flags", "railmq.data_dir = /var/lib/railmq\nrailmq.queue_window = 10\nrailmq.coalesce_acks = false",
		func(o *options) { o.dataDir, o.queueWindow, o.coalesceAcks = "/var/lib/railmq", 10, false }},
	// Snippets of RabbitMQ's own schema tests (deps/rabbit/test/
	// config_schema_SUITE_data/rabbit.snippets, v4.1.0), with the terms
	// RabbitMQ reads them as.
	// {listeners_tcp_ip, "listeners.tcp.1 = 192.168.1.99:5672", [{tcp_listeners,[{"192.168.1.99",5672}]}]}
	{"snippet listeners_tcp_ip", "listeners.tcp.1 = 192.168.1.99:5672", func(o *options) { o.listen = "192.168.1.99:5672" }},
	// {listeners_tcp_ip_all,"listeners.tcp.1 = :::5672", [{tcp_listeners,[{"::",5672}]}]}
	{"snippet listeners_tcp_ip_all", "listeners.tcp.1 = :::5672", func(o *options) { o.listen = "[::]:5672" }},
	// {listeners_tcp_ipv6, "listeners.tcp.1 = fe80::2acf:e9ff:fe17:f97b:5672", [{tcp_listeners,[{"fe80::2acf:e9ff:fe17:f97b",5672}]}]}
	{"snippet listeners_tcp_ipv6", "listeners.tcp.1 = fe80::2acf:e9ff:fe17:f97b:5672", func(o *options) { o.listen = "[fe80::2acf:e9ff:fe17:f97b]:5672" }},
	// {disk_free_limit_absolute_priority_regardless_of_order, "disk_free_limit.absolute = 50000
	//    disk_free_limit.relative = 1.0", [{disk_free_limit, 50000}]}
	{"snippet disk_free_limit_absolute_priority", "disk_free_limit.absolute = 50000\ndisk_free_limit.relative = 1.0",
		func(o *options) { o.diskFreeLimit = "50000" }},
	// {disk_free_limit_only_absolute_units_t, "disk_free_limit.absolute = 2T", [{disk_free_limit, "2T"}]}
	// (a single letter: a power of 1024, as 3.10.8 reads k, M and G, below)
	{"snippet disk_free_limit_only_absolute_units_t", "disk_free_limit.absolute = 2T", func(o *options) { o.diskFreeLimit = "2199023255552" }},
	{"disk absolute TB", "disk_free_limit.absolute = 2TB", func(o *options) { o.diskFreeLimit = "2000000000000" }},
	{"snippet disk_free_limit_only_absolute_units_pib", "disk_free_limit.absolute = 2PiB", func(o *options) { o.diskFreeLimit = "2251799813685248" }},
	// {vm_memory_watermark_absolute_units_m, "vm_memory_high_watermark.absolute = 1024M", [{vm_memory_high_watermark,{absolute,"1024M"}}]}
	// RabbitMQ 3.10.8 reads the units so (rabbit_common-3.10.8's
	// rabbit_resource_monitor_misc:parse_information_unit, run with erl):
	// "1024M" {ok,1073741824}, "2G" {ok,2147483648}, "1k" {ok,1024},
	// "1024MB" {ok,1024000000}, "2GB" {ok,2000000000}, "1kB" {ok,1000},
	// "1024MiB" {ok,1073741824}, "1GiB" {ok,1073741824}, "1kiB" {ok,1024}.
	// 4.x reads single letters as powers of 1000 (it adds Ki, Mi, Gi, T,
	// P, TB, PB ...: 3.10.8 answers {error,parse_error} to those).
	{"snippet vm_memory_watermark_absolute_units_m", "vm_memory_high_watermark.absolute = 1024M", func(o *options) { o.watermark = "1073741824" }},
	{"3.10.8 G", "vm_memory_high_watermark.absolute = 2G", func(o *options) { o.watermark = "2147483648" }},
	{"3.10.8 k", "vm_memory_high_watermark.absolute = 1k", func(o *options) { o.watermark = "1024" }},
	{"3.10.8 MB", "vm_memory_high_watermark.absolute = 1024MB", func(o *options) { o.watermark = "1024000000" }},
	{"3.10.8 kB", "vm_memory_high_watermark.absolute = 1kB", func(o *options) { o.watermark = "1000" }},
	{"3.10.8 kiB", "vm_memory_high_watermark.absolute = 1kiB", func(o *options) { o.watermark = "1024" }},
	{"3.10.8 GiB", "vm_memory_high_watermark.absolute = 1GiB", func(o *options) { o.watermark = "1073741824" }},
	// {cluster_formation: "cluster_formation.peer_discovery_backend = rabbit_peer_discovery_classic_config
	// cluster_formation.classic_config.nodes.peer1 = rabbit@hostname1 ...", {cluster_nodes,{[rabbit@hostname2,rabbit@hostname1],disc}}}
	{"snippet classic_config", "cluster_formation.peer_discovery_backend = rabbit_peer_discovery_classic_config\n" +
		"cluster_formation.classic_config.nodes.peer1 = rabbit@hostname1\ncluster_formation.classic_config.nodes.peer2 = rabbit@hostname2\n" +
		"cluster_formation.node_type = disc\nrailmq.node_name = rabbit@hostname1",
		func(o *options) {
			o.clusterPeers, o.clusterListen, o.nodeName = "rabbit@hostname1=hostname1:25672,rabbit@hostname2=hostname2:25672", ":25672", "rabbit@hostname1"
		}},
	// The official image's conf.d/10-defaults.conf.
	{"official image defaults", "## DEFAULT SETTINGS ARE NOT MEANT TO BE TAKEN STRAIGHT INTO PRODUCTION\n" +
		"## allow access to the guest user from anywhere on the network\nloopback_users.guest = false\n\n" +
		"## Send all logs to stdout/TTY. Necessary to see logs when running via\n## a container\nlog.console = true",
		func(o *options) { o.loopbackUsers = "" }},
	{"ignored keys", "collect_statistics_interval = 5000\nmanagement_agent.disable_metrics_collector = true\nno.such.key = 1", func(o *options) {}},
}

// Every key railmq reads, in a file, gives the option it maps to and
// nothing else.
func TestConfKeys(t *testing.T) {
	for _, k := range confKeys {
		found := false
		for _, tc := range confCases {
			for _, l := range strings.Split(tc.conf, "\n") {
				key, _, _ := strings.Cut(l, " =")
				if _, ok := matchKey(k.pattern, strings.Split(key, ".")); ok {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("key %s has no case", k.pattern)
		}
	}
	for _, tc := range confCases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConf(t, tc.conf+"\n")
			o, _, out, err := parseWith(t, nil, "--config", path)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := defaults()
			want.config = path
			tc.set(&want)
			if *o != want {
				t.Fatalf("%s:\n got %+v\nwant %+v", tc.conf, *o, want)
			}
		})
	}
}

// A value the key does not take is an error naming the file, the line,
// the key and the value.
func TestConfBadValues(t *testing.T) {
	for _, tc := range []struct{ conf, err string }{
		{"listeners.tcp.default = 70000", "not a port or IP:port"},
		{"listeners.tcp.default = localhost:5672", `"localhost" is not an IP address`},
		{"listeners.tcp.default = 127.0.0.1:x", "not a port (1..65535)"},
		{"listeners.tcp = all", "only none is a value of the key itself (.NAME = PORT or IP:PORT adds a listener)"},
		{"listeners.ssl.default = five", "not a port or IP:port"},
		{"ssl_options.verify = verify_maybe", "not one of verify_peer, verify_none"},
		{"ssl_options.fail_if_no_peer_cert = yes", "not true or false"},
		{"default_pass = encrypted:abc", "encrypted values are not supported; give the password itself"},
		{"loopback_users = guest", "only none is a value of loopback_users itself (loopback_users.NAME = true|false lists users)"},
		{"loopback_users.guest = no", "not true or false"},
		{"vm_memory_high_watermark.relative = lots", "not a decimal number such as 0.4"},
		{"vm_memory_high_watermark.relative = 1.5", "a relative watermark is at most 1.0"},
		{"vm_memory_high_watermark.relative = 1e-1", "not a decimal number such as 0.4"},
		{"vm_memory_high_watermark.absolute = 2 gigs", "not a size (supported formats: 500MB, 500MiB, 10GB, 10GiB, 2TB, 2TiB, 10000000000)"},
		{"vm_memory_high_watermark.absolute = 99999999999PB", "too large"},
		{"vm_memory_high_watermark_paging_ratio = half", "not a decimal number such as 0.4"},
		{"vm_memory_calculation_strategy = magic", "not one of rss, allocated, erlang, legacy (or railmq's held)"},
		{"disk_free_limit.absolute = 1 GB", "not a size (supported formats: 500MB, 500MiB, 10GB, 10GiB, 2TB, 2TiB, 10000000000)"},
		{"disk_free_limit.relative = -1", "not a decimal number such as 0.4"},
		{"consumer_timeout = 0", "not a number of milliseconds, 1 or more"},
		{"consumer_timeout = 30m", "not a number of milliseconds, 1 or more"},
		{"heartbeat = -1", "not an integer from 0 to 65535"},
		{"handshake_timeout = forever", "not an integer from 0 to 9007199254740992"},
		{"frame_max = 1TB", "not a size in bytes (or with KB, MB, GB) up to 4GB"},
		{"channel_max = 70000", "not an integer from 0 to 65535"},
		{"max_message_size = 600000000", "max message size should be between 1 and 512MB (536870912)"},
		{"management.tcp.port = 0", "not a port (1..65535)"},
		{"management.tcp.ip = localhost", `"localhost" is not an IP address`},
		{"management.ssl.port = x", "not a port (1..65535)"},
		{"management.http.max_body_size = -1", "not an integer from 0 to 9007199254740992"},
		{"prometheus.tcp.port = 99999", "not a port (1..65535)"},
		{"prometheus.tcp.ip = any", `"any" is not an IP address`},
		{"distribution.listener.port_range.min = 0", "not a port (1..65535)"},
		{"distribution.listener.interface = eth0", `"eth0" is not an IP address`},
		{"log.console.level = verbose", "not a level (debug, info, notice, warning, error, critical, alert, emergency, none)"},
		{"log.default.level = loud", "not a level (debug, info, notice, warning, error, critical, alert, emergency, none)"},
		{"log.console.formatter = xml", "not plaintext or json"},
		{"log.console = maybe", "not true or false"},
		{"log.console.stdio = file", "not one of stdout, stderr"},
		{"cluster_formation.classic_config.nodes.1 = rabbit", "not a node name such as rabbit@hostname"},
		{"deprecated_features.permit.global_qos = maybe", "not true or false"},
		{"railmq.queue_window = many", "parse error"},
	} {
		t.Run(tc.conf, func(t *testing.T) {
			path := writeConf(t, "# line 1\n\n"+tc.conf+"\n")
			key, value, _ := strings.Cut(tc.conf, " = ")
			want := path + ":3: " + key + " = " + value + ": " + tc.err
			_, _, out, err := parseWith(t, nil, "--config="+path)
			if err == nil || err.Error() != want {
				t.Fatalf("error %v\nwant %s", err, want)
			}
			if out != "railmq: "+want+"\n" {
				t.Fatalf("wrote %q", out)
			}
		})
	}
}

// A key railmq does not read is a warning naming it, its file and line:
// "not supported by railmq" when RabbitMQ has it, "unknown" when not. A
// value railmq cannot honour is a warning too.
func TestConfWarnings(t *testing.T) {
	path := writeConf(t, "collect_statistics_interval = 5000\nno.such.key = 1\ntcp_listen_options.backlog = 128\n"+
		"mqtt.listeners.tcp.default = 1883\nlog.console = false\nvm_memory_calculation_strategy = allocated\n"+
		"vm_memory_high_watermark.relative = 0.5\nvm_memory_high_watermark.absolute = 1GB\ncluster_name = prod\nrailmq.config = x\n")
	_, notes, _, err := parseWith(t, nil, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		s := n.level.String() + " " + n.msg
		for _, f := range n.fields {
			if f.Type == zapcore.StringType {
				s += " " + f.Key + "=" + f.String
			} else {
				s += " " + f.Key + "=" + strconv.Itoa(int(f.Integer))
			}
		}
		got = append(got, strings.ReplaceAll(s, path, "F"))
	}
	want := []string{
		"info config file read file=F keys=10 flags_set=1",
		"warn config key not supported by railmq, ignored key=collect_statistics_interval file=F line=1",
		"warn unknown config key, ignored key=no.such.key file=F line=2",
		"warn config key not supported by railmq, ignored key=tcp_listen_options.backlog file=F line=3",
		"warn config key not supported by railmq, ignored key=mqtt.listeners.tcp.default file=F line=4",
		"warn config value not supported by railmq, ignored key=log.console value=false file=F line=5 reason=railmq always logs to stderr",
		"warn config value not supported by railmq, ignored key=vm_memory_calculation_strategy value=allocated file=F line=6 reason=railmq measures held (bodies it holds for clients) or rss; held is used",
		"info config key accepted, not used by railmq yet key=cluster_name value=prod file=F line=9",
		"warn unknown config key, ignored key=railmq.config file=F line=10",
		"warn both vm_memory_high_watermark.absolute and vm_memory_high_watermark.relative are configured; vm_memory_high_watermark.absolute has precedence key=vm_memory_high_watermark.relative file=F line=7",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("notes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
