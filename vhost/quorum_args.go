package vhost

import (
	"fmt"

	"github.com/railmq/railmq/amqp"
)

// groupSizeArg reads x-quorum-initial-group-size: 0 when absent (the
// default size), else a positive integer, refused in RabbitMQ 3.10.8's
// words (asked: 0 gives "invalid arg 'x-quorum-initial-group-size' for
// queue 'q' in vhost '/': {value_zero,0}", -1 "{value_negative,-1}", a
// string "\"expected integer, got longstr\"").
func groupSizeArg(d QueueDecl, vh string) (int, error) {
	v, ok := d.Args["x-quorum-initial-group-size"]
	if !ok {
		return 0, nil
	}
	if detail := wantInt(v); detail != "" {
		return 0, invalidArg("x-quorum-initial-group-size", d.Name, vh, detail)
	}
	n, _ := amqp.Int(v)
	switch {
	case n == 0:
		return 0, invalidArg("x-quorum-initial-group-size", d.Name, vh, "{value_zero,0}")
	case n < 0:
		return 0, invalidArg("x-quorum-initial-group-size", d.Name, vh, fmt.Sprintf("{value_negative,%d}", n))
	}
	return int(min(n, 1<<16)), nil
}
