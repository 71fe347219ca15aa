package broker

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/persist"
)

// Resource alarms, as RabbitMQ's rabbit_alarm: memory (queues hold more
// than MemoryHighWatermark) and disk (DataDir's filesystem has less than
// DiskFreeLimit free). The server keeps one state, s.alarms; while any
// alarm is on, a connection that publishes is blocked (blockWhileAlarm).
//
// Who changes what: a reader that sees queues over the watermark sets the
// memory alarm at once (Server.alarmBits), so a fast publisher is stopped
// within a frame, and wakes the monitor. The monitor goroutine (monitor,
// one per server, stopped by Shutdown) does everything else: it clears the
// memory alarm once queues are back at or under the watermark (at its
// check, every AlarmCheckInterval, as RabbitMQ's vm_memory_monitor checks
// every second), checks the disk and sets or clears the disk alarm, and
// logs each change once. Its own state (alarmMonitor) is touched by no
// other goroutine. No lock: the state is atomic.

const (
	alarmMemory uint32 = 1 << iota
	alarmDisk
)

// blockedReason is connection.blocked's reason for the alarms in bits, as
// RabbitMQ 3.10.8 writes it (rabbit_reader:blocked_by_message): "low on "
// and the resources joined by " & ", in the order sets:to_list gives them,
// disk before memory.
func blockedReason(bits uint32) string {
	switch bits & (alarmMemory | alarmDisk) {
	case alarmMemory:
		return "low on memory"
	case alarmDisk:
		return "low on disk"
	case alarmMemory | alarmDisk:
		return "low on disk & memory"
	}
	return ""
}

// alarmBits is the alarms in force: s.alarms, and the memory alarm if
// queues are over the watermark now, which it sets (and has the monitor
// log) if it was not yet. Paging starts here too when queues are over the
// paging ratio, so that a burst pages as it arrives rather than at the
// monitor's next check; the monitor logs it and ends it.
func (s *Server) alarmBits() uint32 {
	bits := s.alarms.Load()
	if bits&alarmMemory == 0 {
		used := s.memory.Load()
		if !s.paging.Load() && s.overPagingRatio(used) {
			s.paging.Store(true)
			select {
			case s.alarmWake <- struct{}{}:
			default:
			}
		}
		if used > s.watermark.Load() {
			s.memTrip.Store(used)
			if s.alarms.Or(alarmMemory)&alarmMemory == 0 {
				select {
				case s.alarmWake <- struct{}{}:
				default:
				}
			}
			bits |= alarmMemory
		}
	}
	return bits
}

// blockWhileAlarm stops reading from a publishing connection while a
// resource alarm is on: TCP backpressure reaches the publisher, as with
// RabbitMQ. Clients that advertise connection.blocked are sent it once,
// with the alarms in force then, and connection.unblocked once every alarm
// has cleared (RabbitMQ sends neither again when the set of alarms changes
// in between). Other connections, consumers among them, keep going, so
// their acks drain the backlog. Called by the reader.
func (c *conn) blockWhileAlarm() error {
	// What this reader delivered to consumers goes out before it waits.
	c.flushes.Flush()
	reason := blockedReason(c.srv.alarmBits())
	if reason == "" {
		return nil
	}
	notify := c.clientCapability("connection.blocked")
	if notify {
		c.SendMethod(0, &amqp.ConnectionBlocked{Reason: reason})
	}
	c.log.Debug("connection blocked", zap.String("reason", reason))
	c.blocked.Store(true)
	defer c.blocked.Store(false)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for c.srv.alarmed() {
		select {
		case <-t.C:
		case <-c.srv.stop:
			return nil
		}
		c.runRequests()
		if c.closing.Load() {
			return nil
		}
	}
	// Blocked again only once it publishes again, as RabbitMQ blocks a
	// connection on a publish during an alarm: one that now only acks and
	// consumes keeps going through the next alarm.
	c.published = false
	if notify {
		c.SendMethod(0, &amqp.ConnectionUnblocked{})
	}
	c.log.Debug("connection unblocked")
	return nil
}

// alarmMonitor is the monitor goroutine's state (New sets it up before
// the goroutine starts).
type alarmMonitor struct {
	logged      uint32      // the alarms as last logged
	paging      atomic.Bool // paging (Server.paging) as last logged; SetMemoryHighWatermark checks too
	diskOn      bool        // DiskFreeLimit > 0
	diskFree    uint64      // bytes free at the last disk check
	diskFailing bool        // the last disk check failed (logged once)
}

// monitor checks the alarms until Shutdown.
func (s *Server) monitor() {
	defer close(s.watched)
	every := s.opts.AlarmCheckInterval
	now := time.Now()
	nextMem, nextDisk := now.Add(every), now.Add(s.diskInterval())
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		next := nextMem
		if s.mon.diskOn && nextDisk.Before(next) {
			next = nextDisk
		}
		t.Reset(time.Until(next))
		select {
		case <-s.stop:
			return
		case <-s.alarmWake:
			s.logAlarms()
		case now := <-t.C:
			s.logAlarms() // a reader's set is logged before a check clears it
			if !now.Before(nextMem) {
				s.checkMemory()
				nextMem = now.Add(every)
			}
			if s.mon.diskOn && !now.Before(nextDisk) {
				s.checkDisk()
				nextDisk = now.Add(s.diskInterval())
			}
			s.logAlarms()
		}
	}
}

// checkMemory sets or clears the memory alarm by what queues hold (and
// the process's RSS with MemoryStrategy "rss"). The monitor, and
// SetMemoryHighWatermark: what it touches is atomic.
func (s *Server) checkMemory() {
	used := s.memory.Load()
	if s.opts.MemoryStrategy == "rss" {
		used = max(used, processRSS())
	}
	if r := s.opts.PagingRatio; r > 0 && r < 1 {
		paging := s.overPagingRatio(used)
		if paging != s.paging.Load() {
			s.paging.Store(paging)
		}
		if s.mon.paging.Swap(paging) != paging { // a reader may have set it (alarmBits)
			s.log.Info("memory paging ratio", zap.Bool("paging", paging), zap.String("used", humanBytes(used)),
				zap.String("threshold", humanBytes(int64(r*float64(s.watermark.Load())))))
		}
	}
	if used <= s.watermark.Load() {
		s.alarms.And(^alarmMemory)
		return
	}
	if s.alarms.Load()&alarmMemory == 0 {
		s.memTrip.Store(used)
		s.alarms.Or(alarmMemory)
	}
}

// overPagingRatio reports whether used is over the paging ratio of the
// watermark.
func (s *Server) overPagingRatio(used int64) bool {
	r := s.opts.PagingRatio
	return r > 0 && r < 1 && float64(used) > r*float64(s.watermark.Load())
}

// checkDisk sets or clears the disk alarm by the space free on DataDir's
// filesystem (RabbitMQ: alarm while free < limit). A failed check is
// logged once and leaves the alarm as it was. Monitor (and New) only.
func (s *Server) checkDisk() {
	free, err := s.diskFree()
	if err != nil {
		if !s.mon.diskFailing {
			s.mon.diskFailing = true
			s.log.Warn("disk free space check failed", zap.String("dir", s.opts.DataDir), zap.Error(err))
		}
		return
	}
	if s.mon.diskFailing {
		s.mon.diskFailing = false
		s.log.Info("disk free space check works again", zap.String("dir", s.opts.DataDir))
	}
	s.mon.diskFree = free
	s.diskFreeNow.Store(free)
	if free < uint64(s.opts.DiskFreeLimit) {
		s.alarms.Or(alarmDisk)
	} else {
		s.alarms.And(^alarmDisk)
	}
}

// diskFree is the bytes free to the broker on DataDir's filesystem.
func (s *Server) diskFree() (uint64, error) {
	if s.opts.DiskFree != nil {
		return s.opts.DiskFree()
	}
	return persist.FreeSpace(s.opts.DataDir)
}

// diskInterval is how long until the next disk check, as RabbitMQ's
// rabbit_disk_monitor:interval reckons it: the time the headroom left
// above the limit would last at 250 MB/s, halved, kept between 100 ms and
// AlarmCheckInterval; the longest while the alarm is on (or the check
// fails).
func (s *Server) diskInterval() time.Duration {
	longest := s.opts.AlarmCheckInterval
	shortest := min(100*time.Millisecond, longest)
	if s.alarms.Load()&alarmDisk != 0 || s.mon.diskFailing {
		return longest
	}
	headroom := int64(min(s.mon.diskFree, 1<<62)) - s.opts.DiskFreeLimit
	const nsPerByte = 2 * int64(time.Second) / 250e6 // 2 × (1 s / 250 MB)
	if headroom >= int64(longest)/nsPerByte {
		return longest
	}
	return max(shortest, time.Duration(headroom*nsPerByte))
}

// logAlarms logs each alarm that was set or cleared since it last looked,
// once (not per connection). Monitor (and New) only.
func (s *Server) logAlarms() {
	bits := s.alarms.Load()
	changed := bits ^ s.mon.logged
	s.mon.logged = bits
	limit := max(s.watermark.Load(), 0)
	if changed&alarmMemory != 0 {
		if bits&alarmMemory != 0 {
			used := s.memTrip.Load()
			s.log.Warn("memory alarm set: publishers are blocked", zap.String("used", humanBytes(used)), zap.String("limit", humanBytes(limit)),
				zap.Int64("used_bytes", used), zap.Int64("limit_bytes", limit))
		} else {
			used := s.memory.Load()
			s.log.Warn("memory alarm cleared", zap.String("used", humanBytes(used)), zap.String("limit", humanBytes(limit)),
				zap.Int64("used_bytes", used), zap.Int64("limit_bytes", limit))
		}
	}
	if changed&alarmDisk != 0 {
		free, limit := int64(min(s.mon.diskFree, 1<<62)), s.opts.DiskFreeLimit
		msg := "disk alarm cleared"
		if bits&alarmDisk != 0 {
			msg = "disk alarm set: publishers are blocked"
		}
		s.log.Warn(msg, zap.String("free", humanBytes(free)), zap.String("limit", humanBytes(limit)),
			zap.Int64("free_bytes", free), zap.Int64("limit_bytes", limit), zap.String("dir", s.opts.DataDir))
	}
}

// humanBytes writes n bytes for a log line: 1.2 GiB, 50.0 MiB, 512 B.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// SetMemoryHighWatermark changes the memory high watermark at run time
// (rabbitmqctl set_vm_memory_high_watermark): the alarm follows it at the
// next check, within AlarmCheckInterval.
func (s *Server) SetMemoryHighWatermark(bytes int64) {
	old := s.watermark.Swap(bytes)
	s.log.Info("memory high watermark set", zap.String("limit", humanBytes(max(bytes, 0))), zap.String("was", humanBytes(max(old, 0))))
	// In force when this returns, as rabbitmqctl's: the check runs here
	// (its state is atomic), the monitor logs what changed.
	s.checkMemory()
	select {
	case s.alarmWake <- struct{}{}:
	default:
	}
}
