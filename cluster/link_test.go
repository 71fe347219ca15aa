package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// tcpPair is two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// linkPair is a client link (no handler) and a server link whose
// handler is handle.
func linkPair(t testing.TB, client, server ConnConfig) (*Conn, *Conn) {
	t.Helper()
	a, b := tcpPair(t)
	ca, cb := NewConn(a, client), NewConn(b, server)
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
	})
	return ca, cb
}

// echo answers every request with its kind and body.
func echo(c *Conn, f Frame) error {
	return c.Answer(f.ID, append([]byte{f.Kind}, f.Body...))
}

// within fails the test if f takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if el := time.Since(start); el > d {
		t.Fatalf("%s took %v (over %v)", what, el, d)
	}
}

func TestLinkRoundTrip(t *testing.T) {
	c, _ := linkPair(t, ConnConfig{}, ConnConfig{Handle: echo})
	for _, size := range []int{0, 1, 127, 128, 64 << 10, 1 << 20, 3<<20 + 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			body := make([]byte, size)
			rand.New(rand.NewSource(int64(size))).Read(body)
			kind := byte(1 + size%255)
			p, err := c.CallWait(kind, body, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) != 1+size || p[0] != kind || !bytes.Equal(p[1:], body) {
				t.Fatalf("answer of %d bytes, kind %d", len(p), p[0])
			}
		})
	}
}

// Many calls in flight on one link, answered in another order than they
// were asked, each get their own answer.
func TestLinkPipelining(t *testing.T) {
	const n = 500
	var mu sync.Mutex
	var held []Frame
	release := make(chan struct{})
	srv := ConnConfig{Handle: func(c *Conn, f Frame) error {
		mu.Lock()
		held = append(held, f)
		all := len(held) == n
		mu.Unlock()
		if all {
			close(release)
		}
		return nil
	}}
	c, s := linkPair(t, ConnConfig{}, srv)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := Enc(nil).Uvarint(uint64(i))
			p, err := c.CallWait(1, body, 30*time.Second)
			if err == nil && !bytes.Equal(p, append([]byte("re:"), body...)) {
				err = fmt.Errorf("call %d answered %q", i, p)
			}
			errs <- err
		}()
	}
	select {
	case <-release:
	case <-time.After(30 * time.Second):
		t.Fatal("the requests did not all arrive")
	}
	// Answer from another goroutine, in a shuffled order.
	rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, f := range held {
		if err := s.Answer(f.ID, append([]byte("re:"), f.Body...)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestLinkFailAll(t *testing.T) {
	for _, how := range []string{"close", "peer closes", "break"} {
		t.Run(how, func(t *testing.T) {
			got := make(chan struct{}, 1000)
			var downs atomic.Int32
			var downErr atomic.Value
			cli := ConnConfig{OnDown: func(c *Conn, err error) {
				downs.Add(1)
				downErr.Store(err)
			}}
			srv := ConnConfig{Handle: func(*Conn, Frame) error {
				got <- struct{}{}
				return nil // never answered
			}}
			c, s := linkPair(t, cli, srv)
			const n = 100
			results := make(chan error, n)
			for range n {
				if err := c.Call(1, []byte("q"), func(p []byte, err error) { results <- err }); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				<-got
			}
			want := ErrBroken
			within(t, 5*time.Second, "failing the calls", func() {
				switch how {
				case "close":
					want = ErrClosed
					c.Close()
				case "peer closes":
					s.Close()
				case "break":
					c.Break(errors.New("test"))
				}
				for range n {
					if err := <-results; !errors.Is(err, want) {
						t.Fatalf("a call failed with %v, want %v", err, want)
					}
				}
			})
			poll.Eventually(t, 10*time.Second, func() bool { return downs.Load() == 1 }, "OnDown told %d times, want 1", downs.Load())
			if err, _ := downErr.Load().(error); !errors.Is(err, want) {
				t.Fatalf("OnDown told %v", err)
			}
			if err := c.Call(1, nil, func([]byte, error) { t.Error("done called for a call not sent") }); !errors.Is(err, ErrClosed) {
				t.Fatalf("a call on a down link: %v", err)
			}
			if err := c.Send(2, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("a send on a down link: %v", err)
			}
			c.Close()
			if downs.Load() != 1 {
				t.Fatalf("OnDown told %d times", downs.Load())
			}
		})
	}
}

// One-way frames go both ways, in order, beside calls.
func TestLinkOneWayBothWays(t *testing.T) {
	toServer, toClient := make(chan Frame, 100), make(chan Frame, 100)
	cli := ConnConfig{Handle: func(c *Conn, f Frame) error { toClient <- f; return nil }}
	srv := ConnConfig{Handle: func(c *Conn, f Frame) error {
		if f.ID != 0 {
			return echo(c, f)
		}
		toServer <- f
		// Told something, the server tells the client something back.
		return c.Send(f.Kind+1, append([]byte("back:"), f.Body...))
	}}
	c, _ := linkPair(t, cli, srv)
	for i := range 50 {
		if err := c.Send(10, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CallWait(3, []byte("between"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		f := <-toServer
		if f.Kind != 10 || f.ID != 0 || string(f.Body) != fmt.Sprint(i) {
			t.Fatalf("server got %+v, want %d", f, i)
		}
		f = <-toClient
		if f.Kind != 11 || f.ID != 0 || string(f.Body) != fmt.Sprint("back:", i) {
			t.Fatalf("client got %+v, want back:%d", f, i)
		}
	}
}

func TestLinkCallWaitTimeout(t *testing.T) {
	var hold atomic.Value
	c, s := linkPair(t, ConnConfig{}, ConnConfig{Handle: func(c *Conn, f Frame) error {
		if string(f.Body) == "slow" {
			hold.Store(f)
			return nil
		}
		return echo(c, f)
	}})
	if _, err := c.CallWait(1, []byte("slow"), 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	// Its late answer is dropped; the link still serves.
	poll.Eventually(t, 10*time.Second, func() bool { return hold.Load() != nil }, "the call never reached the server")
	if err := s.Answer(hold.Load().(Frame).ID, []byte("late")); err != nil {
		t.Fatal(err)
	}
	if p, err := c.CallWait(1, []byte("x"), 10*time.Second); err != nil || string(p) != "\x01x" {
		t.Fatalf("after a timeout: %q, %v", p, err)
	}
}

func TestLinkOversizeFrame(t *testing.T) {
	c, _ := linkPair(t, ConnConfig{MaxFrame: 1 << 10}, ConnConfig{MaxFrame: 1 << 10, Handle: echo})
	if err := c.Call(1, make([]byte, 2<<10), func([]byte, error) {}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an oversize call: %v", err)
	}
	if err := c.Send(1, make([]byte, 2<<10)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an oversize send: %v", err)
	}
	if _, err := c.CallWait(1, make([]byte, 900), 10*time.Second); err != nil {
		t.Fatalf("a frame under the bound: %v", err)
	}

	// A peer announcing a frame over the bound: the link breaks on the
	// length alone (the body never comes), nothing allocated for it.
	a, b := tcpPair(t)
	defer b.Close()
	down := make(chan error, 1)
	l := NewConn(a, ConnConfig{MaxFrame: 1 << 20, Handle: echo, OnDown: func(_ *Conn, err error) { down <- err }})
	defer l.Close()
	if _, err := b.Write(binary.BigEndian.AppendUint32(nil, 1<<30)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-down:
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrBroken) {
			t.Fatalf("down with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an oversize frame did not break the link")
	}
}

// A peer that never reads: sending keeps returning at once (it only
// appends), the buffer's cap refuses what would pass it, the writer's
// deadline breaks the link, and Close returns.
func TestLinkStalledPeer(t *testing.T) {
	t.Run("sends return, close returns", func(t *testing.T) {
		a, b := net.Pipe() // synchronous: nothing is taken unless read
		defer b.Close()
		c := NewConn(a, ConnConfig{MaxFrame: 1 << 20, MaxBuffered: 8 << 20, WriteTimeout: time.Hour})
		body := make([]byte, 4<<10)
		within(t, 5*time.Second, "1,000 sends to a stalled peer", func() {
			for i := range 1000 {
				if err := c.Send(1, body); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
		})
		if c.Buffered() == 0 {
			t.Fatal("nothing buffered")
		}
		// Past the cap: refused, the link stays up.
		var err error
		for range 2000 {
			if err = c.Send(1, body); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrOverflow) || c.Err() != nil {
			t.Fatalf("over the cap: %v (link %v)", err, c.Err())
		}
		done := make(chan error, 1)
		if err := c.Call(2, body, func(_ []byte, err error) { done <- err }); !errors.Is(err, ErrOverflow) {
			t.Fatalf("a call over the cap: %v", err)
		}
		within(t, 5*time.Second, "closing a link to a stalled peer", func() { c.Close() })
	})
	t.Run("write deadline", func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		down := make(chan error, 1)
		c := NewConn(a, ConnConfig{WriteTimeout: 100 * time.Millisecond, OnDown: func(_ *Conn, err error) { down <- err }})
		defer c.Close()
		failed := make(chan error, 1)
		if err := c.Call(1, []byte("never read"), func(_ []byte, err error) { failed <- err }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-failed:
			var ne net.Error
			if !errors.Is(err, ErrBroken) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("the call failed with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stalled peer did not break the link")
		}
		<-down
	})
}

// Garbage from a peer breaks the link (or is ignored), never panics, and
// the link still closes.
func TestLinkGarbage(t *testing.T) {
	frame := func(kind byte, id uint64, body string) []byte { return appendFrame(nil, kind, id, []byte(body)) }
	tests := []struct {
		name   string
		in     []byte
		breaks bool
	}{
		{"empty frame", []byte{0, 0, 0, 0}, true},
		{"kind only", []byte{0, 0, 0, 1, 5}, true},
		{"bad id", append([]byte{0, 0, 0, 12, 1}, bytes.Repeat([]byte{0xff}, 11)...), true},
		{"answer nobody waits for", frame(kindAnswer, 77, "x"), false},
		{"truncated", frame(1, 1, "hello")[:7], true},
		{"handler refuses", frame(9, 0, ""), true},
		{"random", func() []byte { p := make([]byte, 4096); rand.New(rand.NewSource(1)).Read(p); return p }(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tcpPair(t)
			defer b.Close()
			down := make(chan error, 1)
			c := NewConn(a, ConnConfig{MaxFrame: 1 << 16, OnDown: func(_ *Conn, err error) { down <- err },
				Handle: func(c *Conn, f Frame) error {
					if f.Kind == 9 {
						return errors.New("kind 9 refused")
					}
					return echo(c, f)
				}})
			defer c.Close()
			if _, err := b.Write(tt.in); err != nil {
				t.Fatal(err)
			}
			if tt.name == "truncated" {
				b.(*net.TCPConn).CloseWrite()
			}
			if tt.breaks {
				select {
				case <-down:
				case <-time.After(10 * time.Second):
					t.Fatal("the link did not break")
				}
				return
			}
			// Still up: a request is answered.
			if _, err := b.Write(frame(1, 5, "ok")); err != nil {
				t.Fatal(err)
			}
			f, err := readFrame(bufio.NewReader(b), 1<<16)
			if err != nil || f.Kind != kindAnswer || f.ID != 5 || string(f.Body) != "\x01ok" {
				t.Fatalf("answer %+v, %v", f, err)
			}
		})
	}
}

// A link set's links that go down are closed by it, and a closed set
// closes the rest and dials no more.
func TestLinkSet(t *testing.T) {
	m := NewMux(mustListen(t), []byte("secret"), nil)
	defer m.Close()
	layer, err := m.Layer("svc")
	if err != nil {
		t.Fatal(err)
	}
	served, dialled := newLinkSet(), newLinkSet()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			nc, err := layer.Accept()
			if err != nil {
				return
			}
			served.serve(nc, ConnConfig{Handle: echo})
		}
	}()
	addr := m.Addr().String()
	c1, err := dialled.dial(addr, layer, time.Second, ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := dialled.dial(addr, layer, time.Second, ConnConfig{}); c2 != c1 {
		t.Fatal("a second dial made a second link")
	}
	if _, err := c1.CallWait(1, []byte("x"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The served side goes away: the dialled link goes down, and the
	// next dial makes a new one.
	served.close()
	poll.Eventually(t, 10*time.Second, func() bool { return c1.Err() != nil }, "the dialled link stayed up after its peer went")
	served = newLinkSet()
	var c3 *Conn
	poll.Eventually(t, 10*time.Second, func() bool {
		c3, err = dialled.dial(addr, layer, time.Second, ConnConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if c3 == c1 {
			return false
		}
		_, err = c3.CallWait(1, []byte("y"), 10*time.Second)
		return err == nil
	}, "no new link answers after the served side came back: %v", err)
	dialled.close()
	if _, err := dialled.dial(addr, layer, time.Second, ConnConfig{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("dial on a closed set: %v", err)
	}
	layer.Close()
	<-accepted
	served.close()
}

func mustListen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// FuzzReadFrame reads frames from any bytes, whole and in split chunks:
// it never panics, never allocates past the bound, reads the same frames
// both ways, and what it reads re-encodes to a frame that reads the same.
func FuzzReadFrame(f *testing.F) {
	var seed []byte
	seed = appendFrame(seed, 1, 1, []byte("request"))
	seed = appendFrame(seed, kindAnswer, 1, []byte("answer"))
	seed = appendFrame(seed, 7, 0, nil)
	seed = appendFrame(seed, 255, 1<<63, bytes.Repeat([]byte("x"), 300))
	f.Add(seed)
	f.Add(appendFrame(nil, 2, 300, []byte("one")))
	f.Add([]byte{0, 0, 0, 2, 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, p []byte) {
		read := func(r io.Reader) ([]Frame, error) {
			br := bufio.NewReaderSize(r, 16)
			var out []Frame
			for {
				fr, err := readFrame(br, max)
				if err != nil {
					return out, err
				}
				if len(fr.Body) > max {
					t.Fatalf("a %d-byte body", len(fr.Body))
				}
				out = append(out, fr)
			}
		}
		whole, err1 := read(bytes.NewReader(p))
		split, err2 := read(iotest.HalfReader(iotest.OneByteReader(bytes.NewReader(p))))
		if len(whole) != len(split) || (err1 == nil) != (err2 == nil) {
			t.Fatalf("whole: %d frames, %v; split: %d, %v", len(whole), err1, len(split), err2)
		}
		for i := range whole {
			a, b := whole[i], split[i]
			if a.Kind != b.Kind || a.ID != b.ID || !bytes.Equal(a.Body, b.Body) {
				t.Fatalf("frame %d: %+v and %+v", i, a, b)
			}
			again, err := readFrame(bufio.NewReader(bytes.NewReader(appendFrame(nil, a.Kind, a.ID, a.Body))), max)
			if err != nil || again.Kind != a.Kind || again.ID != a.ID || !bytes.Equal(again.Body, a.Body) {
				t.Fatalf("frame %d re-encoded reads %+v, %v", i, again, err)
			}
		}
	})
}

func BenchmarkLinkCall(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			c, _ := linkPair(b, ConnConfig{}, ConnConfig{Handle: func(c *Conn, f Frame) error { return c.Answer(f.ID, f.Body[:1]) }})
			body := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.CallWait(1, body, 10*time.Second); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// ConnConfig.Memory counts the bytes waiting to be written: appended
// frames while a stalled peer takes nothing, none once the peer has read
// them, none once a link with frames still waiting is closed.
func TestLinkMemory(t *testing.T) {
	t.Run("written", func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		var mem atomic.Int64
		c := NewConn(a, ConnConfig{Memory: &mem})
		defer c.Close()
		body := make([]byte, 1000)
		for range 100 {
			if err := c.Send(1, body); err != nil {
				t.Fatal(err)
			}
		}
		if got := mem.Load(); got < 100*int64(len(body)) {
			t.Fatalf("%d bytes counted, want at least %d", got, 100*len(body))
		}
		br := bufio.NewReader(b)
		for i := range 100 {
			f, err := readFrame(br, DefaultMaxFrame)
			if err != nil || len(f.Body) != len(body) {
				t.Fatalf("frame %d: %d bytes, %v", i, len(f.Body), err)
			}
		}
		poll.Eventually(t, 10*time.Second, func() bool { return mem.Load() == 0 }, "%d bytes still counted", mem.Load())
	})
	t.Run("dropped", func(t *testing.T) {
		a, b := net.Pipe() // never read
		defer b.Close()
		var mem atomic.Int64
		c := NewConn(a, ConnConfig{Memory: &mem, WriteTimeout: time.Hour})
		body := make([]byte, 64<<10)
		for range 64 { // more than one writeChunk: some wait in the writer's hands, the rest in the buffer
			if err := c.Send(1, body); err != nil {
				t.Fatal(err)
			}
		}
		if got := mem.Load(); got < 64*int64(len(body)) {
			t.Fatalf("%d bytes counted, want at least %d", got, 64*len(body))
		}
		within(t, 5*time.Second, "closing a link to a stalled peer", func() { c.Close() })
		if got := mem.Load(); got != 0 {
			t.Fatalf("%d bytes still counted after Close", got)
		}
	})
}

// TestLinkSetSkipsDeadLink: a dial never returns a cached link that has
// gone down, even before the set has heard of it (its OnDown runs after
// its calls' failures), so a forwarded write is not sent to a dead link.
func TestLinkSetSkipsDeadLink(t *testing.T) {
	m := NewMux(mustListen(t), []byte("secret"), nil)
	defer m.Close()
	layer, err := m.Layer("svc")
	if err != nil {
		t.Fatal(err)
	}
	served, dialled := newLinkSet(), newLinkSet()
	defer served.close()
	defer dialled.close()
	go func() {
		for {
			nc, err := layer.Accept()
			if err != nil {
				return
			}
			served.serve(nc, ConnConfig{Handle: echo})
		}
	}()
	addr := m.Addr().String()
	// A dead link in the set's cache, whose OnDown has not told the set.
	a, b := net.Pipe()
	defer b.Close()
	dead := NewConn(a, ConnConfig{})
	dead.Break(errors.New("gone"))
	dialled.mu.Lock()
	dialled.byAddr[addr] = dead
	dialled.all[dead] = struct{}{}
	dialled.mu.Unlock()
	c, err := dialled.dial(addr, layer, time.Second, ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c == dead {
		t.Fatal("dial returned the cached link that had gone down")
	}
	if _, err := c.CallWait(1, []byte("x"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close()
}

// TestLinkSilentPeer: a peer that takes what it is sent and sends
// nothing back, not even a heartbeat (a paused process, a network that
// drops its packets), breaks a link with heartbeats within DeadAfter:
// the call waiting on it fails (ErrSilent) rather than waiting for as
// long as the silence lasts. Two links that heartbeat stay up while idle.
func TestLinkSilentPeer(t *testing.T) {
	t.Run("silent peer", func(t *testing.T) {
		a, b := tcpPair(t)
		defer b.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }() // takes everything, says nothing
		c := NewConn(a, ConnConfig{Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
		defer c.Close()
		failed := make(chan error, 1)
		if err := c.Call(1, []byte("no answer"), func(_ []byte, err error) { failed <- err }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-failed:
			if !errors.Is(err, ErrBroken) || !errors.Is(err, ErrSilent) {
				t.Fatalf("the call failed with %v, want ErrSilent", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a silent peer did not break the link")
		}
	})
	t.Run("idle links heartbeat", func(t *testing.T) {
		hb := ConnConfig{Heartbeat: 100 * time.Millisecond, DeadAfter: 1500 * time.Millisecond}
		srv := hb
		srv.Handle = echo
		c, s := linkPair(t, hb, srv)
		select {
		case <-c.Done():
			t.Fatalf("an idle link broke: %v", c.Err())
		case <-s.Done():
			t.Fatalf("an idle link broke: %v", s.Err())
		case <-time.After(3 * time.Second): // twice DeadAfter, nothing sent
		}
		if p, err := c.CallWait(7, []byte("x"), 10*time.Second); err != nil || string(p) != "\x07x" {
			t.Fatalf("after idling: %q %v", p, err)
		}
	})
}
