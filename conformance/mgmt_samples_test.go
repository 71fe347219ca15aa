package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// A vhost as RabbitMQ 3.10.8 shows it with its figures over time: GET
// /api/vhosts/%2F?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5
// has message_stats (publish 13, publish_details {"rate": 0.0, "samples":
// [{"sample": 13, "timestamp": 1796600860000}, ...]}), recv_oct,
// send_oct and their details, and messages_details,
// messages_ready_details, messages_unacknowledged_details each with
// "samples": [{"sample": 205, "timestamp": 1796600860000},
// {"sample": 205, "timestamp": 1796600855000}, ...], newest first, a
// sample each lengths_incr seconds.
func TestMgmtVHostSamples(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: 200 * time.Millisecond}) // what newAPI serves
	a := newAPI(t, b)
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("vs-q", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 3; i++ {
		must(t, ch.Publish("", "vs-q", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	var v map[string]any
	samples := func(m map[string]any, key string) []any {
		d, _ := m[key].(map[string]any)
		l, _ := d["samples"].([]any)
		return l
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		v = nil
		a.call("GET", "/api/vhosts/%2F?lengths_age=60&lengths_incr=1", "guest", "guest", nil, &v)
		s := samples(v, "messages_details")
		if len(s) < 2 {
			return false
		}
		newest, _ := s[0].(map[string]any)
		return fmt.Sprint(newest["sample"]) == "3"
	}, "vhost messages_details.samples: %v", v["messages_details"])
	s := samples(v, "messages_details")
	first, second := s[0].(map[string]any), s[1].(map[string]any)
	t1, _ := first["timestamp"].(float64)
	t2, _ := second["timestamp"].(float64)
	if t1 <= t2 || t1 < float64(time.Now().Add(-time.Minute).UnixMilli()) || t1-t2 < 800 {
		t.Errorf("samples not newest first, 1 s apart, in ms: %v", s[:2])
	}
	for _, k := range []string{"messages_ready_details", "messages_unacknowledged_details"} {
		if len(samples(v, k)) < 2 {
			t.Errorf("%s: %v", k, v[k])
		}
	}
	ms, _ := v["message_stats"].(map[string]any)
	if fmt.Sprint(ms["publish"]) != "3" || len(samples(ms, "publish_details")) < 2 {
		t.Errorf("message_stats %v", ms)
	}
	for _, k := range []string{"recv_oct", "send_oct"} {
		if n, _ := v[k].(float64); n <= 0 {
			t.Errorf("%s = %v", k, v[k])
		}
		if d, _ := v[k+"_details"].(map[string]any); d == nil || d["rate"] == nil {
			t.Errorf("%s_details = %v", k, v[k+"_details"])
		}
	}
	// Without the parameters, no samples (as RabbitMQ).
	v = nil
	a.call("GET", "/api/vhosts/%2F", "guest", "guest", nil, &v)
	if samples(v, "messages_details") != nil {
		t.Errorf("samples without lengths_age: %v", v["messages_details"])
	}
}
