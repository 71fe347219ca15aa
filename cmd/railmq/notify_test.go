package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/internal/testutil"
)

// The real binary under systemd's Type=notify protocol (sd_notify(3)):
// READY=1 arrives on $NOTIFY_SOCKET once the store has recovered and the
// AMQP and management listeners take connections, and STOPPING=1 once
// SIGTERM starts the shutdown; the process then exits 0. Both kinds of
// socket name systemd hands out: a path, and an abstract name (@...).
func TestSdNotifyBinary(t *testing.T) {
	bin := testutil.Binary(t)
	for _, abstract := range []bool{false, true} {
		t.Run(fmt.Sprintf("abstract=%v", abstract), func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, "notify.sock")
			env := name
			if abstract {
				name = fmt.Sprintf("\x00railmq-notify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
				env = "@" + name[1:]
			}
			sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			amqpAddr, mgmtAddr := testutil.FreePort(t), testutil.FreePort(t)
			cmd := exec.Command(bin, "--listen", amqpAddr, "--management-listen", mgmtAddr, "--data-dir", filepath.Join(dir, "data"), "--log-format", "json")
			cmd.Env = append(cleanedEnv(), "NOTIFY_SOCKET="+env)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-done
				}
			}()

			msg := readNotify(t, sock, 60*time.Second)
			if !hasAssignment(msg, "READY=1") {
				t.Fatalf("first notification %q, want READY=1 (log: %s)", msg, stderr.String())
			}
			// Ready means ready: a client connects at once, and the
			// management API answers with the broker's API (not the
			// start-up page).
			conn, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
			if err != nil {
				t.Fatalf("AMQP right after READY=1: %v", err)
			}
			conn.Close()
			req, _ := http.NewRequest("GET", "http://"+mgmtAddr+"/api/overview", nil)
			req.SetBasicAuth("guest", "guest")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("management API right after READY=1: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /api/overview right after READY=1: %d", resp.StatusCode)
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			msg = readNotify(t, sock, 60*time.Second)
			if !hasAssignment(msg, "STOPPING=1") {
				t.Fatalf("notification after SIGTERM %q, want STOPPING=1", msg)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exit after SIGTERM: %v (log: %s)", err, stderr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatal("no exit 60 s after SIGTERM")
			}
		})
	}
}

// cleanedEnv is the test's environment without RAILMQ_ and RABBITMQ_
// variables and NOTIFY_SOCKET (the binary is configured by its flags).
func cleanedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAILMQ_") && !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return env
}

// readNotify reads one datagram from sock within timeout.
func readNotify(t *testing.T, sock *net.UnixConn, timeout time.Duration) string {
	t.Helper()
	if err := sock.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := sock.Read(buf)
	if err != nil {
		t.Fatalf("reading NOTIFY_SOCKET: %v", err)
	}
	return string(buf[:n])
}

// hasAssignment says whether the newline-separated state has line a.
func hasAssignment(state, a string) bool {
	for _, l := range strings.Split(state, "\n") {
		if l == a {
			return true
		}
	}
	return false
}

// Without NOTIFY_SOCKET sdNotify does nothing; with a socket nobody
// listens on, it logs a warning naming the socket and goes on.
func TestSdNotifyNoListener(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	t.Setenv("NOTIFY_SOCKET", "")
	sdNotify("READY=1", zap.New(core))
	if logs.Len() != 0 {
		t.Fatalf("logged without NOTIFY_SOCKET: %v", logs.All())
	}
	missing := filepath.Join(t.TempDir(), "missing.sock")
	t.Setenv("NOTIFY_SOCKET", missing)
	sdNotify("READY=1", zap.New(core))
	l := logs.FilterMessage("cannot notify the service manager").All()
	if len(l) != 1 || l[0].ContextMap()["notify_socket"] != missing {
		t.Fatalf("logs %v, want one warning naming %s", logs.All(), missing)
	}
}
