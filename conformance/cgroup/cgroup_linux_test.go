package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// memCgroup is a memory cgroup the test made, v2 or v1, whatever the
// kernel mounts: a directory under the hierarchy with its limit written,
// into which a child is moved through procs. systemd-run --scope would
// need systemd as PID 1, which a CI container seldom has; a directory of
// our own needs only root and a mounted memory controller.
type memCgroup struct {
	dir   string
	v2    bool
	procs string // the file a pid is written to, to move it in
}

// requireCgroup says whether a test that cannot make a memory cgroup must
// fail rather than skip (.ci/run sets it: CI must really run the test).
const requireCgroup = "RAILMQ_REQUIRE_CGROUP"

// newMemCgroup makes a memory cgroup limited to limit bytes (swap off
// where the kernel accounts it), removed when the test ends (its
// processes must be gone by then). It skips the test, with the reason,
// when there is no memory controller to use, unless RAILMQ_REQUIRE_CGROUP
// is set.
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	cg, err := makeMemCgroup(t.Name(), limit)
	if err != nil {
		if os.Getenv(requireCgroup) != "" {
			t.Fatalf("no memory cgroup (%s is set): %v", requireCgroup, err)
		}
		t.Skipf("no memory cgroup to run the broker in: %v (the test needs root and a kernel with the memory controller, cgroup v1 or v2)", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("removing cgroup %s: %v", cg.dir, err)
		}
	})
	return cg
}

func makeMemCgroup(name string, limit int64) (*memCgroup, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not root")
	}
	v2root, v1root, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	leaf := fmt.Sprintf("railmq-%s-%d", strings.NewReplacer("/", "-", " ", "-").Replace(name), os.Getpid())
	if v2root != "" && hasWord(filepath.Join(v2root, "cgroup.controllers"), "memory") {
		// Under the hierarchy's root, the one cgroup exempt from the rule
		// that a cgroup with processes has no children with controllers.
		sub := filepath.Join(v2root, "cgroup.subtree_control")
		if !hasWord(sub, "memory") {
			if err := os.WriteFile(sub, []byte("+memory"), 0); err != nil {
				return nil, fmt.Errorf("enabling the memory controller in %s: %w", sub, err)
			}
		}
		cg := &memCgroup{dir: filepath.Join(v2root, leaf), v2: true}
		cg.procs = filepath.Join(cg.dir, "cgroup.procs")
		if err := os.Mkdir(cg.dir, 0o755); err != nil {
			return nil, err
		}
		if err := cg.write("memory.max", limit); err != nil {
			os.Remove(cg.dir)
			return nil, err
		}
		_ = cg.write("memory.swap.max", 0) // absent without swap accounting
		return cg, nil
	}
	if v1root == "" {
		return nil, errors.New("no cgroup2 mount with the memory controller and no cgroup v1 memory mount (/proc/self/mountinfo)")
	}
	// v1: beside ours, under the memory hierarchy.
	parent := v1root
	if own := ownV1Path(); own != "" {
		parent = filepath.Join(v1root, own)
	}
	cg := &memCgroup{dir: filepath.Join(parent, leaf)}
	cg.procs = filepath.Join(cg.dir, "cgroup.procs")
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, err
	}
	if err := cg.write("memory.limit_in_bytes", limit); err != nil {
		os.Remove(cg.dir)
		return nil, err
	}
	_ = cg.write("memory.memsw.limit_in_bytes", limit) // absent without swap accounting
	return cg, nil
}

func (cg *memCgroup) write(file string, v int64) error {
	return os.WriteFile(filepath.Join(cg.dir, file), []byte(strconv.FormatInt(v, 10)), 0)
}

// peak is the most memory the cgroup was charged at once (its processes'
// anonymous memory and the page cache they brought in), or 0 when the
// kernel does not say (v2's memory.peak is Linux 5.19).
func (cg *memCgroup) peak() int64 {
	f := "memory.max_usage_in_bytes"
	if cg.v2 {
		f = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, f))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// oomKills is how many processes the kernel's OOM killer killed in the
// cgroup (v2 memory.events, v1 memory.oom_control since Linux 4.13).
func (cg *memCgroup) oomKills() (int64, error) {
	f := "memory.oom_control"
	if cg.v2 {
		f = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, f))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no oom_kill count in %s", f)
}

// cgroupMounts finds the cgroup2 mount and the cgroup v1 mount of the
// memory controller, either of which may be missing.
func cgroupMounts() (v2, v1 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, after := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(after) < 3 {
			continue
		}
		switch after[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = fields[4]
			}
		case "cgroup":
			for _, o := range strings.Split(after[2], ",") {
				if o == "memory" && v1 == "" {
					v1 = fields[4]
				}
			}
		}
	}
	return v2, v1, sc.Err()
}

// ownV1Path is this process's cgroup in the v1 memory hierarchy
// ("4:memory:/path" in /proc/self/cgroup), or "" when at its root.
func ownV1Path() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					return strings.TrimPrefix(parts[2], "/")
				}
			}
		}
	}
	return ""
}

func hasWord(file, word string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, w := range strings.Fields(string(b)) {
		if w == word {
			return true
		}
	}
	return false
}

// statusBytes reads a "Name:   123 kB" line of /proc/pid/status, in bytes.
func statusBytes(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}
