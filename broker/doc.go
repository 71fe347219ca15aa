// Package broker is the AMQP node: the listener and accept loop, one
// reader and one writer goroutine per connection (handshake, tuning,
// heartbeats, channel 0, frame dispatch to channels, exception handling),
// TLS, resource alarms and the memory limit, flow control, the
// consumer-timeout sweeper, the limits' AMQP half, users, vhosts and
// policies as stored (and, in a cluster, replicated) state, and graceful
// Shutdown. It wires the store, the vhost registry and channels together.
//
// It knows neither HTTP nor Prometheus: it imports neither net/http nor
// the Prometheus client. What the management plane (package mgmt) and
// the metrics (package metrics) may ask of a running node is the admin
// API in admin.go, which returns plain data.
//
// A connection (conn.go) has two goroutines. The reader owns the protocol
// state and the channels: it runs the handshake (handshake.go), reads and
// dispatches frames (read.go), handles channel 0 and every way a
// connection ends (closing.go), and serves requests other goroutines post
// to it, woken by a read deadline in the past (deadline.go, which also
// keeps the heartbeat and close deadlines). The writer owns the socket's
// write side and the heartbeats it sends (writer.go); the two share the
// outbound buffer under outMu. A reader that delivered to another
// connection's consumers may write that connection's socket itself when
// its writer is idle (Flush, TryLock on wmu). alarm.go stops reading from
// publishers while the memory alarm is on. LOCKS.md orders the locks.
//
// In a cluster, the replicated queue kinds (quorum queues, classic queues
// homed on another node) are package replica's: New makes the
// replica.Manager (Server.rep) and gives it to the vhosts and the cluster
// node (replica.go: what it asks of the node), the sweeper ticks it once
// a second, and Shutdown closes it before the node. The definitions the
// cluster replicates (users, vhosts, policies; replicate.go) stay here.
package broker
