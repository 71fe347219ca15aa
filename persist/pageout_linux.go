//go:build linux

package persist

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4): reclaim these pages now.
const madvPageout = 21

// pageOut asks the kernel to reclaim the resident pages of Badger's
// memory-mapped value log and table files under dir. Badger does all its
// I/O through mmap, so every byte written or read stays in the process's
// RSS until the kernel is short of memory; a backlog of a gigabyte would
// show as a gigabyte of RSS although it is only page cache. MADV_PAGEOUT is
// a hint that never changes memory contents (unlike MADV_DONTNEED), so a
// mapping that moved since /proc/self/maps was read is merely paged out,
// never corrupted. The memtables' write-ahead files (*.mem), rewritten all
// the time, are left alone. It returns the bytes advised.
func pageOut(dir string) int64 {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		path := line[i:]
		if !strings.HasPrefix(path, dir) || strings.HasSuffix(path, ".mem") {
			continue
		}
		rng, _, _ := strings.Cut(line, " ")
		lo, hi, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), madvPageout); e == 0 {
			total += int64(end - start)
		}
	}
	return total
}

func absDir(dir string) string {
	if a, err := filepath.Abs(dir); err == nil {
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r + "/"
		}
		return a + "/"
	}
	return dir
}
