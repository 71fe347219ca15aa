package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// container is one docker run of the image, removed when the test ends.
type container struct {
	t    *testing.T
	name string
}

// runContainer starts the image with args (docker run's, before the
// image) publishing AMQP and the management API on loopback ports.
func runContainer(t *testing.T, image string, args ...string) *container {
	t.Helper()
	name := fmt.Sprintf("railmq-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	run := append([]string{"run", "-d", "--name", name, "-p", "127.0.0.1::5672", "-p", "127.0.0.1::15672"}, args...)
	must(t, 2*time.Minute, "docker", append(run, image)...)
	c := &container{t: t, name: name}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := command(time.Minute, nil, "docker", "logs", "--tail", "60", name)
			t.Logf("docker logs %s:\n%s", name, out)
		}
		_, _ = command(2*time.Minute, nil, "docker", "rm", "-f", "-v", name)
	})
	return c
}

// port is the loopback address docker published the container's port on
// (it changes when the container restarts).
func (c *container) port(p string) string {
	c.t.Helper()
	out := must(c.t, time.Minute, "docker", "port", c.name, p+"/tcp")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "127.0.0.1:") {
			return strings.TrimSpace(l)
		}
	}
	c.t.Fatalf("docker port %s %s: %q", c.name, p, out)
	return ""
}

// dial connects with amqp091-go as user to vhost, polling until the
// broker in the container takes the connection.
func (c *container) dial(user, pass, vhost string) *amqp091.Connection {
	c.t.Helper()
	var conn *amqp091.Connection
	var err error
	testutil.Eventually(c.t, 2*time.Minute, func() bool {
		url := fmt.Sprintf("amqp://%s:%s@%s/%s", user, pass, c.port("5672"), strings.ReplaceAll(vhost, "/", "%2F"))
		conn, err = amqp091.Dial(url)
		return err == nil
	}, "AMQP as %s in the container: %v", user, lazy(func() string { return fmt.Sprint(err) }))
	return conn
}

// lazy is a value for a failure message, computed when it is printed.
type lazy func() string

func (l lazy) String() string { return l() }

// inspect is docker inspect's value of format for the container.
func (c *container) inspect(format string) string {
	c.t.Helper()
	return strings.TrimSpace(must(c.t, time.Minute, "docker", "inspect", "-f", format, c.name))
}

// exec runs args in the container and returns the exit code and output.
func (c *container) exec(args ...string) (int, string) {
	c.t.Helper()
	out, err := command(2*time.Minute, nil, "docker", append([]string{"exec", c.name}, args...)...)
	if err == nil {
		return 0, out
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		c.t.Fatalf("docker exec %v: %v\n%s", args, err, out)
	}
	return ee.ExitCode(), out
}

// The image as make image builds it: what docker inspect shows of it,
// as RabbitMQ's official rabbitmq:3-management image has it (ports,
// volume, health check), a non-root user and the version in the labels.
func TestImageConfig(t *testing.T) {
	image := buildImage(t)
	var cfg struct {
		User         string
		ExposedPorts map[string]struct{}
		Volumes      map[string]struct{}
		Labels       map[string]string
		Entrypoint   []string
		Env          []string
		Healthcheck  struct{ Test []string }
	}
	out := must(t, time.Minute, "docker", "image", "inspect", "-f", "{{json .Config}}", image)
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("docker image inspect: %v\n%s", err, out)
	}
	if cfg.User != "999:999" {
		t.Errorf("User %q, want 999:999 (rabbitmq, as the official image)", cfg.User)
	}
	for _, p := range []string{"5672/tcp", "5671/tcp", "15672/tcp", "15692/tcp", "25672/tcp"} {
		if _, ok := cfg.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, cfg.ExposedPorts)
		}
	}
	if _, ok := cfg.Volumes["/var/lib/rabbitmq"]; !ok {
		t.Errorf("no volume /var/lib/rabbitmq: %v", cfg.Volumes)
	}
	if got := strings.Join(cfg.Healthcheck.Test, " "); got != "CMD rabbitmq-diagnostics -q ping" {
		t.Errorf("health check %q, want the official image's rabbitmq-diagnostics -q ping", got)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "cmd", "railmq", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^var version = "(.*)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no version in cmd/railmq/main.go")
	}
	if v := cfg.Labels["org.opencontainers.image.version"]; v != string(m[1]) {
		t.Errorf("label org.opencontainers.image.version %q, want %q (cmd/railmq/main.go)", v, m[1])
	}
	// railmq --version in the image says the same version.
	out, err = command(2*time.Minute, nil, "docker", "run", "--rm", image, "--version")
	if err != nil || !strings.Contains(out, string(m[1])) {
		t.Errorf("docker run %s --version: %v, %q; want %s", image, err, out, m[1])
	}
	// railmqctl, with the same version, and the shims, railmqctl under
	// RabbitMQ's names, are in the PATH (docker says "executable file
	// not found", exit 127, for a name that is not).
	out, err = command(2*time.Minute, nil, "docker", "run", "--rm", "--entrypoint", "railmqctl", image, "--version")
	if err != nil || !strings.Contains(out, string(m[1])) {
		t.Errorf("railmqctl --version in the image: %v, %q; want %s", err, out, m[1])
	}
	for _, shim := range []string{"rabbitmqctl", "rabbitmq-diagnostics"} {
		out, err := command(2*time.Minute, nil, "docker", "run", "--rm", "--entrypoint", shim, image, "-q", "ping")
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || ee.ExitCode() == 126 || ee.ExitCode() == 127 || strings.Contains(out, "executable file not found")) {
			t.Errorf("%s in the image: %v\n%s", shim, err, out)
		}
	}
}

// The image run as the official one is, with a memory limit: a client on another host (here,
// through docker's port mapping: not loopback inside the container)
// logs in as guest, publishes and consumes; the health check passes;
// docker stop (SIGTERM) shuts the broker down cleanly with exit code 0,
// and a persistent message outlives the restart (the data directory is
// the container's volume).
func TestImageRun(t *testing.T) {
	image := buildImage(t)
	c := runContainer(t, image, "--memory", "1g")
	conn := c.dial("guest", "guest", "/")
	// The memory watermark follows the container's limit: 0.4 of 1 GiB
	// (railmq reads the cgroup's limit, broker.TotalMemory).
	if logs := must(t, time.Minute, "docker", "logs", c.name); !strings.Contains(logs, `"limit_bytes": 429496729, "total_bytes": 1073741824}`) {
		t.Errorf("memory high watermark not 0.4 of the container's 1 GiB limit:\n%s", tail(logs, 20))
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("deploy-test", true /* durable */, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first", "kept"} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "deploy-test", false, false,
			amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("publish %q: confirmed %v, %v", body, ok, err)
		}
	}
	d, ok, err := ch.Get("deploy-test", false /* autoAck */)
	if err != nil || !ok || string(d.Body) != "first" {
		t.Fatalf("basic.get: %v %v %q, want first", ok, err, d.Body)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	must(t, 2*time.Minute, "docker", "stop", "-t", "60", c.name)
	if code := c.inspect("{{.State.ExitCode}}"); code != "0" {
		t.Fatalf("exit code after docker stop: %s, want 0", code)
	}
	logs := must(t, time.Minute, "docker", "logs", c.name)
	for _, line := range []string{"signal received, shutting down", "shut down"} {
		if !strings.Contains(logs, line) {
			t.Errorf("log after docker stop lacks %q:\n%s", line, tail(logs, 20))
		}
	}

	must(t, 2*time.Minute, "docker", "start", c.name)
	conn = c.dial("guest", "guest", "/")
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err = ch.Get("deploy-test", true /* autoAck */)
	if err != nil || !ok || string(d.Body) != "kept" {
		t.Fatalf("after the restart basic.get: %v %v %q, want the persistent message kept", ok, err, d.Body)
	}

	if code, out := c.exec("rabbitmq-diagnostics", "-q", "ping"); code != 0 {
		t.Errorf("docker exec rabbitmq-diagnostics -q ping: exit %d\n%s", code, out)
	}
	// The image's HEALTHCHECK, run by docker itself.
	var health string
	testutil.Eventually(t, 2*time.Minute, func() bool {
		health = c.inspect("{{json .State.Health}}")
		return c.inspect("{{.State.Health.Status}}") == "healthy"
	}, "container healthy (docker's health check); last: %s", lazy(func() string { return health }))
}

// The official image's conventions: RABBITMQ_DEFAULT_USER, _PASS and
// _VHOST make the first user and vhost (guest is then not made),
// RABBITMQ_NODENAME names the node, and a rabbitmq.conf mounted at
// /etc/rabbitmq/rabbitmq.conf loads definitions from a mounted file
// (load_definitions), as the official image's users configure it.
func TestImageEnvAndDefinitions(t *testing.T) {
	image := buildImage(t)
	dir := t.TempDir()
	defs := `{
  "vhosts": [{"name": "orders"}],
  "users": [{"name": "svc", "password": "svc-pass", "tags": ""}],
  "permissions": [{"user": "svc", "vhost": "orders", "configure": ".*", "write": ".*", "read": ".*"}],
  "exchanges": [{"name": "orders.in", "vhost": "orders", "type": "direct", "durable": true, "auto_delete": false, "internal": false, "arguments": {}}],
  "queues": [{"name": "orders.new", "vhost": "orders", "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "quorum"}}],
  "bindings": [{"source": "orders.in", "vhost": "orders", "destination": "orders.new", "destination_type": "queue", "routing_key": "new", "arguments": {}}]
}`
	testutil.WriteFile(t, filepath.Join(dir, "definitions.json"), []byte(defs))
	testutil.WriteFile(t, filepath.Join(dir, "rabbitmq.conf"), []byte("load_definitions = /etc/rabbitmq/definitions.json\n"))
	for _, f := range []string{"definitions.json", "rabbitmq.conf"} {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := runContainer(t, image,
		"-e", "RABBITMQ_DEFAULT_USER=ann", "-e", "RABBITMQ_DEFAULT_PASS=ann-secret", "-e", "RABBITMQ_DEFAULT_VHOST=app",
		"-e", "RABBITMQ_NODENAME=rabbit@deploy-test",
		"-v", filepath.Join(dir, "rabbitmq.conf")+":/etc/rabbitmq/rabbitmq.conf:ro",
		"-v", filepath.Join(dir, "definitions.json")+":/etc/rabbitmq/definitions.json:ro")

	conn := c.dial("ann", "ann-secret", "app")
	conn.Close()
	if _, err := amqp091.Dial("amqp://guest:guest@" + c.port("5672") + "/"); err == nil {
		t.Error("guest logged in, though RABBITMQ_DEFAULT_USER made ann instead")
	}
	// The node's name, as the management API reports it.
	req, _ := http.NewRequest("GET", "http://"+c.port("15672")+"/api/overview", nil)
	req.SetBasicAuth("ann", "ann-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ov struct{ Node string }
	err = json.NewDecoder(resp.Body).Decode(&ov)
	resp.Body.Close()
	if err != nil || ov.Node != "rabbit@deploy-test" {
		t.Errorf("GET /api/overview node %q (%v), want rabbit@deploy-test (RABBITMQ_NODENAME)", ov.Node, err)
	}
	// The health check as the image runs it: the container's environment
	// (RABBITMQ_DEFAULT_USER/PASS) is the shim's too.
	if code, out := c.exec("rabbitmq-diagnostics", "-q", "ping"); code != 0 {
		t.Errorf("rabbitmq-diagnostics -q ping with RABBITMQ_DEFAULT_USER set: exit %d\n%s", code, out)
	}

	// The definitions: svc's vhost, exchange, binding and quorum queue.
	conn = c.dial("svc", "svc-pass", "orders")
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "orders.in", "new", true /* mandatory */, false,
		amqp091.Publishing{Body: []byte("order 1"), DeliveryMode: amqp091.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish to orders.in: confirmed %v, %v", ok, err)
	}
	d, ok, err := ch.Get("orders.new", true /* autoAck */)
	if err != nil || !ok || string(d.Body) != "order 1" {
		t.Fatalf("basic.get orders.new: %v %v %q, want the message routed by the definitions' binding", ok, err, d.Body)
	}
}
