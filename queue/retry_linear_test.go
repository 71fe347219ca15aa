package queue

import (
	"testing"
	"time"
)

// RabbitMQ 4.3's delayed retry: the n-th failed delivery waits
// min(min * n, max), n at least 1 (rabbit_fifo.erl v4.3.5
// calculate_ready_at: DeliveryCount = max(1, DC), Delay = min(Min *
// DeliveryCount, Max)).
func TestRetryDelayForLinear(t *testing.T) {
	r := Retry{Delay: 100 * time.Millisecond, Max: 350 * time.Millisecond, Linear: true}
	for n, want := range map[uint32]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond,
		2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 4: 350 * time.Millisecond, 1000: 350 * time.Millisecond} {
		if got := r.DelayFor(n); got != want {
			t.Errorf("DelayFor(%d) = %v, want %v", n, got, want)
		}
	}
}

// Which returns a retry setting holds: railmq's x-retry-delay a
// consumer's verdict (reject or nack with requeue); RabbitMQ 4.3's types
// all, failed (reject, a consumer gone) and returned (nack, recover, a
// consumer timeout) (rabbit_fifo.erl v4.3.5 should_delay0); none without
// a delay.
func TestRetryHolds(t *testing.T) {
	type ret struct{ failed, verdict bool }
	reject, nack, gone, recovered := ret{true, true}, ret{false, true}, ret{true, false}, ret{false, false}
	for _, c := range []struct {
		on   RetryOn
		want map[ret]bool
	}{
		{RetryVerdicts, map[ret]bool{reject: true, nack: true, gone: false, recovered: false}},
		{RetryAll, map[ret]bool{reject: true, nack: true, gone: true, recovered: true}},
		{RetryFailed, map[ret]bool{reject: true, nack: false, gone: true, recovered: false}},
		{RetryReturned, map[ret]bool{reject: false, nack: true, gone: false, recovered: true}},
	} {
		r := Retry{Delay: time.Second, On: c.on}
		off := Retry{On: c.on}
		for k, want := range c.want {
			if got := r.Holds(k.failed, k.verdict); got != want {
				t.Errorf("on %d, failed %v verdict %v: holds %v, want %v", c.on, k.failed, k.verdict, got, want)
			}
			if off.Holds(k.failed, k.verdict) {
				t.Errorf("on %d without a delay: holds", c.on)
			}
		}
	}
}
