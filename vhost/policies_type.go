package vhost

import "github.com/railmq/railmq/amqp"

// ofQueueType is the policies of ps that may apply to a queue with
// arguments args, by their apply-to: "classic_queues" to classic queues
// only, "quorum_queues" to quorum queues only, "streams" to streams
// only, the rest to any queue (RabbitMQ 3.12+,
// rabbit_policy.erl matches_queue_type; the queue type comes from
// x-queue-type, as a declare's does). ps itself when all may.
func ofQueueType(ps []*PolicyDef, args amqp.Table) []*PolicyDef {
	own := "classic_queues"
	switch {
	case IsQuorum(args):
		own = "quorum_queues"
	case IsStream(args):
		own = "streams"
	}
	var out []*PolicyDef
	for i, p := range ps {
		other := p.ApplyTo != own && (p.ApplyTo == "classic_queues" || p.ApplyTo == "quorum_queues" || p.ApplyTo == "streams")
		switch {
		case other && out == nil:
			out = append(make([]*PolicyDef, 0, len(ps)), ps[:i]...)
		case !other && out != nil:
			out = append(out, p)
		}
	}
	if out == nil {
		return ps
	}
	return out
}
