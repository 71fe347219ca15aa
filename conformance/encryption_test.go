package conformance

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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

// Encryption at rest (docs/encryption.md): --data-encryption-key-file.
// RabbitMQ has nothing to compare with: it does not encrypt its message
// store (rabbitmq-server v4.1.0: rabbit_msg_store.erl,
// rabbit_classic_queue_store_v2.erl and rabbit_classic_queue_index_v2.erl
// hold no "encrypt" or "crypto:" at all; in deps/rabbit/src only
// rabbit_control_pbe.erl and rabbit_cuttlefish.erl mention encryption,
// for values in the configuration). These tests run the real binary and
// look at the bytes it leaves on disk.

// keyFile writes a fresh key as `openssl rand -hex 32 > key` does and
// returns its path.
func keyFile(t *testing.T, name string) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(p, []byte(hex.EncodeToString(k)+"\n"), 0o600))
	return p
}

// startArgs is startBinary with more flags; stop it with stopBinary.
func startArgs(t *testing.T, bin, dir string, args ...string) (*exec.Cmd, string, *bytes.Buffer) {
	t.Helper()
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--data-dir", dir, "--log-level", "warn"}, args...)...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.WaitListening(t, addr, 30*time.Second)
	return cmd, "amqp://guest:guest@" + addr + "/", &logs
}

// stopBinary stops a broker started by startArgs with SIGTERM.
func stopBinary(t *testing.T, cmd *exec.Cmd, logs *bytes.Buffer) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, cmd, 30*time.Second); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, logs.String())
	}
}

// refusedStart runs the binary expecting it to refuse to start: it
// returns the exit code and what it logged.
func refusedStart(t *testing.T, bin, dir string, args ...string) (int, string) {
	t.Helper()
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--data-dir", dir}, args...)...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	cmd.Stdout = &logs
	must(t, cmd.Start())
	err := waitExit(t, cmd, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the broker started (or ended without an exit code: %v); want a refusal\n%s", err, logs.String())
	}
	return ee.ExitCode(), logs.String()
}

// filesHolding lists the files under dir whose bytes contain needle.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walked (a page file read, a WAL flushed)
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	must(t, err)
	return out
}

// anyUnder reports whether one of files is under the directory sub
// ("" : the top level, the store's own files).
func anyUnder(files []string, sub string) bool {
	for _, f := range files {
		d := filepath.Dir(f)
		if sub == "" && d == "." || sub != "" && (d == sub || strings.HasPrefix(d, sub+string(filepath.Separator))) {
			return true
		}
	}
	return false
}

// cryptBody is message i's body: the marker the files are searched for,
// then padding (large enough for Badger's value log and the raft log's).
func cryptBody(marker string, i int) []byte {
	return []byte(fmt.Sprintf("%s%06d%s", marker, i, strings.Repeat("p", 1500)))
}

func newMarker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "railmq-crypt-marker-" + hex.EncodeToString(b) + "-"
}

// cryptShapes are the queues the at-rest tests fill: one of each kind of
// file railmq writes messages to.
var cryptShapes = []struct {
	name string
	args rmq.Table
	n    int
}{
	{"crypt-classic", nil, 100},
	{"crypt-quorum", rmq.Table{"x-queue-type": "quorum"}, 50},
	{"crypt-stream", rmq.Table{"x-queue-type": "stream"}, 50},
}

// fillCrypt declares the shapes and publishes to them with confirms; the
// non-durable "crypt-paged" gets 600 transient messages, beyond the
// broker's window of 16 (--queue-window), so that it pages them to its
// page files.
func fillCrypt(t *testing.T, url, marker string) {
	t.Helper()
	conn, err := rmq.Dial(url)
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 2000))
	sent := 0
	for _, s := range cryptShapes {
		_, err := ch.QueueDeclare(s.name, true, false, false, false, s.args)
		must(t, err)
		for i := range s.n {
			must(t, ch.Publish("", s.name, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: cryptBody(marker, i)}))
			sent++
		}
	}
	_, err = ch.QueueDeclare("crypt-paged", false, false, false, false, nil)
	must(t, err)
	for i := range 600 {
		must(t, ch.Publish("", "crypt-paged", false, false, rmq.Publishing{Body: cryptBody(marker, i)}))
		sent++
	}
	for range sent {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no confirm within 30 s")
		}
	}
}

// checkCrypt reads every shape back: the classic and quorum queues'
// messages by basic.get (acked), the stream's from "first".
func checkCrypt(t *testing.T, url, marker string) {
	t.Helper()
	conn, err := rmq.Dial(url)
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	for _, s := range cryptShapes {
		if s.args["x-queue-type"] == "stream" {
			readCryptStream(t, ch, s.name, marker, s.n)
			continue
		}
		for i := range s.n {
			var d rmq.Delivery
			var ok bool
			testutil.Eventually(t, 30*time.Second, func() bool {
				d, ok, err = ch.Get(s.name, true)
				must(t, err)
				return ok
			}, "%s: message %d not there", s.name, i)
			if !bytes.Equal(d.Body, cryptBody(marker, i)) {
				t.Fatalf("%s: message %d is %.40q, want %.40q", s.name, i, d.Body, cryptBody(marker, i))
			}
		}
	}
}

func readCryptStream(t *testing.T, ch *rmq.Channel, name, marker string, n int) {
	t.Helper()
	must(t, ch.Qos(100, 0, false))
	tag := "crypt-stream-reader-" + marker
	ds, err := ch.Consume(name, tag, false, false, false, false, rmq.Table{"x-stream-offset": "first"})
	must(t, err)
	defer func() { _ = ch.Cancel(tag, false) }()
	for i := range n {
		select {
		case d := <-ds:
			if !bytes.Equal(d.Body, cryptBody(marker, i)) {
				t.Fatalf("%s: record %d is %.40q", name, i, d.Body)
			}
			must(t, d.Ack(false))
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: record %d not read within 30 s", name, i)
		}
	}
}

// TestEncryptionAtRest: with --data-encryption-key-file, no file under
// the data dir holds a message body, while the broker runs (page files
// included) and after it stopped; restarted with the key, every message
// is there. The control, the same run without a key, finds the bodies in
// the store, the page files, the stream's segments and the quorum
// queue's raft log: the search would see them.
func TestEncryptionAtRest(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	key := keyFile(t, "key")
	for _, tc := range []struct {
		name string
		args []string
	}{{"plain", nil}, {"encrypted", []string{"--data-encryption-key-file", key}}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := newMarker()
			args := append([]string{"--queue-window", "16"}, tc.args...)
			cmd, url, logs := startArgs(t, bin, dir, args...)
			fillCrypt(t, url, marker)
			var running []string
			testutil.Eventually(t, 30*time.Second, func() bool {
				running = filesHolding(t, dir, []byte(marker))
				return tc.args != nil || anyUnder(running, "spill")
			}, "no page file holds a body in the plain run")
			spill, err := os.ReadDir(filepath.Join(dir, "spill"))
			must(t, err)
			if len(spill) == 0 {
				t.Fatal("the transient backlog wrote no page file: the test pages nothing")
			}
			stopBinary(t, cmd, logs)
			stopped := filesHolding(t, dir, []byte(marker))
			t.Logf("files holding a body: running %v; stopped %v", running, stopped)
			if tc.args != nil {
				if len(running) > 0 || len(stopped) > 0 {
					t.Fatalf("encrypted data dir: bodies in the clear in %v (running), %v (stopped)", running, stopped)
				}
			} else {
				for _, sub := range []string{"", "streams", filepath.Join("cluster", "queues")} {
					if !anyUnder(stopped, sub) {
						t.Errorf("plain run: no file under %q holds a body (%v): the search would miss it", sub, stopped)
					}
				}
			}
			cmd, url, logs = startArgs(t, bin, dir, args...)
			checkCrypt(t, url, marker)
			stopBinary(t, cmd, logs)
		})
	}
}

// TestEncryptionKeyErrors: a data dir encrypted with one key refuses to
// start with another (naming the key file), without a key, and a key
// file that is missing or holds no key is refused naming the file; a
// plain data dir refuses a key. None of them starts on an empty store.
func TestEncryptionKeyErrors(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	key, other := keyFile(t, "key"), keyFile(t, "other-key")
	dir, plain := t.TempDir(), t.TempDir()
	cmd, url, logs := startArgs(t, bin, dir, "--data-encryption-key-file", key)
	marker := newMarker()
	conn, err := rmq.Dial(url)
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("crypt-kept", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	ok, err := ch.PublishWithDeferredConfirm("", "crypt-kept", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: cryptBody(marker, 0)})
	must(t, err)
	if !ok.Wait() {
		t.Fatal("nacked")
	}
	conn.Close()
	stopBinary(t, cmd, logs)
	cmd, _, logs = startArgs(t, bin, plain)
	stopBinary(t, cmd, logs)

	bad := filepath.Join(t.TempDir(), "bad-key")
	must(t, os.WriteFile(bad, []byte("not a key\n"), 0o600))
	missing := filepath.Join(t.TempDir(), "no-such-key")
	for _, tc := range []struct {
		name string
		dir  string
		args []string
		want []string
	}{
		{"wrong key", dir, []string{"--data-encryption-key-file", other},
			[]string{"encrypted with a key that is not among those given", other}},
		{"no key", dir, nil, []string{"is encrypted, but no --data-encryption-key-file was given"}},
		{"missing key file", dir, []string{"--data-encryption-key-file", missing}, []string{missing, "no such file"}},
		{"not a key", dir, []string{"--data-encryption-key-file", bad},
			[]string{bad, "neither a raw AES key (16, 24 or 32 bytes) nor the hex or base64 text of one"}},
		{"plain store with a key", plain, []string{"--data-encryption-key-file", key},
			[]string{"is not encrypted, but --data-encryption-key-file was given"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := refusedStart(t, bin, tc.dir, tc.args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
		})
	}
	// The refusals changed nothing: the key still opens the store, with
	// its message.
	cmd, url, logs = startArgs(t, bin, dir, "--data-encryption-key-file", key)
	conn, err = rmq.Dial(url)
	must(t, err)
	defer conn.Close()
	ch, err = conn.Channel()
	must(t, err)
	d, got, err := ch.Get("crypt-kept", true)
	must(t, err)
	if !got || !bytes.Equal(d.Body, cryptBody(marker, 0)) {
		t.Fatalf("after the refusals: got %v %.40q", got, d.Body)
	}
	stopBinary(t, cmd, logs)
}

// TestEncryptionKeyRotation: a store written under key A restarts with
// key B and A as --data-encryption-old-key-file: every message is read
// (Badger's master key and the streams' chunks are rewritten under B).
// Started again with B alone, everything still reads; A alone is then
// the wrong key.
func TestEncryptionKeyRotation(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	a, b := keyFile(t, "key-a"), keyFile(t, "key-b")
	dir := t.TempDir()
	marker := newMarker()
	cmd, url, logs := startArgs(t, bin, dir, "--data-encryption-key-file", a)
	fillCrypt(t, url, marker)
	stopBinary(t, cmd, logs)

	cmd, url, logs = startArgs(t, bin, dir, "--data-encryption-key-file", b, "--data-encryption-old-key-file", a)
	conn, err := rmq.Dial(url)
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	for _, s := range cryptShapes {
		if s.args["x-queue-type"] == "stream" {
			readCryptStream(t, ch, s.name, marker, s.n)
			continue
		}
		q, err := ch.QueueDeclarePassive(s.name, true, false, false, false, s.args)
		must(t, err)
		if q.Messages != s.n {
			t.Fatalf("%s after the rotation: %d messages, want %d", s.name, q.Messages, s.n)
		}
	}
	conn.Close()
	stopBinary(t, cmd, logs)

	cmd, url, logs = startArgs(t, bin, dir, "--data-encryption-key-file", b)
	checkCrypt(t, url, marker)
	stopBinary(t, cmd, logs)
	code, out := refusedStart(t, bin, dir, "--data-encryption-key-file", a)
	if code == 0 || !strings.Contains(out, "encrypted with a key that is not among those given") {
		t.Fatalf("the old key alone after the rotation: exit %d\n%s", code, out)
	}
	if files := filesHolding(t, dir, []byte(marker)); len(files) > 0 {
		t.Fatalf("bodies in the clear after the rotation: %v", files)
	}
}

// TestEncryptionPika publishes and consumes through an encrypted broker
// with Python's pika (1.2), across a restart.
func TestEncryptionPika(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	key := keyFile(t, "key")
	dir := t.TempDir()
	marker := newMarker()
	cmd, url, logs := startArgs(t, bin, dir, "--data-encryption-key-file", key)
	pub := `
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = c.channel()
ch.confirm_delivery()
ch.queue_declare("crypt-pika", durable=True)
for i in range(20):
    ch.basic_publish("", "crypt-pika", (sys.argv[2] + "%06d" % i).encode(), pika.BasicProperties(delivery_mode=2))
c.close()
print("published")
`
	if out, err := exec.Command("/usr/bin/python3", "-c", pub, url, marker).CombinedOutput(); err != nil || !strings.Contains(string(out), "published") {
		t.Fatalf("pika publish: %v\n%s", err, out)
	}
	stopBinary(t, cmd, logs)
	if files := filesHolding(t, dir, []byte(marker)); len(files) > 0 {
		t.Fatalf("bodies in the clear: %v", files)
	}
	cmd, url, logs = startArgs(t, bin, dir, "--data-encryption-key-file", key)
	get := `
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = c.channel()
for i in range(20):
    m, p, body = ch.basic_get("crypt-pika", auto_ack=True)
    print(body.decode() if m else "none")
c.close()
`
	out, err := exec.Command("/usr/bin/python3", "-c", get, url).CombinedOutput()
	if err != nil {
		t.Fatalf("pika get: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 20 {
		t.Fatalf("pika read %d lines, want 20:\n%s", len(lines), out)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("%s%06d", marker, i); l != want {
			t.Fatalf("pika message %d is %q, want %q", i, l, want)
		}
	}
	stopBinary(t, cmd, logs)
}
