package mgmt

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The HTTP servers of the management API and the metrics: timeouts, and
// a cap on the sockets that clients who have not authenticated may hold
// (they share the process's file descriptors with AMQP).
//
// A socket counts as unauthenticated until a request on it has
// authenticated (the management API), or has been answered (a server of
// public routes: the metrics). Over the cap, accepting a new socket
// closes the oldest unauthenticated one that is not in the middle of a
// request: a client that holds sockets open cannot starve the others,
// and whoever authenticates keeps its keep-alive socket.

// ServerLimits are an HTTP server's timeouts and cap.
type ServerLimits struct {
	// ReadHeaderTimeout closes a socket whose request headers have not
	// all arrived in time (a new socket that sends nothing included).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included
	// (a definitions import of tens of MB on a slow link must fit).
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive socket left idle.
	IdleTimeout time.Duration
	// MaxUnauthenticated caps the sockets not yet authenticated; 0:
	// DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// Public: no route authenticates (the metrics); a socket counts once
	// it has been answered.
	Public bool
}

// The defaults: RabbitMQ's management listener (Cowboy) closes a
// connection idle for 120 s (management.tcp.idle_timeout 120000) and
// bounds a request to 120 s (request_timeout); the headers get 10 s.
const (
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultReadTimeout        = 120 * time.Second
	DefaultIdleTimeout        = 120 * time.Second
	DefaultMaxUnauthenticated = 256
)

func (l *ServerLimits) defaults() {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxUnauthenticated <= 0 {
		l.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
}

// NewServer makes an HTTP server for h (the management API's Handler, or
// the metrics' with lim.Public) with lim's timeouts and cap; the caller
// sets Addr or TLSConfig and serves it.
func NewServer(h http.Handler, lim ServerLimits) *http.Server {
	lim.defaults()
	g := &connGuard{max: lim.MaxUnauthenticated, conns: map[net.Conn]*guardedConn{}}
	if lim.Public {
		h = servedMarks(h)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		ConnState:         g.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, guardKey{}, g.get(c))
		},
	}
}

type guardKey struct{}

// markAuthenticated exempts the request's socket from the cap (a request
// on it has authenticated). Requests from a server NewServer did not make
// (tests' httptest) have nothing to mark.
func markAuthenticated(r *http.Request) {
	if gc, _ := r.Context().Value(guardKey{}).(*guardedConn); gc != nil {
		gc.authed.Store(true)
	}
}

// servedMarks marks each socket once a request on it is answered.
func servedMarks(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		markAuthenticated(r)
	})
}

// connGuard tracks a server's sockets, oldest first.
type connGuard struct {
	max int

	mu    sync.Mutex // guards conns, order and seq; a leaf (LOCKS.md)
	conns map[net.Conn]*guardedConn
	seq   uint64
}

type guardedConn struct {
	c      net.Conn
	seq    uint64      // accept order
	authed atomic.Bool // a request on it has authenticated
	active atomic.Bool // a request is being served
}

// get is c's record, made if the ConnState hook has not yet run (the
// server calls ConnContext first).
func (g *connGuard) get(c net.Conn) *guardedConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	gc := g.conns[c]
	if gc == nil {
		g.seq++
		gc = &guardedConn{c: c, seq: g.seq}
		g.conns[c] = gc
	}
	return gc
}

func (g *connGuard) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		g.get(c)
		if victim := g.overCap(); victim != nil {
			_ = victim.Close() // its serving goroutine sees the error and ends
		}
	case http.StateActive, http.StateIdle:
		g.mu.Lock()
		if gc := g.conns[c]; gc != nil {
			gc.active.Store(st == http.StateActive)
		}
		g.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
	}
}

// overCap is the socket to close when more than max are unauthenticated:
// the oldest of them not serving a request; nil when under the cap.
func (g *connGuard) overCap() net.Conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	var oldest *guardedConn
	for _, gc := range g.conns {
		if gc.authed.Load() {
			continue
		}
		n++
		if !gc.active.Load() && (oldest == nil || gc.seq < oldest.seq) {
			oldest = gc
		}
	}
	if n <= g.max || oldest == nil {
		return nil
	}
	delete(g.conns, oldest.c) // counted out now: its StateClosed comes later
	return oldest.c
}
