package vhost

import (
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// Streams (x-queue-type stream): append-only logs that consumers read
// from offsets of their choosing. Their definitions are kept as quorum
// queues' are (quorum.go, quorumlocal.go): in the vhost's store on a
// standalone node, in the metadata store in a cluster, with an id naming
// the stream's storage and the members holding it. The vhost's Quorum
// (replica.Manager) starts them: StartStream.

// StreamStarter is a Quorum that starts streams.
type StreamStarter interface {
	// StartStream makes this node's handle of a stream from cfg: its
	// log, under the id, held by the members voters.
	StartStream(cfg queue.Config, voters []string, id string) (*queue.Queue, error)
}

// declareStream declares a stream (d is not passive; r nil: a standalone
// node).
func (v *VHost) declareStream(d QueueDecl, r Replicator, defaults queue.Config) (*queue.Queue, error) {
	v.mu.RLock()
	q, qm := v.queues[d.Name], v.quorum
	v.mu.RUnlock()
	if q != nil {
		return q, v.queueEquivalent(q, d)
	}
	if _, ok := qm.(StreamStarter); !ok {
		return nil, invalidArg("x-queue-type", d.Name, v.name, "\"unsupported queue type 'stream'\"")
	}
	if err := v.checkStreamDecl(d); err != nil {
		return nil, err
	}
	size := -1 // every node, RabbitMQ's default (rabbit_stream_queue.erl v4.0.0 initial_cluster_size)
	if n, ok := amqp.Int(d.Args["x-initial-cluster-size"]); ok {
		size = int(n) // checked: at least 1
	}
	id, voters := qm.NewGroup(size)
	def := amqp.Table{"durable": true, "auto_delete": false, "arguments": orEmpty(d.Args),
		"voters": strings.Join(voters, ","), "id": id}
	if r == nil {
		return v.declareQuorumLocal(d, encodeDef(def), defaults) // the same steps (quorumlocal.go)
	}
	if err := r.Replicate(persist.DefQueue, DefName(v.name, d.Name), encodeDef(def), false); err != nil {
		return nil, err
	}
	v.mu.RLock()
	q = v.queues[d.Name]
	v.mu.RUnlock()
	if q == nil {
		return nil, v.noQueue(d.Name)
	}
	return q, nil
}

// startReplicated starts the handle of a quorum queue or a stream, as
// its definition's arguments say.
func startReplicated(qm Quorum, cfg queue.Config, voters []string, id string) (*queue.Queue, error) {
	if IsStream(cfg.Args) {
		return qm.(StreamStarter).StartStream(cfg, voters, id)
	}
	return qm.Start(cfg, voters, id)
}
