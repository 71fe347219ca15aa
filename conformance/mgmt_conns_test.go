package conformance

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// GET /api/connections, /api/vhosts/{vhost}/connections,
// /api/connections/{name}/channels and /api/channels/{name} answer with
// RabbitMQ's fields. What RabbitMQ 3.10.8 answered for a pika connection
// named "api-probe" with two channels (the first in confirm mode, 6
// publishes, a basic.get acked and one with no-ack; the second with
// basic.qos 7 and a consumer):
//
//	{"auth_mechanism":"PLAIN","channel_max":2047,"channels":2,
//	 "client_properties":{...,"connection_name":"api-probe",...},
//	 "connected_at":1796598284937,"frame_max":131072,"host":"127.0.0.1",
//	 "name":"127.0.0.1:36250 -> 127.0.0.1:5672","node":"rabbit@vm",
//	 "peer_cert_issuer":null,"peer_cert_subject":null,"peer_cert_validity":null,
//	 "peer_host":"127.0.0.1","peer_port":36250,"port":5672,"protocol":"AMQP 0-9-1",
//	 "recv_cnt":17,"recv_oct":976,"recv_oct_details":{"rate":0.0},"send_cnt":17,
//	 "send_oct":1272,"send_oct_details":{"rate":0.0},"send_pend":0,"ssl":false,
//	 "ssl_cipher":null,"ssl_hash":null,"ssl_key_exchange":null,"ssl_protocol":null,
//	 "state":"running","timeout":60,"type":"network","user":"guest",
//	 "user_provided_name":"api-probe","user_who_performed_action":"guest","vhost":"/"}
//
// (railmq answered recv_oct 976 for the same client), and the first
// channel's message_stats {"ack":1,"confirm":6,"deliver":0,"deliver_get":2,
// "deliver_no_ack":0,"drop_unroutable":0,"get":1,"get_empty":0,"get_no_ack":1,
// "publish":6,"redeliver":0,"return_unroutable":0, each with _details
// {"rate":...}}; the consumer's channel had no publishing keys, and a
// channel that did nothing has no message_stats. A connection the client
// did not name has no user_provided_name. Also run against RabbitMQ
// (RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL).
func TestMgmtConnectionAndChannelFields(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	conn, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "mgmt-fields"}, Heartbeat: 20 * time.Second})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	plain := dial(t, b.URL)
	channelTraffic(t, conn, func(ch *rmq.Channel) (rmq.Queue, error) { return ch.QueueDeclare("", false, false, true, false, nil) },
		"mgmt-fields-nowhere", "mgmt-fields-c")

	// The connection, found by its name.
	_, port, _ := net.SplitHostPort(conn.LocalAddr().String())
	var c map[string]any
	testutil.Eventually(t, 30*time.Second, func() bool {
		var cs []map[string]any
		a.call("GET", "/api/connections", "guest", "guest", nil, &cs)
		for _, x := range cs {
			if fmt.Sprint(x["peer_port"]) == port && fmt.Sprint(x["channels"]) == "2" {
				c = x
			}
		}
		return c != nil
	}, "connection from port %s with 2 channels not listed", port)
	srvHost, srvPort, _ := net.SplitHostPort(conn.RemoteAddr().String())
	want := map[string]string{"user_provided_name": "mgmt-fields", "channels": "2", "host": srvHost, "port": srvPort,
		"peer_host": "127.0.0.1", "peer_port": port, "ssl": "false", "protocol": "AMQP 0-9-1", "auth_mechanism": "PLAIN",
		"timeout": "20", "frame_max": "131072", "channel_max": "2047", "state": "running", "type": "network", "user": "guest",
		"user_who_performed_action": "guest", "vhost": "/", "ssl_protocol": "<nil>", "ssl_cipher": "<nil>", "peer_cert_subject": "<nil>"}
	for k, v := range want {
		if got := fmt.Sprint(c[k]); got != v {
			t.Errorf("connection %s = %s, want %s", k, got, v)
		}
	}
	for _, k := range []string{"recv_oct", "send_oct", "recv_cnt", "send_cnt", "connected_at"} {
		if n, _ := c[k].(float64); n <= 0 {
			t.Errorf("connection %s = %v, want > 0", k, c[k])
		}
	}
	for _, k := range []string{"recv_oct_details", "send_oct_details"} {
		if d, _ := c[k].(map[string]any); d == nil || d["rate"] == nil {
			t.Errorf("connection %s = %v, want {rate}", k, c[k])
		}
	}
	if props, _ := c["client_properties"].(map[string]any); props["connection_name"] != "mgmt-fields" {
		t.Errorf("client_properties %v", c["client_properties"])
	}
	name := c["name"].(string)

	// The unnamed connection has no user_provided_name; the vhost's list
	// has both.
	var vcs []map[string]any
	if code := a.call("GET", "/api/vhosts/%2F/connections", "guest", "guest", nil, &vcs); code != 200 {
		t.Fatalf("GET /api/vhosts/%%2F/connections: %d", code)
	}
	_, plainPort, _ := net.SplitHostPort(plain.LocalAddr().String())
	seen := 0
	for _, x := range vcs {
		switch fmt.Sprint(x["peer_port"]) {
		case port:
			seen++
		case plainPort:
			seen++
			if _, has := x["user_provided_name"]; has {
				t.Errorf("unnamed connection has user_provided_name %v", x["user_provided_name"])
			}
		}
	}
	if seen != 2 {
		t.Errorf("/api/vhosts/%%2F/connections: %d of the 2 connections", seen)
	}
	checkChannels(t, a, name)
}

// checkChannels checks the channels of connection name (opened by
// TestMgmtConnectionAndChannelFields).
func checkChannels(t *testing.T, a *api, name string) {
	t.Helper()
	var chs []map[string]any
	if code := a.call("GET", "/api/connections/"+url.PathEscape(name)+"/channels", "guest", "guest", nil, &chs); code != 200 || len(chs) != 2 {
		t.Fatalf("GET /api/connections/{name}/channels: %d %v", code, chs)
	}
	// RabbitMQ's counts show at its next stats emission: wait for them.
	var ch1, ch2 map[string]any
	testutil.Eventually(t, 30*time.Second, func() bool {
		ch1, ch2 = nil, nil
		a.call("GET", "/api/channels/"+url.PathEscape(name+" (1)"), "guest", "guest", nil, &ch1)
		a.call("GET", "/api/channels/"+url.PathEscape(name+" (2)"), "guest", "guest", nil, &ch2)
		ms, _ := ch1["message_stats"].(map[string]any)
		ms2, _ := ch2["message_stats"].(map[string]any)
		return fmt.Sprint(ms["publish"]) == "6" && fmt.Sprint(ms["get_no_ack"]) == "1" && fmt.Sprint(ms["ack"]) == "1" && fmt.Sprint(ms2["deliver"]) == "3"
	}, "channel message_stats")
	ms := ch1["message_stats"].(map[string]any)
	for k, v := range map[string]string{"publish": "6", "confirm": "6", "return_unroutable": "0", "get": "1", "get_no_ack": "1",
		"get_empty": "0", "ack": "1", "deliver": "0", "deliver_no_ack": "0", "deliver_get": "2", "redeliver": "0"} {
		if got := fmt.Sprint(ms[k]); got != v {
			t.Errorf("channel 1 message_stats.%s = %s, want %s", k, got, v)
		}
		if d, _ := ms[k+"_details"].(map[string]any); d == nil || d["rate"] == nil {
			t.Errorf("channel 1 message_stats.%s_details = %v", k, ms[k+"_details"])
		}
	}
	// drop_unroutable is counted by RabbitMQ only with its
	// drop_unroutable_metric feature flag (off on 3.10.8 by default).
	if _, ok := ms["drop_unroutable"]; !ok {
		t.Error("channel 1 message_stats has no drop_unroutable")
	}
	for k, v := range map[string]string{"number": "1", "confirm": "true", "transactional": "false", "consumer_count": "0",
		"messages_uncommitted": "0", "acks_uncommitted": "0", "user": "guest", "vhost": "/", "state": "running"} {
		if got := fmt.Sprint(ch1[k]); got != v {
			t.Errorf("channel 1 %s = %s, want %s", k, got, v)
		}
	}
	for _, k := range []string{"consumer_details", "publishes", "deliveries"} {
		if l, ok := ch1[k].([]any); !ok || len(l) != 0 {
			t.Errorf("channel 1 %s = %v, want []", k, ch1[k])
		}
	}
	ms2 := ch2["message_stats"].(map[string]any)
	if _, has := ms2["publish"]; has {
		t.Errorf("the consumer's channel has publishing stats: %v", ms2)
	}
	if fmt.Sprint(ch2["prefetch_count"]) != "7" || fmt.Sprint(ch2["consumer_count"]) != "1" || fmt.Sprint(ch2["messages_unacknowledged"]) != "3" {
		t.Errorf("channel 2: prefetch %v consumers %v unacked %v", ch2["prefetch_count"], ch2["consumer_count"], ch2["messages_unacknowledged"])
	}
	if cd, _ := ch2["consumer_details"].([]any); len(cd) != 1 {
		t.Errorf("channel 2 consumer_details %v", ch2["consumer_details"])
	}
	if code := a.call("GET", "/api/channels/"+url.PathEscape(name+" (9)"), "guest", "guest", nil, nil); code != 404 {
		t.Errorf("GET /api/channels/{no such channel}: %d, want 404", code)
	}
	// columns= reaches into the rate objects (it answered nothing there).
	code, body := a.raw("GET", "/api/channels?columns=name,message_stats.publish_details.rate")
	var cols []map[string]any
	if err := json.Unmarshal([]byte(body), &cols); code != 200 || err != nil {
		t.Fatalf("columns: %d %s", code, body)
	}
	found := false
	for _, x := range cols {
		if x["name"] == name+" (1)" {
			found = true
			ms, _ := x["message_stats"].(map[string]any)
			pd, _ := ms["publish_details"].(map[string]any)
			if _, ok := pd["rate"].(float64); !ok || len(x) != 2 || len(ms) != 1 || len(pd) != 1 {
				t.Errorf("columns=name,message_stats.publish_details.rate: %v", x)
			}
		}
	}
	if !found {
		t.Errorf("columns: channel 1 not listed: %s", body)
	}
	var vchs []map[string]any
	if code := a.call("GET", "/api/vhosts/%2F/channels", "guest", "guest", nil, &vchs); code != 200 || len(vchs) < 2 {
		t.Errorf("GET /api/vhosts/%%2F/channels: %d, %d channels", code, len(vchs))
	}
}

// Every list takes RabbitMQ's pagination: page, page_size, name,
// use_regex, and answers {filtered_count, item_count, items, page,
// page_count, page_size, total_count}. RabbitMQ 3.10.8 pages connections,
// channels, exchanges, queues and vhosts (asked with page=1&page_size=1;
// its other lists answer the whole array), and an empty list is page 1
// of 0: GET /api/connections?page=1&page_size=1 with none open is
// {"total_count":0,"item_count":0,"filtered_count":0,"page":1,
// "page_size":1,"page_count":0,"items":[]}, and page=2 400
// {"error":"page_out_of_range","reason":"Page out of range, page: 2 page
// size: 1, len: 0"}. railmq pages every list the same way (the console
// asks for pages of each).
func TestMgmtPaginationEveryList(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	type paged struct {
		Filtered  *int             `json:"filtered_count"`
		ItemCount *int             `json:"item_count"`
		Items     []map[string]any `json:"items"`
		Page      *int             `json:"page"`
		PageCount *int             `json:"page_count"`
		PageSize  *int             `json:"page_size"`
		Total     *int             `json:"total_count"`
	}
	for _, p := range []string{"/api/connections", "/api/channels", "/api/vhosts/%2F/connections", "/api/vhosts/%2F/channels"} {
		var pg paged
		if code := a.call("GET", p+"?page=1&page_size=1", "guest", "guest", nil, &pg); code != 200 || pg.PageCount == nil || *pg.PageCount != 0 || *pg.Total != 0 || pg.Items == nil {
			t.Errorf("%s with nothing open: %d %+v", p, code, pg)
		}
		code, body := a.raw("GET", p+"?page=2&page_size=1")
		if code != 400 || !json.Valid([]byte(body)) || !strings.Contains(body, "Page out of range, page: 2 page size: 1, len: 0") {
			t.Errorf("%s page 2 of 0: %d %s", p, code, body)
		}
	}
	for i := 0; i < 3; i++ {
		c := dial(t, b.URL)
		_, err := c.Channel()
		must(t, err)
	}
	e := &env{t: t, b: b, conn: dial(t, b.URL)}
	e.ch = e.channel(e.conn)
	must(t, e.ch.ExchangeDeclare("pg-x", "direct", false, true, false, false, nil))
	a.admin("PUT", "/api/users/pg-user", map[string]any{"password": "pw", "tags": ""}, 201)
	a.admin("PUT", "/api/policies/%2F/pg-pol", map[string]any{"pattern": "^pg-", "definition": map[string]any{"max-length": 5}}, 201)
	a.admin("PUT", "/api/global-parameters/pg-g", map[string]any{"value": 1}, 201)
	lists := []string{"/api/connections", "/api/channels", "/api/exchanges", "/api/exchanges/%2F", "/api/queues", "/api/bindings",
		"/api/consumers", "/api/vhosts", "/api/users", "/api/policies", "/api/policies/%2F", "/api/permissions",
		"/api/global-parameters", "/api/feature-flags", "/api/nodes", "/api/vhosts/%2F/connections", "/api/vhosts/%2F/channels"}
	for _, p := range lists {
		var all []map[string]any
		if code := a.call("GET", p, "guest", "guest", nil, &all); code != 200 {
			t.Fatalf("GET %s: %d", p, code)
		}
		var pg paged
		if code := a.call("GET", p+"?page=1&page_size=1", "guest", "guest", nil, &pg); code != 200 {
			t.Fatalf("GET %s paged: %d", p, code)
		}
		if pg.Total == nil || pg.Filtered == nil || pg.ItemCount == nil || pg.Page == nil || pg.PageCount == nil || pg.PageSize == nil {
			t.Errorf("%s: not RabbitMQ's paged object: %+v", p, pg)
			continue
		}
		wantPages := len(all)
		if *pg.Total != len(all) || *pg.Filtered != len(all) || *pg.PageCount != wantPages || *pg.PageSize != 1 || *pg.Page != 1 ||
			len(pg.Items) != min(1, len(all)) || *pg.ItemCount != len(pg.Items) {
			t.Errorf("%s?page=1&page_size=1: %+v (the list has %d)", p, pg, len(all))
		}
	}
	// name filters, use_regex makes it a regular expression.
	var pg paged
	a.call("GET", "/api/exchanges?page=1&page_size=100&name=PG-", "guest", "guest", nil, &pg)
	if *pg.Filtered != 1 || pg.Items[0]["name"] != "pg-x" {
		t.Errorf("name=PG-: %+v", pg)
	}
	a.call("GET", "/api/exchanges?page=1&page_size=100&name=%5Eamq%5C.(direct%7Cfanout)%24&use_regex=true", "guest", "guest", nil, &pg)
	if *pg.Filtered != 2 {
		t.Errorf("use_regex: %+v", pg)
	}
	a.call("GET", "/api/users?page=1&page_size=100&name=pg-&sort=name&sort_reverse=true", "guest", "guest", nil, &pg)
	if *pg.Filtered != 1 || pg.Items[0]["name"] != "pg-user" {
		t.Errorf("users name=pg-: %+v", pg)
	}
	if code, body := a.raw("GET", "/api/users?page=0"); code != 400 || !strings.Contains(body, "invalid_pagination_parameters") {
		t.Errorf("page=0: %d %s", code, body)
	}
	a.admin("DELETE", "/api/users/pg-user", nil, 204)
}
