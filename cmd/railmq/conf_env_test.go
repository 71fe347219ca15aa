package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A flag wins over a variable (RAILMQ_ first, then RabbitMQ's), which
// wins over the config file, which wins over the default.
func TestConfPrecedence(t *testing.T) {
	path := writeConf(t, "default_user = file\nheartbeat = 30\nlisteners.tcp.default = 1111\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		set  func(o *options)
	}{
		{"default", nil, nil, func(o *options) {}},
		{"file", map[string]string{"RAILMQ_CONFIG": path}, nil, func(o *options) {
			o.defaultUser, o.heartbeat, o.listen = "file", 30*time.Second, ":1111"
		}},
		{"rabbitmq variable over file", map[string]string{"RAILMQ_CONFIG": path, "RABBITMQ_DEFAULT_USER": "rabbit", "RABBITMQ_NODE_PORT": "2222"}, nil,
			func(o *options) { o.defaultUser, o.heartbeat, o.listen = "rabbit", 30*time.Second, ":2222" }},
		{"railmq variable over rabbitmq variable", map[string]string{"RAILMQ_CONFIG": path, "RABBITMQ_DEFAULT_USER": "rabbit", "RAILMQ_DEFAULT_USER": "railmq",
			"RAILMQ_HEARTBEAT": "5s", "RABBITMQ_NODE_PORT": "2222", "RAILMQ_LISTEN": ":3333"}, nil,
			func(o *options) { o.defaultUser, o.heartbeat, o.listen = "railmq", 5*time.Second, ":3333" }},
		{"flag over everything", map[string]string{"RAILMQ_CONFIG": path, "RABBITMQ_DEFAULT_USER": "rabbit", "RAILMQ_DEFAULT_USER": "railmq", "RAILMQ_HEARTBEAT": "5s"},
			[]string{"--default-user=flag", "--heartbeat=7s", "--listen=:4444"},
			func(o *options) { o.defaultUser, o.heartbeat, o.listen = "flag", 7*time.Second, ":4444" }},
		{"an empty RAILMQ_ variable wins too", map[string]string{"RAILMQ_CONFIG": path, "RAILMQ_DEFAULT_USER": ""}, nil,
			func(o *options) { o.defaultUser, o.heartbeat, o.listen = "", 30*time.Second, ":1111" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, out, err := parseWith(t, tc.env, tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := defaults()
			if _, ok := tc.env["RAILMQ_CONFIG"]; ok {
				want.config = path
			}
			tc.set(&want)
			if *o != want {
				t.Fatalf("\n got %+v\nwant %+v", *o, want)
			}
		})
	}
}

// Which file is read: --config, else RAILMQ_CONFIG, else
// RABBITMQ_CONFIG_FILE (PATH.conf when it has no extension). A missing
// --config or RAILMQ_CONFIG file is an error; a missing
// RABBITMQ_CONFIG_FILE one is skipped with an info line, as RabbitMQ
// skips a missing default config.
func TestConfFileChoice(t *testing.T) {
	a := writeConf(t, "default_user = a\n")
	b := writeConf(t, "default_user = b\n")
	c := writeConf(t, "default_user = c\n")
	missing := filepath.Join(t.TempDir(), "missing.conf")
	confD := t.TempDir()
	for name, text := range map[string]string{"10-defaults.conf": "default_user = d1\n", "20-more.conf": "default_user = d2\n", "README": "# read too: a directory's every file\n"} {
		if err := os.WriteFile(filepath.Join(confD, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(confD, "sub.conf"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		user string // the default user read
		note string // the first note, level and message
		err  string
	}{
		{name: "flag", env: map[string]string{"RAILMQ_CONFIG": b, "RABBITMQ_CONFIG_FILE": c}, args: []string{"--config", a}, user: "a", note: "info config file read"},
		{name: "railmq variable", env: map[string]string{"RAILMQ_CONFIG": b, "RABBITMQ_CONFIG_FILE": c}, user: "b", note: "info config file read"},
		{name: "rabbitmq variable", env: map[string]string{"RABBITMQ_CONFIG_FILE": c}, user: "c", note: "info config file read"},
		{name: "rabbitmq variable without extension", env: map[string]string{"RABBITMQ_CONFIG_FILE": strings.TrimSuffix(c, ".conf")}, user: "c",
			note: "info config file read"},
		{name: "rabbitmq variable missing", env: map[string]string{"RABBITMQ_CONFIG_FILE": missing}, user: "guest", note: "info config file not found, ignored"},
		{name: "rabbitmq variable erlang terms", env: map[string]string{"RABBITMQ_CONFIG_FILE": "/etc/rabbitmq/advanced.config"}, user: "guest",
			note: "warn config file in Erlang terms (advanced.config format) not supported by railmq, ignored"},
		// RABBITMQ_CONFIG_FILES: read after the main file (later files win),
		// a directory's files or a glob's in name order (rabbit_prelaunch_conf).
		{name: "config files directory", env: map[string]string{"RABBITMQ_CONFIG_FILE": c, "RABBITMQ_CONFIG_FILES": confD}, user: "d2",
			note: "info config file read"},
		{name: "config files glob", env: map[string]string{"RABBITMQ_CONFIG_FILES": filepath.Join(confD, "*.conf")}, args: []string{"--config", a}, user: "d2",
			note: "info config file read"},
		{name: "config files glob only", env: map[string]string{"RABBITMQ_CONFIG_FILES": filepath.Join(confD, "1*.conf")}, user: "d1", note: "info config file read"},
		{name: "config files without main", env: map[string]string{"RABBITMQ_CONFIG_FILE": missing, "RABBITMQ_CONFIG_FILES": filepath.Join(confD, "*.conf")},
			user: "d2", note: "info config file not found, ignored"},
		{name: "flag missing", env: map[string]string{"RABBITMQ_CONFIG_FILE": c}, args: []string{"--config", missing},
			err: "config file: open " + missing + ": no such file or directory"},
		{name: "railmq variable missing", env: map[string]string{"RAILMQ_CONFIG": missing}, err: "config file: open " + missing + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, notes, out, err := parseWith(t, tc.env, tc.args...)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || out != "railmq: "+tc.err+"\n" {
					t.Fatalf("error %v, wrote %q; want %s", err, out, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.defaultUser != tc.user {
				t.Errorf("default user %q, want %q", o.defaultUser, tc.user)
			}
			if len(notes) == 0 || notes[0].level.String()+" "+notes[0].msg != tc.note {
				t.Errorf("notes %+v, want first %q", notes, tc.note)
			}
		})
	}
}

// The RabbitMQ image's variables set the options they name when the
// RAILMQ_ variable of the same option is not set.
func TestRabbitEnv(t *testing.T) {
	host := shortHostname()
	nodes := writeConf(t, "cluster_formation.classic_config.nodes.1 = rabbit@a\ncluster_formation.classic_config.nodes.2 = rabbit@b\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		set  func(o *options)
		err  string
	}{
		{name: "default user", env: map[string]string{"RABBITMQ_DEFAULT_USER": "admin", "RABBITMQ_DEFAULT_PASS": "pw", "RABBITMQ_DEFAULT_VHOST": "prod"},
			set: func(o *options) { o.defaultUser, o.defaultPass, o.defaultVHost = "admin", "pw", "prod" }},
		{name: "nodename", env: map[string]string{"RABBITMQ_NODENAME": "rabbit@node1"}, set: func(o *options) { o.nodeName = "rabbit@node1" }},
		{name: "nodename without host", env: map[string]string{"RABBITMQ_NODENAME": "rabbit"}, set: func(o *options) { o.nodeName = "rabbit@" + host }},
		{name: "nodename bad", env: map[string]string{"RABBITMQ_NODENAME": "a,b"}, err: `RABBITMQ_NODENAME="a,b": not a node name such as rabbit@hostname`},
		{name: "node port", env: map[string]string{"RABBITMQ_NODE_PORT": "5673"}, set: func(o *options) { o.listen = ":5673" }},
		{name: "node ip and port", env: map[string]string{"RABBITMQ_NODE_PORT": "5673", "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1"},
			set: func(o *options) { o.listen = "127.0.0.1:5673" }},
		{name: "node ip", env: map[string]string{"RABBITMQ_NODE_IP_ADDRESS": "::1"}, set: func(o *options) { o.listen = "[::1]:5672" }},
		{name: "node port bad", env: map[string]string{"RABBITMQ_NODE_PORT": "x"}, err: `RABBITMQ_NODE_PORT="x": not a port (1..65535)`},
		{name: "watermark", env: map[string]string{"RABBITMQ_VM_MEMORY_HIGH_WATERMARK": "0.6"}, set: func(o *options) { o.watermark = "0.6" }},
		{name: "railmq variable wins", env: map[string]string{"RABBITMQ_DEFAULT_USER": "admin", "RAILMQ_DEFAULT_USER": "railmq", "RABBITMQ_NODE_PORT": "1",
			"RAILMQ_LISTEN": ":2"}, set: func(o *options) { o.defaultUser, o.listen = "railmq", ":2" }},
		{name: "dist port", env: map[string]string{"RABBITMQ_DIST_PORT": "25999", "RABBITMQ_NODENAME": "rabbit@a", "RAILMQ_CONFIG": nodes},
			set: func(o *options) {
				o.config, o.nodeName, o.clusterListen, o.clusterPeers = nodes, "rabbit@a", ":25999", "rabbit@a=a:25999,rabbit@b=b:25999"
			}},
		{name: "empty is unset", env: map[string]string{"RABBITMQ_DEFAULT_USER": ""}, set: func(o *options) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, out, err := parseWith(t, tc.env)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || out != "railmq: "+tc.err+"\n" {
					t.Fatalf("error %v, wrote %q; want %s", err, out, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := defaults()
			tc.set(&want)
			if *o != want {
				t.Fatalf("\n got %+v\nwant %+v", *o, want)
			}
		})
	}
}

// --help lists every flag once, under its topic, in flag.PrintDefaults's
// form.
func TestUsageGroups(t *testing.T) {
	fs := flag.NewFlagSet("railmq", flag.ContinueOnError)
	defineFlags(fs)
	seen := map[string]string{}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if fs.Lookup(name) == nil {
				t.Errorf("%s lists --%s, no such flag", g.title, name)
			}
			if prev, ok := seen[name]; ok {
				t.Errorf("--%s in %s and %s", name, prev, g.title)
			}
			seen[name] = g.title
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if seen[f.Name] == "" {
			t.Errorf("--%s is in no group", f.Name)
		}
	})
	_, out, _ := parse(t, nil, "--help")
	last := -1
	for _, g := range flagGroups {
		i := strings.Index(out, "\n"+g.title+":\n")
		if i < last {
			t.Errorf("%s missing or out of order:\n%s", g.title, out)
		}
		last = i
	}
	// Each flag as flag.PrintDefaults prints it, alone.
	for _, name := range []string{"listen", "coalesce-acks", "channel-max", "tls-fail-if-no-peer-cert", "heartbeat"} {
		one := flag.NewFlagSet("x", flag.ContinueOnError)
		f := fs.Lookup(name)
		one.Var(f.Value, f.Name, f.Usage)
		var want bytes.Buffer
		one.SetOutput(&want)
		one.PrintDefaults()
		var got bytes.Buffer
		printFlag(&got, f)
		if got.String() != want.String() {
			t.Errorf("--%s:\n%q\nwant\n%q", name, got.String(), want.String())
		}
	}
}

// railmq --version prints the version on stdout and exits 0, starting
// nothing; it reads no config file.
func TestVersion(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdout := os.Stdout
	os.Stdout = f
	code, errOut := runCaptured(t, map[string]string{"RAILMQ_CONFIG": "/nonexistent.conf", "RAILMQ_VERSION": "9"}, "--version")
	os.Stdout = stdout
	out, _ := os.ReadFile(f.Name())
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(string(out), "railmq 0.1.0 (go1.") || !strings.HasSuffix(string(out), ")\n") || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("printed %q", out)
	}
}

// A config file run refuses ends with exit 2 and says why; its warnings
// are logged once the logger exists, at the file's log level and format.
func TestRunConfig(t *testing.T) {
	bad := writeConf(t, "log.console.formatter = json\nheartbeat = soon\n")
	code, out := runCaptured(t, nil, "--config", bad)
	if want := "railmq: " + bad + ":2: heartbeat = soon: not an integer from 0 to 65535\n"; code != 2 || out != want {
		t.Fatalf("exit %d, stderr %q; want 2, %q", code, out, want)
	}
	missing := filepath.Join(t.TempDir(), "missing.conf")
	code, out = runCaptured(t, map[string]string{"RAILMQ_CONFIG": missing})
	if want := "railmq: config file: open " + missing + ": no such file or directory\n"; code != 2 || out != want {
		t.Fatalf("exit %d, stderr %q; want 2, %q", code, out, want)
	}
	warn := writeConf(t, "log.console.formatter = json\nlog.console.level = warning\ncollect_statistics_interval = 5000\nchannel_max = 0\n")
	code, out = runCaptured(t, nil, "--config", warn, "--channel-max=0")
	if code != 2 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	m := logged(out, "config key not supported by railmq, ignored")
	if m == nil || m["key"] != "collect_statistics_interval" || m["line"] != float64(3) || m["file"] != warn || m["level"] != "warn" {
		t.Fatalf("warning %v\n%s", m, out)
	}
	if logged(out, "config file read") != nil {
		t.Fatalf("info line logged at log.console.level = warning:\n%s", out)
	}
	if logged(out, "channel-max must be 1..65535") == nil {
		t.Fatalf("the flag's channel-max=0 is not refused:\n%s", out)
	}
}

// A commit given with -ldflags "-X main.commit=..." is printed, cut to
// 12 characters.
func TestVersionCommit(t *testing.T) {
	old := commit
	defer func() { commit = old }()
	commit = "0123456789abcdef0123"
	var b bytes.Buffer
	printVersion(&b)
	if want := "railmq 0.1.0 (" + runtime.Version() + ", commit 0123456789ab)\n"; b.String() != want {
		t.Fatalf("printed %q, want %q", b.String(), want)
	}
}

// --node-name (RABBITMQ_NODENAME, as in a container) names a standalone
// node too, as RabbitMQ's node is named so: the broker's options carry
// it and the logs' node field shows it.
func TestStandaloneNodeName(t *testing.T) {
	o, notes, _, err := parseWith(t, map[string]string{"RABBITMQ_NODENAME": "rabbit@box"})
	if err != nil || len(notes) != 0 {
		t.Fatalf("%v, notes %+v", err, notes)
	}
	bo, err := o.brokerOptions(1<<30, zap.NewNop())
	if err != nil || bo.NodeName != "rabbit@box" || o.node() != "rabbit@box" {
		t.Fatalf("%v: broker's node name %q, logs' %q", err, bo.NodeName, o.node())
	}
}

// The config files read are the node's ConfigFiles (/api/nodes
// config_files, rabbitmq-diagnostics status): the main file, then
// RABBITMQ_CONFIG_FILES' in name order; none without a file.
func TestConfigFilesRead(t *testing.T) {
	a := writeConf(t, "default_user = a\n")
	confD := t.TempDir()
	for _, name := range []string{"20-more.conf", "10-defaults.conf"} {
		if err := os.WriteFile(filepath.Join(confD, name), []byte("heartbeat = 30\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{args: []string{"--config", a}, want: []string{a}},
		{env: map[string]string{"RAILMQ_CONFIG": a}, want: []string{a}},
		{env: map[string]string{"RABBITMQ_CONFIG_FILES": confD}, args: []string{"--config", a},
			want: []string{a, filepath.Join(confD, "10-defaults.conf"), filepath.Join(confD, "20-more.conf")}},
		{env: map[string]string{"RABBITMQ_CONFIG_FILE": filepath.Join(confD, "missing.conf")}, want: nil},
		{want: nil},
	} {
		o, _, _, err := parseWith(t, tc.env, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if got := configFilesRead(o, os.Getenv); !slices.Equal(got, tc.want) {
			t.Errorf("%v %v: %v, want %v", tc.env, tc.args, got, tc.want)
		}
	}
}
