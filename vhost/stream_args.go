package vhost

import (
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// A stream's arguments, checked as RabbitMQ 3.10.8 checks a declare of
// one (rabbit_amqqueue:check_declare_arguments with rabbit_stream_queue's
// queue_arguments): each argument the stream type takes, in
// declare_args's order, with its check; then any argument another type
// takes ("invalid arg ... of queue type rabbit_stream_queue"); then
// rabbit_stream_queue:declare's checks of the properties (auto-delete,
// exclusive, non-durable) and of x-stream-max-segment-size-bytes.
// x-stream-filter-size-bytes is RabbitMQ 3.13's (rabbit_stream_queue.erl
// v4.3.5 check_filter_size: 16 to 255).

// maxSegmentBytes is RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE (3 GB).
const maxSegmentBytes = 3_000_000_000

var streamArgChecks = []queueArgCheck{
	{name: "x-max-length-bytes", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-max-age", typ: wantString, rng: maxAgeCheck},
	{name: "x-stream-max-segment-size-bytes", typ: wantInt, rng: ints(nonNegative)},
	{name: "x-initial-cluster-size", typ: wantInt, rng: ints(groupSize)},
	{name: "x-queue-leader-locator", typ: wantString, rng: leaderLocator},
	// RabbitMQ 4.3.1+ (declare_args: check_non_neg_int_arg); its range
	// after the properties, in checkStreamDecl.
	{name: "x-stream-filter-size-bytes", typ: wantInt, rng: ints(nonNegative)},
}

// otherTypeArgs are the arguments classic and quorum queues take that a
// stream does not (rabbit_queue_type:arguments(queue_arguments) minus
// the stream's).
var otherTypeArgs = []string{"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-dead-letter-strategy", "x-max-length", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-priority",
	"x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer", "x-queue-master-locator",
	"x-quorum-initial-group-size", "x-delivery-limit"}

// IsStream reports whether a declare's arguments ask for a stream.
func IsStream(args amqp.Table) bool {
	s, _ := args["x-queue-type"].(string)
	return s == "stream"
}

// checkStreamDecl checks a new stream's declare (see above).
func (v *VHost) checkStreamDecl(d QueueDecl) error {
	for i := range streamArgChecks {
		c := &streamArgChecks[i]
		a, ok := d.Args[c.name]
		if !ok {
			continue
		}
		detail := c.typ(a)
		if detail == "" && c.rng != nil {
			detail = c.rng(a, d.Args)
		}
		if detail != "" {
			return invalidArg(c.name, d.Name, v.name, detail)
		}
	}
	var bad []string
	for _, k := range otherTypeArgs {
		if _, ok := d.Args[k]; ok {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for queue '%s' in vhost '%s' of queue type rabbit_stream_queue", bad[0], d.Name, v.name)
	}
	if err := quorumProperties(d, v.name); err != nil { // the same checks, in the same words
		return err
	}
	if n, ok := amqp.Int(d.Args["x-stream-max-segment-size-bytes"]); ok && n > maxSegmentBytes {
		return amqp.Errorf(amqp.PreconditionFailed, "Exceeded max value for x-stream-max-segment-size-bytes")
	}
	if n, ok := amqp.Int(d.Args["x-stream-filter-size-bytes"]); ok && (n < 16 || n > 255) {
		// rabbit_stream_queue.erl v4.3.5 check_filter_size
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid value for x-stream-filter-size-bytes")
	}
	return nil
}

// streamEquivalenceArgs are the arguments a redeclare of a stream must
// match (its queue_arguments, rabbit_amqqueue:assert_args_equivalence).
var streamEquivalenceArgs = []string{"x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
	"x-initial-cluster-size", "x-queue-leader-locator", "x-stream-filter-size-bytes"}

var maxAgeRe = regexp.MustCompile(`^([0-9]*)(.*)$`)

// ParseMaxAge reads x-max-age, RabbitMQ's way (rabbit_amqqueue:
// check_max_age): a positive integer and one of the units Y, M, D, h, m,
// s (a year is 365 days, a month 30).
func ParseMaxAge(s string) (time.Duration, bool) {
	m := maxAgeRe.FindStringSubmatch(s)
	if m == nil || m[1] == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	var unit time.Duration
	switch m[2] {
	case "Y":
		unit = 365 * 24 * time.Hour
	case "M":
		unit = 30 * 24 * time.Hour
	case "D":
		unit = 24 * time.Hour
	case "h":
		unit = time.Hour
	case "m":
		unit = time.Minute
	case "s":
		unit = time.Second
	default:
		return 0, false
	}
	if n > int64(1<<62)/int64(unit) {
		return 1 << 62, true
	}
	return time.Duration(n) * unit, true
}

func maxAgeCheck(v any, _ amqp.Table) string {
	if _, ok := ParseMaxAge(v.(string)); !ok {
		return "invalid_max_age"
	}
	return ""
}

// streamPolicy sets a stream's retention in p from its arguments (or a
// policy's, merged into them).
func streamPolicy(args amqp.Table, p *queue.Policy) {
	if s, ok := args["x-max-age"].(string); ok {
		if d, ok := ParseMaxAge(s); ok {
			p.MaxAge = d
		}
	}
	if n, ok := amqp.Int(args["x-stream-max-segment-size-bytes"]); ok && n > 0 {
		p.MaxSegmentBytes = n
	}
}
