package shovel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// State is a shovel's state as RabbitMQ's GET /api/shovels shows it.
type State string

// The states (rabbit_shovel_status.erl).
const (
	Starting   State = "starting"
	Running    State = "running"
	Terminated State = "terminated"
)

// Status is a snapshot of a shovel.
type Status struct {
	State State
	// Reason is why the shovel is terminated: the error that ended its
	// last session while it waits reconnect-delay to start again, or
	// "stopped" / "completed" (src-delete-after reached) when it is done.
	Reason string
	// LastError is the last session's error, kept while it starts again.
	LastError string
	// SrcURI and DestURI are the URIs of the running session, without
	// credentials.
	SrcURI, DestURI string
	// Timestamp is when State last changed.
	Timestamp time.Time
	// Published counts messages published to the destination; Moved those
	// also acknowledged at the source (on-confirm: after the destination's
	// confirm), or published (no-ack); Nacked the destination's nacks
	// (requeued at the source).
	Published, Moved, Nacked uint64
	// Sessions counts the sessions started (1 + reconnects).
	Sessions uint64
	// Remaining is what src-delete-after still asks to move; -1 for never.
	Remaining int64
	// Done is true when the shovel will not start again (stopped,
	// completed, or failed with reconnect-delay 0).
	Done bool
	// Connecting is true when the last session failed before both sides
	// were connected (RabbitMQ's worker then stays "starting").
	Connecting bool
	// ClosedByServer is true when the last session ended with a
	// connection or channel closed by a broker's exception (RabbitMQ's
	// "needed a restart").
	ClosedByServer bool
}

// Options are what a shovel needs besides its Config.
type Options struct {
	Name, Vhost string
	// ClusterName is written as shovelled-by in x-shovelled.
	ClusterName string
	// Dialer opens the connections; nil is AMQPDialer{}.
	Dialer Dialer
	Logger *zap.Logger
	// OnComplete runs (on the shovel's goroutine, once) when
	// src-delete-after is reached: RabbitMQ then deletes the shovel's
	// parameter, which is the caller's to do.
	OnComplete func()
}

// Shovel runs one shovel: Start, Stop, Restart, Status.
type Shovel struct {
	cfg  Config
	opts Options
	log  *zap.Logger

	published, moved, nacked, sessions atomic.Uint64
	remaining                          atomic.Int64

	mu      sync.Mutex // guards below; a leaf (LOCKS.md)
	st      Status
	cancel  context.CancelFunc
	done    chan struct{}
	counted bool // remaining was read (queue-length) or set

	connected bool // the running session has both connections; the shovel's goroutine's own
}

// New makes a shovel; it does nothing until Start.
func New(cfg Config, opts Options) *Shovel {
	if opts.Dialer == nil {
		opts.Dialer = AMQPDialer{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	s := &Shovel{cfg: cfg, opts: opts,
		log: opts.Logger.With(zap.String("shovel", opts.Name), zap.String("vhost", opts.Vhost))}
	s.remaining.Store(-1)
	if !cfg.SrcDeleteAfter.QueueLength && cfg.SrcDeleteAfter.Count >= 0 {
		s.remaining.Store(cfg.SrcDeleteAfter.Count)
		s.counted = true
	}
	s.st = Status{State: Starting, Timestamp: time.Now()}
	return s
}

// Config is the shovel's definition.
func (s *Shovel) Config() Config { return s.cfg }

// Start runs the shovel on a goroutine of its own; a no-op if it runs.
func (s *Shovel) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	s.st.State, s.st.Reason, s.st.Done, s.st.Timestamp = Starting, "", false, time.Now()
	go s.run(ctx, s.done)
}

// Stop ends the shovel and waits for its goroutine: the source's
// unacknowledged messages go back to their queue when its connection
// closes. Status then says terminated, "stopped".
func (s *Shovel) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Restart stops the shovel and starts it again at once (RabbitMQ's
// DELETE /api/shovels/vhost/{vhost}/{name}/restart).
func (s *Shovel) Restart() {
	s.Stop()
	s.Start()
}

// Done is closed when the running shovel's goroutine has ended; nil before
// Start.
func (s *Shovel) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Status is a snapshot of the shovel.
func (s *Shovel) Status() Status {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	st.Published, st.Moved, st.Nacked = s.published.Load(), s.moved.Load(), s.nacked.Load()
	st.Sessions, st.Remaining = s.sessions.Load(), s.remaining.Load()
	return st
}

func (s *Shovel) setState(state State, reason string, final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.State, s.st.Reason, s.st.Done, s.st.Timestamp = state, reason, final, time.Now()
	if state == Terminated && !final {
		s.st.LastError = reason
	}
	if state != Running {
		s.st.SrcURI, s.st.DestURI = "", ""
	}
}

// setFailed is setState(Terminated, reason, final) for a failed session,
// with how it failed.
func (s *Shovel) setFailed(reason string, final, connecting, byServer bool) {
	s.setState(Terminated, reason, final)
	s.mu.Lock()
	s.st.Connecting, s.st.ClosedByServer = connecting, byServer
	s.mu.Unlock()
}

func (s *Shovel) setRunning(src, dest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.State, s.st.Reason, s.st.Timestamp = Running, "", time.Now()
	s.st.SrcURI, s.st.DestURI = Redact(src), Redact(dest)
}

// errComplete ends a session whose src-delete-after is reached.
var errComplete = errors.New("completed")

// run is the shovel's goroutine: a session, and after it fails a wait of
// reconnect-delay and another, until Stop or completion.
func (s *Shovel) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		s.setState(Starting, "", false)
		s.sessions.Add(1)
		err := s.session(ctx)
		switch {
		case ctx.Err() != nil:
			s.setState(Terminated, "stopped", true)
			s.log.Info("shovel stopped")
			return
		case errors.Is(err, errComplete):
			s.setState(Terminated, "completed", true)
			s.log.Info("shovel completed, no messages left to transfer", zap.Uint64("moved", s.moved.Load()))
			if s.opts.OnComplete != nil {
				s.opts.OnComplete()
			}
			return
		}
		reason := err.Error()
		final := s.cfg.ReconnectDelay <= 0
		var ae *rmq.Error
		s.setFailed(reason, final, !s.connected, errors.As(err, &ae) && ae.Server)
		s.log.Warn("shovel failed", zap.String("reason", reason), zap.Duration("reconnect_delay", s.cfg.ReconnectDelay))
		if final {
			return
		}
		t := time.NewTimer(s.cfg.ReconnectDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			s.setState(Terminated, "stopped", true)
			return
		case <-t.C:
		}
	}
}
