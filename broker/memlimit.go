package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
)

// Sizes and limits as RabbitMQ configures them: vm_memory_high_watermark
// (relative or absolute), disk_free_limit (absolute or mem_relative), and
// the total memory a relative figure is a fraction of.

// unknownMemory is the total memory assumed when it cannot be read, as
// RabbitMQ's vm_memory_monitor does (MEMORY_SIZE_FOR_UNKNOWN_OS, 1 GiB).
const unknownMemory = 1 << 30

// DefaultWatermark is the fraction of total memory that queues may hold
// before the memory alarm (RabbitMQ's vm_memory_high_watermark).
const DefaultWatermark = 0.4

// DefaultDiskFreeLimit is the free disk space under which the disk alarm
// is on (RabbitMQ's disk_free_limit, 50 MB).
const DefaultDiskFreeLimit = 50_000_000

// sizeUnits are the units ParseSize takes: RabbitMQ 3.10.8's
// (rabbit_resource_monitor_misc:parse_information_unit), whose single
// letters are binary; "KiB", which 3.10.8's pattern takes and its
// multiplier table misses (a crash there); and the unambiguous ones 3.13
// added (Ki, Mi, Gi, Ti, TB, TiB). RabbitMQ 3.13 also reads the single
// letters k, m, g as decimal; railmq keeps 3.10.8's reading.
var sizeUnits = map[string]int64{
	"k": 1 << 10, "K": 1 << 10, "kiB": 1 << 10, "KiB": 1 << 10, "KIB": 1 << 10, "kib": 1 << 10, "Ki": 1 << 10,
	"m": 1 << 20, "M": 1 << 20, "MiB": 1 << 20, "MIB": 1 << 20, "mib": 1 << 20, "Mi": 1 << 20,
	"g": 1 << 30, "G": 1 << 30, "GiB": 1 << 30, "GIB": 1 << 30, "gib": 1 << 30, "Gi": 1 << 30,
	"TiB": 1 << 40, "TIB": 1 << 40, "tib": 1 << 40, "Ti": 1 << 40,
	"kB": 1e3, "KB": 1e3, "kb": 1e3, "Kb": 1e3,
	"MB": 1e6, "mb": 1e6, "Mb": 1e6,
	"GB": 1e9, "gb": 1e9, "Gb": 1e9,
	"TB": 1e12, "tb": 1e12, "Tb": 1e12,
}

// ErrSize is a size or limit that cannot be read.
var ErrSize = errors.New("invalid size")

// ParseSize reads a size in bytes as RabbitMQ writes one: digits, then
// optionally a unit (512MiB, 2GB, 1024M, 1073741824). kB, MB, GB are
// powers of 1000; k, M, G, kiB, MiB, GiB powers of 1024.
func ParseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%w %q: not digits and a unit (such as 512MiB or 2GB)", ErrSize, s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
	}
	if i == len(s) {
		return n, nil
	}
	mult, ok := sizeUnits[s[i:]]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (kB, MB, GB, TB are powers of 1000; k, M, G, KiB, MiB, GiB, TiB powers of 1024)", ErrSize, s, s[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
	}
	return n * mult, nil
}

// parseFraction reads a relative figure: digits with a decimal point
// (0.4, .4, 1.0) or a percentage (40%), the forms the RabbitMQ Docker
// image's RABBITMQ_VM_MEMORY_HIGH_WATERMARK takes as relative.
func parseFraction(s string) (f float64, ok bool, err error) {
	pct := strings.HasSuffix(s, "%")
	num := strings.TrimSuffix(s, "%")
	if !pct && !strings.Contains(num, ".") {
		return 0, false, nil
	}
	if !isDecimal(num) {
		return 0, false, nil
	}
	f, err = strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, true, fmt.Errorf("%w %q: %v", ErrSize, s, err)
	}
	if pct {
		f /= 100
	}
	return f, true, nil
}

// isDecimal reports whether s is digits with at most one decimal point
// (1, 1.0, .5, 2.): no sign, exponent, or Inf.
func isDecimal(s string) bool {
	digits, points := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			points++
		default:
			return false
		}
	}
	return digits > 0 && points <= 1
}

// ParseWatermark reads --vm-memory-high-watermark and resolves it against
// total (TotalMemory), in bytes. A number with a decimal point or a
// percentage is a fraction of total, at most 1.0 (RabbitMQ's
// vm_memory_high_watermark.relative); anything else is a size (ParseSize:
// vm_memory_high_watermark.absolute), capped at total as RabbitMQ caps
// it. 0 means publishing is always blocked, as in RabbitMQ.
func ParseWatermark(s string, total int64) (int64, error) {
	f, rel, err := parseFraction(s)
	if err != nil {
		return 0, err
	}
	if rel {
		if f > 1 {
			return 0, fmt.Errorf("%w %q: a relative watermark is at most 1.0 (100%%)", ErrSize, s)
		}
		return int64(f * float64(total)), nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return 0, err
	}
	return min(n, total), nil
}

// ParseDiskFreeLimit reads --disk-free-limit, in bytes: a size (ParseSize:
// RabbitMQ's disk_free_limit.absolute) or mem_relative:F, F times total
// memory (disk_free_limit.relative, {mem_relative, F} in advanced.config).
func ParseDiskFreeLimit(s string, total int64) (int64, error) {
	if r, ok := strings.CutPrefix(s, "mem_relative:"); ok {
		f, err := strconv.ParseFloat(r, 64)
		if !isDecimal(r) || err != nil {
			return 0, fmt.Errorf("%w %q: mem_relative: takes a factor of total memory, such as mem_relative:1.0", ErrSize, s)
		}
		if v := f * float64(total); v < math.MaxInt64 {
			return int64(math.Round(v)), nil
		}
		return 0, fmt.Errorf("%w %q: too large", ErrSize, s)
	}
	return ParseSize(s)
}

// TotalMemory is the memory the broker's relative limits are fractions
// of: the machine's (MemTotal in /proc/meminfo), or the memory limit of
// the cgroup the broker runs in when that is lower (a container's; the
// RabbitMQ Docker image sets total_memory_available_override_value to
// it). 1 GiB when neither can be read.
func TotalMemory() int64 { return totalMemory(os.DirFS("/")) }

// totalMemory is TotalMemory reading the files under root.
func totalMemory(root fs.FS) int64 {
	total, ok := memTotal(root)
	if lim, limited := cgroupLimit(root); limited && (!ok || lim < total) {
		return lim
	}
	if !ok {
		return unknownMemory
	}
	return total
}

// memTotal reads MemTotal from /proc/meminfo (in kB, which the kernel
// means as KiB).
func memTotal(root fs.FS) (int64, bool) {
	data, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 && kb < math.MaxInt64/1024 {
				return kb * 1024, true
			}
		}
	}
	return 0, false
}

// noCgroupLimit: a cgroup memory limit at or above it means none (cgroup
// v1 writes "no limit" as 2^63 less a page, some kernels as 2^64-1).
const noCgroupLimit = 1 << 62

// cgroupLimit is the lowest memory limit of the broker's cgroup and its
// ancestors: cgroup v2's memory.max, else v1's memory.limit_in_bytes.
// The cgroup's path comes from /proc/self/cgroup; in a container with its
// own cgroup namespace it is "/" and the limit is the one at the mount's
// root, which the walk up reaches in either case.
func cgroupLimit(root fs.FS) (int64, bool) {
	var v2, v1 string
	if data, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				v2 = parts[2]
			}
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					v1 = parts[2]
				}
			}
		}
	}
	if lim, ok := lowestLimit(root, "sys/fs/cgroup", v2, "memory.max"); ok {
		return lim, true
	}
	return lowestLimit(root, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
}

// lowestLimit walks from mount/cg up to mount, reading file in each
// directory, and returns the lowest limit found.
func lowestLimit(root fs.FS, mount, cg, file string) (int64, bool) {
	best, found := int64(0), false
	dir := path.Clean("/" + cg)
	for {
		if data, err := fs.ReadFile(root, path.Join(mount, dir, file)); err == nil {
			v := strings.TrimSpace(string(data))
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 && n < noCgroupLimit {
				if !found || int64(n) < best {
					best, found = int64(n), true
				}
			}
		}
		if dir == "/" {
			return best, found
		}
		dir = path.Dir(dir)
	}
}
