package vhost

import (
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// The x-delayed-retry arguments as RabbitMQ 4.3 reads them
// (rabbit_quorum_queue.erl v4.3.5 get_delayed_retry_config): on with a
// known type and a positive minimum, the maximum defaulting to the
// minimum; off otherwise, without a refusal.
func TestDelayedRetryArgs(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		args amqp.Table
		want queue.Retry
	}{
		{"all", amqp.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": int32(100), "x-delayed-retry-max": int64(900)},
			queue.Retry{Delay: 100 * ms, Max: 900 * ms, Linear: true, On: queue.RetryAll}},
		{"failed, max defaults to min", amqp.Table{"x-delayed-retry-type": "failed", "x-delayed-retry-min": int16(50)},
			queue.Retry{Delay: 50 * ms, Max: 50 * ms, Linear: true, On: queue.RetryFailed}},
		{"returned, bad max is min", amqp.Table{"x-delayed-retry-type": "returned", "x-delayed-retry-min": int32(5), "x-delayed-retry-max": int32(-1)},
			queue.Retry{Delay: 5 * ms, Max: 5 * ms, Linear: true, On: queue.RetryReturned}},
		{"disabled", amqp.Table{"x-delayed-retry-type": "disabled", "x-delayed-retry-min": int32(5)}, queue.Retry{}},
		{"unknown type", amqp.Table{"x-delayed-retry-type": "bogus", "x-delayed-retry-min": int32(5)}, queue.Retry{}},
		{"no min", amqp.Table{"x-delayed-retry-type": "all"}, queue.Retry{}},
		{"min 0", amqp.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": int32(0)}, queue.Retry{}},
		{"min a string", amqp.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": "5"}, queue.Retry{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			qa, err := validateQueueArgs("q", "v", c.args)
			if err != nil {
				t.Fatal(err)
			}
			if qa.policy.Retry != c.want {
				t.Fatalf("retry %+v, want %+v", qa.policy.Retry, c.want)
			}
		})
	}
}

// A delivery limit merged from an argument and a policy (or a policy and
// an operator policy): the lower, but a negative one (none) gives way
// (rabbit_quorum_queue.erl v4.3.5 resolve_delivery_limit,
// rabbit_policies.erl merge_policy_value); other limits the lower.
func TestMergeLimit(t *testing.T) {
	for _, c := range []struct {
		arg        string
		a, b, want int64
	}{
		{"x-delivery-limit", 5, 2, 2},
		{"x-delivery-limit", -1, 2, 2},
		{"x-delivery-limit", 7, -1, 7},
		{"x-delivery-limit", -1, -3, -1},
		{"x-max-length", -1, 2, -1},
		{"x-consumer-timeout", 1000, 300, 300},
	} {
		if got := mergeLimit(c.arg, c.a, c.b); got != c.want {
			t.Errorf("mergeLimit(%s, %d, %d) = %d, want %d", c.arg, c.a, c.b, got, c.want)
		}
	}
}

// The policies a quorum queue gets: its type does not make the merge
// fail (it did, leaving the queue with its arguments alone), the
// delivery limit merged as above, the consumer timeout the lower of the
// argument and the policy's, and an operator policy's delayed-retry keys
// merged as RabbitMQ merges them.
func TestPolicyForQuorumQueue(t *testing.T) {
	v := &VHost{name: "v"}
	pol, err := NewPolicyDef("p", "^q$", "queues", 0, map[string]any{"delivery-limit": -1.0, "consumer-timeout": 300.0,
		"delayed-retry-type": "all", "delayed-retry-min": 100.0, "delayed-retry-max": 1000.0}, false)
	if err != nil {
		t.Fatal(err)
	}
	op, err := NewPolicyDef("op", "^q$", "queues", 0, map[string]any{"delayed-retry-min": 200.0, "delayed-retry-max": 500.0}, true)
	if err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(4), "x-consumer-timeout": int32(3_600_000),
		"x-delayed-retry-type": "returned"} // the policy's type wins (policy_has_precedence)
	_, p, applied := v.policyFor("q", args, []*PolicyDef{pol}, []*PolicyDef{op})
	if !p.DeliveryLimitSet || p.DeliveryLimit != 4 {
		t.Errorf("delivery limit %d (set %v), want 4: the argument's, the policy's -1 giving way", p.DeliveryLimit, p.DeliveryLimitSet)
	}
	if p.ConsumerTimeout != 300*time.Millisecond {
		t.Errorf("consumer timeout %v, want the policy's 300ms (the lower)", p.ConsumerTimeout)
	}
	want := queue.Retry{Delay: 200 * time.Millisecond, Max: 500 * time.Millisecond, Linear: true, On: queue.RetryAll}
	if p.Retry != want {
		t.Errorf("retry %+v, want %+v (the policy's type over the argument's, the operator's higher min and lower max)", p.Retry, want)
	}
	// An operator policy's type wins over the policy's.
	op.Definition["delayed-retry-type"] = "failed"
	if _, p, _ = v.policyFor("q", args, []*PolicyDef{pol}, []*PolicyDef{op}); p.Retry.On != queue.RetryFailed {
		t.Errorf("with the operator's type failed: %+v", p.Retry)
	}
	if applied.Policy != "p" || applied.OperatorPolicy != "op" {
		t.Errorf("applied %+v", applied)
	}
}
