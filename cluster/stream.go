package cluster

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/hashicorp/raft"
)

// A replicated stream is a Raft group of its own, as a quorum queue is
// (group.go): the same members (its voters, x-initial-cluster-size of
// them; every other node a non-voter that holds the log too, so that
// every node serves the stream's consumers from its own copy), the same
// transport, log store, forwarding of a follower's appends to the leader
// and batching by load (Group.Submit). Only the state machine differs: a
// stream's is its storage on each member (StreamMachine, the caller's),
// which an entry's items are appended to, tagged with the entry's index.
//
// An item is confirmed (Append's done, nil) once its entry is committed:
// a quorum of the voters has it fsynced in its Raft log, and the leader
// has applied it. An entry whose fate is unknown (the leader lost its
// leadership with the entry appended and not known committed, or a
// forwarded round's answer never came) fails with ErrUnknownOutcome or
// raft.ErrLeadershipLost and is not sent again (it may be committed by
// the next leader: sent again, it could be appended twice); one that
// never reached a leader is sent again until the write timeout.
//
// The log's entries are what a member missing them needs. A member
// restarted replays its Raft log from its last snapshot and skips the
// entries its storage already holds (StreamMachine.Applied). A snapshot
// holds no records, only the index its member's storage holds durably
// (Sync is waited for first), so that raft may drop the entries before
// it; it keeps streamTrailing entries after it, and a member further
// behind than that when it comes back (down for long, or started with an
// empty data dir on a busy stream) is given the snapshot, which it cannot
// fill its storage from: StreamMachine.Behind tells it.

// StreamMachine is a replicated stream's storage on one member. Its
// methods run on raft's FSM goroutine.
type StreamMachine interface {
	// Applied is the index of the last entry whose items the storage
	// holds or has queued (after a restart: holds durably).
	Applied() uint64
	// Apply appends the items of the committed entry at index, in order,
	// after every earlier one's; it queues the write and does not wait
	// for it. The items are the entry's: Apply may keep them.
	Apply(index uint64, items [][]byte)
	// Sync waits until every item given to Apply is durable: raft is
	// about to take a snapshot, after which it may drop those entries.
	Sync() error
	// Behind: a snapshot was installed whose member held the items of
	// entries up to index, further than this storage holds.
	Behind(index uint64)
}

// StreamConfig describes a replicated stream's group.
type StreamConfig struct {
	ID        string   // unique in the cluster, as GroupConfig's
	Voters    []string // x-initial-cluster-size members; other nodes follow as non-voters
	Bootstrap bool     // this node makes the group (it declared the stream)
	Machine   StreamMachine
}

// Snapshots of a stream group: taken every streamSnapshotEvery entries,
// keeping streamTrailing entries behind each (a member restarted, or cut
// off, within that many entries catches up from the leader's log).
const (
	streamSnapshotEvery = 8192
	streamTrailing      = 65536
)

// StreamGroup is this node's member of a replicated stream's group.
type StreamGroup struct {
	g   *Group
	fsm *streamFSM
}

// StartStreamGroup starts (or resumes, after a restart) this node's
// member of a stream's group.
func (n *Node) StartStreamGroup(cfg StreamConfig) (*StreamGroup, error) {
	if cfg.Machine == nil {
		return nil, errors.New("cluster: a stream group needs its storage")
	}
	f := &streamFSM{m: cfg.Machine}
	g, err := n.StartGroup(GroupConfig{ID: cfg.ID, Voters: cfg.Voters, Bootstrap: cfg.Bootstrap,
		OnCreate: func(g *Group) { f.g = g },
		machine:  f, snapEvery: streamSnapshotEvery, trailing: streamTrailing})
	if err != nil {
		return nil, err
	}
	return &StreamGroup{g: g, fsm: f}, nil
}

// Append proposes item; done learns, on another goroutine, nil once it is
// committed (a quorum has it on disk, the leader applied it), or why not.
// Items appended from one goroutine reach the log in that order.
func (s *StreamGroup) Append(item []byte, done func(error)) {
	var cb func(Effects, error)
	if done != nil {
		cb = func(_ Effects, err error) { done(err) }
	}
	s.g.Submit(Enqueue(0, Message{Body: item}), cb)
}

// Group is the stream's group (its status, members, membership).
func (s *StreamGroup) Group() *Group { return s.g }

// Close stops this node's member; its state stays for the next start.
func (s *StreamGroup) Close() error { return s.g.Close() }

// Remove stops the member and deletes its Raft state (the stream was
// deleted; the storage is the caller's).
func (s *StreamGroup) Remove() error { return s.g.Remove() }

// streamFSM applies a stream group's log to its member's storage.
type streamFSM struct {
	m StreamMachine
	g *Group // set before raft starts (OnCreate)
}

// Apply hands the entry's items to the storage, unless it holds them
// already (an entry applied again after a restart, or after a snapshot
// older than what it holds). Its Response is one Effects per command of
// a batch, as a round's submitters are answered from (finish).
func (f *streamFSM) Apply(l *raft.Log) any {
	c, err := DecodeCommand(l.Data)
	if err != nil {
		return err
	}
	var items [][]byte
	var out Effects
	switch c.Kind {
	case cmdEnqueue:
		items = [][]byte{c.Msg.Body}
	case cmdBatch:
		out.Results = make([]Effects, len(c.Cmds))
		for i := range c.Cmds {
			if c.Cmds[i].Kind == cmdEnqueue {
				items = append(items, c.Cmds[i].Msg.Body)
			}
		}
	}
	if len(items) > 0 && l.Index > f.m.Applied() {
		f.m.Apply(l.Index, items)
	}
	f.nudge(l.Index, &c)
	return out
}

// nudge, on the leader, makes the followers learn at once of the commit
// of the last entry appended so far (as a quorum queue's leader does for
// a consumer on another node: Group.Nudge): their consumers read what
// their own node applied, and raft would tell them only at its next idle
// append (groupCommitTimeout).
func (f *streamFSM) nudge(index uint64, c *Command) {
	r := f.g.raft()
	if r == nil || IsNudge(c) || r.State() != raft.Leader || r.LastIndex() > index {
		return
	}
	f.g.Submit(Tick(0), nil)
}

// Snapshot: once the storage holds every applied item durably, the index
// it holds them to.
func (f *streamFSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.m.Sync(); err != nil {
		return nil, err
	}
	return fsmSnapshot(binary.BigEndian.AppendUint64(nil, f.m.Applied())), nil
}

// Restore: a snapshot's member held the items to its index; this
// storage holds them too (its own snapshot, at a start), or it is told
// it is behind.
func (f *streamFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	if at := binary.BigEndian.Uint64(b[:]); at > f.m.Applied() {
		f.m.Behind(at)
	}
	return nil
}
