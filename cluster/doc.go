// Package cluster is railmq's cluster machinery, a leaf beside persist:
// it knows nothing of queues, vhosts or brokers, and imports only
// hashicorp/raft, go-hclog, badger and zap (never broker, replica,
// channel, vhost or queue, which import it). It owns:
//
//   - a node (node.go): the inter-node listener (Mux, mux.go: one port,
//     every connection authenticated with the cluster secret, optionally
//     TLS, handed to the service it names) and the metadata store, one
//     Raft group replicating the definitions as keys and values
//     (MetaFSM); a follower forwards its writes to the leader;
//   - quorum queues' Raft groups (group.go): the queue's state machine
//     (Fifo, fifo.go, RabbitMQ's rabbit_fifo), its adapter to
//     hashicorp/raft (QueueFSM), the rounds a node forwards to a group's
//     leader (grouprpc.go), and the Badger log store they share
//     (logstore.go);
//   - replicated streams' Raft groups (stream.go): a Group whose state
//     machine is the caller's storage (StreamMachine), which appends
//     each committed entry's opaque items tagged with the entry's index;
//     a member behind its leader's snapshot fetches the items it misses
//     from the leader's storage (kindStreamRead, grouprpc.go);
//   - the one inter-node request/answer link (Conn, link.go): framing,
//     request ids, pipelining, one-way frames both ways, fail-all on
//     close, an outbound buffer drained by a writer goroutine so that no
//     caller writes a socket (its bytes counted in the owner's memory
//     figure when asked: ConnConfig.Memory). The metadata forwarding, the
//     group RPC and replica's link to the classic queues homed on other
//     nodes (a service of Node.Link) run on it, and no other link is;
//   - the one binary codec (Enc and Dec, codec.go) of what the link
//     carries and of what the package persists in its own format (the
//     quorum queue's commands, the log store's entries). The metadata
//     log's entries and snapshots and the quorum queues' snapshots are
//     gob, as they have always been written: they are read back at
//     recovery, so their format stays.
//
// Consensus, log replication, elections and snapshots are
// hashicorp/raft's; this package writes the state machines on top.
//
// Why hashicorp/raft rather than etcd's raft: measured with
// fit_bench_test.go (three members in one process, in-memory logs and
// transport, 1 KiB entries, 3 runs each on this 2-core machine),
// hashicorp/raft commits an entry in 12.5-16.5 us wall and 18.9-21.8 us
// of CPU, 32-34 allocations; etcd's raft, driven by the simplest loop
// (one goroutine stepping all three members), in 10.6-12.4 us and
// 11.9-13.7 us of CPU, 65 allocations. etcd's is lighter per entry by
// about 7 us of CPU, but it is a bare state machine: the transport, the
// log storage, snapshot transfer and membership changes are the user's
// to write. railmq's entries carry batches of messages (a group commit's
// worth), which makes a per-entry difference a fraction of a microsecond
// per message, while hashicorp/raft brings a pipelined TCP transport,
// snapshot streaming, AddVoter/RemoveServer and leadership transfer, all
// proven in Consul, Nomad and Vault. So the fit is hashicorp/raft.
package cluster
