// Package cluster holds what railmq replicates with Raft (issue [12], in
// progress): the quorum queue's state machine (Fifo, RabbitMQ's
// rabbit_fifo) and its adapter to hashicorp/raft (QueueFSM). Consensus,
// log replication, elections and snapshots are hashicorp/raft's; this
// package writes the state machines on top. It imports amqp-free pure Go
// and hashicorp/raft; it must not import broker, channel or vhost (they
// will import it).
package cluster
