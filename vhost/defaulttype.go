package vhost

import (
	"fmt"

	"github.com/railmq/railmq/amqp"
)

// A vhost's default queue type (RabbitMQ 3.10+'s vhost metadata
// default_queue_type): the type a queue.declare that names none gets, when
// the queue's properties suit it. What RabbitMQ does, and railmq with it:
//
//   - The channel rewrites the declare's arguments before anything else
//     (rabbit_channel.erl handle_method queue.declare, calling
//     rabbit_amqqueue:augment_declare_args, v3.10.8 to v4.3.5): if the
//     vhost has a default type and the declare carries no x-queue-type at
//     all (any value, "" too, counts as one), x-queue-type is set to the
//     default when the type is compatible with the declare's durable,
//     exclusive and auto-delete flags. A quorum queue is compatible only
//     with durable, not exclusive, not auto-delete
//     (rabbit_quorum_queue:is_compatible); a classic one with anything.
//   - An incompatible declare (exclusive, auto-delete or transient) is
//     left as it was, a classic queue with no x-queue-type argument
//     (v3.10.8 to v3.12; 3.13 and 4.x write x-queue-type "classic" into it
//     instead, which changes only what its arguments show). Checked on
//     RabbitMQ 3.10.8 with default_queue_type quorum: a transient, an
//     auto-delete and an exclusive queue are classic with arguments [].
//   - A server-named declare (queue "") is rewritten the same way, so a
//     durable, not exclusive, not auto-delete one becomes a quorum declare
//     and is refused: "Cannot declare a server-named queue for type
//     rabbit_quorum_queue" (rabbit_channel.erl; is_server_named_allowed is
//     false for quorum queues). The usual server-named queue, exclusive,
//     stays classic.
//   - Passive declares are not rewritten. A redeclare is rewritten before
//     the equivalence check, so a classic queue made before the default
//     was set, redeclared with no type, is inequivalent (x-queue-type).
//   - The management API's PUT /api/queues goes through the channel's code
//     (rabbit_mgmt_util:direct_request), and a definitions import rewrites
//     each new queue's arguments the same way (rabbit_definitions.erl
//     add_queue_int, v3.12+).

// Queue types a vhost's default may name.
const (
	TypeClassic = "classic"
	TypeQuorum  = "quorum"
	TypeStream  = "stream"
)

// ParseDefaultQueueType reads a default_queue_type as RabbitMQ 4.3.5
// validates one (rabbit_queue_type:validate_default_queue_type): a type's
// name or module name, normalised to the name; "" for none (absent, JSON
// null or "undefined"). Its errors carry RabbitMQ's texts.
func ParseDefaultQueueType(v any) (string, error) {
	switch t := v.(type) {
	case nil:
		return "", nil
	case string:
		switch t {
		case "undefined":
			return "", nil
		case "":
			return "", fmt.Errorf("default_queue_type must not be an empty string")
		case TypeClassic, "rabbit_classic_queue":
			return TypeClassic, nil
		case TypeQuorum, "rabbit_quorum_queue":
			return TypeQuorum, nil
		case TypeStream, "rabbit_stream_queue":
			return TypeStream, nil
		}
		return "", fmt.Errorf("%s is not a valid queue type", t)
	}
	return "", fmt.Errorf("%v is not a valid default_queue_type value", v)
}

// SetDefaultQueueType sets the vhost's default queue type ("" for none:
// classic queues, with no x-queue-type argument added).
func (v *VHost) SetDefaultQueueType(t string) { v.defaultType.Store(&t) }

// DefaultQueueType is the vhost's default queue type, "" if it has none.
func (v *VHost) DefaultQueueType() string {
	if p := v.defaultType.Load(); p != nil {
		return *p
	}
	return ""
}

// withDefaultType is d with the vhost's default queue type written into
// its arguments (WithDefaultType).
func (v *VHost) withDefaultType(d QueueDecl) QueueDecl {
	return WithDefaultType(d, v.DefaultQueueType())
}

// WithDefaultType is d with default queue type t ("" for none) written
// into its arguments, where RabbitMQ's augment_declare_args would write
// it. The caller's table is not changed.
func WithDefaultType(d QueueDecl, t string) QueueDecl {
	if t == "" || d.Passive {
		return d
	}
	if _, named := d.Args["x-queue-type"]; named {
		return d
	}
	if (t == TypeQuorum || t == TypeStream) && (!d.Durable || d.Exclusive || d.AutoDelete) {
		return d
	}
	args := make(amqp.Table, len(d.Args)+1)
	for k, a := range d.Args {
		args[k] = a
	}
	args["x-queue-type"] = t
	d.Args = args
	return d
}
