// Package replica holds a cluster node's replicated queue kinds: quorum
// queues (quorum.go: a queue.Replica over the queue's Raft group, whose
// committed entries' effects are delivered to this node's consumers) and
// classic queues homed on another node (proxy.go: this node's handle
// forwards every operation over the cluster link to the home; home.go:
// the home's side, serving the other nodes' consumers and requests).
// Both deliver to their consumers here the same way (local.go). Streams
// (stream.go) append to a log of this node's; in a cluster, through the
// stream's Raft group (stream_repl.go), every node applying the
// committed records to its own log.
//
// One Manager owns them: this node's quorum queues and the groups it is
// creating, its handles of classic queues homed elsewhere, the links to
// their homes and the other nodes' links to the queues homed here, and
// the once-a-second work on them (Tick). It is the vhosts' vhost.Quorum,
// and Describe, DescribeMembers, Home and Raft give the management API
// and the metrics what they show of a replicated queue. What it needs of
// the node (its vhosts, the metadata store's queue definitions) it asks
// through Host. Every goroutine it starts (the link's accept loop; each
// link's owner, which dials it when it is this node's, and its reader
// and writer; the home's requests that write through Raft; the counts'
// refreshes) stops and is waited for by Close.
//
// The classic queues' link (link.go) is the cluster's one inter-node
// link, a cluster.Conn (framing, request ids, pipelining, fail-all), and
// its frames are written with the cluster's codec (cluster.Enc and
// cluster.Dec); link.go lists the frames. Nothing under a queue's exec
// dials, writes a socket or waits for a peer: frames are appended to the
// link's outbound buffer, which its writer goroutine writes with no lock
// held, and a link to a home is dialled by a goroutine of its own, what
// is sent to it meanwhile waiting for it.
//
// It imports queue, vhost, cluster and amqp; never broker or channel
// (broker imports it, and the channels reach it through queue.Queue).
// LOCKS.md orders its locks.
package replica
