package vhost

import (
	"fmt"

	"github.com/railmq/railmq/amqp"
)

// checkQuorumDecl reports the error declaring d, a new quorum queue, would
// meet for its own sake (CheckQueue: a definitions import checks every
// queue before it makes any): the properties a quorum queue cannot have,
// its arguments, and the group size. The same refusals as declareQuorum
// makes, in the same order.
func (v *VHost) checkQuorumDecl(d QueueDecl) error {
	rs := fmt.Sprintf("queue '%s' in vhost '%s'", d.Name, v.name)
	switch {
	case d.AutoDelete:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'auto-delete' for %s", rs)
	case d.Exclusive:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'exclusive-owner' for %s", rs)
	case !d.Durable:
		return amqp.Errorf(amqp.PreconditionFailed, "invalid property 'non-durable' for %s", rs)
	}
	if _, err := validateQueueArgs(d.Name, v.name, withoutType(d.Args)); err != nil {
		return err
	}
	for _, a := range retryArgs {
		if _, ok := d.Args[a]; ok {
			return amqp.Errorf(amqp.PreconditionFailed, "invalid arg '%s' for %s of queue type rabbit_quorum_queue", a, rs)
		}
	}
	if n, ok := amqp.Int(d.Args["x-quorum-initial-group-size"]); ok && n < 1 {
		return invalidArg("x-quorum-initial-group-size", d.Name, v.name, fmt.Sprintf("\"value %d must be greater than 0\"", n))
	}
	return nil
}
