package conformance

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// dlqSetup makes a work queue that dead-letters to rd-dlq and rejects n
// persistent messages into it, numbered from 0.
func dlqSetup(t *testing.T, ch *rmq.Channel, n int) {
	t.Helper()
	must(t, ch.ExchangeDeclare("rd-x", "direct", true, false, false, false, nil))
	for _, q := range []struct {
		name string
		args rmq.Table
	}{{"rd-dlq", nil}, {"rd-work", rmq.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rd-dlq"}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
	}
	must(t, ch.QueueBind("rd-work", "job", "rd-x", false, nil))
	must(t, ch.Confirm(false))
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("rd-x", "job", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprintf("job-%03d", i))})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for range n {
		d, ok, err := ch.Get("rd-work", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		must(t, d.Reject(false)) // the bug: every job fails
	}
}

// Redrive moves dead-lettered messages back where they died, in order,
// with their x-death history, and leaves those without a route; peek
// shows messages and leaves them as they were.
func TestRedriveAndPeek(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	dlqSetup(t, ch, 10)
	must(t, ch.Publish("", "rd-dlq", false, false, rmq.Publishing{Body: []byte("stray")})) // never dead-lettered: no origin
	testutil.Eventually(t, 5*time.Second, func() bool { return e2count(ch, "rd-dlq") == 11 }, "11 in the DLQ")

	var peeked []struct {
		Payload     string
		Redelivered bool
	}
	a.call("POST", "/api/queues/%2F/rd-dlq/peek", "guest", "guest", map[string]any{"count": 3}, &peeked)
	if len(peeked) != 3 || peeked[0].Payload != "job-000" || peeked[2].Payload != "job-002" {
		t.Fatalf("peek: %+v", peeked)
	}
	var out struct{ Moved, Unroutable, Remaining int }
	if code := a.call("POST", "/api/queues/%2F/rd-dlq/redrive", "guest", "guest", map[string]any{}, &out); code != 200 || out.Moved != 10 || out.Unroutable != 1 {
		t.Fatalf("redrive: %d %+v", code, out)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return e2count(ch, "rd-work") == 10 && e2count(ch, "rd-dlq") == 1 }, "moved back")
	for i := range 10 {
		d, ok, err := ch.Get("rd-work", true)
		if err != nil || !ok || string(d.Body) != fmt.Sprintf("job-%03d", i) {
			t.Fatalf("redriven %d: %v %v %q", i, ok, err, d.Body)
		}
		if deaths, _ := d.Headers["x-death"].([]any); len(deaths) != 1 || d.Redelivered {
			t.Fatalf("redriven %d: x-death %v, redelivered %v", i, d.Headers["x-death"], d.Redelivered)
		}
	}
	d, ok, err := ch.Get("rd-dlq", true)
	if err != nil || !ok || string(d.Body) != "stray" || d.Redelivered {
		t.Fatalf("the stray message: %v %v %q redelivered %v", ok, err, d.Body, d.Redelivered)
	}
}

func e2count(ch *rmq.Channel, q string) int {
	n, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return n.Messages
}

// A redrive killed with SIGKILL half way loses nothing: every message is
// in the work queue (moved, confirmed there first) or still in the DLQ;
// one may be in both (at least once).
func TestRedriveSurvivesKill9(t *testing.T) {
	bin := testutil.Binary(t)
	dir := t.TempDir()
	start := func() (*exec.Cmd, string, string) {
		addr, mgmt := testutil.FreePort(t), testutil.FreePort(t)
		cmd := exec.Command(bin, "--listen", addr, "--management-listen", mgmt, "--data-dir", dir, "--log-level", "warn")
		must(t, cmd.Start())
		testutil.WaitListening(t, addr, 30*time.Second)
		testutil.WaitListening(t, mgmt, 30*time.Second)
		return cmd, addr, mgmt
	}
	cmd, addr, mgmt := start()
	c := dial(t, "amqp://guest:guest@"+addr+"/")
	ch, _ := c.Channel()
	const n = 200
	dlqSetup(t, ch, n)
	c.Close()
	a := &api{t: t, url: "http://" + mgmt}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// 100 a second: two seconds for all; killed before (the answer
		// is then an error, expected).
		req, _ := http.NewRequest("POST", a.url+"/api/queues/%2F/rd-dlq/redrive", strings.NewReader(`{"rate":100}`))
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(700 * time.Millisecond) // time passing: part of the redrive done
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	<-done
	cmd, addr, _ = start()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c = dial(t, "amqp://guest:guest@"+addr+"/")
	defer c.Close()
	ch, _ = c.Channel()
	seen := map[string]int{}
	for _, q := range []string{"rd-work", "rd-dlq"} {
		t.Logf("after the kill, %s holds %d", q, e2count(ch, q))
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			seen[string(d.Body)]++
		}
	}
	moved := 0
	for i := range n {
		if seen[fmt.Sprintf("job-%03d", i)] == 0 {
			t.Fatalf("job-%03d lost across the kill", i)
		}
	}
	for _, k := range seen {
		if k > 1 {
			moved++
		}
	}
	if len(seen) != n || moved > 1 {
		t.Fatalf("%d distinct messages, %d in both queues; want %d, at most 1", len(seen), moved, n)
	}
}
