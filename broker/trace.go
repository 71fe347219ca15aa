package broker

import "errors"

// ErrNoSuchVHost is SetTracing's error for a vhost that does not exist.
var ErrNoSuchVHost = errors.New("no such vhost")

// SetTracing turns firehose tracing on or off for vhost vh (RabbitMQ's
// rabbitmqctl trace_on/trace_off, and "tracing" in PUT /api/vhosts/{vh}):
// publishes and deliveries in it are copied to its amq.rabbitmq.trace
// exchange (vhost/trace.go). As RabbitMQ's, the setting is this node's,
// in memory: a restart turns it off.
func (s *Server) SetTracing(vh string, on bool) error {
	st := s.vhostByName(vh)
	if st == nil {
		return ErrNoSuchVHost
	}
	st.v.SetTracing(on, s.nodeName())
	return nil
}
