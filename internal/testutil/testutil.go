// Package testutil starts brokers for tests: in-process on a free
// loopback port, or the real binary as a subprocess.
package testutil

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/mgmt"
)

// Broker is a broker started for one test.
type Broker struct {
	Addr    string // host:port
	URL     string // amqp://guest:guest@host:port/
	DataDir string
	Server  *broker.Server // nil for an external or subprocess broker

	t       testing.TB
	mu      sync.Mutex
	api     *mgmt.API // made on first use (mgmt.go)
	apiOpts mgmt.Options
}

// ExternalURL is set (RAILMQ_TEST_URL) to run the conformance tests
// against another broker, such as RabbitMQ, to compare behaviours.
func ExternalURL() string { return os.Getenv("RAILMQ_TEST_URL") }

// Start runs a broker in-process on 127.0.0.1:0 with a fresh data dir,
// shut down when the test ends. With RAILMQ_TEST_URL set it returns that
// broker instead (and opts are ignored).
func Start(t testing.TB, opts broker.Options) *Broker {
	t.Helper()
	if u := ExternalURL(); u != "" {
		host := u[len("amqp://guest:guest@"):]
		if i := len(host) - 1; host[i] == '/' {
			host = host[:i]
		}
		return &Broker{Addr: host, URL: u, t: t}
	}
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	b, _ := StartStoppable(t, opts)
	return b
}

// StartStoppable is Start for a broker the test stops itself (to restart
// it on the same data dir); stop is idempotent and also runs at cleanup.
func StartStoppable(t testing.TB, opts broker.Options) (*Broker, func()) {
	t.Helper()
	srv, err := broker.New(opts)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			if err := <-done; !errors.Is(err, broker.ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	addr := ln.Addr().String()
	return &Broker{Addr: addr, URL: "amqp://guest:guest@" + addr + "/", DataDir: opts.DataDir, Server: srv, t: t}, stop
}

// InProcess skips a test that needs the in-process broker (its options or
// internals) when the suite runs against an external one.
func InProcess(t testing.TB) {
	if ExternalURL() != "" {
		t.Skip("needs the in-process broker")
	}
}

var (
	buildMu sync.Mutex
	builds  = map[string]string{} // command name -> binary
)

// Binary builds cmd/railmq once per test process and returns its path.
func Binary(t testing.TB) string { return Command(t, "railmq") }

// Command builds cmd/<name> once per test process and returns its path.
func Command(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[name]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "railmq-bin")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", p, "github.com/railmq/railmq/cmd/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	builds[name] = p
	return p
}

// FreePort returns a loopback address that was free a moment ago, on a
// port it has not given before (portRange says where from).
func FreePort(t testing.TB) string {
	t.Helper()
	lo, hi := portRange()
	for range 200 {
		if lo >= hi {
			break
		}
		port := lo + rand.IntN(hi-lo)
		portsMu.Lock()
		taken := portsGiven[port]
		portsMu.Unlock()
		if taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		portsMu.Lock()
		portsGiven[port] = true
		portsMu.Unlock()
		return addr
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // handed out by FreePort in this process
)

// portRange is where FreePort picks ports: from 10000 up to the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768 by default). A
// port from that range, what listening on port 0 gives, may be taken
// again before the test listens on it, as the local port of any outgoing
// connection: CI once saw a cluster node's port taken by its peers
// dialling each other before it started.
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if n, _ := fmt.Sscan(string(b), &a, &z); n == 2 && a > lo {
			hi = a
		}
	}
	return lo, hi
}

// WaitListening polls until addr accepts TCP connections.
func WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "broker listening on %s", addr)
}

// Raw is a raw-socket AMQP client for tests of malformed input.
type Raw struct {
	t  testing.TB
	NC net.Conn
	FR *amqp.FrameReader
}

// DialRaw connects without any handshake.
func DialRaw(t testing.TB, addr string) *Raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := &Raw{t: t, NC: nc, FR: amqp.NewFrameReader(bufio.NewReader(nc))}
	r.FR.Max = 131072
	return r
}

// Handshake performs the handshake as guest with the given capabilities
// and heartbeat, and opens channel 1 when openChannel is set.
func (r *Raw) Handshake(caps amqp.Table, heartbeat uint16, openChannel bool) {
	r.t.Helper()
	r.Write([]byte("AMQP\x00\x00\x09\x01"))
	r.Expect((*amqp.ConnectionStart)(nil))
	r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": caps}, Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune := r.Expect((*amqp.ConnectionTune)(nil)).(*amqp.ConnectionTune)
	r.Send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax, Heartbeat: heartbeat})
	r.Send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	r.Expect((*amqp.ConnectionOpenOk)(nil))
	if openChannel {
		r.Send(1, &amqp.ChannelOpen{})
		r.Expect((*amqp.ChannelOpenOk)(nil))
	}
}

// Write writes raw bytes.
func (r *Raw) Write(b []byte) {
	r.t.Helper()
	if _, err := r.NC.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// Send writes one method frame.
func (r *Raw) Send(ch uint16, m amqp.Method) { r.Write(amqp.AppendMethodFrame(nil, ch, m)) }

// Frame builds a frame with an arbitrary type and payload.
func Frame(typ uint8, ch uint16, payload []byte) []byte {
	b := []byte{typ, byte(ch >> 8), byte(ch), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[3:], uint32(len(payload)))
	b = append(b, payload...)
	return append(b, amqp.FrameEnd)
}

// Next reads the next frame, skipping heartbeats, and decodes methods.
func (r *Raw) Next() (amqp.Frame, amqp.Method, error) {
	for {
		_ = r.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := r.FR.ReadFrame()
		if err != nil {
			return f, nil, err
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Type != amqp.FrameMethod {
			return f, nil, nil
		}
		m, err := amqp.DecodeMethod(f.Payload)
		return f, m, err
	}
}

// Expect reads the next method and fails unless it has want's type.
func (r *Raw) Expect(want amqp.Method) amqp.Method {
	r.t.Helper()
	_, m, err := r.Next()
	if err != nil {
		r.t.Fatalf("waiting for %T: %v", want, err)
	}
	if fmt.Sprintf("%T", m) != fmt.Sprintf("%T", want) {
		r.t.Fatalf("got %#v, want %T", m, want)
	}
	return m
}

// ExpectConnectionClose reads until connection.close, answers close-ok
// and, as a client does once it has answered, closes its write side;
// it returns the close.
func (r *Raw) ExpectConnectionClose() *amqp.ConnectionClose {
	r.t.Helper()
	for {
		_, m, err := r.Next()
		if err != nil {
			r.t.Fatalf("waiting for connection.close: %v", err)
		}
		if cc, ok := m.(*amqp.ConnectionClose); ok {
			r.Send(0, &amqp.ConnectionCloseOk{})
			if tc, ok := r.NC.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return cc
		}
	}
}

// ExpectEOF fails unless the server closes the socket within timeout.
func (r *Raw) ExpectEOF(timeout time.Duration) {
	r.t.Helper()
	_ = r.NC.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 4096)
	for {
		_, err := r.NC.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.t.Fatalf("socket still open after %v", timeout)
			}
			return
		}
	}
}
