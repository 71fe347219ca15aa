package mgmt

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Failed logins on the management API are made no easier to guess than
// on AMQP, where a refused login is answered after 3 s (RabbitMQ's
// behaviour, broker/silent.go): a failed login's 401 is held for the
// delay, and a source (an IPv4 address, or an IPv6 /64) may have at most
// maxFailsPerSource failures counted within the last delay: past that its
// requests are answered 401 at once, without their password being
// checked, so that parallel guesses gain nothing. Holding is bounded
// (maxHeld answers at once; past that a failure is answered at once, and
// still counted), so an attacker cannot tie up goroutines and sockets
// without bound; counting holds no goroutine (a timer forgets each
// failure). A login that succeeds is never held, and other sources are
// never refused.

const (
	defaultFailedLoginDelay = 3 * time.Second
	maxFailsPerSource       = 8
	maxHeld                 = 1024
)

// loginLimiter counts failed logins by source.
type loginLimiter struct {
	delay time.Duration // <= 0: off
	mu    sync.Mutex    // guards fails, held; a leaf
	fails map[string]int
	held  int
}

// source is the key of a request's remote address: the IPv4 address,
// or the /64 of an IPv6 one.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String()
}

// admit reports whether a login from src may be checked now: not while
// src has maxFailsPerSource failures counted.
func (l *loginLimiter) admit(src string) bool {
	if l.delay <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fails[src] < maxFailsPerSource
}

// failed counts a failed login from src for the delay, and holds the
// caller for it while fewer than maxHeld are held (or until ctx ends).
func (l *loginLimiter) failed(ctx context.Context, src string) {
	if l.delay <= 0 {
		return
	}
	l.mu.Lock()
	if l.fails == nil {
		l.fails = map[string]int{}
	}
	l.fails[src]++
	hold := l.held < maxHeld
	if hold {
		l.held++
	}
	l.mu.Unlock()
	time.AfterFunc(l.delay, func() {
		l.mu.Lock()
		if l.fails[src]--; l.fails[src] <= 0 {
			delete(l.fails, src)
		}
		l.mu.Unlock()
	})
	if !hold {
		return
	}
	t := time.NewTimer(l.delay)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	l.mu.Lock()
	l.held--
	l.mu.Unlock()
}
