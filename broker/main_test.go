package broker

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// divergent skips the rest of a test case that pins RabbitMQ's behaviour
// where railmq does otherwise: the case documents what RabbitMQ does (as
// RabbitMQ 3.10 answered it) until railmq is changed to match.
func divergent(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Skipf("railmq differs from RabbitMQ: "+format, args...)
}
