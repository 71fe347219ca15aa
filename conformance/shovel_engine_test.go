package conformance

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/shovel"
)

// The shovel engine (package shovel) between real brokers over TCP: the
// railmq binary and in-process brokers. What RabbitMQ's shovel
// guarantees with ack-mode on-confirm (the default): a source message is
// acked only after the destination confirmed it, so a crash of either
// side loses nothing, and the source's requeue of what was unconfirmed
// may duplicate (rabbit_amqp091_shovel.erl v3.10.8, confirm_to_inbound).

// shovelFill publishes n persistent messages numbered from 0 to a durable
// queue, confirmed.
func shovelFill(t *testing.T, url, q string, n, size int) {
	t.Helper()
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var last *rmq.DeferredConfirmation
	for i := range n {
		body := make([]byte, max(size, 12))
		copy(body, fmt.Sprintf("%012d", i))
		if last, err = ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: body}); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 || i == n-1 {
			if ok, err := last.WaitContext(t.Context()); !ok || err != nil {
				t.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
}

func shovelQueueLen(t *testing.T, url, q string) int {
	t.Helper()
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info.Messages
}

// shovelCollect consumes q (once it exists) until it has seen ids
// 0..n-1, and returns how many extra copies it saw.
func shovelCollect(t *testing.T, url, q string, n int, within time.Duration) (dups int) {
	t.Helper()
	poll.Eventually(t, within, func() bool {
		c, err := rmq.Dial(url)
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}, "queue %s declared", q)
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	timer := time.NewTimer(within)
	defer timer.Stop()
	for len(seen) < n {
		select {
		case d := <-ds:
			id, err := strconv.Atoi(string(d.Body[:12]))
			if err != nil || id < 0 || id >= n {
				t.Fatalf("body %q: %v", d.Body[:12], err)
			}
			if seen[id]++; seen[id] > 1 {
				dups++
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timer.C:
			t.Fatalf("%d of %d messages arrived in %s within %v: lost", len(seen), n, q, within)
		}
	}
	return dups
}

func startShovel(t *testing.T, def map[string]any) *shovel.Shovel {
	t.Helper()
	cfg, err := shovel.Parse(def)
	if err != nil {
		t.Fatal(err)
	}
	s := shovel.New(cfg, shovel.Options{Name: "s", Vhost: "/"})
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// TestShovelEngineMove moves 5,000 persistent messages on-confirm between
// two brokers, and on one broker from one vhost to another: each arrives
// once, the source ends empty.
func TestShovelEngineMove(t *testing.T) {
	testutil.InProcess(t)
	const n = 5000
	a := testutil.Start(t, broker.Options{})
	b := testutil.Start(t, broker.Options{})
	if _, err := a.Server.PutVHost("other", broker.VHostRecord{Limits: map[string]int64{}}); err != nil {
		t.Fatal(err)
	}
	p, _ := auth.NewPermission(".*", ".*", ".*")
	if err := a.Server.PutAccess(nil, []auth.PermissionEntry{{VHost: "other", User: "guest", Permission: p}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, src, dest string }{
		{"two brokers", a.URL, b.URL},
		{"other vhost", a.URL, a.URL + "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := strings.ReplaceAll(tc.name, " ", "-")
			shovelFill(t, tc.src, q, n, 1024)
			s := startShovel(t, map[string]any{"src-uri": tc.src, "src-queue": q, "dest-uri": tc.dest, "dest-queue": q + "-dst"})
			if dups := shovelCollect(t, tc.dest, q+"-dst", n, 60*time.Second); dups != 0 {
				t.Errorf("%d duplicates with no failure", dups)
			}
			poll.Eventually(t, 30*time.Second, func() bool { return shovelQueueLen(t, tc.src, q) == 0 }, "source empty")
			poll.Eventually(t, 30*time.Second, func() bool { return s.Status().Moved == n }, "all acked at the source")
			if st := s.Status(); st.State != shovel.Running || st.Published != n {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestShovelEngineKill9 kills -9 the destination (a railmq binary) in the
// middle of an on-confirm move, and in another round the source, then
// starts it again on the same address and store. While it is down the
// shovel's status is terminated with the reason; then it resumes, and
// every message arrives (duplicates counted, none lost), the source ends
// empty.
func TestShovelEngineKill9(t *testing.T) {
	testutil.InProcess(t)
	for _, kill := range []string{"destination", "source"} {
		t.Run(kill, func(t *testing.T) { shovelKill9(t, kill) })
	}
}

func shovelKill9(t *testing.T, kill string) {
	const n = 20000
	bin := testutil.Binary(t)
	dir, addr := t.TempDir(), testutil.FreePort(t)
	var cmd *exec.Cmd
	var logs bytes.Buffer
	run := func() {
		cmd = exec.Command(bin, "--listen", addr, "--data-dir", dir, "--log-level", "warn")
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testutil.WaitListening(t, addr, 30*time.Second)
	}
	run()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := waitExit(t, cmd, 30*time.Second); err != nil {
			t.Errorf("shutdown: %v\n%s", err, logs.String())
		}
	}()
	proc := "amqp://guest:guest@" + addr + "/"
	local := testutil.Start(t, broker.Options{}).URL
	src, dest := local, proc
	if kill == "source" {
		src, dest = proc, local
	}
	shovelFill(t, src, "src", n, 512)
	s := startShovel(t, map[string]any{
		"src-uri": src, "src-queue": "src", "dest-uri": dest, "dest-queue": "dst",
		"reconnect-delay": 0.2, "src-prefetch-count": float64(500),
	})
	poll.Eventually(t, 60*time.Second, func() bool { return s.Status().Moved >= 2000 }, "first messages moved")
	_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
	_ = cmd.Wait()
	var st shovel.Status
	poll.Eventually(t, 30*time.Second, func() bool {
		st = s.Status()
		return st.State == shovel.Terminated && strings.Contains(st.Reason, kill) && !st.Done
	}, "terminated, the %s's error as the reason (now %+v)", kill, st)
	t.Logf("status while the %s is down: %s: %s (moved %d)", kill, st.State, st.Reason, st.Moved)
	run()
	dups := shovelCollect(t, dest, "dst", n, 120*time.Second)
	poll.Eventually(t, 30*time.Second, func() bool { return shovelQueueLen(t, src, "src") == 0 }, "source empty")
	st = s.Status()
	t.Logf("kill -9 of the %s: %d messages, none lost, %d duplicates, %d sessions", kill, n, dups, st.Sessions)
	if st.State != shovel.Running || st.Sessions < 2 {
		t.Errorf("after the restart: %+v", st)
	}
}

// TestShovelEngineTLS: an amqps:// destination with RabbitMQ's URI query
// options (https://www.rabbitmq.com/docs/uri-query-parameters):
// cacertfile verifies the broker, verify=verify_none skips it,
// server_name_indication names the host to verify, certfile and keyfile
// present a client certificate. A destination that fails verification
// shows the TLS error as the shovel's reason.
func TestShovelEngineTLS(t *testing.T) {
	p := newPKI(t)
	certFile, keyFile := p.ca.Client(t, "shovel").Write(t, p.dir, "client")
	b, addr := startTLS(t, p.opts("verify_peer", true))
	base := "amqps://guest:guest@" + addr + "/?"
	for i, tc := range []struct {
		query string
		fails string // "" when the move succeeds
	}{
		{"cacertfile=" + p.caFile + "&certfile=" + certFile + "&keyfile=" + keyFile, ""},
		{"cacertfile=" + p.caFile + "&certfile=" + certFile + "&keyfile=" + keyFile + "&server_name_indication=localhost", ""},
		{"verify=verify_none&certfile=" + certFile + "&keyfile=" + keyFile, ""},
		{"certfile=" + certFile + "&keyfile=" + keyFile, "certificate"},
		{"cacertfile=" + p.caFile + "&certfile=" + certFile + "&keyfile=" + keyFile + "&server_name_indication=other.example", "certificate"},
		{"cacertfile=" + p.caFile, "certificate required"}, // the broker wants a client certificate
	} {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			q := "tls-" + strconv.Itoa(i)
			shovelFill(t, b.URL, q, 10, 10)
			s := startShovel(t, map[string]any{"src-uri": b.URL, "src-queue": q, "dest-uri": base + tc.query, "dest-queue": q + "-dst", "reconnect-delay": 0.2})
			if tc.fails == "" {
				shovelCollect(t, b.URL, q+"-dst", 10, 30*time.Second)
				return
			}
			var st shovel.Status
			poll.Eventually(t, 30*time.Second, func() bool {
				st = s.Status()
				return st.State == shovel.Terminated && strings.Contains(st.Reason, tc.fails)
			}, "terminated with %q (now %+v)", tc.fails, st)
			t.Logf("reason: %s", st.Reason)
			if n := shovelQueueLen(t, b.URL, q); n != 10 {
				t.Errorf("source holds %d, want 10", n)
			}
		})
	}
}
