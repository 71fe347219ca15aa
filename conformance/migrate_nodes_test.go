package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/testutil"
)

// The two brokers of the migration test (migrate_test.go): a private
// RabbitMQ 3.10.8 node and the railmq binary, each a real process that
// the test kills with SIGKILL and starts again on the same data.

// rabbitServerPath is Debian's rabbitmq-server start script (the one
// that runs the node as the calling user; /usr/sbin/rabbitmq-server
// switches to the rabbitmq user). Where it is missing the migration test
// fails when asked for (RAILMQ_MIGRATION=1, make compat-migrate) or in
// CI (RAILMQ_REQUIRE_TOOLS), and is skipped otherwise, saying why.
const rabbitServerPath = "/usr/lib/rabbitmq/bin/rabbitmq-server"

func requireRabbitMQ(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(rabbitServerPath); err == nil {
		return
	}
	msg := rabbitServerPath + " is not installed (apt-get install rabbitmq-server): the migration test needs a private RabbitMQ 3.10.8 node"
	if os.Getenv("RAILMQ_MIGRATION") != "" || os.Getenv("RAILMQ_REQUIRE_TOOLS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// rabbitNode is a RabbitMQ node of the test's own: its node name,
// ports, epmd, Erlang cookie (HOME), config, enabled plugins, mnesia and
// log dirs, all under one temporary dir. The shared RabbitMQ of the
// machine (5672, 15672) is never touched.
type rabbitNode struct {
	t                      *testing.T
	dir, name              string
	amqp, mgmt, dist, epmd int
	cmd                    *exec.Cmd     // the start script; the node (beam.smp) is its child
	waitExit               chan struct{} // closed when cmd has ended
	out                    *os.File      // the script's output, every life's
	user, pass             string        // the management API's
	started, killed9       int
}

func portOf(t *testing.T, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	must(t, err)
	n, err := strconv.Atoi(p)
	must(t, err)
	return n
}

func newRabbitNode(t *testing.T) *rabbitNode {
	t.Helper()
	requireRabbitMQ(t)
	dir, err := os.MkdirTemp("", "railmq-migrate-rabbit")
	must(t, err)
	r := &rabbitNode{t: t, dir: dir, name: fmt.Sprintf("mig-%d@localhost", os.Getpid()),
		amqp: portOf(t, testutil.FreePort(t)), mgmt: portOf(t, testutil.FreePort(t)),
		dist: portOf(t, testutil.FreePort(t)), epmd: portOf(t, testutil.FreePort(t)),
		user: "guest", pass: "guest"}
	for _, d := range []string{"mnesia", "log"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nmanagement.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %d\nloopback_users = none\n", r.amqp, r.mgmt)
	must(t, os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[rabbitmq_management,rabbitmq_federation,rabbitmq_shovel].\n"), 0o644))
	r.out, err = os.Create(filepath.Join(dir, "server.out"))
	must(t, err)
	t.Cleanup(r.cleanup)
	return r
}

// env is the node's environment: the caller's, less anything of
// RabbitMQ's or Erlang's, plus the node's own settings.
func (r *rabbitNode) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RABBITMQ_") || strings.HasPrefix(kv, "ERL_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+r.dir, // the Erlang cookie is made there
		"ERL_EPMD_PORT="+strconv.Itoa(r.epmd),
		"RABBITMQ_NODENAME="+r.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(r.amqp),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(r.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(r.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(r.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(r.dir, "pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(r.dir, "rabbitmq"),
		// Nothing of the machine's own node (/etc/rabbitmq): its env file
		// and advanced.config.
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(r.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(r.dir, "advanced.config"))
}

// start runs the node and waits until it serves AMQP and its management
// API (a cold start takes 10-30 s on a busy machine).
func (r *rabbitNode) start() {
	t := r.t
	t.Helper()
	_ = os.Remove(filepath.Join(r.dir, "pid"))
	fmt.Fprintf(r.out, "--- start at %s\n", time.Now().Format(time.RFC3339Nano))
	r.cmd = exec.Command(rabbitServerPath)
	r.cmd.Dir = r.dir
	r.cmd.Env = r.env()
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, r.cmd.Start())
	exited := make(chan struct{})
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(r.cmd)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-exited:
			t.Fatalf("RabbitMQ node %s exited while starting:\n%s", r.name, r.tail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("RabbitMQ node %s did not serve within 3 min:\n%s", r.name, r.tail())
		}
		if r.pid() > 0 && dialable(fmt.Sprintf("127.0.0.1:%d", r.amqp)) {
			if code, _ := r.api("GET", "/api/overview", nil); code == 200 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.waitExit = exited
	r.started++
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// pid is the node's OS pid (beam.smp), from RABBITMQ_PID_FILE; 0 if
// there is none yet.
func (r *rabbitNode) pid() int {
	b, err := os.ReadFile(filepath.Join(r.dir, "pid"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// kill9 sends SIGKILL to the node's beam.smp and waits for the start
// script to end; the node's files stay as the kill left them.
func (r *rabbitNode) kill9() {
	t := r.t
	t.Helper()
	pid := r.pid()
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if pid <= 0 || strings.TrimSpace(string(comm)) != "beam.smp" {
		t.Fatalf("RabbitMQ node %s: pid file has %d, which is %q, not beam.smp", r.name, pid, comm)
	}
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	r.wait(30 * time.Second)
	r.killed9++
}

// wait waits for the start script to end, then kills what is left of the
// node's process group (the processes this node started: erl_child_setup,
// inet_gethost).
func (r *rabbitNode) wait(within time.Duration) {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.waitExit:
	case <-time.After(within):
		r.t.Errorf("RabbitMQ node %s: the start script did not end within %v", r.name, within)
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	r.cmd = nil
}

// cleanup stops the node (SIGTERM to beam.smp: RabbitMQ shuts down
// cleanly), its epmd, and removes its dir unless the test failed
// (RAILMQ_MIGRATION_KEEP keeps it always).
func (r *rabbitNode) cleanup() {
	if r.cmd != nil {
		if pid := r.pid(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		r.wait(60 * time.Second)
	}
	if out, err := exec.Command("epmd", "-port", strconv.Itoa(r.epmd), "-kill").CombinedOutput(); err != nil {
		r.t.Logf("epmd -port %d -kill: %v %s", r.epmd, err, out)
	}
	r.out.Close()
	if r.t.Failed() || os.Getenv("RAILMQ_MIGRATION_KEEP") != "" {
		r.t.Logf("RabbitMQ node's files kept in %s", r.dir)
		return
	}
	_ = os.RemoveAll(r.dir)
}

// tail is the end of the start script's output and of the node's log.
func (r *rabbitNode) tail() string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(r.dir, "server.out"), filepath.Join(r.dir, "log", r.name+".log")} {
		data, _ := os.ReadFile(f)
		lines := strings.Split(string(data), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", f, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return b.String()
}

func (r *rabbitNode) url(user, pass, vhost string) string {
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/%s", user, pass, r.amqp, urlVhost(vhost))
}

func (r *rabbitNode) api(method, path string, body any) (int, []byte) {
	return httpAPI(fmt.Sprintf("http://127.0.0.1:%d", r.mgmt), r.user, r.pass, method, path, body)
}

// urlVhost is a vhost as the path of an AMQP URI or of an API route.
func urlVhost(v string) string {
	if v == "/" {
		return "%2F"
	}
	return v
}

// httpAPI calls a management API (RabbitMQ's or railmq's): the status
// and the body; 0 when it did not answer.
func httpAPI(base, user, pass, method, path string, body any) (int, []byte) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return 0, []byte(err.Error())
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// railmqNode is the railmq binary on fixed ports and one data dir, so
// that clients reconnect to it after a kill -9 and a restart.
type railmqNode struct {
	t                *testing.T
	bin, dir         string
	amqp, mgmt       string
	cmd              *exec.Cmd
	logs             *testutil.SyncBuffer // every life's
	user, pass       string
	started, killed9 int
}

func newRailmqNode(t *testing.T) *railmqNode {
	t.Helper()
	n := &railmqNode{t: t, bin: testutil.Binary(t), dir: t.TempDir(), amqp: testutil.FreePort(t), mgmt: testutil.FreePort(t),
		logs: &testutil.SyncBuffer{}, user: "guest", pass: "guest"}
	t.Cleanup(func() {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			if err := waitExit(t, n.cmd, 30*time.Second); err != nil {
				t.Logf("railmq exited: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("railmq's log, every life:\n%s", n.logs.String())
		}
	})
	return n
}

func (n *railmqNode) start() {
	t := n.t
	t.Helper()
	fmt.Fprintf(n.logs, "--- start at %s\n", time.Now().Format(time.RFC3339Nano))
	n.cmd = exec.Command(n.bin, "--listen", n.amqp, "--management-listen", n.mgmt, "--data-dir", n.dir, "--log-level", "warn")
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	must(t, n.cmd.Start())
	testutil.WaitListening(t, n.amqp, 60*time.Second)
	testutil.WaitListening(t, n.mgmt, 60*time.Second)
	n.started++
}

func (n *railmqNode) kill9() {
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
	n.killed9++
}

func (n *railmqNode) url(user, pass, vhost string) string {
	return fmt.Sprintf("amqp://%s:%s@%s/%s", user, pass, n.amqp, urlVhost(vhost))
}

func (n *railmqNode) api(method, path string, body any) (int, []byte) {
	return httpAPI("http://"+n.mgmt, n.user, n.pass, method, path, body)
}
