package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// api calls the management API of b as user:pass with a JSON body
// (nil: none) and decodes the answer into out (nil: ignored).
type api struct {
	t   *testing.T
	url string
}

// newAPI serves b's management API; with RAILMQ_TEST_URL set, it is the
// other broker's at RAILMQ_TEST_MGMT_URL (default RabbitMQ's on
// 127.0.0.1:15673).
func newAPI(t *testing.T, b *testutil.Broker) *api {
	if testutil.ExternalURL() != "" {
		u := os.Getenv("RAILMQ_TEST_MGMT_URL")
		if u == "" {
			u = "http://127.0.0.1:15673"
		}
		return &api{t: t, url: u}
	}
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	return &api{t: t, url: hs.URL}
}

func (a *api) call(method, path, user, pass string, body any, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	req.SetBasicAuth(user, pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			a.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func (a *api) admin(method, path string, body any, want int) {
	a.t.Helper()
	if got := a.call(method, path, "guest", "guest", body, nil); got != want {
		a.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// publishAndSync publishes a message and makes a round trip on ch: it
// returns the error the channel was closed with, if the publish was
// refused.
func publishAndSync(ch *rmq.Channel, ex, key string) error {
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	if err := ch.Publish(ex, key, false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
		return err
	}
	return syncErr(ch, closed)
}

// syncErr makes a round trip on ch (an asynchronous method was sent
// before): nil if the channel is still open, else the error it was
// closed with.
func syncErr(ch *rmq.Channel, closed <-chan *rmq.Error) error {
	if err := ch.ExchangeDeclarePassive("amq.topic", "topic", true, false, false, false, nil); err == nil {
		return nil
	}
	select {
	case e := <-closed:
		if e != nil {
			return e
		}
	case <-time.After(5 * time.Second):
	}
	return errors.New("the channel closed without an error")
}

func amqpErr(t *testing.T, err error, code int, reason string) {
	t.Helper()
	var e *rmq.Error
	if !errors.As(err, &e) || e.Code != code || e.Reason != reason {
		t.Fatalf("got %v, want %d %q", err, code, reason)
	}
}

// A vhost made at run time is a namespace of its own that survives a
// restart with its users, permissions and messages; a user without
// permissions in it is refused at connection.open with RabbitMQ's 530;
// deleting it closes its connections with 320 and its name is then
// unknown.
func TestVHostsAndUsersAtRunTime(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	a := newAPI(t, r.b)
	a.admin("PUT", "/api/vhosts/orders", map[string]any{"description": "orders team"}, 201)
	a.admin("PUT", "/api/vhosts/orders", map[string]any{"description": "orders team", "tags": "prod,eu"}, 204)
	a.admin("PUT", "/api/users/alice", map[string]any{"password": "pw", "tags": ""}, 201)
	url := "amqp://alice:pw@" + r.b.Addr + "/orders"
	_, err := rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - access to vhost 'orders' refused for user 'alice'")
	a.admin("PUT", "/api/permissions/orders/alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishPersistent(t, ch, "", "jobs", "in orders")
	c.Close()
	// The same queue name in / is another queue.
	c0, ch0 := r.dial()
	if q, err := ch0.QueueDeclare("jobs", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("jobs in /: %+v, %v", q, err)
	}
	c0.Close()

	r.restart()
	a = newAPI(t, r.b)
	url = "amqp://alice:pw@" + r.b.Addr + "/orders"
	var vh struct {
		Name, Description string
		Tags              []string
	}
	if code := a.call("GET", "/api/vhosts/orders", "guest", "guest", nil, &vh); code != 200 || vh.Description != "orders team" || strings.Join(vh.Tags, ",") != "prod,eu" {
		t.Fatalf("vhost after restart: %d %+v", code, vh)
	}
	c, err = rmq.Dial(url)
	if err != nil {
		t.Fatalf("alice after restart: %v", err)
	}
	ch, _ = c.Channel()
	d, ok, err := ch.Get("jobs", true)
	if err != nil || !ok || string(d.Body) != "in orders" {
		t.Fatalf("message after restart: %v %v %q", ok, err, d.Body)
	}
	a.admin("PUT", "/api/policies/orders/cap", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 5}}, 201)
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	a.admin("DELETE", "/api/vhosts/orders", nil, 204)
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - vhost 'orders' is deleted" {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the vhost's connection stayed open")
	}
	_, err = rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - vhost orders not found")
	a.admin("GET", "/api/vhosts/orders", nil, 404)
	r.restart()
	_, err = rmq.Dial("amqp://alice:pw@" + r.b.Addr + "/orders")
	amqpErr(t, err, 530, "NOT_ALLOWED - vhost orders not found")
	// A vhost made again with the name is a new one: nothing of the old.
	a = newAPI(t, r.b)
	a.admin("PUT", "/api/vhosts/orders", map[string]any{}, 201)
	r.restart()
	a = newAPI(t, r.b)
	var pols []any
	if a.call("GET", "/api/policies/orders", "guest", "guest", nil, &pols); len(pols) != 0 {
		t.Fatalf("the deleted vhost's policies came back: %v", pols)
	}
}

// Every AMQP method that checks a permission refuses, with RabbitMQ's
// 403 and text, what the user's patterns do not allow, and allows what
// they do. bob may configure and read "bob-*" and write "bob-*" and the
// default exchange.
func TestPermissionChecks(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/users/bob", map[string]any{"password": "pw", "tags": "management"}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/bob", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/permissions/%2F/bob", map[string]any{"configure": "^bob-", "write": "^(bob-.*|amq\\.default)$", "read": "^bob-"}, 201)
	// Objects bob may not make, made by guest.
	admin := dial(t, b.URL)
	ach, _ := admin.Channel()
	t.Cleanup(func() {
		ch, _ := admin.Channel()
		_ = ch.ExchangeDelete("other-x", false, false)
		_ = ch.ExchangeDelete("bob-x", false, false)
		for _, q := range []string{"other-q", "bob-q"} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
	must(t, ach.ExchangeDeclare("other-x", "topic", false, false, false, false, nil))
	if _, err := ach.QueueDeclare("other-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	bobURL := "amqp://bob:pw@" + b.Addr + "/"
	refusedQ := func(op string) string {
		return "ACCESS_REFUSED - access to queue '" + op + "' in vhost '/' refused for user 'bob'"
	}
	refusedX := func(x string) string {
		return "ACCESS_REFUSED - access to exchange '" + x + "' in vhost '/' refused for user 'bob'"
	}
	for _, tc := range []struct {
		name string
		do   func(ch *rmq.Channel) error
		want string // "" allowed
	}{
		{"queue.declare allowed", func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("bob-q", false, false, false, false, nil)
			return err
		}, ""},
		{"queue.declare", func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("q1", false, false, false, false, nil)
			return err
		}, refusedQ("q1")},
		{"queue.declare passive (not checked in 3.10)", func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclarePassive("other-q", false, false, false, false, nil)
			return err
		}, ""},
		{"queue.declare with a dead-letter exchange: write on it", func(ch *rmq.Channel) error {
			_, err := ch.QueueDeclare("bob-dl", false, false, false, false, rmq.Table{"x-dead-letter-exchange": "other-x"})
			return err
		}, refusedX("other-x")},
		{"exchange.declare", func(ch *rmq.Channel) error {
			return ch.ExchangeDeclare("x1", "direct", false, false, false, false, nil)
		}, refusedX("x1")},
		{"exchange.declare allowed", func(ch *rmq.Channel) error {
			return ch.ExchangeDeclare("bob-x", "topic", false, false, false, false, nil)
		}, ""},
		{"exchange.declare with an alternate exchange: write on it", func(ch *rmq.Channel) error {
			return ch.ExchangeDeclare("bob-ae", "direct", false, false, false, false, rmq.Table{"alternate-exchange": "other-x"})
		}, refusedX("other-x")},
		{"exchange.delete", func(ch *rmq.Channel) error { return ch.ExchangeDelete("other-x", false, false) }, refusedX("other-x")},
		{"queue.delete", func(ch *rmq.Channel) error { _, err := ch.QueueDelete("other-q", false, false, false); return err }, refusedQ("other-q")},
		{"queue.purge", func(ch *rmq.Channel) error { _, err := ch.QueuePurge("other-q", false); return err }, refusedQ("other-q")},
		{"basic.get", func(ch *rmq.Channel) error { _, _, err := ch.Get("other-q", true); return err }, refusedQ("other-q")},
		{"basic.consume", func(ch *rmq.Channel) error {
			_, err := ch.Consume("other-q", "", true, false, false, false, nil)
			return err
		}, refusedQ("other-q")},
		{"queue.bind: write on the queue", func(ch *rmq.Channel) error { return ch.QueueBind("other-q", "k", "bob-x", false, nil) }, refusedQ("other-q")},
		{"queue.bind: read on the exchange", func(ch *rmq.Channel) error { return ch.QueueBind("bob-q", "k", "other-x", false, nil) }, refusedX("other-x")},
		{"queue.bind allowed", func(ch *rmq.Channel) error { return ch.QueueBind("bob-q", "k", "bob-x", false, nil) }, ""},
		{"queue.unbind", func(ch *rmq.Channel) error { return ch.QueueUnbind("bob-q", "k", "other-x", nil) }, refusedX("other-x")},
		{"exchange.bind: write on the destination", func(ch *rmq.Channel) error { return ch.ExchangeBind("other-x", "k", "bob-x", false, nil) }, refusedX("other-x")},
		{"basic.publish to the default exchange", func(ch *rmq.Channel) error { return publishAndSync(ch, "", "bob-q") }, ""},
		{"basic.publish", func(ch *rmq.Channel) error { return publishAndSync(ch, "other-x", "k") }, refusedX("other-x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rmq.Dial(bobURL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ch, _ := c.Channel()
			err = tc.do(ch)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			amqpErr(t, err, 403, tc.want)
		})
	}
	// What was refused did not happen.
	if _, err := ach.QueueDeclarePassive("other-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ach.ExchangeDeclarePassive("other-x", "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// The rules of TestVHostsAndUsersAtRunTime that need no restart, also run
// against RabbitMQ (RAILMQ_TEST_URL) to pin its codes and texts.
func TestVHostAccessAndDeletion(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/vhosts/acc-v", map[string]any{"description": ""}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/vhosts/acc-v", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/users/acc-u", map[string]any{"password": "pw", "tags": ""}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/acc-u", "guest", "guest", nil, nil) })
	url := "amqp://acc-u:pw@" + b.Addr + "/acc-v"
	_, err := rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - access to vhost 'acc-v' refused for user 'acc-u'")
	_, err = rmq.Dial("amqp://acc-u:pw@" + b.Addr + "/acc-missing")
	amqpErr(t, err, 530, "NOT_ALLOWED - vhost acc-missing not found")
	// Empty patterns: access to the vhost, nothing in it.
	a.admin("PUT", "/api/permissions/acc-v/acc-u", map[string]any{"configure": "", "write": "", "read": ""}, 201)
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := c.Channel()
	_, err = ch.QueueDeclare("q", false, false, false, false, nil)
	amqpErr(t, err, 403, "ACCESS_REFUSED - access to queue 'q' in vhost 'acc-v' refused for user 'acc-u'")
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	a.admin("DELETE", "/api/vhosts/acc-v", nil, 204)
	select {
	case e := <-closed:
		// RabbitMQ races its vhost's supervisor and says "is down" at times.
		down := testutil.ExternalURL() != "" && e != nil && e.Reason == "CONNECTION_FORCED - vhost 'acc-v' is down"
		if e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - vhost 'acc-v' is deleted" && !down {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the vhost's connection stayed open")
	}
	_, err = rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - vhost acc-v not found")
	// Deleting a user closes its connections too.
	a.admin("PUT", "/api/permissions/%2F/acc-u", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	c, err = rmq.Dial("amqp://acc-u:pw@" + b.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	closed = c.NotifyClose(make(chan *rmq.Error, 1))
	a.admin("DELETE", "/api/users/acc-u", nil, 204)
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - user 'acc-u' is deleted" {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deleted user's connection stayed open")
	}
}

// Topic permissions: publishing to and binding from a topic exchange
// check the routing key against the user's write and read patterns for
// that exchange ({username} expanded); other exchanges are not checked.
func TestTopicPermissions(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/users/tp-u", map[string]any{"password": "pw", "tags": ""}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/tp-u", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/permissions/%2F/tp-u", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	a.admin("PUT", "/api/topic-permissions/%2F/tp-u", map[string]any{"exchange": "amq.topic", "write": "^{username}\\.", "read": "^public\\."}, 201)
	c, err := rmq.Dial("amqp://tp-u:pw@" + b.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	if err := publishAndSync(ch, "amq.topic", "tp-u.orders"); err != nil {
		t.Fatalf("own key refused: %v", err)
	}
	amqpErr(t, publishAndSync(ch, "amq.topic", "other.orders"), 403, "ACCESS_REFUSED - access to topic 'other.orders' in exchange 'amq.topic' in vhost '/' refused for user 'tp-u'")
	ch, _ = c.Channel()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, ch.QueueBind(q.Name, "public.#", "amq.topic", false, nil))
	amqpErr(t, ch.QueueBind(q.Name, "secret.#", "amq.topic", false, nil), 403,
		"ACCESS_REFUSED - access to topic 'secret.#' in exchange 'amq.topic' in vhost '/' refused for user 'tp-u'")
	ch, _ = c.Channel()
	if err := publishAndSync(ch, "amq.direct", "anything"); err != nil {
		t.Fatalf("an exchange without a topic permission: %v", err)
	}
}

// Who may use the management API, by tag, as RabbitMQ: a user without a
// management tag may not log in; a management user may not manage users
// or vhosts, sees only the vhosts it has permissions in and only its own
// connections; bad input gets 400.
func TestManagementAPIByTag(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, u := range []struct{ name, tags string }{{"tag-none", ""}, {"tag-mgmt", "management"}} {
		a.admin("PUT", "/api/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags}, 201)
		a.admin("PUT", "/api/permissions/%2F/"+u.name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
		name := u.name
		t.Cleanup(func() { a.call("DELETE", "/api/users/"+name, "guest", "guest", nil, nil) })
	}
	a.admin("PUT", "/api/vhosts/tag-v", map[string]any{}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/vhosts/tag-v", "guest", "guest", nil, nil) })
	var e struct{ Error, Reason string }
	if code := a.call("GET", "/api/whoami", "tag-none", "pw", nil, &e); code != 401 || e.Reason != "Not management user" {
		t.Fatalf("untagged user: %d %+v", code, e)
	}
	if code := a.call("GET", "/api/users", "tag-mgmt", "pw", nil, &e); code != 401 || e.Error != "not_authorised" || e.Reason != "Not administrator user" {
		t.Fatalf("management user listing users: %d %+v", code, e)
	}
	if code := a.call("PUT", "/api/vhosts/tag-v2", "tag-mgmt", "pw", map[string]any{}, &e); code != 401 || e.Reason != "Not administrator user" {
		t.Fatalf("management user making a vhost: %d %+v", code, e)
	}
	var vhs []struct{ Name string }
	a.call("GET", "/api/vhosts", "tag-mgmt", "pw", nil, &vhs)
	for _, v := range vhs {
		if v.Name == "tag-v" {
			t.Fatal("a management user sees a vhost it has no permissions in")
		}
	}
	for _, vh := range []string{"tag-v", "tag-missing"} { // the same, whether it exists or not
		if code := a.call("GET", "/api/vhosts/"+vh, "tag-mgmt", "pw", nil, &e); code != 401 || e.Reason != "Not administrator user" {
			t.Fatalf("a vhost without permissions: %d %+v", code, e)
		}
	}
	var who struct {
		Name string
		Tags []string
	}
	if code := a.call("GET", "/api/whoami", "tag-mgmt", "pw", nil, &who); code != 200 || who.Name != "tag-mgmt" || len(who.Tags) != 1 || who.Tags[0] != "management" {
		t.Fatalf("whoami: %d %+v", code, who)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		reason       string
	}{
		{"PUT", "/api/users/tag-x", map[string]any{"password": "pw"}, "tags_not_present"},
		{"PUT", "/api/permissions/tag-v/nobody", map[string]any{"configure": "", "write": "", "read": ""}, "vhost_or_user_not_found"},
		{"PUT", "/api/permissions/tag-v/tag-mgmt", map[string]any{"configure": ""}, "[{key_missing,write},{key_missing,read}]"},
		{"PUT", "/api/topic-permissions/tag-v/tag-mgmt", map[string]any{"write": "", "read": ""}, "[{key_missing,exchange}]"},
	} {
		if code := a.call(tc.method, tc.path, "guest", "guest", tc.body, &e); code != 400 || e.Error != "bad_request" || e.Reason != tc.reason {
			t.Errorf("%s %s: %d %+v, want 400 %q", tc.method, tc.path, code, e, tc.reason)
		}
	}
	// Not JSON, and a pattern that is not a regular expression.
	req, _ := http.NewRequest("PUT", a.url+"/api/users/tag-x", strings.NewReader("{not json"))
	req.SetBasicAuth("guest", "guest")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Reason != "not_json" {
		t.Fatalf("not JSON: %d %+v", resp.StatusCode, e)
	}
	if code := a.call("PUT", "/api/permissions/tag-v/tag-mgmt", "guest", "guest", map[string]any{"configure": "(", "write": "", "read": ""}, nil); code != 400 {
		t.Fatalf("invalid regex: %d", code)
	}
}

// Vhost and user limits, with RabbitMQ's API and its refusals: a vhost's
// max-queues refuses new queues (not redeclares), its max-connections
// and a user's refuse connection.open, a user's max-channels refuses
// channel.open over all its connections.
func TestLimits(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/vhosts/lim-v", map[string]any{}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/vhosts/lim-v", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/users/lim-u", map[string]any{"password": "pw", "tags": ""}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/lim-u", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/permissions/lim-v/lim-u", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	a.admin("PUT", "/api/vhost-limits/lim-v/max-queues", map[string]any{"value": 1}, 204)
	a.admin("PUT", "/api/vhost-limits/lim-v/max-connections", map[string]any{"value": 2}, 204)
	var got []struct {
		VHost string
		Value map[string]int64
	}
	if a.call("GET", "/api/vhost-limits/lim-v", "guest", "guest", nil, &got); len(got) != 1 || got[0].Value["max-queues"] != 1 || got[0].Value["max-connections"] != 2 {
		t.Fatalf("vhost limits %+v", got)
	}
	var e struct{ Error, Reason string }
	if code := a.call("PUT", "/api/vhost-limits/lim-v/bogus", "guest", "guest", map[string]any{"value": 1}, &e); code != 400 || e.Error != "bad_request" {
		t.Fatalf("unknown limit: %d %+v", code, e)
	}
	if code := a.call("PUT", "/api/vhost-limits/lim-missing/max-queues", "guest", "guest", map[string]any{"value": 1}, &e); code != 404 || e.Reason != "vhost_not_found" {
		t.Fatalf("missing vhost: %d %+v", code, e)
	}
	url := "amqp://lim-u:pw@" + b.Addr + "/lim-v"
	c1, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	ch, _ := c1.Channel()
	if _, err := ch.QueueDeclare("q1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q1", false, false, false, false, nil); err != nil {
		t.Fatalf("a redeclare is not a new queue: %v", err)
	}
	_, err = ch.QueueDeclare("q2", false, false, false, false, nil)
	amqpErr(t, err, 406, "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim-v' (1) is reached")
	c2, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - access to vhost 'lim-v' refused for user 'lim-u': connection limit (2) is reached")
	a.admin("DELETE", "/api/vhost-limits/lim-v/max-connections", nil, 204)
	a.admin("PUT", "/api/user-limits/lim-u/max-connections", map[string]any{"value": 2}, 204)
	_, err = rmq.Dial(url)
	amqpErr(t, err, 530, "NOT_ALLOWED - connection refused for user 'lim-u': user connection limit (2) is reached")
	a.admin("DELETE", "/api/user-limits/lim-u/max-connections", nil, 204)
	a.admin("PUT", "/api/user-limits/lim-u/max-channels", map[string]any{"value": 2}, 204)
	for _, c := range []*rmq.Connection{c1, c2} { // c1's channel closed on the 406: one each
		if _, err := c.Channel(); err != nil {
			t.Fatal(err)
		}
	}
	closed := c2.NotifyClose(make(chan *rmq.Error, 1))
	_, err = c2.Channel()
	if err == nil {
		t.Fatal("a third channel of the user opened")
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 530 || e.Reason != "NOT_ALLOWED - number of channels opened for user 'lim-u' has reached the maximum allowed user limit of (2)" {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.close")
	}
	var ul []struct {
		User  string
		Value map[string]int64
	}
	if a.call("GET", "/api/user-limits/lim-u", "guest", "guest", nil, &ul); len(ul) != 1 || ul[0].Value["max-channels"] != 2 {
		t.Fatalf("user limits %+v", ul)
	}
	a.admin("DELETE", "/api/user-limits/lim-u/max-channels", nil, 204)
}

// The user_id property must name the user who publishes, unless that
// user has the impersonator tag (RabbitMQ's check_user_id_header).
func TestUserIDAndImpersonator(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, u := range []struct{ name, tags string }{{"uid-plain", ""}, {"uid-imp", "impersonator"}} {
		a.admin("PUT", "/api/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags}, 201)
		a.admin("PUT", "/api/permissions/%2F/"+u.name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
		name := u.name
		t.Cleanup(func() { a.call("DELETE", "/api/users/"+name, "guest", "guest", nil, nil) })
	}
	publishAs := func(user, userID string) error {
		c, err := rmq.Dial("amqp://" + user + ":pw@" + b.Addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ch, _ := c.Channel()
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		closed := ch.NotifyClose(make(chan *rmq.Error, 1))
		must(t, ch.Publish("", q.Name, false, false, rmq.Publishing{UserId: userID, Body: []byte("x")}))
		return syncErr(ch, closed)
	}
	if err := publishAs("uid-plain", "uid-plain"); err != nil {
		t.Fatalf("own user_id: %v", err)
	}
	amqpErr(t, publishAs("uid-plain", "someone"), 406, "PRECONDITION_FAILED - user_id property set to 'someone' but authenticated user was 'uid-plain'")
	if err := publishAs("uid-imp", "someone"); err != nil {
		t.Fatalf("impersonator: %v", err)
	}
}

// A vhost deleted while connections publish into it with confirms: its
// publishers are closed with 320, nothing crashes, and the confirmed
// messages of another vhost are untouched, across a restart too.
func TestVHostDeletedWhilePublishing(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	a := newAPI(t, r.b)
	c0, ch0 := r.dial()
	if _, err := ch0.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		publishPersistent(t, ch0, "", "kept", fmt.Sprintf("m%d", i))
	}
	c0.Close()
	a.admin("PUT", "/api/vhosts/busy", map[string]any{}, 201) // guest, its maker, may use it
	url := "amqp://guest:guest@" + r.b.Addr + "/busy"
	var wg sync.WaitGroup
	var confirmed atomic.Int64
	for p := range 4 {
		c, err := rmq.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, _ := c.Channel()
		q := fmt.Sprintf("busy-%d", p)
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		must(t, ch.Confirm(false))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for {
				dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: make([]byte, 512)})
				if err != nil {
					return
				}
				if !dc.Wait() {
					return
				}
				confirmed.Add(1)
			}
		}()
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return confirmed.Load() > 500 }, "publishing into busy")
	a.admin("DELETE", "/api/vhosts/busy", nil, 204)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publishers into the deleted vhost still running")
	}
	check := func(when string) {
		t.Helper()
		c, ch := r.dial()
		defer c.Close()
		q, err := ch.QueueDeclarePassive("kept", true, false, false, false, nil)
		if err != nil || q.Messages != 200 {
			t.Fatalf("%s: kept has %d messages, %v", when, q.Messages, err)
		}
		if _, err := rmq.Dial("amqp://guest:guest@" + r.b.Addr + "/busy"); err == nil {
			t.Fatalf("%s: the deleted vhost accepts connections", when)
		}
	}
	check("after the delete")
	r.restart()
	check("after a restart")
}

// rabbitmqadmin, RabbitMQ's own CLI for its HTTP API, manages railmq's
// vhosts, users and permissions unchanged. It ships with Debian's
// rabbitmq-server; the test is skipped where it is not installed.
func TestRabbitmqadminManagesAccess(t *testing.T) {
	testutil.InProcess(t)
	admin := os.Getenv("RAILMQ_RABBITMQADMIN") // .ci/run: scripts/rabbitmqadmin.sh
	for _, p := range []string{"rabbitmqadmin", "/usr/bin/rabbitmqadmin"} {
		if admin != "" {
			break
		}
		if path, err := exec.LookPath(p); err == nil {
			admin = path
			break
		}
	}
	if admin == "" {
		t.Skip("rabbitmqadmin not found: set RAILMQ_RABBITMQADMIN=$(bash scripts/rabbitmqadmin.sh)")
	}
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	defer hs.Close()
	u, _ := neturl.Parse(hs.URL)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("python3", append([]string{admin, "-H", u.Hostname(), "-P", u.Port(), "-u", "guest", "-p", "guest"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqadmin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{
		{"declare", "vhost", "name=adm-v"},
		{"declare", "user", "name=adm-u", "password=pw", "tags=management"},
		{"declare", "permission", "vhost=adm-v", "user=adm-u", "configure=^adm-", "write=.*", "read=.*"},
	} {
		run(args...)
	}
	var vhosts []struct{ Name string }
	if err := json.Unmarshal([]byte(run("list", "vhosts", "-f", "raw_json")), &vhosts); err != nil || len(vhosts) != 2 || vhosts[1].Name != "adm-v" {
		t.Fatalf("list vhosts: %+v %v", vhosts, err)
	}
	if out := run("list", "users"); !strings.Contains(out, "adm-u") || !strings.Contains(out, "management") {
		t.Fatalf("list users:\n%s", out)
	}
	if out := run("list", "permissions"); !strings.Contains(out, "^adm-") {
		t.Fatalf("list permissions:\n%s", out)
	}
	c, err := rmq.Dial("amqp://adm-u:pw@" + b.Addr + "/adm-v")
	if err != nil {
		t.Fatalf("the user rabbitmqadmin made: %v", err)
	}
	c.Close()
	run("delete", "vhost", "name=adm-v")
	run("delete", "user", "name=adm-u")
	if out := run("list", "vhosts"); strings.Contains(out, "adm-v") {
		t.Fatalf("deleted vhost listed:\n%s", out)
	}

	// Exchanges, queues, bindings, publish and get, export and import.
	for _, args := range [][]string{
		{"declare", "exchange", "name=adm-x", "type=topic", "durable=true"},
		{"declare", "queue", "name=adm-q", "durable=true"},
		{"declare", "binding", "source=adm-x", "destination=adm-q", "routing_key=a.*"},
		{"publish", "exchange=adm-x", "routing_key=a.b", "payload=hello"},
	} {
		run(args...)
	}
	if out := run("list", "bindings", "source", "destination", "routing_key"); !strings.Contains(out, "a.*") {
		t.Fatalf("list bindings:\n%s", out)
	}
	if out := run("list", "queues", "name", "messages"); !strings.Contains(out, "adm-q") {
		t.Fatalf("list queues:\n%s", out)
	}
	if out := run("get", "queue=adm-q", "ackmode=ack_requeue_false"); !strings.Contains(out, "hello") {
		t.Fatalf("get:\n%s", out)
	}
	cmd := exec.Command("python3", admin, "-H", u.Hostname(), "-P", u.Port(), "-u", "guest", "-p", "guest",
		"declare", "exchange", "name=adm-x", "type=topic", "durable=false")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "inequivalent arg 'durable'") {
		t.Fatalf("an inequivalent redeclare: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "defs.json")
	run("export", file)
	run("delete", "queue", "name=adm-q")
	run("delete", "exchange", "name=adm-x")
	run("import", file)
	if out := run("list", "bindings", "source", "destination", "routing_key"); !strings.Contains(out, "a.*") {
		t.Fatalf("the imported binding:\n%s", out)
	}
	run("delete", "queue", "name=adm-q")
	run("delete", "exchange", "name=adm-x")
}

// The first user of a fresh store: DefaultUser (RABBITMQ_DEFAULT_USER's
// counterpart) instead of guest; users given with --users to a store that
// has users are added, and the stored ones stay.
func TestDefaultUserAndUsersFlagOnAnExistingStore(t *testing.T) {
	r := newRestartable(t, broker.Options{DefaultUser: "admin", DefaultPass: "s3cret", DefaultVHost: "main"})
	if _, err := rmq.Dial("amqp://guest:guest@" + r.b.Addr + "/"); !errors.Is(err, rmq.ErrCredentials) {
		t.Fatalf("guest on a store made with another default user: %v", err)
	}
	c, err := rmq.Dial("amqp://admin:s3cret@" + r.b.Addr + "/main")
	if err != nil {
		t.Fatalf("the default user in the default vhost: %v", err)
	}
	c.Close()
	r.opts.Users = map[string]string{"ops": "pw"}
	r.restart()
	for _, u := range []string{"admin:s3cret", "ops:pw"} {
		c, err := rmq.Dial("amqp://" + u + "@" + r.b.Addr + "/main")
		if err != nil {
			t.Fatalf("%s after a restart with --users: %v", u, err)
		}
		c.Close()
	}
}

// Users imported with a password hash of each algorithm RabbitMQ takes
// log in with their password; vhost names with "/" are one path segment
// when escaped; unknown fields are ignored, as RabbitMQ does; a
// management user sees and closes only its own connections.
func TestUsersImportedAndPathsEscaped(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, h := range []struct{ algo, hash string }{
		{"rabbit_password_hashing_sha256", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"},
		{"rabbit_password_hashing_sha512", "kI3GChuNuIYf8lRbCCxZjgjKwsY19ns6+uFO0zcXRBGA/XGJPYD8OWMy7EB8TaOmAzjP2azv84GbINYwX2cDWb4DHnc="},
		{"rabbit_password_hashing_md5", "kI3GChNpte2FApYFXScl+0dIluk="},
	} {
		name := "imp-" + h.algo[len("rabbit_password_hashing_"):]
		a.admin("PUT", "/api/users/"+name, map[string]any{"password_hash": h.hash, "hashing_algorithm": h.algo, "tags": "", "bogus": true}, 201)
		t.Cleanup(func() { a.call("DELETE", "/api/users/"+name, "guest", "guest", nil, nil) })
		a.admin("PUT", "/api/permissions/%2F/"+name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
		c, err := rmq.Dial("amqp://" + name + ":test12@" + b.Addr + "/")
		if err != nil {
			t.Fatalf("%s: %v", h.algo, err)
		}
		c.Close()
	}
	a.admin("PUT", "/api/vhosts/team%2Fa", map[string]any{}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/vhosts/team%2Fa", "guest", "guest", nil, nil) })
	var vh struct{ Name string }
	if code := a.call("GET", "/api/vhosts/team%2Fa", "guest", "guest", nil, &vh); code != 200 || vh.Name != "team/a" {
		t.Fatalf("vhost team/a: %d %+v", code, vh)
	}
	// Its maker got every permission in it, as from RabbitMQ.
	var perms []struct{ User, Configure string }
	if a.call("GET", "/api/vhosts/team%2Fa/permissions", "guest", "guest", nil, &perms); len(perms) != 1 || perms[0].User != "guest" || perms[0].Configure != ".*" {
		t.Fatalf("permissions in a new vhost: %+v", perms)
	}
	c, err := rmq.Dial("amqp://guest:guest@" + b.Addr + "/team%2Fa")
	if err != nil {
		t.Fatalf("connecting to team/a: %v", err)
	}
	c.Close()
	// Connections by owner.
	a.admin("PUT", "/api/users/own-m", map[string]any{"password": "pw", "tags": "management"}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/users/own-m", "guest", "guest", nil, nil) })
	a.admin("PUT", "/api/permissions/%2F/own-m", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	mine, err := rmq.DialConfig("amqp://own-m:pw@"+b.Addr+"/", rmq.Config{Properties: rmq.Table{"connection_name": "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	theirs, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "theirs"}})
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	var conns []struct {
		Name string
		User string
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		conns = nil
		a.call("GET", "/api/connections", "guest", "guest", nil, &conns)
		return len(conns) >= 2
	}, "both connections listed to the administrator")
	var theirName string
	for _, c := range conns {
		if c.User == "guest" {
			theirName = c.Name
		}
	}
	conns = nil
	a.call("GET", "/api/connections", "own-m", "pw", nil, &conns)
	for _, c := range conns {
		if c.User != "own-m" {
			t.Fatalf("a management user sees %s's connection %s", c.User, c.Name)
		}
	}
	if len(conns) != 1 {
		t.Fatalf("a management user sees %d connections of its own, want 1", len(conns))
	}
	if code := a.call("DELETE", "/api/connections/"+neturl.PathEscape(theirName), "own-m", "pw", nil, nil); code/100 == 2 {
		t.Fatalf("a management user closed another user's connection: %d", code)
	}
	if theirs.IsClosed() {
		t.Fatal("the other user's connection was closed")
	}
}
