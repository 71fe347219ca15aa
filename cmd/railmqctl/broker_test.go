package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The commands against a real broker, started in-process, for what
// conformance's TestRailmqctl (the built binary: declare, publish, list
// queues and users, peek, get, users, permissions, policies, export and
// import, status, list_queues, set_vm_memory_high_watermark, ping) does
// not run.

// managementAPI serves b's management API for the test; its URL.
func managementAPI(t *testing.T, b *testutil.Broker) string {
	t.Helper()
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// ctlOK runs railmqctl called as name, with RAILMQ_MANAGEMENT_URL api,
// and fails the test unless it exits 0; its stdout.
func ctlOK(t *testing.T, name, api string, args ...string) string {
	t.Helper()
	code, out, errOut := ctl(t, name, map[string]string{"RAILMQ_MANAGEMENT_URL": api}, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d\n%s%s", name, args, code, out, errOut)
	}
	return out
}

// ctlJSON runs railmqctl --format json and decodes what it printed.
func ctlJSON(t *testing.T, api string, args ...string) []map[string]any {
	t.Helper()
	var v []map[string]any
	out := ctlOK(t, "railmqctl", api, append([]string{"--format", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return v
}

// hasRow reports whether a line of the table out holds exactly these
// fields.
func hasRow(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		if slices.Equal(strings.Fields(l), fields) {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A client's connection, channel and consumer are listed; a connection
// closed with close connection (and rabbitmqctl close_connection) gets
// 320.
func TestConnectionsAgainstBroker(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)
	open := func() (*rmq.Connection, chan *rmq.Error) {
		c, err := rmq.Dial(b.URL)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		ch, err := c.Channel()
		must(t, err)
		_, err = ch.QueueDeclare("ctl-work", false, false, false, false, nil)
		must(t, err)
		must(t, ch.Qos(7, 0, false))
		_, err = ch.Consume("ctl-work", fmt.Sprintf("ctl-tag-%p", c), false, false, false, false, nil)
		must(t, err)
		return c, c.NotifyClose(make(chan *rmq.Error, 1))
	}
	_, closed1 := open()
	_, closed2 := open()

	var conns []map[string]any
	testutil.Eventually(t, 5*time.Second, func() bool {
		conns = ctlJSON(t, api, "list", "connections")
		return len(conns) == 2
	}, "two connections listed")
	out := ctlOK(t, "railmqctl", api, "list", "connections")
	if !strings.HasPrefix(out, "name") || strings.Count(out, "guest") != 2 || strings.Count(out, "running") != 2 {
		t.Errorf("list connections:\n%s", out)
	}
	if out := ctlOK(t, "railmqctl", api, "list", "channels"); strings.Count(out, "guest") != 2 {
		t.Errorf("list channels:\n%s", out)
	}
	if out := ctlOK(t, "railmqctl", api, "list", "consumers"); strings.Count(out, "ctl-work") != 2 || strings.Count(out, "ctl-tag-") != 2 ||
		!strings.Contains(out, " 7 ") || !strings.Contains(out, "true") {
		t.Errorf("list consumers:\n%s", out)
	}
	if out := ctlOK(t, "rabbitmqctl", api, "list_connections"); strings.Count(out, "127.0.0.1") != 2 {
		t.Errorf("rabbitmqctl list_connections:\n%s", out)
	}

	// close connection NAME, and the shim's close_connection NAME REASON.
	for i, closeArgs := range [][]string{{"close", "connection"}, nil} {
		name, _ := conns[i]["name"].(string)
		closed := closed1
		if i == 1 {
			closed = closed2
			ctlOK(t, "rabbitmqctl", api, "close_connection", name, "go away")
		} else {
			ctlOK(t, "railmqctl", api, append(closeArgs, name)...)
		}
		select {
		case e := <-closed:
			if e == nil || e.Code != 320 {
				t.Errorf("connection %s closed with %v, want 320", name, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %s still open", name)
		}
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return len(ctlJSON(t, api, "list", "connections")) == 0 }, "no connection listed")
}

// Objects made, listed, emptied and deleted; dead-lettered messages
// redriven; the cluster status of a node alone; and the API's refusals.
func TestObjectsAgainstBroker(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)
	ok := func(args ...string) string { t.Helper(); return ctlOK(t, "railmqctl", api, args...) }
	fails := func(want string, args ...string) {
		t.Helper()
		code, out, errOut := ctl(t, "railmqctl", map[string]string{"RAILMQ_MANAGEMENT_URL": api}, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", args, code, out, errOut, want)
		}
	}

	ok("declare", "exchange", "name=ctl-x", "type=direct", "durable=true")
	ok("declare", "exchange", "name=ctl-alt", "type=fanout")
	ok("declare", "queue", "name=ctl-dlq", "durable=true")
	ok("declare", "queue", "name=ctl-work", "durable=true", `arguments={"x-dead-letter-exchange":"","x-dead-letter-routing-key":"ctl-dlq"}`)
	ok("declare", "binding", "source=ctl-x", "destination=ctl-work", "routing_key=job")
	ok("declare", "binding", "source=ctl-x", "destination=ctl-alt", "destination_type=exchange", "routing_key=other")
	if out := ok("list", "exchanges", "name", "type"); !hasRow(out, "ctl-x", "direct") || !hasRow(out, "ctl-alt", "fanout") {
		t.Errorf("list exchanges:\n%s", out)
	}
	bindings := ctlJSON(t, api, "list", "bindings")
	var toExchange bool
	for _, bd := range bindings {
		toExchange = toExchange || (bd["destination"] == "ctl-alt" && bd["destination_type"] == "exchange")
	}
	if !toExchange {
		t.Errorf("no exchange-to-exchange binding: %v", bindings)
	}

	// Publish: unroutable, then three jobs; get two, rejected (dead-lettered).
	if out := ok("publish", "--exchange", "ctl-x", "--routing-key", "nowhere", "--payload", "lost"); out != "published, not routed\n" {
		t.Errorf("unroutable publish printed %q", out)
	}
	for i := range 3 {
		if out := ok("publish", "--exchange", "ctl-x", "--routing-key", "job", "--payload", fmt.Sprintf("job-%d", i)); out != "" {
			t.Errorf("publish printed %q", out)
		}
	}
	out := ok("get", "ctl-work", "--count", "2", "--ackmode", "reject_requeue_false")
	if !strings.Contains(out, "job-0") || !strings.Contains(out, "job-1") || strings.Contains(out, "job-2") {
		t.Errorf("get --count 2:\n%s", out)
	}
	count := func(q string) float64 {
		for _, m := range ctlJSON(t, api, "list", "queues") {
			if m["name"] == q {
				n, _ := m["messages"].(float64)
				return n
			}
		}
		return -1
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return count("ctl-dlq") == 2 && count("ctl-work") == 1 }, "two dead-lettered, one left")
	if out := ok("redrive", "ctl-dlq"); out != "moved  unroutable  remaining\n2      0           0\n" {
		t.Errorf("redrive:\n%s", out)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return count("ctl-dlq") == 0 && count("ctl-work") == 3 }, "redriven back")
	ok("purge", "ctl-work")
	testutil.Eventually(t, 5*time.Second, func() bool { return count("ctl-work") == 0 }, "purged")

	// Deletes.
	ok("set_policy", "ctl-p", "^ctl-", `{"max-length":9}`)
	ok("delete", "policy", "ctl-p")
	if out := ok("list", "policies"); strings.Contains(out, "ctl-p") {
		t.Errorf("deleted policy listed:\n%s", out)
	}
	ok("delete", "exchange", "ctl-alt")
	ok("delete", "queue", "ctl-dlq")
	if out := ok("list", "exchanges", "name"); strings.Contains(out, "ctl-alt") {
		t.Errorf("deleted exchange listed:\n%s", out)
	}
	ok("add_user", "ctl-u", "pw")
	ok("delete", "user", "ctl-u")
	if out := ok("list", "users"); strings.Contains(out, "ctl-u") {
		t.Errorf("deleted user listed:\n%s", out)
	}

	// A vhost (made through the API: railmqctl has no command for it),
	// used with --vhost and the shim's -p, listed, deleted.
	req, _ := http.NewRequest("PUT", api+"/api/vhosts/ctl-v", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	ok("set_permissions", "guest", ".*", ".*", ".*", "--vhost", "ctl-v")
	ok("--vhost", "ctl-v", "declare", "queue", "name=in-v")
	if out := ctlOK(t, "rabbitmqctl", api, "-p", "ctl-v", "list_queues"); out != "Timeout: 60.0 seconds ...\nListing queues for vhost ctl-v ...\nname\tmessages\nin-v\t0\n" {
		t.Errorf("rabbitmqctl -p ctl-v list_queues:\n%s", out)
	}
	if out := ok("list", "vhosts", "name"); !hasRow(out, "ctl-v") {
		t.Errorf("list vhosts:\n%s", out)
	}
	if out := ok("list", "permissions", "vhost", "user"); !hasRow(out, "ctl-v", "guest") {
		t.Errorf("list permissions:\n%s", out)
	}
	ok("delete", "vhost", "ctl-v")
	if out := ok("list", "vhosts", "name"); strings.Contains(out, "ctl-v") {
		t.Errorf("deleted vhost listed:\n%s", out)
	}

	// A node alone: its own leader; joining is refused.
	node, _ := ctlJSON(t, api, "status")[0]["name"].(string)
	if out := ok("cluster", "status"); !strings.HasPrefix(out, "node "+node+": Leader, term 0, leader "+node+"\n") || !hasRow(out, node, "true") {
		t.Errorf("cluster status:\n%s", out)
	}
	fails("400 Bad Request: this node is not clustered", "cluster", "join", "other@h", "127.0.0.1:1")
	fails("400 Bad Request: this node is not clustered", "cluster", "leave", "other@h")

	// The shim's status, rabbitmq-diagnostics' ping, an absolute watermark.
	if out := ctlOK(t, "rabbitmqctl", api, "status"); !strings.HasPrefix(out, "Status of node "+node+" ...\nRuntime\n") || !strings.Contains(out, "Node name: "+node+"\n") {
		t.Errorf("rabbitmqctl status:\n%s", out)
	}
	if out := ctlOK(t, "rabbitmq-diagnostics", api, "-q", "ping"); out != "Ping succeeded\n" {
		t.Errorf("rabbitmq-diagnostics ping: %q", out)
	}
	ctlOK(t, "rabbitmqctl", api, "set_vm_memory_high_watermark", "absolute", "1GiB")
	if limit := ctlJSON(t, api, "status")[0]["mem_limit"]; limit != float64(1<<30) {
		t.Errorf("mem_limit %v after set_vm_memory_high_watermark absolute 1GiB", limit)
	}

	// Refusals.
	fails("404 Not Found", "delete", "queue", "nope")
	fails("404 Not Found", "purge", "nope")
	fails("401 Unauthorized", "--password", "wrong", "list", "queues")
	fails("401 Unauthorized", "-u", "nobody", "status")
}

// A redrive that takes longer than a short command's request timeout is
// not cut: railmqctl used to send it with the 60 s timeout of every
// request, so a redrive of 3,000 messages at --rate 40 (75 s) stopped at
// 60 s with 1,841 moved (the broker stops when its client leaves) and the
// user was not told. Here the request timeout is 500 ms and the redrive
// takes about 3 s: all are moved, progress is printed while it runs, and
// the final count at the end.
func TestRedriveOutlivesRequestTimeout(t *testing.T) {
	defer func(d, i time.Duration) { requestTimeout, defaultInterval = d, i }(requestTimeout, defaultInterval)
	requestTimeout = 500 * time.Millisecond
	b := testutil.Start(t, broker.Options{})
	api := managementAPI(t, b)
	ok := func(args ...string) string { t.Helper(); return ctlOK(t, "railmqctl", api, args...) }
	// Messages expire at once from rd-work into rd-dlq, dead-lettered.
	ok("declare", "queue", "--name", "rd-dlq")
	ok("declare", "queue", "--name", "rd-back")
	ok("declare", "queue", "--name", "rd-work", "--arguments", `{"x-message-ttl":0,"x-dead-letter-exchange":"","x-dead-letter-routing-key":"rd-dlq"}`)
	const n = 60
	c, err := rmq.Dial(b.URL)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	for i := range n {
		must(t, ch.Publish("", "rd-work", false, false, rmq.Publishing{Body: []byte(fmt.Sprint(i))}))
	}
	depth := func(q string) float64 {
		for _, m := range ctlJSON(t, api, "list", "queues") {
			if m["name"] == q {
				d, _ := m["messages"].(float64)
				return d
			}
		}
		return -1
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return depth("rd-dlq") == n }, "60 messages dead-lettered")

	code, out, errOut := ctl(t, "railmqctl", map[string]string{"RAILMQ_MANAGEMENT_URL": api},
		"redrive", "rd-dlq", "--rate", "20", "--interval", "500ms", "--target-exchange", "", "--target-routing-key", "rd-back")
	if code != 0 {
		t.Fatalf("redrive: exit %d\n%s%s", code, out, errOut)
	}
	if out != "moved  unroutable  remaining\n60     0           0\n" {
		t.Errorf("redrive printed\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if lines[0] != "redriving 60 messages from 'rd-dlq' in vhost '/' at 20 msg/s (about 3s)" ||
		!strings.HasPrefix(lines[len(lines)-1], "redrove 60 messages from 'rd-dlq' in ") ||
		!strings.HasSuffix(lines[len(lines)-1], "; 0 unroutable (left in 'rd-dlq'), 0 remaining") {
		t.Errorf("redrive's progress:\n%s", errOut)
	}
	progress := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "redrive: moved ") && strings.Contains(l, " of 60, ") {
			progress++
		}
	}
	if progress == 0 {
		t.Errorf("no progress line while the redrive ran:\n%s", errOut)
	}
	if d := depth("rd-back"); d != n {
		t.Errorf("rd-back holds %v, want %d", d, n)
	}
}
