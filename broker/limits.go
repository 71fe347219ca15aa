package broker

import (
	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
)

// Limits, as RabbitMQ's: per vhost max-connections and max-queues, per
// user max-connections and max-channels. Absent means none; a negative
// value too; 0 allows none.

// limitOf is limit name in m, or -1 (none).
func limitOf(m map[string]int64, name string) int64 {
	if v, ok := m[name]; ok && v >= 0 {
		return v
	}
	return -1
}

// openLimits refuses connection.open, as rabbit_reader does and in its
// order, when the vhost or the user is at its max-connections.
func (s *Server) openLimits(st *vhostState, u *auth.User) *amqp.Error {
	vl, ul := limitOf(st.rec.Limits, "max-connections"), limitOf(u.Limits, "max-connections")
	if vl < 0 && ul < 0 {
		return nil
	}
	var nv, nu int64
	for _, c := range s.openConns() {
		if c.vh == st.v {
			nv++
		}
		if c.user == u.Name {
			nu++
		}
	}
	if vl >= 0 && nv >= vl {
		return amqp.Errorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", st.v.Name(), u.Name, vl)
	}
	if ul >= 0 && nu >= ul {
		return amqp.Errorf(amqp.NotAllowed, "connection refused for user '%s': user connection limit (%d) is reached", u.Name, ul)
	}
	return nil
}

// channelLimit refuses channel.open when the user has max-channels open
// over all its connections (RabbitMQ: a connection error, 530).
func (c *conn) channelLimit() error {
	u := c.authUser
	if u == nil {
		return nil
	}
	cur := c.srv.reg.User(u.Name) // limits set since the connection opened count
	if cur == nil {
		return nil
	}
	l := limitOf(cur.Limits, "max-channels")
	if l < 0 {
		return nil
	}
	var n int64
	for _, o := range c.srv.openConns() {
		if o.user == u.Name {
			n += int64(o.nchan.Load())
		}
	}
	if n >= l {
		return amqp.Errorf(amqp.NotAllowed, "number of channels opened for user '%s' has reached the maximum allowed user limit of (%d)", u.Name, l)
	}
	return nil
}
