package conformance

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// TestHTTPSlowloris is TestHandshakeTimeout for the management listener
// (issue 38, item 10): a socket that sends nothing, one that trickles its
// headers, and one left idle after a 401 are closed at the server's
// timeouts, and a crowd of unauthenticated sockets beyond the cap does
// not keep an authenticated client out nor close its keep-alive socket.
func TestHTTPSlowloris(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	const max = 8
	hs := mgmt.NewServer(b.ManagementHandler(), mgmt.ServerLimits{ReadHeaderTimeout: 500 * time.Millisecond,
		ReadTimeout: 2 * time.Second, IdleTimeout: 500 * time.Millisecond, MaxUnauthenticated: max})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := ln.Addr().String()
	open := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed waits for the server to close c (EOF or reset).
	closed := func(c net.Conn, what string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: still open after 10 s", what)
		}
	}
	closed(open(), "a socket that sends nothing")

	c := open()
	go func(c net.Conn) { // one header byte every 100 ms, for ever
		for _, ch := range []byte("GET /api/overview HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)) {
			if _, err := c.Write([]byte{ch}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the attack's pace
		}
	}(c)
	closed(c, "a socket trickling its headers")

	c = open()
	if _, err := c.Write([]byte("GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("unauthenticated request: %v %v", resp, err)
	}
	resp.Body.Close()
	closed(c, "a keep-alive socket idle after a 401")

	// An authenticated client's keep-alive socket, then a crowd of
	// sockets that send nothing, more than the cap, on a server whose
	// timeouts are long: the cap alone makes room.
	slow := mgmt.NewServer(b.ManagementHandler(), mgmt.ServerLimits{ReadHeaderTimeout: time.Minute, MaxUnauthenticated: max})
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = slow.Serve(ln2) }()
	t.Cleanup(func() { _ = slow.Close() })
	addr = ln2.Addr().String()
	auth := "GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
	good := open()
	gr := bufio.NewReader(good)
	ask := func(what string) {
		t.Helper()
		if _, err := good.Write([]byte(auth)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		resp, err := http.ReadResponse(gr, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", what, resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ask("first request")
	var crowd []net.Conn
	for range 5 * max {
		crowd = append(crowd, open())
	}
	ask("the authenticated socket, among the crowd")
	// A new client gets in and is answered (the oldest of the crowd make
	// room).
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/overview", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err = (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}).Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a new client among the crowd: %v %v", resp, err)
	}
	resp.Body.Close()
	// The server took the crowd before the new client: the oldest of
	// the crowd, all but the cap's worth, are closed (long before the
	// minute of their header timeout); the newest are still open.
	for i, c := range crowd {
		if i >= 4*max && i < len(crowd)-1 {
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		open := err != nil && strings.Contains(err.Error(), "timeout")
		if i < 4*max && open {
			t.Fatalf("crowd socket %d of %d still open: the cap (%d) is not kept", i, len(crowd), max)
		}
		if i == len(crowd)-1 && !open {
			t.Fatalf("the newest crowd socket was closed: %v", err)
		}
	}
}
