// Package poll waits, in tests, until a condition holds: the replacement
// for a sleep before a check (STYLE.md, Tests: poll helpers, never
// time.Sleep). It imports the standard library only, so that the package
// tests of broker/, channel/ or vhost/ can use it where
// internal/testutil, which imports broker, would make a cycle.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Interval is how often Eventually checks its condition.
const Interval = 5 * time.Millisecond

// Eventually calls cond every Interval until it returns true, and fails
// the test with the message (format and args, as fmt.Sprintf) if it has
// not within the given time. cond runs on the calling goroutine, so it
// may call t.Fatal itself.
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", fmt.Sprintf(format, args...), within)
		}
		time.Sleep(Interval)
	}
}
