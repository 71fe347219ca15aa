// Package cgroup holds black-box tests of the railmq binary run in a
// memory cgroup the test makes (a container's limit): a broker must stay
// within it under loads that would otherwise grow its memory. They are a
// package of their own, apart from conformance/, because each moves
// gigabytes through the store and so gets its own test timeout.
package cgroup

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
