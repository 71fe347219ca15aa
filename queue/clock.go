package queue

import "time"

// The clock that message times are in: Message.Enqueued and Expires, the
// holds' due times, DeliveredAt, a queue's last use. Unix nanoseconds, as
// the wall clock read once when the process starts, plus the monotonic
// time since: the interval between two readings is what Go's timers
// count, even when the wall clock is stepped or slewed. On this project's
// test machines the wall clock jumps forward by milliseconds at a time
// (5 ms a second at worst, measured), so that a TTL or a retry delay
// timed by it could end early; a clock step by NTP does the same. Times
// written to the store (expirations, due times) are read back after a
// restart against the new process's start, i.e. against the wall clock
// again.
var (
	clockStart = time.Now()
	clockBase  = clockStart.UnixNano()
)

// Now is the current time on the message clock (unix nanoseconds).
func Now() int64 { return clockBase + int64(time.Since(clockStart)) }

// Since is the time elapsed since t, a time on the message clock.
func Since(t int64) time.Duration { return time.Duration(Now() - t) }
