package testutil

import (
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// Eventually polls cond until it holds, and fails the test with the
// message after within: poll.Eventually, here beside the other helpers of
// the black-box tests. Package tests of broker/, channel/ and vhost/
// call poll.Eventually directly (this package imports broker).
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	poll.Eventually(t, within, cond, format, args...)
}
