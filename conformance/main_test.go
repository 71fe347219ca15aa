// Package conformance holds black-box tests: the amqp091-go client (and raw
// sockets, for malformed input) against a broker on 127.0.0.1. With
// RAILMQ_TEST_URL=amqp://guest:guest@127.0.0.1:5673/ the same tests run
// against another broker (RabbitMQ) to compare behaviours.
package conformance

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// amqp091-go's heartbeater may outlive Close by a tick.
		goleak.IgnoreTopFunction("github.com/rabbitmq/amqp091-go.(*Connection).heartbeater"),
	)
}
