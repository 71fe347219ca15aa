package vhost

import (
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// The retry keys of a policy are checked as their arguments are, and
// reach the queue's policy; the queue's own arguments win over them.
func TestRetryPolicyKeys(t *testing.T) {
	for _, c := range []struct {
		def map[string]any
		ok  bool
	}{
		{map[string]any{"retry-delay": 1000.0}, true},
		{map[string]any{"retry-delay": 1.5}, false},
		{map[string]any{"retry-delay": -1.0}, false},
		{map[string]any{"retry-backoff": 1.5}, true},
		{map[string]any{"retry-backoff": 0.5}, false},
		{map[string]any{"retry-backoff": "2"}, false},
		{map[string]any{"retry-delay-max": 0.0}, false},
		{map[string]any{"retry-delay-max": 60000.0}, true},
		{map[string]any{"retry-jitter": 0.2}, true},
		{map[string]any{"retry-jitter": 2.0}, false},
	} {
		_, err := NewPolicyDef("p", ".*", "queues", 0, c.def, false)
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v, want ok %v", c.def, err, c.ok)
		}
	}
	if _, err := NewPolicyDef("op", ".*", "queues", 0, map[string]any{"retry-delay": 1000.0}, true); err == nil {
		t.Error("an operator policy took retry-delay")
	}

	p, err := NewPolicyDef("p", ".*", "queues", 0, map[string]any{"retry-delay": 1000.0, "retry-backoff": 1.5, "retry-delay-max": 9000.0, "retry-jitter": 0.25}, false)
	if err != nil {
		t.Fatal(err)
	}
	v := &VHost{name: "/"}
	_, pol, _ := v.policyFor("q", nil, []*PolicyDef{p}, nil)
	want := queue.Retry{Delay: time.Second, Backoff: 1.5, Max: 9 * time.Second, Jitter: 0.25}
	if pol.Retry != want {
		t.Fatalf("policy gives %+v, want %+v", pol.Retry, want)
	}
	_, pol, _ = v.policyFor("q", amqp.Table{"x-retry-delay": int32(50), "x-retry-backoff": int32(3)}, []*PolicyDef{p}, nil)
	want = queue.Retry{Delay: 50 * time.Millisecond, Backoff: 3, Max: 9 * time.Second, Jitter: 0.25}
	if pol.Retry != want {
		t.Fatalf("arguments and policy give %+v, want %+v", pol.Retry, want)
	}
}
