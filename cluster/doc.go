// Package cluster holds what railmq replicates with Raft (issue [12], in
// progress): the quorum queue's state machine (Fifo, RabbitMQ's
// rabbit_fifo) and its adapter to hashicorp/raft (QueueFSM). Consensus,
// log replication, elections and snapshots are hashicorp/raft's; this
// package writes the state machines on top. It must not import broker,
// channel or vhost (they will import it).
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
