package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// composeProject is a copy of one of compose/'s files, brought up as a
// project of its own with docker-compose, and down (volumes too) when the
// test ends.
type composeProject struct {
	t    *testing.T
	dir  string
	file string
	name string
	env  []string
}

// hostPorts matches a compose port mapping "HOST:CONTAINER".
var hostPorts = regexp.MustCompile(`"(\d+):(\d+)"`)

// newCompose copies compose/file into a temporary directory, with its
// host ports replaced by docker's choice of a loopback port (this
// machine's 5672 and 15672 are RabbitMQ's, and the test listens on
// loopback only): that is the one change from the file as shipped.
func newCompose(t *testing.T, file string) *composeProject {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", file))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &composeProject{t: t, dir: dir, file: filepath.Join(dir, file),
		name: fmt.Sprintf("railmqtest%d%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	testutil.WriteFile(t, p.file, hostPorts.ReplaceAll(src, []byte(`"127.0.0.1::$2"`)))
	// The cluster's secret, as its comment says to make it.
	testutil.WriteFile(t, filepath.Join(dir, "cluster-secret"), []byte("railmq-compose-test-secret\n"))
	if err := os.Chmod(filepath.Join(dir, "cluster-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *composeProject) run(timeout time.Duration, args ...string) (string, error) {
	return command(timeout, p.env, "docker-compose", append([]string{"-f", p.file, "-p", p.name}, args...)...)
}

func (p *composeProject) must(timeout time.Duration, args ...string) string {
	p.t.Helper()
	out, err := p.run(timeout, args...)
	if err != nil {
		p.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// up starts the project and takes it down when the test ends.
func (p *composeProject) up() {
	p.t.Helper()
	p.t.Cleanup(func() {
		if p.t.Failed() {
			out, _ := p.run(time.Minute, "logs", "--no-color", "--tail", "40")
			p.t.Logf("docker-compose logs:\n%s", out)
		}
		if out, err := p.run(3*time.Minute, "down", "-v", "-t", "60"); err != nil {
			p.t.Errorf("docker-compose down: %v\n%s", err, out)
		}
	})
	p.must(5*time.Minute, "up", "-d")
}

// port is the loopback address of service's container port.
func (p *composeProject) port(service, port string) string {
	p.t.Helper()
	out := strings.TrimSpace(p.must(time.Minute, "port", service, port))
	if !strings.HasPrefix(out, "127.0.0.1:") {
		p.t.Fatalf("docker-compose port %s %s: %q", service, port, out)
	}
	return out
}

// dial connects as guest to service, polling until it takes the
// connection.
func (p *composeProject) dial(service string) *amqp091.Connection {
	p.t.Helper()
	var conn *amqp091.Connection
	var err error
	testutil.Eventually(p.t, 3*time.Minute, func() bool {
		conn, err = amqp091.Dial("amqp://guest:guest@" + p.port(service, "5672") + "/")
		return err == nil
	}, "AMQP to %s: %v", service, lazy(func() string { return fmt.Sprint(err) }))
	return conn
}

// healthy waits until docker reports every service's container healthy
// (the files' health check, rabbitmq-diagnostics -q ping).
func (p *composeProject) healthy(services ...string) {
	p.t.Helper()
	for _, s := range services {
		id := strings.TrimSpace(p.must(time.Minute, "ps", "-q", s))
		var health string
		testutil.Eventually(p.t, 3*time.Minute, func() bool {
			out, _ := command(time.Minute, nil, "docker", "inspect", "-f", "{{json .State.Health}}", id)
			health = out
			return strings.Contains(out, `"Status":"healthy"`)
		}, "%s healthy: %s", s, lazy(func() string { return health }))
	}
}

// Both compose files are valid for docker-compose as shipped.
func TestComposeConfig(t *testing.T) {
	requireTool(t, "docker-compose", "docker-compose")
	for _, file := range []string{"docker-compose.yml", "cluster.yml"} {
		dir := t.TempDir()
		src, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", file))
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(t, filepath.Join(dir, file), src)
		testutil.WriteFile(t, filepath.Join(dir, "cluster-secret"), []byte("x\n"))
		out, err := command(time.Minute, nil, "docker-compose", "-f", filepath.Join(dir, file), "config", "-q")
		if err != nil || out != "" {
			t.Errorf("docker-compose -f %s config: %v\n%s", file, err, out)
		}
	}
}

// docker-compose.yml, the drop-in for rabbitmq:3-management: up, a
// client publishes and consumes as guest, the health check passes.
func TestComposeSingle(t *testing.T) {
	requireTool(t, "docker-compose", "docker-compose")
	image := buildImage(t)
	p := newCompose(t, "docker-compose.yml")
	p.env = []string{"RAILMQ_IMAGE=" + image}
	p.up()
	conn := p.dial("rabbitmq")
	defer conn.Close()
	roundTrip(t, conn, "compose-test", nil, conn)
	p.healthy("rabbitmq")
}

// cluster.yml: three nodes form a cluster by their service names; a
// quorum queue declared on rabbit1 has a message published there
// consumed on rabbit3.
func TestComposeCluster(t *testing.T) {
	requireTool(t, "docker-compose", "docker-compose")
	image := buildImage(t)
	p := newCompose(t, "cluster.yml")
	p.env = []string{"RAILMQ_IMAGE=" + image}
	p.up()
	c1, c3 := p.dial("rabbit1"), p.dial("rabbit3")
	defer c1.Close()
	defer c3.Close()
	roundTrip(t, c1, "compose-quorum", amqp091.Table{"x-queue-type": "quorum"}, c3)
	p.healthy("rabbit1", "rabbit2", "rabbit3")
}

// roundTrip declares the durable queue q with args on from (polling
// while a cluster has no quorum yet), publishes a persistent message
// with a confirm there and gets it on to.
func roundTrip(t *testing.T, from *amqp091.Connection, q string, args amqp091.Table, to *amqp091.Connection) {
	t.Helper()
	var ch *amqp091.Channel
	var err error
	testutil.Eventually(t, 3*time.Minute, func() bool {
		if ch, err = from.Channel(); err != nil {
			t.Fatal(err)
		}
		if _, err = ch.QueueDeclare(q, true /* durable */, false, false, false, args); err != nil {
			return false
		}
		return true
	}, "declare %s: %v", q, lazy(func() string { return fmt.Sprint(err) }))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, true /* mandatory */, false,
		amqp091.Publishing{Body: []byte("hello"), DeliveryMode: amqp091.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish to %s: confirmed %v, %v", q, ok, err)
	}
	rc, err := to.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var d amqp091.Delivery
	var ok bool
	testutil.Eventually(t, time.Minute, func() bool {
		d, ok, err = rc.Get(q, true /* autoAck */)
		if err != nil {
			t.Fatalf("basic.get %s: %v", q, err)
		}
		return ok
	}, "message in %s", q)
	if string(d.Body) != "hello" {
		t.Fatalf("got %q from %s, want hello", d.Body, q)
	}
}
