package channel

import (
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/railmq/railmq/amqp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink is a FrameSink that records what a channel sends. Schedule keeps
// the hooks for the test to run, as the connection's writer runs them
// before its next write.
type sink struct {
	mu        sync.Mutex
	methods   []amqp.Method // SendMethod, in order
	delivered []delivered   // AppendContent
	scheduled []func()
}

// delivered is one basic.deliver and its body.
type delivered struct {
	amqp.BasicDeliver // copied: the channel reuses its own
	body              string
}

func (s *sink) SendMethod(_ uint16, m amqp.Method) {
	s.mu.Lock()
	s.methods = append(s.methods, m)
	s.mu.Unlock()
}

func (s *sink) SendContent(_ uint16, m amqp.Method, _, _ []byte) bool {
	s.SendMethod(0, m)
	return false
}

func (s *sink) AppendContent(_ uint16, m amqp.Method, _, body []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := m.(*amqp.BasicDeliver); ok {
		s.delivered = append(s.delivered, delivered{*d, string(body)})
	}
	return false
}

func (s *sink) Wake()                 {}
func (s *sink) Flush()                {}
func (s *sink) NotifyWritable(func()) {}

func (s *sink) Schedule(fn func()) {
	s.mu.Lock()
	s.scheduled = append(s.scheduled, fn)
	s.mu.Unlock()
}

// runWriter runs the scheduled hooks, as the writer does before a write,
// and reports how many there were.
func (s *sink) runWriter() int {
	s.mu.Lock()
	fns := s.scheduled
	s.scheduled = nil
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return len(fns)
}

// take returns the methods sent since the last take.
func (s *sink) take() []amqp.Method {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.methods
	s.methods = nil
	return ms
}

func (s *sink) deliveries() []delivered {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivered(nil), s.delivered...)
}
