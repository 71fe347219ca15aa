package cluster

import (
	"bytes"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// QueueFSM is a quorum queue's Fifo as hashicorp/raft's state machine:
// raft applies committed log entries to it in order, on every member, and
// takes and restores its snapshots. Consensus, replication, elections and
// snapshots are the library's; the queue's semantics are Fifo's.
type QueueFSM struct {
	mu sync.Mutex // guards f: raft's FSM goroutine applies, others read
	f  *Fifo
	// OnApply, if set, is called on raft's FSM goroutine with each
	// command and its effects, in log order, on every member.
	OnApply func(index uint64, c *Command, e *Effects)
	// OnRestore, if set, is called on raft's FSM goroutine after the
	// state was replaced by a snapshot (the entries it covers were not
	// applied here one by one).
	OnRestore func()
}

// NewQueueFSM returns the state machine of an empty queue.
func NewQueueFSM(cfg FifoConfig) *QueueFSM { return &QueueFSM{f: NewFifo(cfg)} }

// Apply applies a committed entry; its result (Effects, or an error for
// an entry that does not decode) is the ApplyFuture's Response.
//
// An entry the state already reflects is skipped. hashicorp/raft
// restores whatever snapshot a leader sends, even one older than what
// this member applied (a snapshot sent again after a timed-out answer),
// and then applies the entries after it once more; applying them twice
// would hand the same messages out twice, as first deliveries.
func (q *QueueFSM) Apply(l *raft.Log) any {
	c, err := DecodeCommand(l.Data)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if l.Index <= q.f.index {
		q.mu.Unlock()
		return Effects{}
	}
	e := q.f.Apply(c)
	q.f.index = l.Index
	q.mu.Unlock()
	if q.OnApply != nil {
		q.OnApply(l.Index, &c, &e)
	}
	return e
}

// Snapshot copies the state out; raft persists it while applying goes on.
func (q *QueueFSM) Snapshot() (raft.FSMSnapshot, error) {
	var buf bytes.Buffer
	q.mu.Lock()
	err := q.f.Snapshot(&buf)
	q.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return fsmSnapshot(buf.Bytes()), nil
}

// Restore replaces the state with a snapshot's, unless this member has
// applied further already (see Apply): then the state stays as it is.
func (q *QueueFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	f, err := RestoreFifo(r)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if f.index < q.f.index {
		q.mu.Unlock()
		return nil
	}
	f.setDedupKey(q.f.dedupKey) // not in the image (fifo_dedup.go)
	f.restoreGroups(q.f.grp)    // rebuilt from the messages (fifo_groups.go)
	q.f = f
	q.mu.Unlock()
	if q.OnRestore != nil {
		q.OnRestore()
	}
	return nil
}

// Index is the Raft log index of the last entry the state reflects.
func (q *QueueFSM) Index() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.f.index
}

// View runs fn on the state as this member has applied it; fn must not
// keep what it reads beyond the call, nor call back into q.
func (q *QueueFSM) View(fn func(f *Fifo)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	fn(q.f)
}

// Stats are the queue's depth as this member has applied it.
func (q *QueueFSM) Stats() (messages, ready int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.f.Len(), q.f.Ready(), q.f.Bytes()
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}
