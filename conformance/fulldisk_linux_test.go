package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// smallFS mounts a tmpfs of size bytes for the test, or skips it when the
// test may not mount (not root, or a container without the capability).
// tmpfs is the harsh case for Badger's mmaps: on a full one even reading a
// hole faults.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file until the filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		n, err := f.Write(buf)
		if err != nil {
			if n == 0 && !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Whatever part of a block is left.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
}

// On a real filesystem that fills up, with the disk alarm off so that
// nothing stops the publisher first: persistent publishes are nacked, not
// a crash; consumers are still served and their acks still land; a restart
// on the full disk exits with a clear message; once there is room again,
// every confirmed message that was not acked comes back.
func TestFullDiskIsSurvived(t *testing.T) {
	testutil.InProcess(t)
	fs := smallFS(t, "96m")
	bin := testutil.Binary(t)
	dataDir := filepath.Join(fs, "data")
	addr := testutil.FreePort(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--listen", addr, "--data-dir", dataDir, "--disk-free-limit", "0", "--log-level", "warn")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			if t.Failed() {
				t.Logf("broker output:\n%s", out.String())
			}
		})
		testutil.WaitListening(t, addr, 30*time.Second)
		return cmd
	}
	url := "amqp://guest:guest@" + addr + "/"
	cmd := start()
	c, err := rmq.Dial(url)
	must(t, err)
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("fill", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))

	body := func(i uint64) []byte {
		b := make([]byte, 64<<10)
		binary.BigEndian.PutUint64(b, i)
		return b
	}
	confirmed := map[uint64]bool{}
	nacks := 0
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := uint64(1); nacks < 3; i++ {
		if i > 3000 { // 192 MiB into a 96 MiB filesystem
			t.Fatalf("%d confirmed of %d with no nack on a full filesystem", len(confirmed), i-1)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "fill", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body(i)})
		must(t, err)
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v (the broker is gone?)", i, err)
		}
		if ok {
			confirmed[i] = true
		} else {
			nacks++
		}
	}
	if len(confirmed) < 100 {
		t.Fatalf("only %d confirmed before the store refused writes", len(confirmed))
	}
	t.Logf("%d confirmed before the filesystem was full", len(confirmed))

	// A consumer is served, and its acks land: they free space.
	cch, err := c.Channel()
	must(t, err)
	must(t, cch.Qos(10, 0, false))
	ds, err := cch.Consume("fill", "", false, false, false, false, nil)
	must(t, err)
	acked := map[uint64]bool{}
	for range 50 {
		d := recv(t, ds)
		acked[binary.BigEndian.Uint64(d.Body)] = true
		must(t, d.Ack(false))
	}
	must(t, cch.Close()) // a round trip: the acks were processed
	if c.IsClosed() {
		t.Fatal("connection closed on a full disk")
	}
	c.Close()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	// Fill what is left, as another program would: the broker must not
	// start on it, and must say why.
	junk := filepath.Join(fs, "junk")
	fillDisk(t, junk)
	out, err := exec.Command(bin, "--listen", addr, "--data-dir", dataDir, "--disk-free-limit", "0", "--log-format", "json").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("start on a full disk: %v (want exit status 1)\n%s", err, out)
	}
	if !strings.Contains(string(out), "cannot start broker") || !strings.Contains(string(out), "free") {
		t.Fatalf("unclear message:\n%s", out)
	}

	// Room again: everything confirmed and not acked is there.
	must(t, os.Remove(junk))
	start()
	c, err = rmq.Dial(url)
	must(t, err)
	defer c.Close()
	ch, err = c.Channel()
	must(t, err)
	must(t, ch.Qos(100, 0, false))
	ds, err = ch.Consume("fill", "", false, false, false, false, nil)
	must(t, err)
	want := 0
	for id := range confirmed {
		if !acked[id] {
			want++
		}
	}
	got := 0
	for got < want {
		d := recv(t, ds)
		id := binary.BigEndian.Uint64(d.Body)
		if confirmed[id] && !acked[id] {
			got++
			delete(confirmed, id)
		}
		must(t, d.Ack(false))
	}
}
