package conformance

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func TestManagementAPI(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	hs := httptest.NewServer(e.b.ManagementHandler())
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, user string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, nil)
		req.SetBasicAuth(user, "guest")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	if code := call("GET", "/api/connections", "nobody", nil); code != 401 {
		t.Fatalf("unauthenticated: %d", code)
	}
	named, err := rmq.DialConfig(e.b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	var conns []struct {
		Name             string `json:"name"`
		User             string `json:"user"`
		ClientProperties struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	call("GET", "/api/connections/", "guest", &conns)
	var target string
	for _, c := range conns {
		if c.ClientProperties.ConnectionName == "billing" {
			target = c.Name
		}
	}
	if target == "" || len(conns) != 2 {
		t.Fatalf("connections %+v", conns)
	}
	closed := named.NotifyClose(make(chan *rmq.Error, 1))
	if code := call("DELETE", "/api/connections/"+url.PathEscape(target), "guest", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	select {
	case err := <-closed:
		expectErr(t, err, 320, "CONNECTION_FORCED - Closed via management plugin")
	case <-time.After(5 * time.Second):
		t.Fatal("not closed")
	}
	// Queue counts, with the age of the oldest message.
	q := e.queue("mgmt-q", nil)
	e.fill(q, 2)
	e.get(e.ch, q, false)
	var qs []struct {
		Name    string  `json:"name"`
		Ready   int     `json:"messages_ready"`
		Unacked int     `json:"messages_unacknowledged"`
		Age     float64 `json:"head_message_timestamp_age_seconds"`
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		call("GET", "/api/queues", "guest", &qs)
		return len(qs) == 1 && qs[0].Ready == 1 && qs[0].Unacked == 1
	}, "queue counts")
	if qs[0].Name != "mgmt-q" || qs[0].Age <= 0 {
		t.Fatalf("queues %+v", qs)
	}
}
