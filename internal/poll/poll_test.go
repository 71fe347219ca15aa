package poll

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalTB records Fatalf and stops its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, func() bool { n++; return n == 3 }, "third call")
	if n != 3 {
		t.Fatalf("cond called %d times, want 3: it returned once cond held", n)
	}

	f := &fatalTB{TB: t}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(f, 50*time.Millisecond, func() bool { return false }, "queue %s empty", "q1")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Eventually did not give up within 5s of a 50 ms deadline")
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the 50 ms deadline", el)
	}
	if want := "queue q1 empty: not within 50ms"; !strings.Contains(f.msg, want) {
		t.Fatalf("failed with %q, want %q", f.msg, want)
	}
}
