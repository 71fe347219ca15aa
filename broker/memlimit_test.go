package broker

import (
	"errors"
	"testing"
	"testing/fstest"
)

// TestParseSize: RabbitMQ 3.10.8's units (rabbit_resource_monitor_misc:
// parse_information_unit): kB, MB, GB in any case but mB/gB are 1000-based;
// k, M, G (either case) and kiB, MiB, GiB (as written, all caps or all
// lower) 1024-based; plus KiB, which 3.10.8's pattern takes but its table
// misses, and 3.13's unambiguous Ki/Mi/Gi/Ti, TB, TiB.
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1073741824", 1073741824},
		{"50000000", 50_000_000},
		{"512MiB", 512 << 20},
		{"2GB", 2_000_000_000},
		{"1024M", 1 << 30},
		{"50MB", 50_000_000},
		{"50mb", 50_000_000},
		{"50Mb", 50_000_000},
		{"500KB", 500_000},
		{"500kB", 500_000},
		{"500kb", 500_000},
		{"500Kb", 500_000},
		{"5GB", 5_000_000_000},
		{"5gb", 5_000_000_000},
		{"5Gb", 5_000_000_000},
		{"1k", 1024},
		{"1K", 1024},
		{"1kiB", 1024},
		{"1KiB", 1024},
		{"1KIB", 1024},
		{"1kib", 1024},
		{"1m", 1 << 20},
		{"1M", 1 << 20},
		{"1MiB", 1 << 20},
		{"1MIB", 1 << 20},
		{"1mib", 1 << 20},
		{"1g", 1 << 30},
		{"1G", 1 << 30},
		{"1GiB", 1 << 30},
		{"1GIB", 1 << 30},
		{"1gib", 1 << 30},
		{"2Gi", 2 << 30},
		{"3Mi", 3 << 20},
		{"4Ki", 4 << 10},
		{"1Ti", 1 << 40},
		{"1TiB", 1 << 40},
		{"2TB", 2_000_000_000_000},
		{"007MB", 7_000_000},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "MB", "-1", "+1", "1.5GB", "1 GB", " 1GB", "1GB ", "1B", "1mB", "1gB", "1Gib", "1T", "1PB", "0x10",
		"9223372036854775808", "9223372036854775807k", "8589934592GiB",
	} {
		if got, err := ParseSize(in); !errors.Is(err, ErrSize) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrSize", in, got, err)
		}
	}
}

// TestParseWatermark: a decimal point or a percentage is relative (of the
// total, at most 1.0), the rest absolute and capped at the total, as the
// RabbitMQ Docker image reads RABBITMQ_VM_MEMORY_HIGH_WATERMARK and
// vm_memory_monitor:interpret_limit caps an absolute one.
func TestParseWatermark(t *testing.T) {
	const total = 8 << 30
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0.4", total * 4 / 10},
		{".4", total * 4 / 10},
		{"0.40", total * 4 / 10},
		{"40%", total * 4 / 10},
		{"12.5%", total / 8},
		{"1.0", total},
		{"1.", total},
		{"100%", total},
		{"0.0", 0},
		{"0%", 0},
		{"0", 0},
		{"1", 1},
		{"512MiB", 512 << 20},
		{"2GB", 2_000_000_000},
		{"1073741824", 1 << 30},
		{"16GiB", total}, // capped
		{"9000000000000", total},
	} {
		got, err := ParseWatermark(tc.in, total)
		if err != nil || got != tc.want {
			t.Errorf("ParseWatermark(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "1.5", "101%", "-0.4", "0.4.1", "1e-1", "abc", "40 %", "%", ".", "1.5GB", "0.4x"} {
		if got, err := ParseWatermark(in, total); !errors.Is(err, ErrSize) {
			t.Errorf("ParseWatermark(%q) = %d, %v; want ErrSize", in, got, err)
		}
	}
}

// TestParseDiskFreeLimit: a size (disk_free_limit.absolute), or
// mem_relative:F (disk_free_limit.relative, rounded as
// rabbit_disk_monitor:interpret_limit rounds it).
func TestParseDiskFreeLimit(t *testing.T) {
	const total = 3 << 30
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"50MB", 50_000_000},
		{"50000000", 50_000_000},
		{"500KB", 500_000},
		{"1GiB", 1 << 30},
		{"0", 0},
		{"mem_relative:1.0", total},
		{"mem_relative:1", total},
		{"mem_relative:2.0", 2 * total},
		{"mem_relative:1.5", total * 3 / 2},
		{"mem_relative:.1", 322122547}, // round(0.1 * 3 GiB)
		{"mem_relative:0", 0},
	} {
		got, err := ParseDiskFreeLimit(tc.in, total)
		if err != nil || got != tc.want {
			t.Errorf("ParseDiskFreeLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "1.0", "0.5", "mem_relative:", "mem_relative:-1", "mem_relative:1e3", "mem_relative:Inf",
		"mem_relative:NaN", "mem_relative:1GB", "mem_relative 1.0", "mem_relative:99999999999999999999", "50 MB"} {
		if got, err := ParseDiskFreeLimit(in, total); !errors.Is(err, ErrSize) {
			t.Errorf("ParseDiskFreeLimit(%q) = %d, %v; want ErrSize", in, got, err)
		}
	}
}

// TestTotalMemory: the machine's memory, or the cgroup's limit when lower
// (v2 memory.max or v1 memory.limit_in_bytes, the lowest on the way up
// from the broker's cgroup); "max" or v1's huge "no limit" is none.
func TestTotalMemory(t *testing.T) {
	const meminfo = "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n"
	const ram = 16384000 * 1024
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  int64
	}{
		{"meminfo only", fstest.MapFS{"proc/meminfo": file(meminfo)}, ram},
		{"nothing readable: RabbitMQ's 1 GiB", fstest.MapFS{}, 1 << 30},
		{"v2 namespace root, max", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("max\n"),
		}, ram},
		{"v2 namespace root, limited", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("1073741824\n"),
		}, 1 << 30},
		{"v2 no cgroup file: the mount's root", fstest.MapFS{
			"proc/meminfo": file(meminfo), "sys/fs/cgroup/memory.max": file("536870912\n"),
		}, 512 << 20},
		{"v2 limit above RAM: RAM", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("68719476736\n"),
		}, ram},
		{"v2 nested: the lowest on the way up", fstest.MapFS{
			"proc/meminfo":     file(meminfo),
			"proc/self/cgroup": file("0::/system.slice/railmq.service\n"),
			"sys/fs/cgroup/system.slice/railmq.service/memory.max": file("max\n"),
			"sys/fs/cgroup/system.slice/memory.max":                file("2147483648\n"),
		}, 2 << 30},
		{"v2 nested, own limit lower", fstest.MapFS{
			"proc/meminfo":     file(meminfo),
			"proc/self/cgroup": file("0::/system.slice/railmq.service\n"),
			"sys/fs/cgroup/system.slice/railmq.service/memory.max": file("1000000000\n"),
			"sys/fs/cgroup/system.slice/memory.max":                file("2147483648\n"),
		}, 1_000_000_000},
		{"v1 unlimited", fstest.MapFS{
			"proc/meminfo":     file(meminfo),
			"proc/self/cgroup": file("12:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, ram},
		{"v1 in a container: the mount's root", fstest.MapFS{
			"proc/meminfo":     file(meminfo),
			"proc/self/cgroup": file("5:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("268435456\n"),
		}, 256 << 20},
		{"v1 host path", fstest.MapFS{
			"proc/meminfo":     file(meminfo),
			"proc/self/cgroup": file("4:blkio:/\n5:memory,hugetlb:/docker/abc\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("268435456\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":            file("18446744073709551615\n"),
		}, 256 << 20},
		{"cgroup limit without meminfo", fstest.MapFS{
			"proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("4294967296\n"),
		}, 4 << 30},
		{"garbage ignored", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("lots\n"),
		}, ram},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := totalMemory(tc.files); got != tc.want {
				t.Errorf("totalMemory = %d, want %d", got, tc.want)
			}
		})
	}
	if TotalMemory() <= 0 {
		t.Errorf("TotalMemory() = %d", TotalMemory())
	}
}
