package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The built railmqctl binary, installed as rabbitmqctl and
// rabbitmq-diagnostics (as the image installs it), against a broker, and
// against no broker. What RabbitMQ 3.10.8 printed on this machine for
// the same commands (stdout; exit code):
//
//	rabbitmq-diagnostics -q ping                 "Ping succeeded"; 0
//	rabbitmq-diagnostics ping                    "Will ping rabbit@vm. This only checks if the OS process is running and registered with epmd. Timeout: 60000 ms.\nPing succeeded"; 0
//	rabbitmq-diagnostics check_running           "Checking if RabbitMQ is running on node rabbit@vm ...\nRabbitMQ on node rabbit@vm is fully booted and running"; 0
//	rabbitmq-diagnostics check_local_alarms      "Asking node rabbit@vm to report any local resource alarms ...\nNode rabbit@vm reported no local alarms"; 0
//	rabbitmq-diagnostics check_port_connectivity "Testing TCP connections to all active listeners on node rabbit@vm ...\nSuccessfully connected to ports 5672, 15672, 15692, 25672 on node rabbit@vm."; 0
//	rabbitmq-diagnostics check_virtual_hosts     "Checking if all vhosts are running on node rabbit@vm ...\nNode rabbit@vm reported all vhosts as running"; 0
//	rabbitmq-diagnostics listeners               "Asking node rabbit@vm to report its protocol listeners ...\nInterface: [::], port: 5672, protocol: amqp, purpose: AMQP 0-9-1 and AMQP 1.0" (and one line per listener); 0
//	rabbitmq-diagnostics status                  "Status of node rabbit@vm ...\nRuntime\n\nOS PID: ..." (sections Runtime, ..., Alarms, Memory, File Descriptors, Free Disk Space, Totals, Listeners); 0
//	rabbitmqctl list_queues -p / name messages   "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\nname\tmessages\nq\t0"; 0
//	rabbitmqctl -q list_queues name messages     "name\tmessages\nq\t0"; 0
//	rabbitmqctl list_queues --formatter json name messages  "[\n{\"name\":\"q\",\"messages\":0}\n]"; 0
//	rabbitmqctl -q list_queues --no-table-headers name messages  "q\t0"; 0
//	rabbitmqctl list_queues bogus                "Error (argument validation): Info key(s) bogus are not supported" (stderr); 64
//	rabbitmqctl await_startup                    ""; 0
//	rabbitmqctl trace_on                         "Starting tracing for vhost \"/\" ...\nTrace enabled for vhost /"; 0
//	rabbitmqctl -q trace_on -p /                 "Trace enabled for vhost /"; 0
//
// and with the node down (-n rabbit@nohost: a node that is not there):
//
//	rabbitmq-diagnostics -n rabbit@nohost ping   stdout "Will ping rabbit@nohost. ...", stderr "Error:\nFailed to connect and authenticate to rabbit@nohost in 60000 ms"; 69
//	rabbitmq-diagnostics -q -n rabbit@nohost ping  stdout "", the same stderr; 69
//	rabbitmq-diagnostics -n rabbit@nohost check_running|check_port_connectivity|status|listeners
//	                                             stderr "Error: unable to perform an operation on node 'rabbit@nohost'. Please see diagnostics information and suggestions below. ..."; 69

// shimBin builds railmqctl and links it as rabbitmqctl and
// rabbitmq-diagnostics; their directory.
func shimBin(t *testing.T) string {
	t.Helper()
	bin := testutil.Command(t, "railmqctl")
	dir := t.TempDir()
	for _, n := range []string{"rabbitmqctl", "rabbitmq-diagnostics", "railmqctl"} {
		must(t, os.Symlink(bin, filepath.Join(dir, n)))
	}
	return dir
}

// execShim runs dir's name with args, the API at api; exit code, stdout,
// stderr.
func execShim(t *testing.T, dir, name, api string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		if !strings.HasPrefix(k, "RAILMQ_") && !strings.HasPrefix(k, "RABBITMQ_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "RAILMQ_MANAGEMENT_URL="+api)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return code, stdout.String(), stderr.String()
}

func TestShimBinaryAgainstBroker(t *testing.T) {
	dir := shimBin(t)
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)

	c, err := rmq.Dial(b.URL)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("shim-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	for i := range 3 {
		must(t, ch.Publish("", "shim-q", false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}))
	}
	testutil.Eventually(t, 10e9, func() bool {
		return strings.Contains(ctlOK(t, "railmqctl", api, "list", "queues", "name", "messages"), "shim-q  3")
	}, "three messages in shim-q")

	// The node's own name and ports.
	resp, err := http.Get(strings.Replace(api, "http://", "http://guest:guest@", 1) + "/api/overview")
	must(t, err)
	var ov struct{ Node string }
	must(t, json.NewDecoder(resp.Body).Decode(&ov))
	resp.Body.Close()
	node := ov.Node
	_, amqpPort, _ := net.SplitHostPort(b.Addr)
	_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(api, "http://"))

	for _, tc := range []struct {
		name string
		args []string
		out  string // exactly, or a regexp when it begins with ^
	}{
		{"rabbitmq-diagnostics", []string{"-q", "ping"}, "Ping succeeded\n"},
		{"rabbitmq-diagnostics", []string{"ping"}, "Will ping " + node + ". This only checks if the node's management API answers and takes the CLI's user. Timeout: 60000 ms.\nPing succeeded\n"},
		{"rabbitmq-diagnostics", []string{"check_running"}, "Checking if RabbitMQ is running on node " + node + " ...\nRabbitMQ on node " + node + " is fully booted and running\n"},
		{"rabbitmq-diagnostics", []string{"-q", "check_running"}, "RabbitMQ on node " + node + " is fully booted and running\n"},
		{"rabbitmq-diagnostics", []string{"check_local_alarms"}, "Asking node " + node + " to report any local resource alarms ...\nNode " + node + " reported no local alarms\n"},
		{"rabbitmq-diagnostics", []string{"check_port_connectivity"}, "Testing TCP connections to all active listeners on node " + node + " ...\nSuccessfully connected to ports " + sortedPorts(amqpPort, apiPort) + " on node " + node + ".\n"},
		{"rabbitmq-diagnostics", []string{"check_virtual_hosts"}, "Checking if all vhosts are running on node " + node + " ...\nNode " + node + " reported all vhosts as running\n"},
		{"rabbitmq-diagnostics", []string{"-q", "listeners"}, "^(?s:.*)Interface: \\S+, port: " + amqpPort + ", protocol: amqp, purpose: AMQP 0-9-1\n"},
		{"rabbitmq-diagnostics", []string{"-q", "listeners"}, "^(?s:.*)Interface: 127.0.0.1, port: " + apiPort + ", protocol: http, purpose: HTTP API\n"},
		{"rabbitmq-diagnostics", []string{"status"}, "^Status of node " + regexp.QuoteMeta(node) + " ...\nRuntime\n\nOS PID: \\d+\n(?s:.*)\nAlarms\n\n\\(none\\)\n(?s:.*)\nMemory\n\nTotal memory used: [0-9.]+ gb\n(?s:.*)\nFree Disk Space\n(?s:.*)\nTotals\n\nConnection count: 1\nQueue count: 1\nVirtual host count: 1\n\nListeners\n\nInterface: "},
		{"rabbitmqctl", []string{"list_queues", "-p", "/", "name", "messages"}, "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\nname\tmessages\nshim-q\t3\n"},
		{"rabbitmqctl", []string{"-q", "list_queues", "name", "messages", "durable", "type"}, "name\tmessages\tdurable\ttype\nshim-q\t3\ttrue\tclassic\n"},
		{"rabbitmqctl", []string{"list_queues", "--formatter", "json", "name", "messages"}, "[\n{\"name\":\"shim-q\",\"messages\":3}\n]\n"},
		{"rabbitmqctl", []string{"-q", "list_queues", "--no-table-headers"}, "shim-q\t3\n"},
		{"rabbitmqctl", []string{"-q", "list_queues", "-p", "nope"}, ""},
		{"rabbitmqctl", []string{"await_startup"}, ""},
		{"rabbitmqctl", []string{"trace_on"}, "Starting tracing for vhost \"/\" ...\nTrace enabled for vhost /\n"},
		{"rabbitmqctl", []string{"-q", "trace_off", "-p", "/"}, "Trace disabled for vhost /\n"},
		{"rabbitmqctl", []string{"-n", "rabbit@localhost", "-q", "ping"}, "Ping succeeded\n"},
	} {
		code, out, errOut := execShim(t, dir, tc.name, api, tc.args...)
		ok := out == tc.out
		if strings.HasPrefix(tc.out, "^") {
			ok = regexp.MustCompile(tc.out).MatchString(out)
		}
		if code != 0 || errOut != "" || !ok {
			t.Errorf("%s %v: exit %d, stderr %q, stdout\n%s\nwant\n%s", tc.name, tc.args, code, errOut, out, tc.out)
		}
	}
	// A bad info key: usage, 64.
	if code, out, errOut := execShim(t, dir, "rabbitmqctl", api, "list_queues", "bogus"); code != 64 || out != "" ||
		!strings.HasPrefix(errOut, "Error: (argument validation): Info key(s) bogus are not supported") {
		t.Errorf("list_queues bogus: exit %d, %q, %q", code, out, errOut)
	}
	// The other tool's command: RabbitMQ 3.10.8's "Command 'X' not
	// found." and usage on stderr, 64 (rabbitmq-diagnostics await_startup;
	// rabbitmqctl check_running).
	for _, c := range [][2]string{{"rabbitmq-diagnostics", "await_startup"}, {"rabbitmqctl", "check_running"}} {
		code, out, errOut := execShim(t, dir, c[0], api, "-q", c[1])
		if code != 64 || out != "" || !strings.HasPrefix(errOut, "\nCommand '"+c[1]+"' not found. \n\nUsage\n\n"+c[0]+" [--node <node>]") ||
			!strings.HasSuffix(errOut, "\nUse '"+c[0]+" help <command>' to learn more about a specific command\n") {
			t.Errorf("%s %s: exit %d, %q, %q", c[0], c[1], code, out, errOut)
		}
	}
	if code, out, _ := execShim(t, dir, "railmqctl", api, "--version"); code != 0 || out != "railmqctl "+version+"\n" {
		t.Errorf("railmqctl --version: exit %d, %q", code, out)
	}
}

// sortedPorts lists two ports as check_port_connectivity does, by
// number.
func sortedPorts(a, b string) string {
	var x, y int
	fmt.Sscan(a, &x)
	fmt.Sscan(b, &y)
	if x > y {
		a, b = b, a
	}
	return a + ", " + b
}

// With no node there: 69 and RabbitMQ's texts, for every command.
func TestShimBinaryNodeDown(t *testing.T) {
	dir := shimBin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	api := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, tc := range []struct {
		name string
		args []string
		out  string
		err  string // stderr's beginning
	}{
		{"rabbitmq-diagnostics", []string{"-q", "ping"}, "", "Error:\nFailed to connect and authenticate to "},
		{"rabbitmq-diagnostics", []string{"ping"}, "Will ping ", "Error:\nFailed to connect and authenticate to "},
		{"rabbitmq-diagnostics", []string{"-n", "rabbit@nohost.invalid", "ping"}, "Will ping rabbit@nohost.invalid. ", "Error:\nFailed to connect and authenticate to rabbit@nohost.invalid in 60000 ms"},
		{"rabbitmq-diagnostics", []string{"check_running"}, "Checking if RabbitMQ is running on node ", "Error:\nunable to perform an operation on node '"},
		{"rabbitmq-diagnostics", []string{"-n", "rabbit@nohost.invalid", "check_running"}, "Checking if RabbitMQ is running on node rabbit@nohost.invalid ...\n", "Error:\nunable to perform an operation on node 'rabbit@nohost.invalid'. Please see diagnostics information and suggestions below."},
		{"rabbitmq-diagnostics", []string{"check_local_alarms"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmq-diagnostics", []string{"check_port_connectivity"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmq-diagnostics", []string{"check_virtual_hosts"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmq-diagnostics", []string{"status"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmq-diagnostics", []string{"listeners"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmqctl", []string{"list_queues"}, "", "Error:\nunable to perform an operation on node '"},
		{"rabbitmqctl", []string{"trace_on"}, "Starting tracing for vhost \"/\" ...\n", "Error:\nunable to perform an operation on node '"},
		{"rabbitmqctl", []string{"-t", "1", "await_startup"}, "", "Error:\nunable to perform an operation on node '"},
	} {
		code, out, errOut := execShim(t, dir, tc.name, api, tc.args...)
		if code != 69 || !strings.HasPrefix(out, tc.out) || (tc.out == "" && out != "") || !strings.HasPrefix(errOut, tc.err) {
			t.Errorf("%s %v: exit %d, stdout %q, stderr\n%s\nwant 69, %q, %q", tc.name, tc.args, code, out, errOut, tc.out, tc.err)
		}
	}
	// railmqctl too: 69, EX_UNAVAILABLE.
	if code, _, errOut := execShim(t, dir, "railmqctl", api, "queues", "list"); code != 69 || !strings.Contains(errOut, "connection refused") {
		t.Errorf("railmqctl queues list, no node: exit %d, %q", code, errOut)
	}
}
