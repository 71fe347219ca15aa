package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

func newAPI(t *testing.T, b *testutil.Broker) *api {
	hs := httptest.NewServer(b.Server.ManagementHandler())
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
}

// Every AMQP method that checks a permission refuses, with RabbitMQ's
// 403 and text, what the user's patterns do not allow, and allows what
// they do. bob may configure and read "bob-*" and write "bob-*" and the
// default exchange.
func TestPermissionChecks(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	a.admin("PUT", "/api/users/bob", map[string]any{"password": "pw", "tags": "management"}, 201)
	a.admin("PUT", "/api/permissions/%2F/bob", map[string]any{"configure": "^bob-", "write": "^(bob-.*|amq\\.default)$", "read": "^bob-"}, 201)
	// Objects bob may not make, made by guest.
	admin := dial(t, b.URL)
	ach, _ := admin.Channel()
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
		{"basic.publish to the default exchange", func(ch *rmq.Channel) error {
			if err := ch.Publish("", "bob-q", false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
				return err
			}
			_, err := ch.QueueDeclarePassive("bob-q", false, false, false, false, nil) // a round trip: the publish was taken
			return err
		}, ""},
		{"basic.publish", func(ch *rmq.Channel) error {
			if err := ch.Publish("other-x", "k", false, false, rmq.Publishing{Body: []byte("x")}); err != nil {
				return err
			}
			_, err := ch.QueueDeclarePassive("bob-q", false, false, false, false, nil)
			return err
		}, refusedX("other-x")},
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
