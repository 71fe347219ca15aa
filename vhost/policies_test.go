package vhost

import (
	"fmt"
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

// TestAppliedPoliciesArePruned: what policies give each queue is kept
// only for queues a policy matches, and goes with the queue: setting
// policies that match no queue, or deleting the queues, leaves nothing
// behind (it held an entry, with its own map, for every queue).
func TestAppliedPoliciesArePruned(t *testing.T) {
	v := newTestVHost(t)
	const n = 200
	for i := range n {
		if _, _, _, err := v.DeclareQueue(QueueDecl{Name: fmt.Sprintf("ap-%03d", i)}, queue.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	size := func() int {
		v.mu.RLock()
		defer v.mu.RUnlock()
		return len(v.applied)
	}
	none, err := NewPolicyDef("none", "^nothing-matches$", "queues", 0, map[string]any{"max-length": 5.0}, false)
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewPolicyDef("all", "^ap-", "queues", 0, map[string]any{"max-length": 5.0}, false)
	if err != nil {
		t.Fatal(err)
	}
	v.SetPolicies([]*PolicyDef{none}, nil)
	if got := size(); got != 0 {
		t.Fatalf("a policy matching no queue: %d entries, want 0", got)
	}
	v.SetPolicies([]*PolicyDef{all}, nil)
	if got := size(); got != n {
		t.Fatalf("a policy matching every queue: %d entries, want %d", got, n)
	}
	v.SetPolicies(nil, nil)
	if got := size(); got != 0 {
		t.Fatalf("policies cleared: %d entries, want 0", got)
	}
	v.SetPolicies([]*PolicyDef{all}, nil)
	for i := range n {
		if _, err := v.DeleteQueue(0, fmt.Sprintf("ap-%03d", i), false, false); err != nil {
			t.Fatal(err)
		}
	}
	if got := size(); got != 0 {
		t.Fatalf("queues deleted: %d entries, want 0", got)
	}
}
