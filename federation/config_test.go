package federation_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/federation"
)

// unescape undoes the management plugin's HTML escaping of the texts
// pinned from RabbitMQ 3.10.8 (notes/shovel-rabbit.md), which ErrorLines
// leaves to the management API.
func unescape(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">").Replace(s)
}

// TestValidateUpstream: the reasons RabbitMQ 3.10.8 answered to PUT
// /api/parameters/federation-upstream/sr-down/u0 (after
// "Validation failed\n\n"), in its order.
func TestValidateUpstream(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  map[string]any
		want string // "" for valid
	}{
		{"empty", map[string]any{}, `Key "uri" not found in u0` + "\n"},
		{"http", map[string]any{"uri": "http://x"}, `"http://x" not a valid URI: {{unexpected_uri_scheme,"http"},"http://x"}` + "\n"},
		{"empty uri", map[string]any{"uri": ""}, `"" not a valid URI: {{unable_to_parse_uri,no_scheme},[]}` + "\n"},
		{"uri number", map[string]any{"uri": float64(5)}, "uri should be list, actually was 5\n"},
		{"numbers", map[string]any{"uri": "amqp://", "expires": "x", "message-ttl": "y", "max-hops": "z", "prefetch-count": "p", "reconnect-delay": "r"},
			`message-ttl should be a number, actually was &lt;&lt;"y"&gt;&gt;` + "\n" + `expires should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n" +
				`max-hops should be a number, actually was &lt;&lt;"z"&gt;&gt;` + "\n" + `reconnect-delay should be a number, actually was &lt;&lt;"r"&gt;&gt;` + "\n" +
				`prefetch-count should be a number, actually was &lt;&lt;"p"&gt;&gt;` + "\n"},
		{"ack-mode", map[string]any{"uri": "amqp://", "ack-mode": "bogus"},
			`ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"bogus"&gt;&gt;` + "\n"},
		{"trust-user-id", map[string]any{"uri": "amqp://", "trust-user-id": "yes"}, `trust-user-id should be boolean, actually was &lt;&lt;"yes"&gt;&gt;` + "\n"},
		{"binaries", map[string]any{"uri": "amqp://", "exchange": float64(5), "queue": float64(6)},
			"queue should be binary, actually was 6\nexchange should be binary, actually was 5\n"},
		{"unknown", map[string]any{"uri": "amqp://", "bogus": float64(1)}, `Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in u0` + "\n"},
		{"enums", map[string]any{"uri": "amqp://", "resource-cleanup-mode": "x", "channel-use-mode": "y"},
			`channel-use-mode should be one of [&lt;&lt;"multiple"&gt;&gt;,&lt;&lt;"single"&gt;&gt;], actually was &lt;&lt;"y"&gt;&gt;` + "\n" +
				`resource-cleanup-mode should be one of [&lt;&lt;"default"&gt;&gt;,&lt;&lt;"never"&gt;&gt;], actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
		{"negative max-hops, zero expires", map[string]any{"uri": "amqp://", "max-hops": float64(-3), "expires": float64(0)}, ""},
		{"uri list, fractional max-hops", map[string]any{"uri": []any{"amqp://", "amqp://localhost"}, "max-hops": 1.5}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := federation.ValidateUpstream("u0", tc.def)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			var lines federation.ErrorLines
			if !errors.As(err, &lines) {
				t.Fatalf("err %v", err)
			}
			if got, want := err.Error(), "Validation failed\n\n"+unescape(tc.want); got != want {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
		})
	}
}

// TestValidateSet: federation-upstream-set texts of RabbitMQ 3.10.8
// (PUT /api/parameters/federation-upstream-set/sr-down/set0).
func TestValidateSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  []any
		want string
	}{
		{"no upstream", []any{map[string]any{}}, `Key "upstream" not found in set0` + "\n"},
		{"upstream number", []any{map[string]any{"upstream": float64(5)}}, "upstream should be binary, actually was 5\n"},
		{"two entries", []any{map[string]any{"upstream": "a", "bogus": float64(1)}, map[string]any{"upstream": "b", "max-hops": "x"}},
			`Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in set0` + "\n" + `max-hops should be a number, actually was &lt;&lt;"x"&gt;&gt;` + "\n"},
		{"empty", []any{}, ""},
		{"unknown upstream", []any{map[string]any{"upstream": "nosuch", "exchange": "ex2"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := federation.ValidateSet("set0", tc.def)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil || err.Error() != "Validation failed\n\n"+unescape(tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestParseAndResolve: defaults (rabbit_federation_upstream.erl v3.10.8:
// prefetch-count 1000, reconnect-delay 5 s, max-hops 1, ack-mode
// on-confirm, consumer tag federation-link-NAME), a set entry's keys over
// its upstream's, unknown names skipped, "all" as every upstream.
func TestParseAndResolve(t *testing.T) {
	ua, err := federation.ParseUpstream("ua", map[string]any{"uri": "amqp://h/a"})
	if err != nil {
		t.Fatal(err)
	}
	want := federation.Upstream{Name: "ua", URIs: []string{"amqp://h/a"}, ConsumerTag: "federation-link-ua", PrefetchCount: 1000,
		ReconnectDelay: 5 * time.Second, MaxHops: 1, AckMode: federation.OnConfirm, ResourceCleanupMode: "default"}
	if !reflect.DeepEqual(ua, want) {
		t.Fatalf("got  %+v\nwant %+v", ua, want)
	}
	ub, err := federation.ParseUpstream("ub", map[string]any{"uri": []any{"amqp://h/b", "amqp://h2/b"}, "max-hops": float64(2),
		"reconnect-delay": 0.5, "ack-mode": "no-ack", "expires": float64(1000), "message-ttl": float64(2000), "trust-user-id": true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ub.URIs) != 2 || ub.MaxHops != 2 || ub.ReconnectDelay != 500*time.Millisecond || ub.AckMode != federation.NoAck ||
		ub.Expires != 1000 || ub.MessageTTL != 2000 || !ub.TrustUserID {
		t.Fatalf("ub %+v", ub)
	}
	set, err := federation.ParseSet("s", []any{map[string]any{"upstream": "ua"}, map[string]any{"upstream": "ua", "exchange": "other"},
		map[string]any{"upstream": "nosuch"}})
	if err != nil {
		t.Fatal(err)
	}
	ups := map[string]federation.Upstream{"ua": ua, "ub": ub}
	got := federation.Resolve("s", set, ups)
	if len(got) != 2 || got[0].Exchange != "" || got[1].Exchange != "other" || got[1].Name != "ua" {
		t.Fatalf("set resolved to %+v", got)
	}
	if all := federation.Resolve("all", nil, ups); len(all) != 2 || all[0].Name != "ua" || all[1].Name != "ub" {
		t.Fatalf("all resolved to %+v", all)
	}
}

// TestQueueName: upstream_queue_name/3 (rabbit_federation_exchange_link.erl
// v3.10.8); RabbitMQ named fx in sr-down from sr-up
// "federation: fx -> rabbit@vm:sr-down:fx".
func TestQueueName(t *testing.T) {
	for _, tc := range []struct{ upX, upV, downV, downX, want string }{
		{"fx", "sr-up", "sr-down", "fx", "federation: fx -> rabbit@vm:sr-down:fx"},
		{"fx", "v", "v", "fx", "federation: fx -> rabbit@vm"},
		{"other", "v", "v", "fx", "federation: other -> rabbit@vm:fx"},
	} {
		if got := federation.QueueName(tc.upX, tc.upV, "rabbit@vm", tc.downV, tc.downX); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestStatusJSON: the keys of a link in GET /api/federation-links as
// RabbitMQ 3.10.8 serves them (notes/shovel-rabbit.md), less the
// broker's own (node, local_connection, local_channel).
func TestStatusJSON(t *testing.T) {
	ts := time.Date(2026, 12, 6, 18, 10, 43, 0, time.Local)
	x := federation.Status{Type: "exchange", Vhost: "sr-down", Name: "fx", UpstreamName: "fx", Upstream: "up1", ID: "9db92177",
		State: federation.Running, URI: "amqp://localhost:5672/sr-up", Timestamp: ts}.JSON()
	want := map[string]any{"exchange": "fx", "upstream_exchange": "fx", "type": "exchange", "vhost": "sr-down", "upstream": "up1",
		"id": "9db92177", "status": "running", "uri": "amqp://localhost:5672/sr-up", "timestamp": "2026-12-06 18:10:43"}
	if !reflect.DeepEqual(x, want) {
		t.Errorf("exchange link\ngot  %v\nwant %v", x, want)
	}
	q := federation.Status{Type: "queue", Vhost: "sr-down", Name: "fq", UpstreamName: "fq", Upstream: "up1", ConsumerTag: "federation-link-up1",
		ID: "a349d7dd", State: federation.Error, Error: "econnrefused", URI: "amqp://localhost:5999/sr-up", Timestamp: ts}.JSON()
	want = map[string]any{"queue": "fq", "upstream_queue": "fq", "consumer_tag": "federation-link-up1", "type": "queue", "vhost": "sr-down",
		"upstream": "up1", "id": "a349d7dd", "status": "error", "error": "econnrefused", "uri": "amqp://localhost:5999/sr-up",
		"timestamp": "2026-12-06 18:10:43"}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("queue link\ngot  %v\nwant %v", q, want)
	}
	if got := federation.Timestamp(time.Date(2026, 1, 2, 9, 5, 3, 0, time.Local)); got != "2026-01-02 9:05:03" {
		t.Errorf("timestamp %q", got)
	}
}

// TestQueueHeaders: update_headers/5 of rabbit_federation_queue_link.erl
// (v3.10.8): first hop records the original exchange and key; a message
// coming back through the same upstream (same uri and queue) has that
// entry moved to the front with visit-count + 1, others kept; CC becomes
// x-original-cc.
func TestQueueHeaders(t *testing.T) {
	tbl := rmq.Table{"uri": "amqp://a/v", "queue": "q"}
	h := federation.QueueHeaders(rmq.Table{"CC": []any{"k2"}}, tbl, false, "ex", "k")
	want := rmq.Table{"x-original-cc": []any{"k2"}, "x-original-exchange": "ex", "x-original-routing-key": "k",
		"x-received-from": []any{rmq.Table{"uri": "amqp://a/v", "queue": "q", "redelivered": false, "visit-count": int64(1)}}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("first hop\ngot  %v\nwant %v", h, want)
	}
	other := rmq.Table{"uri": "amqp://b/v", "queue": "q", "redelivered": false, "visit-count": int64(1)}
	h["x-received-from"] = append(h["x-received-from"].([]any), other)
	h = federation.QueueHeaders(h, tbl, true, "", "q")
	rf := h["x-received-from"].([]any)
	if len(rf) != 2 || rf[0].(rmq.Table)["visit-count"] != int64(2) || rf[0].(rmq.Table)["redelivered"] != true ||
		!reflect.DeepEqual(rf[1], other) || h["x-original-exchange"] != "ex" {
		t.Fatalf("second visit %v", h)
	}
}

// TestShouldForward: should_forward/4 (rabbit_federation_util.erl v3.10.8).
func TestShouldForward(t *testing.T) {
	one := rmq.Table{"x-received-from": []any{rmq.Table{"cluster-name": "a", "vhost": "v"}}}
	for _, tc := range []struct {
		h       rmq.Table
		hops    int
		cluster string
		want    bool
	}{
		{nil, 1, "b", true},
		{rmq.Table{"x-received-from": "junk"}, 1, "b", true},
		{one, 1, "b", false},
		{one, 2, "b", true},
		{one, 2, "a", false},
	} {
		if got := federation.ShouldForward(tc.h, tc.hops, tc.cluster, "v"); got != tc.want {
			t.Errorf("%v hops %d cluster %s: %v", tc.h, tc.hops, tc.cluster, got)
		}
	}
}
