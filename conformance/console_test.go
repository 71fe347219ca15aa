package conformance

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// The web console in a real browser: Debian's headless Chromium driven
// over the DevTools protocol (chromedp). Screenshots go to
// RAILMQ_ARTIFACTS (CI keeps them) or the test's temporary directory.

type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin := requireTool(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	// A net for a browser that hangs; each step has its own deadline
	// (run). A whole test's steps took more than 4 minutes beside two
	// busy loops (the move test moves 5,000 messages five times).
	ctx, cancelT := context.WithTimeout(ctx, 15*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	// The first run starts the browser, on the long context: a step's
	// own deadline (run) must not bound the browser's life.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	dir := os.Getenv("RAILMQ_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, dir: dir}
}

// stepTimeout bounds one step of run: navigation, waits for elements,
// clicks (a loaded machine's Chromium takes seconds for what takes
// milliseconds idle).
const stepTimeout = 2 * time.Minute

func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// text is an element's text, or "" when it is not (yet) on the page.
func (b *browser) text(sel string) string {
	s, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)||{}).textContent||""`, sel)))
	return s
}

// eval evaluates JavaScript in the page and returns its value.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitText polls until the element's text satisfies ok.
func (b *browser) waitText(sel string, within time.Duration, ok func(string) bool, what string) string {
	b.t.Helper()
	var s string
	deadline := time.Now().Add(within)
	for {
		s = b.text(sel)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
			b.t.Fatalf("%s: %s shows %q", what, sel, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shot saves a full-page PNG and checks it is an image with something
// drawn on it (not one colour).
func (b *browser) shot(name string) string {
	b.t.Helper()
	// Two animation frames: what the page last changed is painted.
	_, _ = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise))
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		b.t.Errorf("screenshot %s is not a PNG: %v", name, err)
		return ""
	}
	if colours(img) < 8 {
		b.t.Errorf("screenshot %s is blank (%d colours)", name, colours(img))
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes, %dx%d)", p, len(buf), img.Bounds().Dx(), img.Bounds().Dy())
	return p
}

func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 7 {
		for x := r.Min.X; x < r.Max.X; x += 7 {
			c0, c1, c2, c3 := img.At(x, y).RGBA()
			seen[[4]uint32{c0, c1, c2, c3}] = true
			if len(seen) > 64 {
				return len(seen)
			}
		}
	}
	return len(seen)
}

func (b *browser) login(url, user, pass string) {
	b.t.Helper()
	b.tryLogin(url, user, pass)
	// Logged in once the user's name shows (start: whoami answered), not
	// when the form was sent: a navigation made before that raced the
	// login (a management user's queue page never showed, twice, beside
	// two busy loops).
	b.waitText("#who-name", 60*time.Second, func(s string) bool { return strings.HasPrefix(s, user) }, "logged in as "+user)
	// From here on (hash navigation keeps the page) script errors are
	// collected for noErrors.
	b.run("watch for errors", js(`window.__errs = [];
		addEventListener('error', e => __errs.push(String(e.message)));
		addEventListener('unhandledrejection', e => __errs.push(String(e.reason)));
		true`))
}

// tryLogin sends the login form as user; login waits for its success.
func (b *browser) tryLogin(url, user, pass string) {
	b.t.Helper()
	b.run("open the console", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`#login input[name=username]`)))
	b.run("log in", chromedp.SendKeys(chromedp.CSS(`#login input[name=username]`), user),
		chromedp.SendKeys(chromedp.CSS(`#login input[name=password]`), pass),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
}

// js is an action that runs a script (whose value is true).
func js(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[bool](expr)(ctx, t)
		return chromedp.Void{}, err
	}
}

// noErrors fails the test if the page threw since login.
func (b *browser) noErrors() {
	b.t.Helper()
	if errs := eval[[]string](b, `window.__errs || []`); len(errs) > 0 {
		b.t.Errorf("the console threw: %q", errs)
	}
}

func number(s string) float64 {
	f, _ := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
	return f
}

// TestConsoleInBrowser logs in, watches a queue fill while a publisher
// runs (its figures and its depth plot move), dead-letters messages and
// redrives them from the dead-letter queue's page, and checks the pages
// on a phone-sized screen; screenshots of each.
func TestConsoleInBrowser(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.Management(mgmt.Options{StatsInterval: 250 * time.Millisecond}).Handler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/?poll=300"

	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("console-dlq", true, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDeclare("console-work", true, false, false, false, rmq.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "console-dlq"})
	must(t, err)

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 10*time.Second, func(s string) bool { return s == "2" }, "overview shows the queues")
	br.shot("overview")

	// A publisher fills the queue while the page is open.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc := dial(t, b.URL)
		defer pc.Close()
		pch, err := pc.Channel()
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := pch.Publish("", "console-work", false, false, rmq.Publishing{Body: []byte(fmt.Sprintf("order %d", i))}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})

	br.run("open the queue", chromedp.Navigate(url+"#/queues/%2F/console-work"))
	first := number(br.waitText("#q-ready", 10*time.Second, func(s string) bool { return number(s) > 0 }, "queue page shows ready messages"))
	testutil.Eventually(t, 10*time.Second, func() bool {
		return number(eval[string](br, `document.querySelector('#plot-depth').dataset.points||"0"`)) >= 3
	}, "the depth plot has no samples")
	plot1 := eval[string](br, `document.querySelector('#plot-depth').toDataURL()`)
	br.waitText("#q-ready", 10*time.Second, func(s string) bool { return number(s) > first }, "the ready count grows as the publisher runs")
	testutil.Eventually(t, 10*time.Second, func() bool {
		return eval[string](br, `document.querySelector('#plot-depth').toDataURL()`) != plot1
	}, "the depth plot did not move")
	br.shot("queue-filling")
	close(stop)
	wg.Wait()

	// Dead-letter some: a consumer rejects 5 without requeue.
	cch, err := conn.Channel()
	must(t, err)
	for i := 0; i < 5; i++ {
		d, ok, err := cch.Get("console-work", false)
		must(t, err)
		if !ok {
			t.Fatal("console-work is empty")
		}
		must(t, d.Reject(false))
	}
	workBefore := queueDepth(t, ch, "console-work")

	br.run("open the dead-letter queue", chromedp.Navigate(url+"#/queues/%2F/console-dlq"))
	br.waitText("#q-ready", 10*time.Second, func(s string) bool { return number(s) == 5 }, "the DLQ shows its 5 messages")
	br.run("peek", chromedp.Click(chromedp.CSS(`#peek`)))
	br.waitText("#messages", 10*time.Second, func(s string) bool { return strings.Contains(s, "Dead-lettered: rejected from console-work") }, "peek shows the x-death")
	br.shot("dlq-peek")
	br.run("redrive", chromedp.Click(chromedp.CSS(`#redrive-button`)))
	br.waitText("#action-result", 10*time.Second, func(s string) bool { return strings.Contains(s, "Redrove 5 message(s)") }, "redrive reports 5 moved")
	br.waitText("#q-ready", 10*time.Second, func(s string) bool { return number(s) == 0 }, "the DLQ empties")
	if n := queueDepth(t, ch, "console-dlq"); n != 0 {
		t.Errorf("console-dlq holds %d after the redrive, want 0", n)
	}
	if n := queueDepth(t, ch, "console-work"); n != workBefore+5 {
		t.Errorf("console-work holds %d after the redrive, want %d", n, workBefore+5)
	}
	br.shot("dlq-redriven")

	// The queues table, sorted and filtered.
	br.run("open the queues", chromedp.Navigate(url+"#/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues tbody tr`)))
	br.run("filter", chromedp.SendKeys(chromedp.CSS(`#queue-filter`), "dlq"))
	br.waitText("#queue-count", 5*time.Second, func(s string) bool { return s == "1 of 2 queues" }, "the filter keeps one queue")
	br.shot("queues")

	// A phone-sized screen: nothing wider than it.
	for _, page := range []string{"#/", "#/queues", "#/queues/%2F/console-work", "#/connections"} {
		br.run("phone "+page, chromedp.EmulateViewport(390, 844), chromedp.Navigate(url+page), chromedp.Sleep(700*time.Millisecond))
		if w := eval[int](br, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("on a 390 px wide screen %s is %d px wide", page, w)
		}
	}
	br.shot("phone-connections")
	br.noErrors()
}

// TestConsolePages drives the other pages' forms: publish from an
// exchange's page, close a connection, create and edit a policy, add a
// user, a vhost and permissions, export and import definitions.
func TestConsolePages(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/?poll=300"
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("pages-q", false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("pages-q", "k", "amq.direct", false, nil))
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 10*time.Second, func(s string) bool { return s == "1" }, "overview")

	// Publish a test message from amq.direct's page.
	br.run("exchange page", chromedp.Navigate(url+"#/exchanges/%2F/amq.direct"), chromedp.WaitVisible(chromedp.CSS(`#exchange-bindings tbody tr`)))
	br.run("publish", chromedp.SendKeys(chromedp.CSS(`#publish input[name=routing_key]`), "k"),
		chromedp.SendKeys(chromedp.CSS(`#publish textarea[name=payload]`), "from the console"),
		chromedp.Click(chromedp.CSS(`#publish button`)))
	br.waitText("#publish-result", 5*time.Second, func(s string) bool { return s == "Message published and routed." }, "publish")
	d, ok, err := ch.Get("pages-q", true)
	must(t, err)
	if !ok || string(d.Body) != "from the console" {
		t.Errorf("pages-q got %q (ok %v), want the console's message", d.Body, ok)
	}
	br.shot("exchange-publish")

	// Policies: create, then edit.
	br.run("policies", chromedp.Navigate(url+"#/policies"), chromedp.WaitVisible(chromedp.CSS(`#policy-form`)))
	br.run("new policy", chromedp.SendKeys(chromedp.CSS(`#policy-form input[name=name]`), "limit"),
		chromedp.SendKeys(chromedp.CSS(`#policy-form input[name=pattern]`), "^pages-"),
		chromedp.SendKeys(chromedp.CSS(`#policy-form textarea[name=definition]`), `{"max-length": 10}`),
		chromedp.Click(chromedp.CSS(`#policy-form button.primary`)))
	br.waitText("#policies", 5*time.Second, func(s string) bool { return strings.Contains(s, `{"max-length":10}`) }, "the policy is listed")
	br.run("edit policy", chromedp.Click(chromedp.CSS(`#policies tbody button`)),
		js(`document.querySelector('#policy-form textarea').value = '{"max-length": 20}'; true`),
		chromedp.Click(chromedp.CSS(`#policy-form button.primary`)))
	br.waitText("#policies", 5*time.Second, func(s string) bool { return strings.Contains(s, `{"max-length":20}`) }, "the policy is edited")
	a := newAPI(t, b)
	var q map[string]any
	testutil.Eventually(t, 5*time.Second, func() bool {
		a.call("GET", "/api/queues/%2F/pages-q", "guest", "guest", nil, &q)
		return q["policy"] == "limit"
	}, "pages-q policy = %v, want limit", q["policy"])
	br.shot("policies")

	// Admin: a user, a vhost, permissions; the definitions export.
	br.run("admin", chromedp.Navigate(url+"#/admin"), chromedp.WaitVisible(chromedp.CSS(`#users-table tbody tr`)))
	br.run("add user", chromedp.SendKeys(chromedp.CSS(`#add-user input[name=name]`), "ops"),
		chromedp.SendKeys(chromedp.CSS(`#add-user input[name=password]`), "s3cret"),
		chromedp.SendKeys(chromedp.CSS(`#add-user input[name=tags]`), "monitoring"),
		chromedp.Click(chromedp.CSS(`#add-user button`)))
	br.waitText("#users-table", 5*time.Second, func(s string) bool { return strings.Contains(s, "opsmonitoring") }, "the user is listed")
	br.run("add vhost", chromedp.SendKeys(chromedp.CSS(`#add-vhost input[name=name]`), "staging"), chromedp.Click(chromedp.CSS(`#add-vhost button`)))
	br.waitText("#vhosts-table", 5*time.Second, func(s string) bool { return strings.Contains(s, "staging") }, "the vhost is listed")
	br.run("set permissions", js(`(() => { const f = document.querySelector('#set-permission');
		f.elements.user.value = 'ops'; f.elements.vhost.value = 'staging'; f.elements.write.value = '^$'; return true })()`),
		chromedp.Click(chromedp.CSS(`#set-permission button`)))
	br.waitText("#permissions-table", 5*time.Second, func(s string) bool { return strings.Contains(s, "opsstaging.*^$.*") }, "the permissions are listed")
	br.run("export", chromedp.Click(chromedp.CSS(`#export`)))
	br.waitText("#admin-result", 5*time.Second, func(s string) bool {
		return strings.HasPrefix(s, "Exported 1 queues") && strings.Contains(s, "2 users")
	}, "the export")
	defs := filepath.Join(t.TempDir(), "defs.json")
	testutil.WriteFile(t, defs, []byte(`{"queues": [{"name": "imported-q", "vhost": "staging", "durable": true, "auto_delete": false, "arguments": {}}]}`))
	br.run("import", chromedp.SetUploadFiles(chromedp.CSS(`#definitions-file`), []string{defs}), chromedp.Click(chromedp.CSS(`#definitions button.primary`)))
	br.waitText("#admin-result", 5*time.Second, func(s string) bool { return s == "Definitions imported." }, "the import")
	if c := a.call("GET", "/api/queues/staging/imported-q", "guest", "guest", nil, nil); c != 200 {
		t.Errorf("GET the imported queue: %d, want 200", c)
	}
	br.shot("admin")

	// Close the test's connection from the connections page.
	br.run("connections", chromedp.Navigate(url+"#/connections"), chromedp.WaitVisible(chromedp.CSS(`#connections tbody button`)))
	br.run("close", chromedp.Click(chromedp.CSS(`#connections tbody button`)), chromedp.Click(chromedp.CSS(`#connections tbody button`)))
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !strings.Contains(e.Reason, "Closed via the railmq console") {
			t.Errorf("connection closed with %v, want 320 and the console's reason", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("the connection was not closed")
	}
	br.noErrors()
}

func queueDepth(t *testing.T, ch *rmq.Channel, name string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	must(t, err)
	return q.Messages
}

// TestConsoleLoginAndTags: a user without a management tag cannot log
// in, as in RabbitMQ's UI; a management user sees no Admin or Policies
// page; a wrong password is refused.
func TestConsoleLoginAndTags(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := newAPI(t, b)
	for user, tags := range map[string]string{"plain": "", "manager": "management"} {
		if c := a.call("PUT", "/api/users/"+user, "guest", "guest", map[string]any{"password": "pw", "tags": tags}, nil); c != 201 {
			t.Fatalf("PUT user %s: %d", user, c)
		}
		if c := a.call("PUT", "/api/permissions/%2F/"+user, "guest", "guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil); c/100 != 2 {
			t.Fatalf("PUT permissions %s: %d", user, c)
		}
	}
	br.tryLogin(hs.URL+"/", "guest", "wrong")
	br.waitText("#login", 5*time.Second, func(s string) bool { return strings.Contains(s, "Login failed") }, "a wrong password is refused")
	br.tryLogin(hs.URL+"/", "plain", "pw")
	br.waitText("#login", 5*time.Second, func(s string) bool { return strings.Contains(s, "Not management user") }, "a user without tags is refused")
	br.login(hs.URL+"/", "manager", "pw")
	br.waitText("#who-name", 5*time.Second, func(s string) bool { return strings.HasPrefix(s, "manager") }, "the management user is logged in")
	hidden := eval[[]bool](br, `[...document.querySelectorAll('#nav a[data-tags]')].map(a => a.hidden)`)
	// Nodes (monitoring, administrator), Policies (policymaker,
	// administrator), Limits and Admin (administrator).
	if len(hidden) != 4 || !hidden[0] || !hidden[1] || !hidden[2] || !hidden[3] {
		t.Errorf("a management user's Nodes, Policies, Limits and Admin links hidden = %v, want [true true true true]", hidden)
	}
	br.shot("management-user")

	// A route the user may not use answers 401 ("Not monitor user", as
	// RabbitMQ 3.10.8's /api/nodes for a management user): the session
	// goes on. Credentials that no longer log in end it.
	br.run("a refused route", js(`(window.__refused = '', api('nodes').then(() => { __refused = 'answered' }, e => { __refused = 'refused ' + e.status }), true)`))
	waitJS(br, 20*time.Second, `window.__refused !== ''`, "the refused route answered")
	if got := eval[string](br, `window.__refused`); got != "refused 401" {
		t.Errorf("GET /api/nodes as a management user: %s, want refused 401", got)
	}
	if eval[bool](br, `document.querySelector('#who').hidden`) {
		t.Error("a 401 for a route the management user may not use ended the session")
	}
	if c := a.call("PUT", "/api/users/manager", "guest", "guest", map[string]any{"password": "changed", "tags": "management"}, nil); c/100 != 2 {
		t.Fatalf("changing manager's password: %d", c)
	}
	br.waitText("#login", 30*time.Second, func(s string) bool { return strings.Contains(s, "Your session ended") }, "the session ends once the password changed")
}

// TestConsoleWhileRecovering: while the broker recovers its store the
// console shows "recovering N of M" instead of an error, and carries on
// to the overview once the broker is up.
func TestConsoleWhileRecovering(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	st := mgmt.NewStartup()
	hs := httptest.NewServer(st)
	t.Cleanup(hs.Close)
	st.Progress("/", 120, 400, 56000)
	br.tryLogin(hs.URL+"/", "guest", "guest") // logged in once the broker is up, below
	br.waitText("#recovering", 10*time.Second, func(s string) bool {
		return strings.Contains(s, "recovering 120 of 400 queues in vhost '/' (56000 messages so far)")
	}, "the console shows the recovery")
	br.shot("recovering")

	// Recovery of a real store reports through Options.RecoveryProgress.
	dir := t.TempDir()
	b, stop := testutil.StartStoppable(t, broker.Options{DataDir: dir})
	c := dial(t, b.URL)
	ch, err := c.Channel()
	must(t, err)
	for i := 0; i < 3; i++ {
		_, err := ch.QueueDeclare(fmt.Sprintf("recover-%d", i), true, false, false, false, nil)
		must(t, err)
	}
	c.Close()
	stop()
	var last [3]int
	b = testutil.Start(t, broker.Options{DataDir: dir, RecoveryProgress: func(vhost string, done, total, messages int) {
		st.Progress(vhost, done, total, messages)
		last = [3]int{done, total, messages}
	}})
	if last != [3]int{3, 3, 0} {
		t.Errorf("last recovery progress = %v, want [3 3 0]", last)
	}
	st.Ready(b.ManagementHandler())
	br.waitText("#total-queues", 15*time.Second, func(s string) bool { return s == "3" }, "the console carries on once the broker is up")
}
