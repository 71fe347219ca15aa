package vhost

import (
	"math"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// RabbitMQ 4.3's delayed retry (x-delayed-retry-type, -min, -max; the
// policy keys delayed-retry-type, -min, -max), on classic and quorum
// queues alike, as a queue.Retry: Linear (the n-th return waits
// min(min * n, max)), On (which returns wait). As RabbitMQ reads them
// (rabbit_quorum_queue.erl v4.3.5 get_delayed_retry_config): a type
// other than all, failed or returned, or a missing or non-positive
// minimum, leaves delayed retry off; a missing or non-positive maximum
// is the minimum. The arguments are not checked at declare (RabbitMQ
// does not: an invalid value only leaves the retry off); the policy keys
// are, with RabbitMQ's texts (validate_policy). Set, they take the place
// of railmq's x-retry-delay and friends.

// delayedRetry reads the x-delayed-retry arguments into r, if they turn
// delayed retry on.
func delayedRetry(args amqp.Table, r *queue.Retry) {
	var on queue.RetryOn
	switch args["x-delayed-retry-type"] {
	case "all":
		on = queue.RetryAll
	case "failed":
		on = queue.RetryFailed
	case "returned":
		on = queue.RetryReturned
	default:
		return
	}
	lo, ok := amqp.Int(args["x-delayed-retry-min"])
	if !ok || lo <= 0 || lo > maxExpiry {
		return
	}
	hi, ok := amqp.Int(args["x-delayed-retry-max"])
	if !ok || hi <= 0 {
		hi = lo
	}
	hi = min(hi, maxExpiry)
	*r = queue.Retry{Delay: time.Duration(lo) * time.Millisecond, Max: time.Duration(hi) * time.Millisecond, Linear: true, On: on}
}

// checkDelayedRetryPolicy checks a policy's delayed-retry keys as
// RabbitMQ 4.3 does (rabbit_quorum_queue.erl v4.3.5 validate_policy0 and
// validate_delayed_retry_constraints), with its texts; nil if they are
// good (or absent).
func checkDelayedRetryPolicy(def map[string]any) error {
	typ, hasType := def["delayed-retry-type"]
	if hasType {
		switch typ {
		case "all", "failed", "returned", "disabled":
		default:
			return invalidPolicy("%s is not a valid delayed retry type. Must be one of: all, failed, returned, disabled", erlTerm(typ))
		}
	}
	posInt := func(k string) (int64, bool, error) {
		v, ok := def[k]
		if !ok {
			return 0, false, nil
		}
		if f, isNum := v.(float64); isNum && f == math.Trunc(f) && f > 0 {
			return int64(f), true, nil
		}
		what := "minimum"
		if k == "delayed-retry-max" {
			what = "maximum"
		}
		return 0, false, invalidPolicy("%s is not a valid delayed retry %s delay. Must be a positive integer", erlTerm(v), what)
	}
	lo, hasMin, err := posInt("delayed-retry-min")
	if err != nil {
		return err
	}
	hi, hasMax, err := posInt("delayed-retry-max")
	if err != nil {
		return err
	}
	if hasType && typ != "disabled" && !hasMin {
		return invalidPolicy("delayed-retry-min is required when delayed-retry-type is %s", typ)
	}
	if hasMin && hasMax && hi < lo {
		return invalidPolicy("delayed-retry-max (%d) must not be smaller than delayed-retry-min (%d)", hi, lo)
	}
	return nil
}

// mergeLimit merges two values of a limit (the queue's argument and a
// policy's, or a policy's and an operator policy's): the lower wins,
// but for a delivery limit, where a negative one (none) gives way to any
// other (RabbitMQ 4.3 rabbit_quorum_queue resolve_delivery_limit,
// rabbit_policies merge_policy_value).
func mergeLimit(arg string, a, b int64) int64 {
	if arg == "x-delivery-limit" && (a < 0 || b < 0) {
		return max(a, b)
	}
	return min(a, b)
}

// mergeOperator merges an operator policy's value of a key into the
// effective one (cur, ok: whether there is one), as RabbitMQ's
// merge_policy_value: the lower of two limits (mergeLimit); the
// operator's delayed-retry-type; the higher delayed-retry-min; the lower
// delayed-retry-max (rabbit_quorum_queue.erl v4.3.5).
func mergeOperator(key string, cur any, ok bool, op any) any {
	if !ok {
		return policyValue(op, policyKeys[key].kind)
	}
	if key == "delayed-retry-type" {
		return op
	}
	c, cok := amqp.Int(cur)
	f, fok := op.(float64)
	if !cok || !fok {
		return policyValue(op, policyKeys[key].kind)
	}
	o := int64(f)
	if key == "delayed-retry-min" {
		return max(c, o)
	}
	return mergeLimit(policyKeys[key].arg, c, o)
}
