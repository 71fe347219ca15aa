package vhost

import (
	"fmt"
	"sort"

	"github.com/railmq/railmq/amqp"
)

// A quorum queue's arguments, checked as RabbitMQ 3.10.8 checks a declare
// of one (rabbit_channel, then rabbit_amqqueue:check_declare_arguments):
// the dead-letter exchange's type (the channel's own words); then each
// argument the quorum queue type takes, in rabbit_amqqueue:declare_args's
// order, with its check; then any argument another type takes that this
// one does not ("invalid arg ... of queue type rabbit_quorum_queue":
// check_arguments_key against rabbit_quorum_queue:capabilities). Only
// then does the queue type check the declare's properties
// (rabbit_quorum_queue:declare: auto-delete, exclusive, non-durable).
// Verified against RabbitMQ 3.10.8 (conformance/quorum_refusals_test.go).

// quorumArgChecks are the quorum queue's arguments that RabbitMQ checks,
// in declare_args's order. x-delivery-limit is not among them (RabbitMQ
// takes any value at declare); x-consumer-timeout is RabbitMQ 4's.
var quorumArgChecks = []queueArgCheck{
	{name: "x-expires", typ: wantInt, rng: ints(expires)},
	{name: "x-message-ttl", typ: wantInt, rng: ints(expiry)},
	{name: "x-dead-letter-routing-key", typ: wantString, rng: needsDLX},
	{name: "x-dead-letter-strategy", typ: wantString, rng: dlxStrategy},
	{name: "x-max-length", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-length-bytes", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-in-memory-length", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-in-memory-bytes", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-overflow", typ: wantString, rng: overflowMode},
	{name: "x-single-active-consumer", typ: wantBool},
	{name: "x-consumer-timeout", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-quorum-initial-group-size", typ: wantInt, rng: ints(groupSize)},
	{name: "x-queue-leader-locator", typ: wantString, rng: leaderLocator},
	{name: "x-message-group-header", typ: wantString, rng: nonEmpty}, // replica/quorum_groups.go
	dedupConfirmCheck, // dedup_confirm.go
}

// notQuorumArgs are the arguments of other queue types (classic, stream)
// that a quorum queue does not take (railmq's retry with backoff, queue/
// retry.go, serves both types: not among them).
var notQuorumArgs = func() map[string]bool {
	m := map[string]bool{}
	for _, a := range []string{"x-max-priority", "x-queue-mode", "x-queue-version", "x-queue-master-locator",
		"x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size", "x-stream-filter-size-bytes"} {
		m[a] = true
	}
	return m
}()

// checkQuorumArgs checks a new quorum queue's arguments (see above).
func checkQuorumArgs(q, vh string, args amqp.Table) error {
	if v, ok := args["x-dead-letter-exchange"]; ok {
		if d := wantString(v); d != "" {
			return refuseDLXType("x-dead-letter-exchange", q, vh, v, d)
		}
	}
	for i := range quorumArgChecks {
		c := &quorumArgChecks[i]
		v, ok := args[c.name]
		if !ok {
			continue
		}
		detail := c.typ(v)
		if detail == "" && c.rng != nil {
			detail = c.rng(v, args)
		}
		if detail != "" && c.refuse != nil {
			return c.refuse(c.name, q, vh, v, detail)
		}
		if detail != "" {
			return invalidArg(c.name, q, vh, detail)
		}
	}
	// RabbitMQ walks the table in its wire order; a Go map has none, so
	// of several such arguments the first by name is named.
	var bad []string
	for k := range args {
		if notQuorumArgs[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s' of queue type rabbit_quorum_queue", bad[0], q, vh)
	}
	return nil
}

// quorumProperties refuses the declare properties a quorum queue cannot
// have, in rabbit_quorum_queue:declare's order and rabbit_queue_type_util's
// words.
func quorumProperties(d QueueDecl, vh string) error {
	rs := fmt.Sprintf("queue '%s' in vhost '%s'", d.Name, vh)
	switch {
	case d.AutoDelete:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'auto-delete' for %s", rs)
	case d.Exclusive:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'exclusive-owner' for %s", rs)
	case !d.Durable:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'non-durable' for %s", rs)
	}
	return nil
}

// dlxStrategy checks x-dead-letter-strategy (rabbit_amqqueue:
// check_dlxstrategy_arg).
func dlxStrategy(v any, _ amqp.Table) string {
	if s := v.(string); s != "at-most-once" && s != "at-least-once" {
		return "invalid_dlx_strategy"
	}
	return ""
}

// groupSize checks x-quorum-initial-group-size (check_initial_cluster_size_arg).
func groupSize(n int64) string {
	if n == 0 {
		return "{value_zero,0}"
	}
	return nonNegative(n)
}

// leaderLocator checks x-queue-leader-locator (rabbit_queue_location:
// queue_leader_locators, the deprecated two included).
func leaderLocator(v any, _ amqp.Table) string {
	switch v.(string) {
	case "client-local", "balanced", "random", "least-leaders":
		return ""
	}
	return "invalid_queue_locator_arg"
}

// quorumEquivalenceArgs are the arguments a redeclare of a quorum queue
// must match: the quorum queue type's (rabbit_amqqueue:
// assert_args_equivalence with rabbit_quorum_queue's queue_arguments);
// any other, x-max-priority say, is ignored, as RabbitMQ 3.10.8 ignores
// it.
var quorumEquivalenceArgs = []string{
	"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-expires",
	"x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-overflow",
	"x-single-active-consumer", "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
	"x-queue-leader-locator", "x-consumer-timeout", "x-deduplication-confirm",
}
