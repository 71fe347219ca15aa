package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/internal/poll"
)

// TestBlockedReason: connection.blocked's reasons as RabbitMQ 3.10.8's
// rabbit_reader:blocked_by_message writes them.
func TestBlockedReason(t *testing.T) {
	for _, tc := range []struct {
		bits uint32
		want string
	}{
		{0, ""},
		{alarmMemory, "low on memory"},
		{alarmDisk, "low on disk"},
		{alarmMemory | alarmDisk, "low on disk & memory"},
	} {
		if got := blockedReason(tc.bits); got != tc.want {
			t.Errorf("blockedReason(%b) = %q, want %q", tc.bits, got, tc.want)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{50_000_000, "47.7 MiB"},
		{1 << 30, "1.0 GiB"},
		{1288490188, "1.2 GiB"},
		{3 << 40, "3.0 TiB"},
		{1 << 62, "4.0 EiB"},
	} {
		if got := humanBytes(tc.n); got != tc.want {
			t.Errorf("humanBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestDiskInterval: RabbitMQ's rabbit_disk_monitor:interval, twice the
// time the headroom lasts at 250 MB/s, between 100 ms and the longest
// interval, and the longest while alarmed.
func TestDiskInterval(t *testing.T) {
	for _, tc := range []struct {
		name    string
		free    uint64
		alarmed bool
		failing bool
		want    time.Duration
	}{
		{"far from the limit", 100 << 30, false, false, time.Second},
		{"250 MB above: 2 s, capped", 300_000_000, false, false, time.Second},
		{"62.5 MB above: 500 ms", 112_500_000, false, false, 500 * time.Millisecond},
		{"10 MB above: 100 ms floor", 60_000_000, false, false, 100 * time.Millisecond},
		{"at the limit", 50_000_000, false, false, 100 * time.Millisecond},
		{"never measured", 0, false, false, 100 * time.Millisecond},
		{"alarmed", 10_000_000, true, false, time.Second},
		{"failing", 0, false, true, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{DiskFreeLimit: 50_000_000, AlarmCheckInterval: time.Second}}
			s.mon.diskFree, s.mon.diskFailing = tc.free, tc.failing
			if tc.alarmed {
				s.alarms.Store(alarmDisk)
			}
			if got := s.diskInterval(); got != tc.want {
				t.Errorf("diskInterval = %v, want %v", got, tc.want)
			}
		})
	}
}

// alarmServer starts a server whose disk free space is free, logging to
// an observer; calls counts the disk checks.
func alarmServer(t *testing.T, opts Options, free *atomic.Uint64, calls *atomic.Int64) (*Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	opts.DataDir = t.TempDir()
	opts.Logger = zap.New(core)
	opts.AlarmCheckInterval = 5 * time.Millisecond
	opts.DiskFree = func() (uint64, error) {
		calls.Add(1)
		return free.Load(), nil
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s, logs
}

// waitChecks waits until the monitor has checked the disk n more times.
func waitChecks(t *testing.T, calls *atomic.Int64, n int64) {
	t.Helper()
	from := calls.Load()
	poll.Eventually(t, 10*time.Second, func() bool { return calls.Load() >= from+n }, "%d more disk checks", n)
}

func count(logs *observer.ObservedLogs, msg string) int { return logs.FilterMessage(msg).Len() }

// TestAlarmStateLogsOnce: each alarm logs one line when set and one when
// cleared, with the figure and the limit, however many checks and
// readers see it; the server's state is the union of both alarms.
func TestAlarmStateLogsOnce(t *testing.T) {
	var free atomic.Uint64
	var calls atomic.Int64
	free.Store(1 << 40)
	s, logs := alarmServer(t, Options{MemoryHighWatermark: 1000, DiskFreeLimit: 50_000_000}, &free, &calls)
	if s.alarmed() {
		t.Fatal("alarm on at start")
	}

	free.Store(10_000_000)
	poll.Eventually(t, 10*time.Second, s.alarmed, "disk alarm on")
	if got := blockedReason(s.alarmBits()); got != "low on disk" {
		t.Errorf("reason %q", got)
	}
	waitChecks(t, &calls, 5)
	set := logs.FilterMessage("disk alarm set: publishers are blocked").All()
	if len(set) != 1 {
		t.Fatalf("%d disk alarm set lines, want 1: %v", len(set), logs.All())
	}
	if f := set[0].ContextMap(); f["free_bytes"] != int64(10_000_000) || f["limit_bytes"] != int64(50_000_000) || f["free"] != "9.5 MiB" ||
		f["limit"] != "47.7 MiB" || set[0].Level != zapcore.WarnLevel {
		t.Errorf("disk alarm line %v %v", set[0].Level, f)
	}

	// The memory alarm as a reader sets it: at once, many times.
	s.memory.Store(5000)
	for range 100 {
		if got := blockedReason(s.alarmBits()); got != "low on disk & memory" {
			t.Fatalf("reason %q", got)
		}
	}
	poll.Eventually(t, 10*time.Second, func() bool { return count(logs, "memory alarm set: publishers are blocked") == 1 }, "memory alarm logged")
	if f := logs.FilterMessage("memory alarm set: publishers are blocked").All()[0].ContextMap(); f["used_bytes"] != int64(5000) ||
		f["limit_bytes"] != int64(1000) || f["used"] != "4.9 KiB" || f["limit"] != "1000 B" {
		t.Errorf("memory alarm line %v", f)
	}

	// Disk clears first: still blocked, by memory.
	free.Store(1 << 40)
	poll.Eventually(t, 10*time.Second, func() bool { return count(logs, "disk alarm cleared") == 1 }, "disk alarm cleared")
	if got := blockedReason(s.alarmBits()); got != "low on memory" {
		t.Errorf("reason %q", got)
	}
	s.memory.Store(1000) // at the watermark: not over it
	poll.Eventually(t, 10*time.Second, func() bool { return !s.alarmed() }, "memory alarm cleared")
	waitChecks(t, &calls, 5)
	for msg, want := range map[string]int{
		"disk alarm set: publishers are blocked":   1,
		"disk alarm cleared":                       1,
		"memory alarm set: publishers are blocked": 1,
		"memory alarm cleared":                     1,
	} {
		if got := count(logs, msg); got != want {
			t.Errorf("%d lines %q, want %d", got, msg, want)
		}
	}
}

// TestDiskAlarmAtStart: a broker started on a full disk is alarmed before
// New returns, so its first publisher is blocked.
func TestDiskAlarmAtStart(t *testing.T) {
	var free atomic.Uint64
	var calls atomic.Int64
	free.Store(1000)
	s, logs := alarmServer(t, Options{}, &free, &calls)
	if got := blockedReason(s.alarms.Load()); got != "low on disk" {
		t.Fatalf("reason %q at start", got)
	}
	if count(logs, "disk alarm set: publishers are blocked") != 1 || count(logs, "disk free limit") != 1 {
		t.Errorf("logs %v", logs.All())
	}
	if f := logs.FilterMessage("disk free limit").All()[0].ContextMap(); f["limit_bytes"] != int64(DefaultDiskFreeLimit) {
		t.Errorf("default limit %v", f)
	}
}

// TestDiskCheckFailure: a failing check is logged once and leaves the
// alarm as it was; the next good check logs that too.
func TestDiskCheckFailure(t *testing.T) {
	var fail atomic.Bool
	var calls atomic.Int64
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := New(Options{
		DataDir: t.TempDir(), Logger: zap.New(core), AlarmCheckInterval: 5 * time.Millisecond,
		DiskFree: func() (uint64, error) {
			calls.Add(1)
			if fail.Load() {
				return 0, errors.New("no such device")
			}
			return 1 << 40, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	fail.Store(true)
	waitChecks(t, &calls, 5)
	if n := count(logs, "disk free space check failed"); n != 1 {
		t.Errorf("%d failure lines, want 1", n)
	}
	if s.alarmed() {
		t.Error("a failed check set the alarm")
	}
	fail.Store(false)
	poll.Eventually(t, 10*time.Second, func() bool { return count(logs, "disk free space check works again") == 1 }, "recovery logged")
}

// TestStatfsDiskFree: without the hook, the data directory's filesystem
// is asked.
func TestStatfsDiskFree(t *testing.T) {
	s := &Server{opts: Options{DataDir: t.TempDir()}}
	if free, err := s.diskFree(); err != nil || free == 0 {
		t.Errorf("diskFree = %d, %v", free, err)
	}
	s.opts.DataDir = "/nonexistent/railmq"
	if _, err := s.diskFree(); err == nil {
		t.Error("statfs of a missing directory succeeded")
	}
}
