package broker

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// Server is a railmq broker: it accepts AMQP 0-9-1 connections and serves
// them until Shutdown.
type Server struct {
	opts  Options
	log   *zap.Logger
	users *users

	mu       sync.Mutex // guards ln, conns, shutdown
	ln       net.Listener
	conns    map[*conn]struct{}
	shutdown bool
	wg       sync.WaitGroup // one per connection goroutine

	nextID atomic.Uint64
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("railmq: server closed")

// New builds a server from opts.
func New(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		users: &users{passwords: opts.Users, loopback: opts.LoopbackUsers},
		conns: make(map[*conn]struct{}),
	}
	return s, nil
}

// ListenAndServe listens on addr and serves until Shutdown.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown; it then returns
// ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	s.log.Info("listening", zap.String("addr", ln.Addr().String()))
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			down := s.shutdown
			s.mu.Unlock()
			if down {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off, as
				// net/http's Serve does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed, retrying", zap.Error(err), zap.Duration("delay", delay))
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := newConn(s, nc, s.nextID.Add(1))
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Addr returns the listening address, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops accepting, sends every client connection.close 320
// CONNECTION_FORCED, and waits for the connections to end or ctx to be
// done (then it closes what is left).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	if s.ln != nil {
		s.ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.log.Info("shutting down", zap.Int("connections", len(conns)))
	forced := &amqp.Error{Code: amqp.ConnectionForced, Text: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"}
	for _, c := range conns {
		c.closeWith(forced, "broker shutdown")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
	}
	s.log.Info("shut down")
	return ctx.Err()
}

func (s *Server) hasVHost(name string) bool { return name == "/" }

// serverProperties are what connection.start advertises. A capability is
// listed only once it works.
func (s *Server) serverProperties() amqp.Table {
	return amqp.Table{
		"product":      "railmq",
		"version":      s.opts.Version,
		"platform":     platform(),
		"cluster_name": "railmq@" + hostname,
		"copyright":    "Copyright (c) the railmq authors",
		"information":  "Licensed under the Apache License 2.0",
		"capabilities": amqp.Table{
			"authentication_failure_close": true,
		},
	}
}
