package vhost

import (
	"fmt"
	"math"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// typeError is the detail for an argument of the wrong type.
func typeError(want string, v any) string {
	return fmt.Sprintf("\"expected %s, got %s\"", want, amqp.TypeName(v))
}

// unacceptable is RabbitMQ's detail for a string or bool argument of
// another type.
func unacceptable(v any) string { return "{unacceptable_type," + amqp.TypeName(v) + "}" }

// invalidType refuses an exchange name argument (x-dead-letter-exchange,
// alternate-exchange) that is not a string: the channel checks those
// first, in its own words (rabbit_channel, rabbit_misc:r_arg).
func invalidType(arg, kind, name, vh string, v any) error {
	return amqp.Errorf(amqp.PreconditionFailed, "invalid type '%s' for arg '%s' in %s '%s' in vhost '%s'", amqp.TypeName(v), arg, kind, name, vh)
}

// maxExpiry is the largest x-message-ttl and x-expires, 10 years in ms
// (rabbit_misc:check_expiry).
const maxExpiry = 315_360_000_000

// queueArgCheck is one row of the queue-argument checks: the argument,
// the check of its type, then of its range, each giving RabbitMQ's detail
// for a bad value ("" for a good one), and how the refusal reads.
type queueArgCheck struct {
	name string
	typ  func(v any) string                  // nil: any type
	rng  func(v any, args amqp.Table) string // nil: any value; v's type is checked
	// refuse words the refusal; nil: "invalid arg" with the detail
	// (rabbit_amqqueue:declare_args).
	refuse func(arg, q, vh string, v any, detail string) error
}

// queueArgChecks are walked in the order RabbitMQ checks a classic queue's
// arguments in, so that of several bad ones the same is reported: first
// the dead-letter exchange's type, which the channel checks in its own
// words (rabbit_channel, rabbit_misc:r_arg); then the queue type; then
// rabbit_amqqueue:declare_args's order; x-delivery-limit and
// x-consumer-timeout, which RabbitMQ 3.10 does not take on classic queues,
// come last.
var queueArgChecks = []queueArgCheck{
	{name: "x-dead-letter-exchange", typ: wantString, refuse: refuseDLXType},
	{name: "x-queue-type", typ: wantString, rng: classicOnly, refuse: refuseQueueType},
	{name: "x-expires", typ: wantInt, rng: ints(expires)},
	{name: "x-message-ttl", typ: wantInt, rng: ints(expiry)},
	{name: "x-dead-letter-routing-key", typ: wantString, rng: needsDLX},
	{name: "x-max-length", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-length-bytes", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-priority", typ: wantInt, rng: ints(priority)},
	{name: "x-overflow", typ: wantString, rng: overflowMode},
	{name: "x-queue-mode", typ: wantString, rng: queueMode},
	{name: "x-queue-version", typ: wantInt, rng: ints(queueVersion)},
	{name: "x-single-active-consumer", typ: wantBool},
	// Any integer: a negative one is no limit (RabbitMQ 4.3's quorum
	// queues: -1 turns the default of 20 off).
	{name: "x-delivery-limit", typ: wantInt},
	{name: "x-consumer-timeout", typ: wantInt, rng: ints(nonNegative)},
	// railmq's own (retry with backoff, queue/retry.go), in RabbitMQ's
	// words for arguments of their kinds.
	{name: "x-retry-delay", typ: wantInt, rng: ints(expiry)},
	{name: "x-retry-backoff", typ: wantNumber, rng: numbers(backoff)},
	{name: "x-retry-delay-max", typ: wantInt, rng: ints(expires)},
	{name: "x-retry-jitter", typ: wantNumber, rng: numbers(fraction)},
	dedupConfirmCheck, // dedup_confirm.go
	// railmq's message groups (queue/groups.go): a header name.
	{name: "x-message-group-header", typ: wantString, rng: nonEmpty},
}

// nonEmpty refuses an empty string, in the style of RabbitMQ's
// {value_zero,0}.
func nonEmpty(v any, _ amqp.Table) string {
	if v.(string) == "" {
		return "{value_empty,<<>>}"
	}
	return ""
}

// Type checks.

func wantInt(v any) string {
	if _, ok := amqp.Int(v); !ok {
		return typeError("integer", v)
	}
	return ""
}

// number reads an integer, floating-point or decimal argument (a decimal
// is the one non-integer number some clients can send: pika encodes
// decimal.Decimal, and no floats).
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case amqp.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale)), true
	}
	n, ok := amqp.Int(v)
	return float64(n), ok
}

func wantNumber(v any) string {
	if _, ok := number(v); !ok {
		return typeError("number", v)
	}
	return ""
}

func wantString(v any) string {
	if _, ok := v.(string); !ok {
		return unacceptable(v)
	}
	return ""
}

func wantBool(v any) string {
	if _, ok := v.(bool); !ok {
		return unacceptable(v)
	}
	return ""
}

// Range checks.

// ints adapts a range check of an integer argument (of the right type).
func ints(check func(n int64) string) func(any, amqp.Table) string {
	return func(v any, _ amqp.Table) string {
		n, _ := amqp.Int(v)
		return check(n)
	}
}

// numbers adapts a range check of a numeric argument (of the right type).
func numbers(check func(f float64) string) func(any, amqp.Table) string {
	return func(v any, _ amqp.Table) string {
		f, _ := number(v)
		return check(f)
	}
}

// backoff checks x-retry-backoff: a multiplier of at least 1 (a delay
// never shrinks from one retry to the next).
func backoff(f float64) string {
	if math.IsInf(f, 1) {
		return fmt.Sprintf("{value_too_large,%v}", f)
	}
	if !(f >= 1) {
		return fmt.Sprintf("{value_too_small,%v}", f)
	}
	return ""
}

// fraction checks x-retry-jitter: a fraction of the delay, 0 to 1.
func fraction(f float64) string {
	if !(f >= 0 && f <= 1) {
		return fmt.Sprintf("{value_out_of_range,%v}", f)
	}
	return ""
}

func nonNegative(n int64) string {
	if n < 0 {
		return fmt.Sprintf("{value_negative,%d}", n)
	}
	return ""
}

// expiry checks x-message-ttl (rabbit_misc:check_expiry).
func expiry(n int64) string {
	if d := nonNegative(n); d != "" {
		return d
	}
	if n > maxExpiry {
		return fmt.Sprintf("{value_too_large,%d}", n)
	}
	return ""
}

// expires checks x-expires: an expiry, but not zero.
func expires(n int64) string {
	if n == 0 {
		return "{value_zero,0}"
	}
	return expiry(n)
}

func priority(n int64) string {
	if d := nonNegative(n); d != "" {
		return d
	}
	if n > 255 {
		return fmt.Sprintf("{max_value_exceeded,%d}", n)
	}
	return ""
}

func queueVersion(n int64) string {
	if d := nonNegative(n); d != "" {
		return d
	}
	if n != 1 && n != 2 {
		return fmt.Sprintf("\"unsupported queue version '%d'\"", n)
	}
	return ""
}

func needsDLX(_ any, args amqp.Table) string {
	if _, ok := args["x-dead-letter-exchange"]; !ok {
		return "routing_key_but_no_dlx_defined"
	}
	return ""
}

func overflowMode(v any, _ amqp.Table) string {
	switch v.(string) {
	case "drop-head", "reject-publish", "reject-publish-dlx":
		return ""
	}
	return "invalid_overflow"
}

func queueMode(v any, _ amqp.Table) string {
	if s := v.(string); s != "default" && s != "lazy" {
		return fmt.Sprintf("\"unsupported queue mode '%s'\"", s)
	}
	return ""
}

// classicOnly is RabbitMQ's answer for a queue type it does not have.
// railmq has classic queues only so far (quorum queues come with the
// cluster).
func classicOnly(v any, _ amqp.Table) string {
	if s := v.(string); s != "classic" {
		return fmt.Sprintf("\"unsupported queue type '%s'\"", s)
	}
	return ""
}

// Refusals other than "invalid arg".

func refuseDLXType(arg, q, vh string, v any, _ string) error {
	return invalidType(arg, "queue", q, vh, v)
}

// refuseQueueType: a queue type that is not a string cannot name a type
// RabbitMQ has; it answers as if the queue existed as a classic one.
func refuseQueueType(arg, q, vh string, v any, detail string) error {
	if _, ok := v.(string); ok {
		return invalidArg(arg, q, vh, detail)
	}
	return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for queue '%s' in vhost '%s': received %s but current is 'classic'",
		arg, q, vh, showArg(v))
}

func invalidArg(arg, q, vh, detail string) error {
	return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s': %s", arg, q, vh, detail)
}

type queueArgs struct {
	consumerTimeout time.Duration
	policy          queue.Policy
	dlx             *string
	dlrk            *string
}

// validateQueueArgs checks the arguments RabbitMQ checks, with its texts,
// walking queueArgChecks; unknown x- arguments are accepted. It then reads
// them into the queue's policy.
func validateQueueArgs(q, vh string, args amqp.Table) (queueArgs, error) {
	out := queueArgs{policy: queue.NoPolicy}
	for i := range queueArgChecks {
		c := &queueArgChecks[i]
		v, ok := args[c.name]
		if !ok {
			continue
		}
		var detail string
		if c.typ != nil {
			detail = c.typ(v)
		}
		if detail == "" && c.rng != nil {
			detail = c.rng(v, args)
		}
		if detail == "" {
			continue
		}
		if c.refuse != nil {
			return out, c.refuse(c.name, q, vh, v, detail)
		}
		return out, invalidArg(c.name, q, vh, detail)
	}
	p := &out.policy
	ms := func(k string) (int64, bool) { n, ok := amqp.Int(args[k]); return n, ok }
	if n, ok := ms("x-message-ttl"); ok {
		p.MessageTTL = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-expires"); ok {
		p.Expires = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-max-length"); ok {
		p.MaxLength = n
	}
	if n, ok := ms("x-max-length-bytes"); ok {
		p.MaxLengthBytes = n
	}
	if n, ok := ms("x-delivery-limit"); ok {
		p.DeliveryLimit, p.DeliveryLimitSet = max(n, -1), true
	}
	if n, ok := ms("x-consumer-timeout"); ok {
		out.consumerTimeout = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-retry-delay"); ok {
		p.Retry.Delay = time.Duration(n) * time.Millisecond
	}
	if n, ok := ms("x-retry-delay-max"); ok {
		p.Retry.Max = time.Duration(n) * time.Millisecond
	}
	if f, ok := number(args["x-retry-backoff"]); ok {
		p.Retry.Backoff = f
	}
	if f, ok := number(args["x-retry-jitter"]); ok {
		p.Retry.Jitter = f
	}
	delayedRetry(args, &p.Retry) // RabbitMQ 4.3's x-delayed-retry-* (retry_args.go)
	streamPolicy(args, p)        // a stream's x-max-age and segment size (stream_args.go)
	if n, ok := ms("x-max-priority"); ok {
		p.MaxPriority = uint8(n)
	}
	switch args["x-overflow"] {
	case "reject-publish":
		p.Overflow = queue.RejectPublish
	case "reject-publish-dlx":
		p.Overflow = queue.RejectPublishDLX
	}
	p.SingleActive = args["x-single-active-consumer"] == true
	p.GroupHeader, _ = args["x-message-group-header"].(string)
	if s, ok := args["x-dead-letter-exchange"].(string); ok {
		out.dlx = &s
	}
	if s, ok := args["x-dead-letter-routing-key"].(string); ok {
		out.dlrk = &s
	}
	out.policy.Dedup = dedupQueue(args)
	out.policy.DedupConfirm = dedupConfirmArg(args)
	return out, nil
}
