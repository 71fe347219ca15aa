package cgroup

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// The sizes of issue 38's item 2: 200 persistent messages of 20 MiB
// drained by a broker in a 1 GiB container, its queue window at the
// default 16 MiB.
const (
	drainMessages = 200
	drainBody     = 20 << 20
	drainLimit    = 1 << 30
)

// broker is the railmq binary running in the cgroup.
type broker struct {
	cmd  *exec.Cmd
	done chan error // Wait's result
	err  error
}

// startInCgroup starts the binary, moved into cg by a shell before it
// execs the broker (so that the broker never runs outside it).
func startInCgroup(t *testing.T, cg *memCgroup, bin, addr, dataDir string) *broker {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$RAILMQ_TEST_CGROUP_PROCS" && exec "$@"`, "sh",
		bin, "--listen", addr, "--data-dir", dataDir, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "RAILMQ_TEST_CGROUP_PROCS="+cg.procs)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &broker{cmd: cmd, done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait() }()
	t.Cleanup(func() { b.stop(t) })
	testutil.Eventually(t, time.Minute, func() bool {
		if b.exited() {
			t.Fatalf("broker exited at start: %v", b.err)
		}
		c, err := rmq.Dial("amqp://guest:guest@" + addr + "/")
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "broker in the cgroup listening on %s", addr)
	return b
}

// exited reports whether the broker process has ended (its error in b.err).
func (b *broker) exited() bool {
	if b.done == nil {
		return true
	}
	select {
	case b.err = <-b.done:
		b.done = nil
		return true
	default:
		return false
	}
}

// fate says whether the broker ended, within a few seconds, and how,
// with the cgroup's OOM kills.
func (b *broker) fate(cg *memCgroup) string {
	if b.done != nil {
		select {
		case b.err = <-b.done:
			b.done = nil
		case <-time.After(10 * time.Second):
		}
	}
	kills, err := cg.oomKills()
	if err != nil {
		return fmt.Sprintf("broker ended: %v (%v); OOM kills unknown: %v", b.done == nil, b.err, err)
	}
	return fmt.Sprintf("broker ended: %v (%v); OOM kills in the cgroup: %d", b.done == nil, b.err, kills)
}

// stop ends the broker with SIGTERM (a clean stop) and waits for it; it
// fails the test if the broker had already ended.
func (b *broker) stop(t *testing.T) {
	t.Helper()
	if b.exited() {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case b.err = <-b.done:
	case <-time.After(2 * time.Minute):
		_ = b.cmd.Process.Kill()
		b.err = <-b.done
		t.Errorf("broker did not stop within 2 minutes of SIGTERM")
	}
	b.done = nil
	if b.err != nil {
		t.Errorf("broker stopped with %v", b.err)
	}
}

// A broker in a 1 GiB memory cgroup drains 200 persistent messages of 20
// MiB, every body intact, half before and half after a restart: reading a
// backlog back from the store is bounded by the queue's window as
// everything else. Before, Badger's iterator copied the 100 records after
// the one asked for into the heap at each read, and at each start while
// reading the definitions (which sort just before the entries): the
// broker drained at about 5 MiB/s with 2.9 GB of RSS outside a cgroup,
// and in this one was OOM-killed on the first delivery. The peak memory
// (the cgroup's, page cache included, and the broker's VmHWM) and the
// drain rates are logged; the rate is measured with railmq-perf
// (bench/drain-large.sh), not asserted here. The messages go through
// testdata/drainclient, built without the race detector.
func TestLargePersistentBacklogDrainsIn1GiBCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads 4 GiB")
	}
	cg := newMemCgroup(t, drainLimit)
	bin := testutil.Binary(t)
	client := filepath.Join(t.TempDir(), "drainclient")
	if out, err := exec.Command("go", "build", "-o", client, "./testdata/drainclient").CombinedOutput(); err != nil {
		t.Fatalf("go build drainclient: %v\n%s", err, out)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	addr := testutil.FreePort(t)
	url := "amqp://guest:guest@" + addr + "/"
	size := strconv.Itoa(drainBody)
	const q = "drain-20mib"
	half, all := strconv.Itoa(drainMessages/2), strconv.Itoa(drainMessages)

	b := startInCgroup(t, cg, bin, addr, dataDir)
	b.client(t, cg, client, "publish", url, q, all, size)
	t.Logf("cgroup peak so far %d MiB, broker VmHWM %d MiB", cg.peak()>>20, statusBytes(b.cmd.Process.Pid, "VmHWM")>>20)
	b.client(t, cg, client, "consume", url, q, "0", half, size)
	hwm := statusBytes(b.cmd.Process.Pid, "VmHWM")
	b.stop(t)
	t.Logf("first broker: VmHWM %d MiB; cgroup peak so far %d MiB", hwm>>20, cg.peak()>>20)
	checkPeakRSS(t, "first broker", hwm)

	b = startInCgroup(t, cg, bin, addr, dataDir)
	b.client(t, cg, client, "consume", url, q, half, all, size)
	hwm = statusBytes(b.cmd.Process.Pid, "VmHWM")
	checkPeakRSS(t, "restarted broker", hwm)
	conn, err := rmq.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || st.Messages != 0 {
		t.Errorf("after the drain: %+v, %v (want an empty queue)", st, err)
	}
	conn.Close()
	b.stop(t)
	kills, err := cg.oomKills()
	if err != nil {
		t.Logf("OOM kills not readable: %v", err)
	}
	if kills != 0 {
		t.Errorf("the OOM killer killed %d processes in the 1 GiB cgroup", kills)
	}
	t.Logf("restarted broker: VmHWM %d MiB; cgroup %s peak %d MiB (page cache included) of a %d MiB limit; OOM kills %d",
		hwm>>20, filepath.Base(cg.dir), cg.peak()>>20, drainLimit>>20, kills)
}

// peakRSSGoal is the bound on the broker's peak resident memory
// while it drains 200 x 20 MiB persistent messages in a 1 GiB container
// (measured 221-283 MiB on a loaded machine). VmHWM is the kernel's
// high-water mark of the process's RSS, page cache not included: what it
// reaches depends on what the broker holds, not on how fast it runs.
const peakRSSGoal = 512 << 20

func checkPeakRSS(t *testing.T, who string, hwm int64) {
	t.Helper()
	if hwm <= 0 {
		t.Errorf("%s: VmHWM not readable", who)
	} else if hwm >= peakRSSGoal {
		t.Errorf("%s: peak RSS (VmHWM) %d MiB, the goal is under %d MiB", who, hwm>>20, peakRSSGoal>>20)
	}
}

// client runs drainclient with args and logs what it printed; it fails
// the test, saying what became of the broker, if the client fails.
func (b *broker) client(t *testing.T, cg *memCgroup, client string, args ...string) {
	t.Helper()
	out, err := exec.Command(client, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("drainclient %s: %v\n%s%s", args[0], err, out, b.fate(cg))
	}
	t.Logf("%s: %s", args[0], bytes.TrimSpace(out))
}
