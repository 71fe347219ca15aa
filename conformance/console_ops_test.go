package conformance

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The console's operator pages in Debian's headless Chromium, one browser
// per test for all its steps, each step waiting for what the page shows
// (never a fixed sleep): bindings added and removed from an exchange's and
// a queue's page, publishing from a queue's page, deleting an exchange,
// a connection's and a channel's pages and closing the connection with a
// reason, the limits page, topic permissions, operator policies and the
// queue type chosen at declare. Each change is checked through the API
// (or AMQP), not only on the page.

// waitJS polls a JavaScript expression in the page until it is true.
func waitJS(br *browser, within time.Duration, expr, what string) {
	br.t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+expr+`) } catch (e) { return false } })()`))
		if err == nil && v {
			return
		}
		if time.Now().After(deadline) {
			br.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
			br.t.Fatalf("%s: %s is not true (%v)", what, expr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clickTwice clicks a button twice: an armed button (Delete, Unbind,
// Close, Clear) asks for the second click.
func clickTwice(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.Click(chromedp.CSS(sel))(ctx, t); err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.Click(chromedp.CSS(sel))(ctx, t)
	}
}

func bindingKeys(t *testing.T, a *api, path string) []string {
	t.Helper()
	var bs []map[string]any
	if c := a.call("GET", path, "guest", "guest", nil, &bs); c != 200 {
		t.Fatalf("GET %s: %d", path, c)
	}
	var keys []string
	for _, b := range bs {
		keys = append(keys, b["routing_key"].(string))
	}
	return keys
}

// TestConsoleBindingsConnections: on an exchange's page a binding to a
// queue is added and removed; on the queue's page a binding from the
// exchange is added and a message published to the queue; the exchange
// is deleted from its page; a connection's page shows its client and its
// channel, the channel's page its consumer, and the connection is closed
// from its page with the reason typed there.
func TestConsoleBindingsConnections(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	url := hs.URL + "/?poll=300"
	conn, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "console-ops-client"}})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare("ops-x", "direct", true, false, false, false, nil))
	_, err = ch.QueueDeclare("ops-q", true, false, false, false, nil)
	must(t, err)
	_, err = ch.Consume("ops-q", "ops-consumer", false, false, false, false, nil)
	must(t, err)
	pub, err := conn.Channel() // the channel the test reads with (the consumer's would get it first)
	must(t, err)
	_, err = pub.QueueDeclare("ops-q2", true, false, false, false, nil)
	must(t, err)

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 20*time.Second, func(s string) bool { return s == "2" }, "overview")

	// The exchange's page: bind ops-x → ops-q2 with k1, then unbind.
	between := "/api/bindings/%2F/e/ops-x/q/ops-q2"
	br.run("exchange page", chromedp.Navigate(url+"#/exchanges/%2F/ops-x"), chromedp.WaitVisible(chromedp.CSS(`#exchange-bindings-add input[name=other]`)))
	br.run("bind", chromedp.SendKeys(chromedp.CSS(`#exchange-bindings-add input[name=other]`), "ops-q2"),
		chromedp.SendKeys(chromedp.CSS(`#exchange-bindings-add input[name=routing_key]`), "k1"),
		chromedp.Click(chromedp.CSS(`#exchange-bindings-add button`)))
	br.waitText("#exchange-bindings", 10*time.Second, func(s string) bool { return strings.Contains(s, "ops-q2") && strings.Contains(s, "k1") }, "the binding is listed")
	if keys := bindingKeys(t, a, between); len(keys) != 1 || keys[0] != "k1" {
		t.Fatalf("bindings ops-x → ops-q2 after Bind: %q, want [k1]", keys)
	}
	br.shot("exchange-bound")
	br.run("unbind", clickTwice(`#exchange-bindings tbody button.danger`))
	br.waitText("#exchange-bindings", 10*time.Second, func(s string) bool { return !strings.Contains(s, "ops-q2") }, "the binding is gone from the page")
	if keys := bindingKeys(t, a, between); len(keys) != 0 {
		t.Fatalf("bindings ops-x → ops-q2 after Unbind: %q, want none", keys)
	}

	// The queue's page: bind from ops-x with k2 (the default exchange's
	// binding is listed and cannot be removed), publish to the queue.
	br.run("queue page", chromedp.Navigate(url+"#/queues/%2F/ops-q2"), chromedp.WaitVisible(chromedp.CSS(`#bindings-add input[name=other]`)))
	br.waitText("#bindings", 10*time.Second, func(s string) bool { return strings.Contains(s, "(default exchange binding)") }, "the default binding is listed")
	br.run("bind from the queue", chromedp.SendKeys(chromedp.CSS(`#bindings-add input[name=other]`), "ops-x"),
		chromedp.SendKeys(chromedp.CSS(`#bindings-add input[name=routing_key]`), "k2"),
		chromedp.Click(chromedp.CSS(`#bindings-add button`)))
	br.waitText("#bindings", 10*time.Second, func(s string) bool { return strings.Contains(s, "ops-x") && strings.Contains(s, "k2") }, "the queue's binding is listed")
	if keys := bindingKeys(t, a, between); len(keys) != 1 || keys[0] != "k2" {
		t.Fatalf("bindings ops-x → ops-q2 after Bind on the queue's page: %q, want [k2]", keys)
	}
	br.run("publish to the queue", chromedp.SendKeys(chromedp.CSS(`#queue-publish textarea[name=payload]`), "to the queue"),
		chromedp.SendKeys(chromedp.CSS(`#queue-publish input[name=properties]`), `{"message_id": "m-7"}`),
		chromedp.Click(chromedp.CSS(`#queue-publish button`)))
	br.waitText("#queue-publish-result", 10*time.Second, func(s string) bool { return s == "Message published and routed." }, "publish from the queue's page")
	d, ok, err := pub.Get("ops-q2", true)
	must(t, err)
	if !ok || string(d.Body) != "to the queue" || d.MessageId != "m-7" {
		t.Errorf("ops-q2 got %q id %q (ok %v), want the console's message m-7", d.Body, d.MessageId, ok)
	}
	br.shot("queue-bound-published")

	// Delete the exchange from its page.
	br.run("exchange page again", chromedp.Navigate(url+"#/exchanges/%2F/ops-x"), chromedp.WaitVisible(chromedp.CSS(`#exchange-delete button`)))
	br.run("delete the exchange", clickTwice(`#exchange-delete button`))
	waitJS(br, 10*time.Second, `location.hash === '#/exchanges'`, "the console goes to the exchanges after the delete")
	if c := a.call("GET", "/api/exchanges/%2F/ops-x", "guest", "guest", nil, nil); c != 404 {
		t.Errorf("GET the deleted exchange: %d, want 404", c)
	}
	// The exchanges list, paged and filtered by the broker.
	br.waitText("#exchanges", 10*time.Second, func(s string) bool { return strings.Contains(s, "amq.topic") && !strings.Contains(s, "ops-x") }, "the list without ops-x")
	br.run("filter the exchanges", chromedp.SendKeys(chromedp.CSS(`#exchange-filter`), `^amq\.dir`))
	br.waitText("#exchange-count", 10*time.Second, func(s string) bool { return strings.HasPrefix(s, "1 of ") && strings.HasSuffix(s, " exchanges") }, "the filter keeps amq.direct")
	br.waitText("#exchanges tbody", 10*time.Second, func(s string) bool { return strings.Contains(s, "amq.direct") && !strings.Contains(s, "amq.topic") }, "only amq.direct is listed")

	// The channels and connections lists, paged and filtered by the broker.
	br.run("channels", chromedp.Navigate(url+"#/channels"))
	br.waitText("#channel-count", 10*time.Second, func(s string) bool { return s == "2 of 2 channels" }, "the channels list")
	br.run("connections", chromedp.Navigate(url+"#/connections"), chromedp.WaitVisible(chromedp.CSS(`#connections tbody a`)))
	br.waitText("#connection-count", 10*time.Second, func(s string) bool { return s == "1 of 1 connections" }, "the connections list")
	br.run("filter the connections", chromedp.SendKeys(chromedp.CSS(`#connection-filter`), "no-such-peer"))
	br.waitText("#connection-count", 10*time.Second, func(s string) bool { return s == "0 of 1 connections" }, "the filter keeps none")
	br.run("clear the filter", js(`(() => { const f = document.querySelector('#connection-filter'); f.value = ''; f.dispatchEvent(new Event('input')); return true })()`))
	br.waitText("#connection-count", 10*time.Second, func(s string) bool { return s == "1 of 1 connections" }, "the filter cleared")

	// The connection's page, its channels, a channel's page, close it.
	br.run("connections again", chromedp.WaitVisible(chromedp.CSS(`#connections tbody a`)))
	br.run("open the connection", chromedp.Click(chromedp.CSS(`#connections tbody a`)), chromedp.WaitVisible(chromedp.CSS(`#connection-info table`)))
	br.waitText("#connection-info", 10*time.Second, func(s string) bool { return strings.Contains(s, "guest") }, "the connection's user")
	br.waitText("#client-properties", 10*time.Second, func(s string) bool {
		return strings.Contains(s, "connection_name") && strings.Contains(s, "console-ops-client") && strings.Contains(s, "capabilities")
	}, "the client properties")
	br.waitText("#connection-channels", 10*time.Second, func(s string) bool { return strings.Contains(s, "Channels (2)") }, "the connection's two channels")
	br.shot("connection")
	br.run("open a channel", chromedp.Click(chromedp.CSS(`#connection-channels tbody a`)), chromedp.WaitVisible(chromedp.CSS(`#channel-info table`)))
	br.waitText("#channel-consumers", 10*time.Second, func(s string) bool { return strings.Contains(s, "ops-consumer") && strings.Contains(s, "ops-q") }, "the channel's consumer")
	br.shot("channel")
	br.run("back to the connection", chromedp.Click(chromedp.CSS(`#chan-connection-details a`)), chromedp.WaitVisible(chromedp.CSS(`#close-reason`)))
	br.run("close it", chromedp.SendKeys(chromedp.CSS(`#close-reason`), "maintenance window"), clickTwice(`#close-connection button.danger`))
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !strings.Contains(e.Reason, "maintenance window") {
			t.Errorf("connection closed with %v, want 320 and the reason typed", e)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the connection was not closed")
	}
	br.waitText("#connection-info", 20*time.Second, func(s string) bool { return strings.Contains(s, "This connection is closed") }, "the page says the connection is gone")
	phoneWidth(br, url, map[string]string{"#/exchanges/%2F/amq.direct": "#exchange-bindings", "#/queues/%2F/ops-q2": "#bindings"})
	br.noErrors()
}

// TestConsoleAdminLimits: the limits page sets and clears a vhost's and a
// user's limits; the admin page sets and clears topic permissions; the
// policies page creates an operator policy that the queue then shows; a
// quorum queue and a stream are declared with the queue form's type.
func TestConsoleAdminLimits(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	url := hs.URL + "/?poll=300"
	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 20*time.Second, func(s string) bool { return s == "0" }, "overview")

	// Limits.
	br.run("limits", chromedp.Navigate(url+"#/limits"), chromedp.WaitVisible(chromedp.CSS(`#set-vhost-limit input[name=value]`)))
	br.run("vhost limit", js(`(() => { const f = document.querySelector('#set-vhost-limit'); f.elements.vhost.value = '/'; f.elements.limit.value = 'max-queues'; return true })()`),
		chromedp.SendKeys(chromedp.CSS(`#set-vhost-limit input[name=value]`), "7"), chromedp.Click(chromedp.CSS(`#set-vhost-limit button`)))
	br.waitText("#vhost-limits-table", 10*time.Second, func(s string) bool { return strings.Contains(s, "/max-queues7") }, "the vhost limit is listed")
	var vl []map[string]any
	a.call("GET", "/api/vhost-limits/%2F", "guest", "guest", nil, &vl)
	if len(vl) != 1 || vl[0]["value"].(map[string]any)["max-queues"] != 7.0 {
		t.Errorf("vhost limits of /: %v, want max-queues 7", vl)
	}
	br.run("user limit", js(`(() => { const f = document.querySelector('#set-user-limit'); f.elements.user.value = 'guest'; f.elements.limit.value = 'max-channels'; return true })()`),
		chromedp.SendKeys(chromedp.CSS(`#set-user-limit input[name=value]`), "3"), chromedp.Click(chromedp.CSS(`#set-user-limit button`)))
	br.waitText("#user-limits-table", 10*time.Second, func(s string) bool { return strings.Contains(s, "guestmax-channels3") }, "the user limit is listed")
	var ul []map[string]any
	a.call("GET", "/api/user-limits/guest", "guest", "guest", nil, &ul)
	if len(ul) != 1 || ul[0]["value"].(map[string]any)["max-channels"] != 3.0 {
		t.Errorf("user limits of guest: %v, want max-channels 3", ul)
	}
	br.shot("limits")
	br.run("clear the vhost limit", clickTwice(`#vhost-limits-table tbody button.danger`))
	br.waitText("#vhost-limits-table", 10*time.Second, func(s string) bool { return !strings.Contains(s, "max-queues") }, "the vhost limit is cleared")
	a.call("GET", "/api/vhost-limits", "guest", "guest", nil, &vl)
	if len(vl) != 0 {
		t.Errorf("vhost limits after Clear: %v, want none", vl)
	}

	// Topic permissions.
	br.run("admin", chromedp.Navigate(url+"#/admin"), chromedp.WaitVisible(chromedp.CSS(`#set-topic-permission input[name=exchange]`)))
	br.run("topic permission", js(`(() => { const f = document.querySelector('#set-topic-permission'); f.elements.user.value = 'guest'; f.elements.vhost.value = '/';
		f.elements.write.value = '^orders\\.'; f.elements.read.value = '^reports\\.'; return true })()`),
		chromedp.Click(chromedp.CSS(`#set-topic-permission button`)))
	br.waitText("#topic-permissions-table", 10*time.Second, func(s string) bool { return strings.Contains(s, `guest/amq.topic^orders\.^reports\.`) }, "the topic permission is listed")
	var tp []map[string]any
	a.call("GET", "/api/topic-permissions/%2F/guest", "guest", "guest", nil, &tp)
	if len(tp) != 1 || tp[0]["exchange"] != "amq.topic" || tp[0]["write"] != `^orders\.` || tp[0]["read"] != `^reports\.` {
		t.Errorf("topic permissions of guest in /: %v", tp)
	}
	br.shot("topic-permissions")
	// Clear removes that row's exchange only: guest's permission on
	// another exchange stays.
	if c := a.call("PUT", "/api/topic-permissions/%2F/guest", "guest", "guest", map[string]any{"exchange": "ops-topic", "write": ".*", "read": ".*"}, nil); c/100 != 2 {
		t.Fatalf("PUT a second topic permission: %d", c)
	}
	br.run("reload admin", chromedp.Navigate(url+"#/"), chromedp.Navigate(url+"#/admin"), chromedp.WaitVisible(chromedp.CSS(`#set-topic-permission input[name=exchange]`)))
	br.waitText("#topic-permissions-table", 10*time.Second, func(s string) bool { return strings.Contains(s, "ops-topic") }, "both topic permissions are listed")
	br.run("clear the topic permission", js(`(() => { const tr = [...document.querySelectorAll('#topic-permissions-table tbody tr')].find(r => r.textContent.includes('amq.topic'));
		tr.querySelector('button.danger').id = 'clear-amq-topic'; return true })()`), clickTwice(`#clear-amq-topic`))
	br.waitText("#topic-permissions-table", 10*time.Second, func(s string) bool { return !strings.Contains(s, "amq.topic") }, "the topic permission is cleared")
	tp = nil
	if c := a.call("GET", "/api/topic-permissions/%2F/guest", "guest", "guest", nil, &tp); c != 200 || len(tp) != 1 || tp[0]["exchange"] != "ops-topic" {
		t.Errorf("GET guest's topic permissions after Clear: %d %v, want ops-topic's only", c, tp)
	}

	// The queue form's type.
	br.run("queues", chromedp.Navigate(url+"#/queues"), chromedp.WaitVisible(chromedp.CSS(`#add-queue input[name=name]`)))
	for _, typ := range []string{"quorum", "stream"} {
		br.run("declare a "+typ, js(`(() => { const f = document.querySelector('#add-queue'); f.elements.type.value = '`+typ+`'; f.elements.type.dispatchEvent(new Event('change'));
			f.elements.name.value = 'ops-`+typ+`'; return true })()`), chromedp.Click(chromedp.CSS(`#add-queue button`)))
		br.waitText("#add-queue-result", 10*time.Second, func(s string) bool { return s == "Queue declared" }, "the "+typ+" queue is declared")
		var q map[string]any
		a.call("GET", "/api/queues/%2F/ops-"+typ, "guest", "guest", nil, &q)
		if q["type"] != typ || q["durable"] != true {
			t.Errorf("ops-%s: type %v durable %v, want %s and durable", typ, q["type"], q["durable"], typ)
		}
		br.run("clear the form", js(`document.querySelector('#add-queue-result').textContent = ''; true`))
	}
	br.waitText("#queues", 10*time.Second, func(s string) bool {
		return strings.Contains(s, "ops-quorumquorum") && strings.Contains(s, "ops-streamstream")
	}, "the queues list shows the types")

	// An operator policy, shown on the queue.
	br.run("policies", chromedp.Navigate(url+"#/policies"), chromedp.WaitVisible(chromedp.CSS(`#operator-policy-form input[name=name]`)))
	br.run("operator policy", chromedp.SendKeys(chromedp.CSS(`#operator-policy-form input[name=name]`), "cap"),
		chromedp.SendKeys(chromedp.CSS(`#operator-policy-form input[name=pattern]`), "^ops-quorum$"),
		chromedp.SendKeys(chromedp.CSS(`#operator-policy-form textarea[name=definition]`), `{"max-length": 1000}`),
		chromedp.Click(chromedp.CSS(`#operator-policy-form button.primary`)))
	br.waitText("#operator-policies", 10*time.Second, func(s string) bool { return strings.Contains(s, `{"max-length":1000}`) }, "the operator policy is listed")
	var q map[string]any
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.call("GET", "/api/queues/%2F/ops-quorum", "guest", "guest", nil, &q)
		return q["operator_policy"] == "cap"
	}, "ops-quorum operator_policy = %v, want cap", q["operator_policy"])
	// A key an operator policy may not hold is refused with RabbitMQ's reason.
	br.run("bad operator policy", js(`document.querySelector('#operator-policy-form textarea').value = '{"dead-letter-exchange": "x"}'; true`),
		chromedp.Click(chromedp.CSS(`#operator-policy-form button.primary`)))
	br.waitText("#operator-policy-result", 10*time.Second, func(s string) bool { return strings.Contains(s, "dead-letter-exchange") }, "the refused key is named")
	br.shot("operator-policies")

	// A phone-sized screen: no page wider than it (tables scroll in their panels).
	phoneWidth(br, url, map[string]string{"#/limits": "#vhost-limits-table", "#/policies": "#operator-policies", "#/admin": "#topic-permissions-table"})
	br.noErrors()
}

// phoneWidth opens each page (hash → an element its data fills) on a
// 390 px wide screen and checks nothing makes it wider.
func phoneWidth(br *browser, url string, pages map[string]string) {
	br.t.Helper()
	br.run("phone", chromedp.EmulateViewport(390, 844))
	for page, sel := range pages {
		br.run("phone "+page, chromedp.Navigate(url+page), chromedp.WaitVisible(chromedp.CSS(sel+` tbody tr`)))
		if w := eval[int](br, `document.documentElement.scrollWidth`); w > 390 {
			br.t.Errorf("on a 390 px wide screen %s is %d px wide", page, w)
		}
	}
	br.shot("phone")
	br.run("desktop", chromedp.EmulateViewport(1280, 900))
}
