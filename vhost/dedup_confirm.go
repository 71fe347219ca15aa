package vhost

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

// x-deduplication-confirm (railmq's own; queue/dedup_confirm.go): how a
// deduplicating queue or exchange confirms a duplicate, "ack" or
// "nack". Anything else is refused at declare, in words that name the
// argument and what it takes; a redeclare must match it (equivalence).

// dedupConfirmText is the refusal of a bad value.
func dedupConfirmText(kind, name, vh string, v any) error {
	return amqp.Errorf(amqp.PreconditionFailed,
		"invalid arg 'x-deduplication-confirm' for %s '%s' in vhost '%s': expected 'ack' or 'nack', got %s",
		kind, name, vh, showArg(typedValue{v}))
}

// dedupConfirmCheck is the queue-argument check (classic and quorum).
var dedupConfirmCheck = queueArgCheck{
	name: queue.DedupConfirmHeader,
	typ: func(v any) string {
		if s, ok := v.(string); ok {
			if _, ok := queue.ParseDedupConfirm(s); ok {
				return ""
			}
		}
		return "bad"
	},
	refuse: func(_, q, vh string, v any, _ string) error { return dedupConfirmText("queue", q, vh, v) },
}

// checkDedupConfirm checks a new deduplication exchange's argument.
func checkDedupConfirm(kind, name, vh string, args amqp.Table) error {
	v, ok := args[queue.DedupConfirmHeader]
	if !ok {
		return nil
	}
	if s, isStr := v.(string); isStr {
		if _, ok := queue.ParseDedupConfirm(s); ok {
			return nil
		}
	}
	return dedupConfirmText(kind, name, vh, v)
}

// dedupConfirmArg reads a validated argument (DedupConfirmDefault
// without one).
func dedupConfirmArg(args amqp.Table) queue.DedupConfirm {
	s, _ := args[queue.DedupConfirmHeader].(string)
	c, _ := queue.ParseDedupConfirm(s)
	return c
}

// exchangeEquivalenceArgs are the arguments a redeclare of ex must
// match: alternate-exchange, and a deduplication exchange's
// x-deduplication-confirm.
func exchangeEquivalenceArgs(ex *exchange.Exchange) []string {
	if ex.Dedup != nil {
		return []string{"alternate-exchange", queue.DedupConfirmHeader}
	}
	return []string{"alternate-exchange"}
}

// dedupAcked reports whether a duplicate the exchange ex found (the
// message's properties in props) is to be taken as its original's
// retry: x-deduplication-confirm "ack" on the exchange or the message.
// Such a duplicate is confirmed with basic.ack once everything stored
// before it is durable, and neither goes to the alternate exchange nor
// is returned to a mandatory publisher: it was routed, the first time.
// By default (the plugin's) it routes nowhere, so it is acked as any
// unroutable message, after going to the alternate exchange or being
// returned; "nack" nacks it. Only on a duplicate: v.mu read-held.
func dedupAcked(ex *exchange.Exchange, props []byte) queue.DedupConfirm {
	return dedupConfirmArg(ex.Args).Resolve(props, queue.DedupConfirmDefault)
}
