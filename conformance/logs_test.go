package conformance

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/testutil"
)

// observed starts an in-process broker whose log lines (debug and up)
// the test reads.
func observed(t *testing.T, opts broker.Options) (*testutil.Broker, *observer.ObservedLogs) {
	t.Helper()
	testutil.InProcess(t)
	core, logs := observer.New(zapcore.DebugLevel)
	opts.Logger = zap.New(core)
	return testutil.Start(t, opts), logs
}

// awaitLine waits for a line whose message matches re and returns it.
func awaitLine(t *testing.T, logs *observer.ObservedLogs, re string) observer.LoggedEntry {
	t.Helper()
	rx := regexp.MustCompile(re)
	var found observer.LoggedEntry
	testutil.Eventually(t, 60*time.Second, func() bool {
		for _, e := range logs.All() {
			if rx.MatchString(e.Message) {
				found = e
				return true
			}
		}
		return false
	}, "no log line matching %q in %d lines", re, logs.Len())
	return found
}

// fieldsOf is an entry's fields as strings (numbers in decimal).
func fieldsOf(e observer.LoggedEntry) map[string]any { return e.ContextMap() }

// A channel exception is logged as RabbitMQ 3.10.8 logs it, at its level
// (error). RabbitMQ 3.10.8 here, for a pika client redeclaring a
// transient queue as durable, wrote (rabbit@vm.log):
//
//	[error] <0.1024.0> Channel error on connection <0.1015.0> (127.0.0.1:58852 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:
//	[error] <0.1024.0> operation queue.declare caused a channel exception precondition_failed: inequivalent arg 'durable' for queue 'logs-helper-q' in vhost '/': received 'true' but current is 'false'
//
// The line also carries the facts as fields: connection, channel,
// method, reply code and text.
func TestLogsChannelError(t *testing.T) {
	b, logs := observed(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("logs-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("logs-q", true, false, false, false, nil)
	expectErr(t, err, 406, "")
	e := awaitLine(t, logs, `^Channel error on connection`)
	want := `^Channel error on connection <0\.\d+\.0> \(127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+, vhost: '/', user: 'guest'\), channel 1:\n` +
		`operation queue\.declare caused a channel exception precondition_failed: inequivalent arg 'durable' for queue 'logs-q' in vhost '/': received 'true' but current is 'false'$`
	if !regexp.MustCompile(want).MatchString(e.Message) {
		t.Errorf("message:\n%s\nwant it to match\n%s", e.Message, want)
	}
	if e.Level != zapcore.ErrorLevel {
		t.Errorf("level %v, want error (RabbitMQ's)", e.Level)
	}
	f := fieldsOf(e)
	if f["method"] != "queue.declare" || f["reply_code"] != uint16(406) || f["channel"] != uint16(1) ||
		f["user"] != "guest" || f["vhost"] != "/" || !strings.HasPrefix(f["reply_text"].(string), "PRECONDITION_FAILED - inequivalent arg 'durable'") ||
		!strings.Contains(f["connection"].(string), " -> ") {
		t.Errorf("fields %v", f)
	}
}

// A connection's lines, as RabbitMQ 3.10.8 wrote them for a pika client
// with connection_name "logs-probe-app" (rabbit@vm.log):
//
//	[info] accepting AMQP connection <0.1015.0> (127.0.0.1:58852 -> 127.0.0.1:5672)
//	[info] connection <0.1015.0> (127.0.0.1:58852 -> 127.0.0.1:5672) has a client-provided name: logs-probe-app
//	[info] connection <0.1015.0> (127.0.0.1:58852 -> 127.0.0.1:5672 - logs-probe-app): user 'guest' authenticated and granted access to vhost '/'
//	[info] closing AMQP connection <0.1015.0> (127.0.0.1:58852 -> 127.0.0.1:5672 - logs-probe-app, vhost: '/', user: 'guest')
//
// with the client's product and version and the listener as fields.
func TestLogsConnectionLines(t *testing.T) {
	b, logs := observed(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "billing", "product": "logs-test", "version": "1.2.3"}})
	if err != nil {
		t.Fatal(err)
	}
	local := c.LocalAddr().String()
	peer := regexp.QuoteMeta(local + " -> " + b.Addr)
	acc := awaitLine(t, logs, `^accepting AMQP connection <0\.\d+\.0> \(`+peer+`\)$`)
	if acc.Level != zapcore.InfoLevel || fieldsOf(acc)["listener"] != b.Addr {
		t.Errorf("accepting line: %v %v", acc.Level, fieldsOf(acc))
	}
	awaitLine(t, logs, `^connection <0\.\d+\.0> \(`+peer+`\) has a client-provided name: billing$`)
	g := awaitLine(t, logs, `^connection <0\.\d+\.0> \(`+peer+` - billing\): user 'guest' authenticated and granted access to vhost '/'$`)
	f := fieldsOf(g)
	if f["connection_name"] != "billing" || f["client_product"] != "logs-test" || f["client_version"] != "1.2.3" ||
		f["listener"] != b.Addr || f["user"] != "guest" || f["vhost"] != "/" {
		t.Errorf("granted line fields %v", f)
	}
	if _, tls := f["tls_protocol"]; tls {
		t.Errorf("tls fields on a plain connection: %v", f)
	}
	c.Close()
	cl := awaitLine(t, logs, `^closing AMQP connection <0\.\d+\.0> \(`+peer+` - billing, vhost: '/', user: 'guest'\)$`)
	if cl.Level != zapcore.InfoLevel {
		t.Errorf("closing line at %v", cl.Level)
	}
}

// A TCP probe (a load balancer's or a health check's: connect, send
// nothing, close) is logged at debug only, as rabbit_reader does
// (connection_closed_with_no_data_received: "We only log incoming
// connections when either the first byte was received or there was an
// error"); RabbitMQ 3.10.8 here logged nothing at info for one. A client
// that sent its header and then vanished is a warning, as RabbitMQ's
// "closing AMQP connection <0.1042.0> (127.0.0.1:58860 -> 127.0.0.1:5672):
// client unexpectedly closed TCP connection".
func TestLogsProbeAtDebug(t *testing.T) {
	b, logs := observed(t, broker.Options{})
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	probe := regexp.QuoteMeta(nc.LocalAddr().String() + " -> " + b.Addr)
	nc.Close()
	e := awaitLine(t, logs, `^closing AMQP connection <0\.\d+\.0> \(`+probe+`\):\nclient unexpectedly closed TCP connection$`)
	if e.Level != zapcore.DebugLevel {
		t.Errorf("probe's closing line at %v", e.Level)
	}
	for _, l := range logs.All() {
		if strings.Contains(l.Message, nc.LocalAddr().String()) && l.Level != zapcore.DebugLevel {
			t.Errorf("probe logged at %v: %q", l.Level, l.Message)
		}
	}

	// One that sent the header: accepted at info, closed at warning.
	nc, err = net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	half := regexp.QuoteMeta(nc.LocalAddr().String() + " -> " + b.Addr)
	if _, err := nc.Write([]byte("AMQP")); err != nil {
		t.Fatal(err)
	}
	if a := awaitLine(t, logs, `^accepting AMQP connection <0\.\d+\.0> \(`+half+`\)$`); a.Level != zapcore.InfoLevel {
		t.Errorf("accepting at %v", a.Level)
	}
	nc.Close()
	if w := awaitLine(t, logs, `^closing AMQP connection <0\.\d+\.0> \(`+half+`\):\n`); w.Level != zapcore.WarnLevel {
		t.Errorf("a half-open handshake's close at %v", w.Level)
	}

	// An open connection whose socket is cut: warning, with user and vhost.
	c, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	cut := regexp.QuoteMeta(c.LocalAddr().String() + " -> " + b.Addr)
	awaitLine(t, logs, `^connection <0\.\d+\.0> \(`+cut+`\): user 'guest' authenticated`)
	c.Close() // the client's close: info, not this
	awaitLine(t, logs, `^closing AMQP connection <0\.\d+\.0> \(`+cut+`, vhost: '/', user: 'guest'\)$`)

	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, false)
	raw := regexp.QuoteMeta(r.NC.LocalAddr().String() + " -> " + b.Addr)
	r.NC.Close()
	w := awaitLine(t, logs, `^closing AMQP connection <0\.\d+\.0> \(`+raw+`, vhost: '/', user: 'guest'\):\nclient unexpectedly closed TCP connection$`)
	if w.Level != zapcore.WarnLevel {
		t.Errorf("abrupt close at %v", w.Level)
	}
}

// A TLS connection's lines name its listener, protocol and cipher.
func TestLogsTLSConnection(t *testing.T) {
	p := newPKI(t)
	core, logs := observer.New(zapcore.DebugLevel)
	opts := p.opts("", false)
	opts.Logger = zap.New(core)
	_, addr := startTLS(t, opts)
	cfg := p.client()
	cfg.MaxVersion = tls.VersionTLS12
	c, err := rmq.DialTLS(amqps("guest:guest", addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := awaitLine(t, logs, `^connection <0\.\d+\.0> \(`+regexp.QuoteMeta(c.LocalAddr().String()+" -> "+addr)+`\): user 'guest' authenticated`)
	f := fieldsOf(g)
	if f["listener"] != addr || f["tls_protocol"] != "TLS 1.2" || f["tls_cipher"] != tls.CipherSuiteName(c.ConnectionState().CipherSuite) {
		t.Errorf("fields %v", f)
	}
}

// Every management change is logged once, after its handler answered:
// who, from where, what and the status; reads are not. A failed HTTP
// login is a warning worded as RabbitMQ 3.10.8's (curl -u guest:wrong
// http://localhost:15672/api/overview logged "[warning] <0.1355.0> HTTP
// access denied: user 'guest' - invalid credentials").
func TestLogsAudit(t *testing.T) {
	b, logs := observed(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, user, pass, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.SetBasicAuth(user, pass)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	named, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "doomed"}})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	connName := named.LocalAddr().String() + " -> " + b.Addr
	steps := []struct {
		method, path, body string
		status             int
		object, action     string
	}{
		{"PUT", "/api/users/alice", `{"password":"pw","tags":"management"}`, 201, "users", "set"},
		{"PUT", "/api/vhosts/audit-vh", ``, 201, "vhosts", "set"},
		{"PUT", "/api/permissions/audit-vh/alice", `{"configure":".*","write":".*","read":".*"}`, 201, "permissions", "set"},
		{"PUT", "/api/policies/%2F/audit-p", `{"pattern":"^audit","definition":{"max-length":10}}`, 201, "policies", "set"},
		{"PUT", "/api/queues/%2F/audit-q", `{"durable":true}`, 201, "queues", "set"},
		{"DELETE", "/api/queues/%2F/audit-q/contents", ``, 204, "queues", "purge"},
		{"DELETE", "/api/queues/%2F/audit-q", ``, 204, "queues", "delete"},
		{"PUT", "/api/parameters/shovel/%2F/audit-s", `{"value":{"src-uri":"amqp://","src-queue":"audit-a","dest-uri":"amqp://","dest-queue":"audit-b"}}`, 201, "shovels", "set"},
		{"DELETE", "/api/parameters/shovel/%2F/audit-s", ``, 204, "shovels", "delete"},
		{"POST", "/api/definitions", `{"queues":[{"name":"audit-imported","vhost":"/","durable":true,"auto_delete":false,"arguments":{}}]}`, 204, "definitions", "import"},
		{"DELETE", "/api/connections/" + url.PathEscape(connName), ``, 204, "connections", "close"},
		{"DELETE", "/api/users/nobody", ``, 404, "users", "delete"},
		{"DELETE", "/api/vhosts/audit-vh", ``, 204, "vhosts", "delete"},
	}
	for _, s := range steps {
		before := logs.FilterMessage("management change").Len()
		if got := call(s.method, s.path, "guest", "guest", s.body); got != s.status {
			t.Fatalf("%s %s: %d, want %d", s.method, s.path, got, s.status)
		}
		lines := logs.FilterMessage("management change").All()
		if len(lines) != before+1 {
			t.Fatalf("%s %s: %d audit lines, want one", s.method, s.path, len(lines)-before)
		}
		f := lines[before].ContextMap()
		path, _ := url.PathUnescape(s.path)
		if f["user"] != "guest" || !strings.HasPrefix(f["remote"].(string), "127.0.0.1:") || f["method"] != s.method ||
			f["path"] != path || f["object"] != s.object || f["action"] != s.action || f["status"] != int64(s.status) {
			t.Errorf("%s %s: audit fields %v", s.method, s.path, f)
		}
		if lines[before].Level != zapcore.InfoLevel {
			t.Errorf("audit at %v", lines[before].Level)
		}
	}
	// Reads are not audited.
	before := logs.FilterMessage("management change").Len()
	call("GET", "/api/queues", "guest", "guest", "")
	call("GET", "/api/overview", "guest", "guest", "")
	if n := logs.FilterMessage("management change").Len(); n != before {
		t.Errorf("reads logged %d audit lines", n-before)
	}

	// A failed login: a warning naming the user and where from.
	if got := call("GET", "/api/overview", "guest", "wrong", ""); got != 401 {
		t.Fatalf("wrong password: %d", got)
	}
	w := awaitLine(t, logs, `^HTTP access denied: user 'guest' - invalid credentials$`)
	if f := w.ContextMap(); w.Level != zapcore.WarnLevel || f["user"] != "guest" || !strings.HasPrefix(f["remote"].(string), "127.0.0.1:") {
		t.Errorf("failed login line: %v %v", w.Level, f)
	}
	// One without the management tag: RabbitMQ's "Not management user".
	if got := call("PUT", "/api/users/plain", "guest", "guest", `{"password":"pw","tags":""}`); got != 201 {
		t.Fatalf("PUT user: %d", got)
	}
	if got := call("PUT", "/api/vhosts/nope", "plain", "pw", ""); got != 401 {
		t.Fatalf("non-management user: %d", got)
	}
	awaitLine(t, logs, `^HTTP access denied: user 'plain' - Not management user$`)
}

// A cluster's lines name its nodes and queues, as RabbitMQ's ("queue
// 'probe-neg' in vhost '/': candidate -> leader in term: 8", "node
// rabbit@b down"), and raft's own lines are entries of their own with
// typed fields and the group they are about, not one wrapped string.
func TestLogsCluster(t *testing.T) {
	testutil.InProcess(t)
	core, logs := observer.New(zapcore.DebugLevel)
	peers := map[string]string{}
	names := []string{"rabbit1@localhost", "rabbit2@localhost", "rabbit3@localhost"}
	for _, n := range names {
		peers[n] = testutil.FreePort(t)
	}
	dirs := map[string]string{}
	start := func(name string) (*testutil.Broker, func()) {
		if dirs[name] == "" {
			dirs[name] = t.TempDir()
		}
		return testutil.StartStoppable(t, broker.Options{DataDir: dirs[name], Logger: zap.New(core).With(zap.String("test_node", name)),
			Cluster: &cluster.NodeConfig{Name: name, Listen: peers[name], Peers: peers, Secret: []byte("test-cookie"),
				HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond}})
	}
	b1, _ := start(names[0])
	start(names[1])
	_, stop3 := start(names[2])
	awaitLine(t, logs, `^cluster: metadata leader is rabbit\d@localhost$`)

	c := dial(t, b1.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("logs-qq", true, false, false, false, rmq.Table{"x-queue-type": "quorum"})
	must(t, err)
	l := awaitLine(t, logs, `^quorum queue 'logs-qq' in vhost '/': leader moved to rabbit\d@localhost \(term \d+\)$`)
	if f := l.ContextMap(); f["queue"] != "'logs-qq' in vhost '/'" || f["raft_group"] == "" || f["leader"] == "" {
		t.Errorf("leader line fields %v", f)
	}

	stop3()
	down := awaitLine(t, logs, `^node rabbit3@localhost down$`)
	if down.Level != zapcore.WarnLevel || down.ContextMap()["peer"] != names[2] {
		t.Errorf("down line %v %v", down.Level, down.ContextMap())
	}
	// raft's own lines about it: entries with their fields, in a group.
	testutil.Eventually(t, 60*time.Second, func() bool {
		for _, e := range logs.All() {
			f := e.ContextMap()
			if e.LoggerName == "raft" && f["raft_group"] != nil && f["peer"] != nil && f["error"] != nil && e.Level >= zapcore.WarnLevel {
				return !strings.Contains(e.Message, "[WARN]") && !strings.Contains(e.Message, "[ERROR]")
			}
		}
		return false
	}, "no raft line with its own fields")

	start(names[2])
	awaitLine(t, logs, `^node rabbit3@localhost up$`)
}
