package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// "Move messages": the management UI's form on a queue's page (RabbitMQ
// 3.10.8 with rabbitmq_shovel_management: deps/rabbitmq_management/priv/
// www/js/tmpl/queue.ejs, deps/rabbitmq_shovel_management/priv/www/js/
// shovel.js) and railmqctl move_messages, both a dynamic shovel with
// src-delete-after "queue-length" that deletes itself when done.
//
// What RabbitMQ 3.10.8's UI sent on this machine (2026-12-06; its queue
// page driven in Chromium, the XMLHttpRequest recorded), Move messages
// from move-probe-src to move-probe-dst in vhost "/":
//
//	PUT api/parameters/shovel/%2F/Move%20from%20move-probe-src
//	{"component":"shovel","vhost":"/","name":"Move from move-probe-src","value":{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///%2F","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}}
//
// and then: /api/shovels/%2F listed it "running" (no counts: 3.10.8's
// JSON has none) while it moved 60,000 messages; once done the list was
// [], GET /api/shovels/vhost/%2F/Move%20from%20move-probe-src 404 and
// the parameter gone. A move to "amq.move-probe" (a reserved name: the
// destination's queue.declare is refused 403) was listed
// {"state":"terminated","reason":"\"needed a restart\""}, started again
// every 5 s (its timestamp moved on) until deleted.
const rabbitMoveBody = `{"component":"shovel","vhost":"/","name":"Move from move-probe-src","value":{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///%2F","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}}`

// moveCap holds a move part way: a policy capping dest at limit messages
// with reject-publish, so the destination nacks the rest and the shovel
// puts them back (the move stands at exactly limit moved) until the
// policy goes.
func moveCap(t *testing.T, a *api, dest string, limit int) (release func()) {
	t.Helper()
	if c := a.call("PUT", "/api/policies/%2F/move-cap", "guest", "guest", map[string]any{"pattern": "^" + regexp.QuoteMeta(dest) + "$", "apply-to": "queues",
		"definition": map[string]any{"max-length": limit, "overflow": "reject-publish"}}, nil); c/100 != 2 {
		t.Fatalf("PUT policy: %d", c)
	}
	return func() {
		t.Helper()
		if c := a.call("DELETE", "/api/policies/%2F/move-cap", "guest", "guest", nil, nil); c != 204 {
			t.Fatalf("DELETE policy: %d", c)
		}
	}
}

// moveStream declares stream q holding n messages.
func moveStream(t *testing.T, url, q string, n int) {
	t.Helper()
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare(q, true, false, false, false, rmq.Table{"x-queue-type": "stream"})
	must(t, err)
	must(t, ch.Confirm(false))
	var last *rmq.DeferredConfirmation
	for i := range n {
		if last, err = ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := last.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}
}

// moveDepth is a queue's messages as the management API counts them
// (a stream's too).
func moveDepth(t *testing.T, a *api, q string) float64 {
	t.Helper()
	var info map[string]any
	if c := a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &info); c != 200 {
		t.Fatalf("GET queue %s: %d", q, c)
	}
	n, _ := info["messages"].(float64)
	return n
}

// TestConsoleMoveMessages moves a queue's messages from its page in a
// real browser: the PUT is RabbitMQ's UI's, byte for byte (names aside);
// the progress shows moved of total and what remains while the move is
// held part way, then the result once the shovel is gone. A move the
// destination refuses shows the shovel's reason and is stopped from the
// page; a user who may not define shovels has no form.
func TestConsoleMoveMessages(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/?poll=300"
	a := &api{t: t, url: hs.URL}
	const n = 5000
	shovelFill(t, b.URL, "move-probe-src", n, 1024)
	release := moveCap(t, a, "move-probe-dst", 1000)

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 10*time.Second, func(s string) bool { return s == "1" }, "overview")
	br.run("open the queue", chromedp.Navigate(url+"#/queues/%2F/move-probe-src"), chromedp.WaitVisible(chromedp.CSS(`#move input[name=dest-queue]`)))
	br.run("record requests", js(`window.__sent = []; const f0 = window.fetch;
		window.fetch = (u, o) => { if (o && o.method && o.method !== 'GET') __sent.push({method: o.method, url: String(u), body: o.body || ''}); return f0(u, o); }; true`))
	br.run("move", chromedp.SendKeys(chromedp.CSS(`#move input[name=dest-queue]`), "move-probe-dst"), chromedp.Click(chromedp.CSS(`#move-button`)))
	br.waitText("#move-status", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "1,000 of 5,000 moved · 4,000 remaining") && strings.Contains(s, "shovel running")
	}, "the progress while the destination holds the move at 1,000")
	sent := eval[[]map[string]string](br, `__sent`)
	if len(sent) != 1 || sent[0]["method"] != "PUT" || sent[0]["url"] != "api/parameters/shovel/%2F/Move%20from%20move-probe-src" || sent[0]["body"] != rabbitMoveBody {
		t.Errorf("the console sent %q\nwant PUT api/parameters/shovel/%%2F/Move%%20from%%20move-probe-src %s", sent, rabbitMoveBody)
	}
	br.shot("move-under-way")

	release()
	br.waitText("#move-result", 60*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "Moved 5,000 message(s) to move-probe-dst in ") && strings.HasSuffix(s, "; 0 remain in this queue.")
	}, "the result once the shovel is gone")
	if c := a.call("GET", "/api/parameters/shovel/%2F/Move%20from%20move-probe-src", "guest", "guest", nil, nil); c != 404 {
		t.Errorf("the move's parameter after it: %d, want 404 (the shovel deletes it)", c)
	}
	if got := shovelQueueLen(t, b.URL, "move-probe-src"); got != 0 {
		t.Errorf("move-probe-src holds %d, want 0", got)
	}
	if got := shovelQueueLen(t, b.URL, "move-probe-dst"); got != n {
		t.Errorf("move-probe-dst holds %d, want %d", got, n)
	}
	br.shot("move-done")

	// A destination the broker refuses (a reserved name): the shovel
	// terminates, the page says why, and Stop the move deletes it; the
	// messages stay.
	br.run("open the destination", chromedp.Navigate(url+"#/queues/%2F/move-probe-dst"), chromedp.WaitVisible(chromedp.CSS(`#move input[name=dest-queue]`)))
	br.run("move to a reserved name", chromedp.SendKeys(chromedp.CSS(`#move input[name=dest-queue]`), "amq.refused"), chromedp.Click(chromedp.CSS(`#move-button`)))
	br.waitText("#move-error", 20*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "The shovel terminated: needed a restart")
	}, "the shovel's reason")
	br.shot("move-refused")
	br.run("stop the move", chromedp.Click(chromedp.CSS(`#move-progress button.danger`)), chromedp.Click(chromedp.CSS(`#move-progress button.danger`)))
	poll.Eventually(t, 10*time.Second, func() bool {
		return a.call("GET", "/api/parameters/shovel/%2F/Move%20from%20move-probe-dst", "guest", "guest", nil, nil) == 404
	}, "the stopped move's shovel is deleted")
	if got := shovelQueueLen(t, b.URL, "move-probe-dst"); got != n {
		t.Errorf("move-probe-dst holds %d after the refused move, want %d", got, n)
	}

	// To another broker: the destination URI.
	b2 := testutil.Start(t, broker.Options{})
	br.run("move to another broker", chromedp.Navigate(url+"#/queues/%2F/move-probe-src"), chromedp.Navigate(url+"#/queues/%2F/move-probe-dst"),
		chromedp.WaitVisible(chromedp.CSS(`#move input[name=dest-uri]`)), js(`__sent = []; true`),
		chromedp.SendKeys(chromedp.CSS(`#move input[name=dest-queue]`), "remote-q"), chromedp.SendKeys(chromedp.CSS(`#move input[name=dest-uri]`), b2.URL),
		chromedp.Click(chromedp.CSS(`#move-button`)))
	br.waitText("#move-result", 60*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "Moved 5,000 message(s) to remote-q in ") && strings.HasSuffix(s, "; 0 remain in this queue.")
	}, "the move to another broker")
	var put struct{ Value map[string]any }
	if sent := eval[[]map[string]string](br, `__sent`); len(sent) != 1 || json.Unmarshal([]byte(sent[0]["body"]), &put) != nil || put.Value["dest-uri"] != b2.URL {
		t.Errorf("the console sent %q, want dest-uri %s", sent, b2.URL)
	}
	if got := shovelQueueLen(t, b2.URL, "remote-q"); got != n {
		t.Errorf("the other broker's remote-q holds %d, want %d", got, n)
	}

	// From a stream (RabbitMQ's form adds x-stream-offset "first"): a
	// copy, the stream keeps its messages.
	moveStream(t, b.URL, "move-stream", 200)
	poll.Eventually(t, 30*time.Second, func() bool { return moveDepth(t, a, "move-stream") == 200 }, "the API counts move-stream's 200 messages")
	br.run("move from a stream", chromedp.Navigate(url+"#/queues/%2F/move-stream"), chromedp.WaitVisible(chromedp.CSS(`#move input[name=dest-queue]`)),
		js(`__sent = []; true`), chromedp.SendKeys(chromedp.CSS(`#move input[name=dest-queue]`), "from-stream"), chromedp.Click(chromedp.CSS(`#move-button`)))
	br.waitText("#move-result", 60*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "Copied 200 message(s) to from-stream in ") && strings.HasSuffix(s, " s; the stream keeps them.")
	}, "the copy from a stream")
	if sent := eval[[]map[string]string](br, `__sent`); len(sent) != 1 || !strings.HasSuffix(sent[0]["body"], `"dest-queue":"from-stream","src-consumer-args":{"x-stream-offset":"first"}}}`) {
		t.Errorf("the console sent %q, want src-consumer-args x-stream-offset first", sent)
	}
	if got, kept := moveDepth(t, a, "from-stream"), moveDepth(t, a, "move-stream"); got != 200 || kept != 200 {
		t.Errorf("from-stream holds %v and move-stream %v, want 200 and 200", got, kept)
	}
	br.noErrors()

	// A management user (no policymaker tag) has no form, and the API
	// refuses the PUT (RabbitMQ 3.10.8: 401 "User not authorised to
	// access object").
	for _, c := range []int{
		a.call("PUT", "/api/users/mover", "guest", "guest", map[string]any{"password": "pw", "tags": "management"}, nil),
		a.call("PUT", "/api/permissions/%2F/mover", "guest", "guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil),
	} {
		if c/100 != 2 {
			t.Fatalf("making user mover: %d", c)
		}
	}
	var refused map[string]any
	if c := a.call("PUT", "/api/parameters/shovel/%2F/Move%20from%20move-probe-dst", "mover", "pw", json.RawMessage(rabbitMoveBody), &refused); c != 401 || refused["reason"] != "User not authorised to access object" {
		t.Errorf("a management user's PUT: %d %v, want 401 User not authorised to access object", c, refused)
	}
	br.run("log out", chromedp.Click(chromedp.CSS(`#logout`)))
	br.login(url, "mover", "pw")
	br.run("the queue as a management user", chromedp.Navigate(url+"#/queues/%2F/move-probe-dst"), chromedp.WaitVisible(chromedp.CSS(`#redrive`)))
	if eval[bool](br, `!!document.querySelector('#move')`) {
		t.Error("a management user is offered Move messages")
	}
}

// moveCtl runs railmqctl move_messages against api, its stdout's lines
// sent to lines as they come; wait returns the exit code, stdout and
// stderr.
func moveCtl(t *testing.T, api string, args ...string) (lines <-chan string, wait func() (int, []string, string)) {
	t.Helper()
	cmd := exec.Command(testutil.Command(t, "railmqctl"), append([]string{"--url", api}, args...)...)
	out, err := cmd.StdoutPipe()
	must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	ch := make(chan string, 10000)
	var all []string
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			all = append(all, sc.Text())
			mu.Unlock()
			select {
			case ch <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return ch, func() (int, []string, string) {
		t.Helper()
		<-done
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return code, all, stderr.String()
	}
}

var moveProgress = regexp.MustCompile(`^(starting|running|terminated|completed): moved (\d+) of (\d+), remaining (\d+), -?\d+ msg/s$`)

// TestRailmqctlMoveMessages moves 10,000 persistent messages with
// railmqctl move_messages (the built binary, against the broker's API):
// progress lines while the move is held part way, the totals once the
// shovel is gone, every message at the destination once; then its
// failures: an unknown queue, a shovel the destination refuses, a user
// who may not define shovels, a move under way; and --no-wait.
func TestRailmqctlMoveMessages(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	const n = 10000
	shovelFill(t, b.URL, "ctl-move-src", n, 1024)
	release := moveCap(t, a, "ctl-move-dst", 4000)

	lines, wait := moveCtl(t, hs.URL, "move_messages", "ctl-move-src", "ctl-move-dst", "--interval", "100ms")
	held := false
	for !held {
		select {
		case l := <-lines:
			held = strings.HasPrefix(l, "running: moved 4000 of 10000, remaining 6000, ")
		case <-time.After(60 * time.Second):
			t.Fatal("railmqctl printed no progress at 4000 of 10000 while the destination held the move there")
		}
	}
	release()
	code, out, errOut := wait()
	if code != 0 {
		t.Fatalf("move_messages: exit %d\n%s\n%s", code, strings.Join(out, "\n"), errOut)
	}
	t.Logf("railmqctl move_messages:\n%s", strings.Join(out, "\n"))
	if want := "moving 10000 messages from 'ctl-move-src' to 'ctl-move-dst' in vhost '/' (shovel 'Move from ctl-move-src')"; out[0] != want {
		t.Errorf("first line %q, want %q", out[0], want)
	}
	last := int64(-1)
	progress := 0
	for _, l := range out[1 : len(out)-2] {
		m := moveProgress.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("not a progress line: %q", l)
			continue
		}
		progress++
		moved, _ := strconv.ParseInt(m[2], 10, 64)
		remaining, _ := strconv.ParseInt(m[4], 10, 64)
		if m[3] != "10000" || moved+remaining != n || moved < last {
			t.Errorf("progress line %q after moved %d: want moved+remaining = total 10000, moved never going back", l, last)
		}
		last = moved
	}
	if progress < 2 {
		t.Errorf("%d progress lines, want several", progress)
	}
	if got := out[len(out)-2]; got != "done: moved 10000 of 10000, remaining 0" {
		t.Errorf("done line %q", got)
	}
	if !regexp.MustCompile(`^moved 10000 messages from 'ctl-move-src' to 'ctl-move-dst' in \d+\.\ds \(\d+ msg/s\)$`).MatchString(out[len(out)-1]) {
		t.Errorf("last line %q, want the total and the rate", out[len(out)-1])
	}
	if got := shovelQueueLen(t, b.URL, "ctl-move-src"); got != 0 {
		t.Errorf("ctl-move-src holds %d, want 0", got)
	}
	if got := shovelQueueLen(t, b.URL, "ctl-move-dst"); got != n {
		t.Errorf("ctl-move-dst holds %d, want %d", got, n)
	}
	if c := a.call("GET", "/api/parameters/shovel/%2F/Move%20from%20ctl-move-src", "guest", "guest", nil, nil); c != 404 {
		t.Errorf("the move's parameter after it: %d, want 404", c)
	}

	fails := func(what, wantErr string, args ...string) {
		t.Helper()
		_, wait := moveCtl(t, hs.URL, args...)
		code, out, errOut := wait()
		if code == 0 || !strings.Contains(errOut, wantErr) {
			t.Errorf("%s: exit %d, stderr %q, want non-zero and %q\n%s", what, code, errOut, wantErr, strings.Join(out, "\n"))
		}
	}
	// A missing object is said so with the API's status and reason
	// (docs/cli.md, exit codes).
	fails("an unknown queue", "Error: no queue 'nope' in vhost '/': 404 Not Found: Not Found\n", "move_messages", "nope", "ctl-move-dst")
	fails("a destination refused", "Error: move from 'ctl-move-dst' to 'amq.refused' failed: the shovel terminated: needed a restart (a broker closed its channel or connection with an error; the broker's log says which) (moved 0 of 10000; the shovel is deleted, 10000 messages remain in 'ctl-move-dst')\n",
		"move_messages", "ctl-move-dst", "amq.refused", "--interval", "100ms")
	if c := a.call("GET", "/api/parameters/shovel/%2F/Move%20from%20ctl-move-dst", "guest", "guest", nil, nil); c != 404 {
		t.Errorf("the failed move's parameter: %d, want 404 (railmqctl deletes it)", c)
	}
	for _, c := range []int{
		a.call("PUT", "/api/users/ctl-mover", "guest", "guest", map[string]any{"password": "pw", "tags": "management"}, nil),
		a.call("PUT", "/api/permissions/%2F/ctl-mover", "guest", "guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil),
	} {
		if c/100 != 2 {
			t.Fatalf("making user ctl-mover: %d", c)
		}
	}
	fails("a management user", "Error: user 'ctl-mover' may not define shovels in vhost '/' (it takes the policymaker or administrator tag and permissions there): 401 Unauthorized: User not authorised to access object\n",
		"-u", "ctl-mover", "-p", "pw", "move_messages", "ctl-move-dst", "elsewhere")
	if got := shovelQueueLen(t, b.URL, "ctl-move-dst"); got != n {
		t.Errorf("ctl-move-dst holds %d after the failures, want %d", got, n)
	}

	// A move under way (a shovel of that name) is not replaced.
	release = moveCap(t, a, "ctl-move-back", 10)
	_, wait = moveCtl(t, hs.URL, "move_messages", "ctl-move-dst", "ctl-move-back", "--no-wait")
	if code, out, errOut := wait(); code != 0 || len(out) != 1 || out[0] != "moving 10000 messages from 'ctl-move-dst' to 'ctl-move-back' in vhost '/' (shovel 'Move from ctl-move-dst')" {
		t.Fatalf("--no-wait: exit %d %q %s", code, out, errOut)
	}
	fails("a move under way", "Error: a shovel named 'Move from ctl-move-dst' exists in vhost '/' already (a move from 'ctl-move-dst' under way?); wait for it or give --name\n",
		"move_messages", "ctl-move-dst", "ctl-move-back")
	// --no-wait's shovel carries on alone and deletes itself when done.
	release()
	poll.Eventually(t, 60*time.Second, func() bool {
		return a.call("GET", "/api/parameters/shovel/%2F/Move%20from%20ctl-move-dst", "guest", "guest", nil, nil) == 404
	}, "the --no-wait move's shovel is gone")
	if got := shovelQueueLen(t, b.URL, "ctl-move-back"); got != n {
		t.Errorf("ctl-move-back holds %d, want %d", got, n)
	}
	if dups := shovelCollect(t, b.URL, "ctl-move-back", n, time.Minute); dups != 0 {
		t.Errorf("%d messages arrived twice", dups)
	}
	if got := shovelQueueLen(t, b.URL, "ctl-move-back"); got != 0 {
		t.Errorf("ctl-move-back holds %d more than the 10,000 moved", got)
	}

	// To another broker: --dest-uri.
	b2 := testutil.Start(t, broker.Options{})
	shovelFill(t, b.URL, "ctl-remote", 500, 1024)
	_, wait = moveCtl(t, hs.URL, "move_messages", "ctl-remote", "ctl-remote", "--dest-uri", b2.URL, "--interval", "100ms")
	if code, out, errOut := wait(); code != 0 || out[len(out)-2] != "done: moved 500 of 500, remaining 0" {
		t.Errorf("move to another broker: exit %d\n%s\n%s", code, strings.Join(out, "\n"), errOut)
	}
	if got := shovelQueueLen(t, b2.URL, "ctl-remote"); got != 500 {
		t.Errorf("the other broker's ctl-remote holds %d, want 500", got)
	}

	// From a stream: a copy from its first offset; the stream keeps its
	// messages, so its depth is no progress: the lines say what is copied.
	moveStream(t, b.URL, "ctl-stream", 300)
	// (The API counts a stream's messages a moment after they are
	// confirmed; what move_messages reads is that count.)
	poll.Eventually(t, 30*time.Second, func() bool { return moveDepth(t, a, "ctl-stream") == 300 }, "the API counts ctl-stream's 300 messages")
	_, wait = moveCtl(t, hs.URL, "move_messages", "ctl-stream", "ctl-from-stream", "--interval", "100ms")
	code, out, errOut = wait()
	if code != 0 || out[0] != "copying 300 messages from 'ctl-stream' to 'ctl-from-stream' in vhost '/' (shovel 'Move from ctl-stream')" ||
		!regexp.MustCompile(`^copied 300 messages from stream 'ctl-stream' to 'ctl-from-stream' in \d+\.\ds \(\d+ msg/s\); the stream keeps them$`).MatchString(out[len(out)-1]) {
		t.Errorf("move from a stream: exit %d\n%s\n%s", code, strings.Join(out, "\n"), errOut)
	}
	for _, l := range out[1 : len(out)-1] {
		if !regexp.MustCompile(`^(starting|running|completed): copying 300 messages$`).MatchString(l) {
			t.Errorf("not a progress line: %q", l)
		}
	}
	if got, kept := moveDepth(t, a, "ctl-from-stream"), moveDepth(t, a, "ctl-stream"); got != 300 || kept != 300 {
		t.Errorf("ctl-from-stream holds %v and ctl-stream %v, want 300 and 300", got, kept)
	}
}
