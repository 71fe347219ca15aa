package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// binary is a running railmq process.
type binary struct {
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{} // closed when it has exited; then err is its Wait's
	err  error
}

// startBinary runs the railmq binary with args and env as its only
// RAILMQ_ and RABBITMQ_ variables; it is killed at the test's end.
func startBinary(t *testing.T, env []string, args ...string) (*binary, *testutil.SyncBuffer) {
	t.Helper()
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAILMQ_") && !strings.HasPrefix(kv, "RABBITMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	logs := &testutil.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &binary{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { b.err = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.done
	})
	return b, logs
}

// stopBinary sends SIGTERM and waits for exit 0.
func stopBinary(t *testing.T, b *binary, logs *testutil.SyncBuffer) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("railmq still running 30s after SIGTERM\n%s", logs)
	}
	if b.err != nil {
		t.Fatalf("exit: %v\n%s", b.err, logs)
	}
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The binary started as the RabbitMQ image starts it (RABBITMQ_CONFIG_FILE,
// RABBITMQ_DEFAULT_PASS) serves AMQP, the management API and metrics
// where the file says, with the variable's password over the file's; every
// JSON log line names the node and has an ISO-8601 time; the banner names
// each listener and the console.
func TestBinaryConfigFile(t *testing.T) {
	amqpAddr, mgmtAddr, promAddr := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	conf := writeConf(t, "# as /etc/rabbitmq/rabbitmq.conf\n"+
		"listeners.tcp.default = 127.0.0.1:"+port(t, amqpAddr)+"\n"+
		"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = "+port(t, mgmtAddr)+"\n"+
		"prometheus.tcp.ip = 127.0.0.1\nprometheus.tcp.port = "+port(t, promAddr)+"\n"+
		"default_user = fileuser\ndefault_pass = filepass\nloopback_users.guest = false\n"+
		"log.console.formatter = json\ncollect_statistics_interval = 5000\n")
	dataDir := t.TempDir()
	cmd, logs := startBinary(t, []string{"RABBITMQ_CONFIG_FILE=" + conf, "RABBITMQ_DEFAULT_PASS=envpass", "RAILMQ_DATA_DIR=" + dataDir})
	testutil.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"server startup complete"`) },
		"the banner is logged:\n%s", logs)

	c, err := rmq.Dial("amqp://fileuser:envpass@" + amqpAddr + "/")
	if err != nil {
		t.Fatalf("dial with the variable's password: %v\n%s", err, logs)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("conf-test", false, true /* autoDelete */, false, false, nil)
	if err != nil || q.Name != "conf-test" {
		t.Fatalf("declare: %v", err)
	}
	c.Close()
	_, err = rmq.Dial("amqp://fileuser:filepass@" + amqpAddr + "/")
	var ae *rmq.Error
	if !errors.As(err, &ae) || ae.Code != rmq.AccessRefused {
		t.Fatalf("dial with the file's password: %v, want 403 ACCESS_REFUSED (RABBITMQ_DEFAULT_PASS wins)", err)
	}
	for _, u := range []string{"http://" + mgmtAddr + "/api/overview", "http://" + promAddr + "/metrics"} {
		req, _ := http.NewRequest("GET", u, nil)
		req.SetBasicAuth("fileuser", "envpass")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", u, resp.Status)
		}
	}
	stopBinary(t, cmd, logs)

	host, _ := os.Hostname()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		if m["node"] != "railmq@"+host {
			t.Errorf("node %v in %s", m["node"], l)
		}
		ts, _ := m["time"].(string)
		if _, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts); err != nil {
			t.Errorf("time %q is not ISO-8601: %v", ts, err)
		}
		if _, ok := m["ts"]; ok {
			t.Errorf("ts in %s", l)
		}
	}
	out := logs.String()
	b := logged(out, "server startup complete")
	want := map[string]any{"version": "0.1.0", "data_dir": dataDir, "amqp": []any{amqpAddr}, "amqps": []any{},
		"management": "http://" + mgmtAddr + "/", "prometheus": "http://" + promAddr + "/metrics", "console": "http://" + mgmtAddr + "/",
		"login": `as "fileuser" with its password (default_user, made with a fresh store), from any host`}
	for k, v := range want {
		if js, wjs := mustJSON(b[k]), mustJSON(v); js != wjs {
			t.Errorf("banner %s: %s, want %s", k, js, wjs)
		}
	}
	if w := logged(out, "config key not supported by railmq, ignored"); w == nil || w["key"] != "collect_statistics_interval" || w["line"] != float64(11) {
		t.Errorf("warning %v", w)
	}
	if r := logged(out, "config file read"); r == nil || r["file"] != conf {
		t.Errorf("config file read: %v", r)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// On the console the banner is a block: each listener and the console
// with how to log in (guest from localhost only, loopback_users' default).
func TestBinaryBannerConsole(t *testing.T) {
	amqpAddr, mgmtAddr := testutil.FreePort(t), testutil.FreePort(t)
	conf := writeConf(t, "listeners.tcp.default = "+port(t, amqpAddr)+"\nmanagement.tcp.port = "+port(t, mgmtAddr)+"\n")
	dataDir := t.TempDir()
	cmd, logs := startBinary(t, nil, "--config", conf, "--data-dir", dataDir)
	testutil.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "server startup complete") },
		"the banner is logged:\n%s", logs)
	c, err := rmq.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, logs)
	}
	c.Close()
	stopBinary(t, cmd, logs)
	host, _ := os.Hostname()
	mport := port(t, mgmtAddr)
	for _, want := range []string{
		"\tserver startup complete\n\n  railmq 0.1.0\n",
		"\n  node:           railmq@" + host + "\n",
		"\n  data dir:       " + dataDir + "\n",
		"\n  AMQP:           [::]:" + port(t, amqpAddr) + "\n",
		"\n  management:     http://[::]:" + mport + "/\n",
		"\n  console:        http://localhost:" + mport + "/\n",
		"\n  log in:         as \"guest\" with its password (default_user, made with a fresh store), from localhost only (loopback_users; --loopback-users= allows it from anywhere)\n",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

// listeners.tcp = none with a TLS listener (RabbitMQ's TLS-only node):
// no plain AMQP port, AMQPS on the file's port with ssl_options' files,
// and the banner lists the AMQPS listener only.
func TestBinaryTLSOnlyConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "railmq test CA")
	certFile, keyFile := ca.Server(t, "localhost").Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca")
	tlsAddr := testutil.FreePort(t)
	conf := writeConf(t, "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:"+port(t, tlsAddr)+"\n"+
		"ssl_options.certfile = "+certFile+"\nssl_options.keyfile = "+keyFile+"\nssl_options.cacertfile = "+caFile+"\n"+
		"ssl_options.verify = verify_none\nlog.console.formatter = json\n")
	b, logs := startBinary(t, []string{"RAILMQ_CONFIG=" + conf, "RAILMQ_DATA_DIR=" + t.TempDir()})
	testutil.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"server startup complete"`) },
		"the banner is logged:\n%s", logs)
	c, err := rmq.DialTLS("amqps://guest:guest@"+tlsAddr+"/", &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	if err != nil {
		t.Fatalf("dial TLS: %v\n%s", err, logs)
	}
	c.Close()
	stopBinary(t, b, logs)
	banner := logged(logs.String(), "server startup complete")
	if mustJSON(banner["amqp"]) != "[]" || mustJSON(banner["amqps"]) != mustJSON([]string{tlsAddr}) {
		t.Fatalf("banner %v", banner)
	}
}
