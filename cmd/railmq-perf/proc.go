package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

var errProcFormat = errors.New("unexpected /proc format")

// procSample is one reading of a process's CPU time and memory.
type procSample struct {
	cpuTicks uint64 // utime + stime
	rssKiB   uint64 // VmRSS
	hwmKiB   uint64 // VmHWM, the lifetime peak of VmRSS
	// From /proc/PID/io (ioOK false when it could not be read: another
	// user's process without the privilege): write_bytes, the bytes the
	// process caused to be sent to storage, and cancelled_write_bytes,
	// those of them dropped again (truncated or deleted before writeback).
	writeBytes, cancelledWriteBytes uint64
	ioOK                            bool
}

// readProc samples /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, err
	}
	var s procSample
	if s.cpuTicks, err = parseStatCPU(stat); err != nil {
		return procSample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	if s.rssKiB, s.hwmKiB, err = parseStatusMem(status); err != nil {
		return procSample{}, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		s.writeBytes, s.cancelledWriteBytes, s.ioOK = parseIO(io)
	}
	return s, nil
}

// parseIO returns write_bytes and cancelled_write_bytes of /proc/PID/io
// ("write_bytes: 4096"), and whether both were there.
func parseIO(io []byte) (write, cancelled uint64, ok bool) {
	var haveW, haveC bool
	for line := range bytes.SplitSeq(io, []byte{'\n'}) {
		key, val, found := bytes.Cut(line, []byte{':'})
		if !found {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			continue
		}
		switch string(key) {
		case "write_bytes":
			write, haveW = n, true
		case "cancelled_write_bytes":
			cancelled, haveC = n, true
		}
	}
	return write, cancelled, haveW && haveC
}

// parseStatCPU returns utime+stime (fields 14 and 15, proc(5)). The command
// name in field 2 may hold spaces and parentheses, so fields are counted from
// the last ')'.
func parseStatCPU(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errProcFormat
	}
	f := bytes.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errProcFormat
	}
	utime, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return utime + stime, nil
}

// parseStatusMem returns VmRSS and VmHWM in KiB ("VmRSS:	  1234 kB").
func parseStatusMem(status []byte) (rss, hwm uint64, err error) {
	var haveRSS, haveHWM bool
	for line := range bytes.SplitSeq(status, []byte{'\n'}) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "VmRSS":
			dst, haveRSS = &rss, true
		case "VmHWM":
			dst, haveHWM = &hwm, true
		default:
			continue
		}
		f := bytes.Fields(val)
		if len(f) == 0 {
			return 0, 0, errProcFormat
		}
		if *dst, err = strconv.ParseUint(string(f[0]), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !haveRSS || !haveHWM {
		return 0, 0, errProcFormat
	}
	return rss, hwm, nil
}

// selfCPU is this process's user plus system CPU time so far
// (getrusage(RUSAGE_SELF)), the tool's own cost.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
