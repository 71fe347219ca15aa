package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
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
// holds no records, only how far its member's storage went (the entry's
// index and the storage's position, once Sync made every applied item
// durable), so that raft may drop the entries before it; it keeps
// streamTrailing entries after it. A member further behind than that
// (down for long, or started with an empty data dir on a busy stream) is
// given the snapshot instead, and restoring it fetches the items it
// misses, up to the snapshot's position, from the group's leader
// (StreamMachine.Read there, Fill here) before it applies any later
// entry. What the leader's storage no longer holds (dropped by its
// retention) cannot be fetched: the restore fails, and raft sends the
// snapshot again later (docs/streams.md, In a cluster).

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
	// Position is how many items the storage holds durably, from the
	// stream's start (its next offset).
	Position() uint64
	// Read returns items the storage holds from position from on, about
	// max bytes of them (at least one, if it holds from); an error if it
	// no longer holds from (its retention dropped it).
	Read(from uint64, max int) ([][]byte, error)
	// Fill appends items fetched from another member at the storage's
	// position, and returns once they are durable.
	Fill(items [][]byte) error
}

// StreamConfig describes a replicated stream's group.
type StreamConfig struct {
	ID        string   // unique in the cluster, as GroupConfig's
	Voters    []string // x-initial-cluster-size members; other nodes follow as non-voters
	Bootstrap bool     // this node makes the group (it declared the stream)
	Machine   StreamMachine
}

// Snapshots of a stream group: taken every streamSnapshotEvery entries
// (checked every streamSnapshotInterval), keeping streamTrailing entries
// behind each (a member restarted, or cut off, within that many entries
// catches up from the leader's log; one further behind, from its
// storage: catchUp). Variables for tests.
var (
	streamSnapshotEvery    uint64 = 8192
	streamTrailing         uint64 = 65536
	streamSnapshotInterval        = 10 * time.Second
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
		machine:  f, snapEvery: streamSnapshotEvery, trailing: streamTrailing, snapInterval: streamSnapshotInterval})
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
	// owed is what a restore at start-up found missing (index,
	// position), fetched before the next entry is applied (raft's FSM
	// goroutine's).
	owed *[2]uint64
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
	if err := f.settleOwed(); err != nil {
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

// Snapshot: once the storage holds every applied item durably, the
// index and position it holds them to.
func (f *streamFSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.m.Sync(); err != nil {
		return nil, err
	}
	return fsmSnapshot(Enc(nil).U64(f.m.Applied()).U64(f.m.Position())), nil
}

// Restore: a snapshot's member held the items to its position; this
// storage holds them too (its own snapshot, at a start), or it fetches
// those it misses from the leader first.
func (f *streamFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	index, pos := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if f.m.Position() >= pos {
		return nil
	}
	if f.g.raft() == nil {
		// Starting (raft restores its last snapshot in NewRaft): fetched
		// before the first entry is applied, once the group runs.
		f.owed = &[2]uint64{index, pos}
		return nil
	}
	return f.catchUp(index, pos)
}

// settleOwed fetches what a restore at start-up found missing, before
// an entry is applied; it tries until it succeeds or the group stops.
func (f *streamFSM) settleOwed() error {
	for f.owed != nil {
		err := f.catchUp(f.owed[0], f.owed[1])
		if err == nil {
			f.owed = nil
			break
		}
		f.g.n.log().Error("stream member behind its snapshot cannot catch up", zap.String("group", f.g.cfg.ID), zap.Error(err))
		select {
		case <-f.g.stop:
			return ErrGroupClosed
		case <-time.After(time.Second):
		}
	}
	return nil
}

// catchUpTimeout bounds a restore's fetching: past it the restore fails
// and raft tries again later.
const catchUpTimeout = 2 * time.Minute

// fetchBytes is about how much one fetch brings.
const fetchBytes = 1 << 20

// catchUp fetches items from the group's leader until the storage holds
// them up to pos (raft's FSM goroutine: no entry is applied meanwhile).
func (f *streamFSM) catchUp(index, pos uint64) error {
	deadline := time.Now().Add(catchUpTimeout)
	n := f.g.n
	for at := f.m.Position(); at < pos; at = f.m.Position() {
		var addr raft.ServerAddress
		if r := f.g.raft(); r != nil {
			addr, _ = r.LeaderWithID()
		}
		var items [][]byte
		var err error
		if addr == "" {
			err = ErrNoLeader
		} else {
			items, err = n.fetchStream(string(addr), f.g.cfg.ID, at, fetchBytes)
		}
		if err == nil && len(items) == 0 {
			err = fmt.Errorf("cluster: the leader has no items from %d on", at)
		}
		if err == nil {
			err = f.m.Fill(items[:min(uint64(len(items)), pos-at)])
		}
		if err != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster: stream %s behind the snapshot at %d (position %d of %d): %w", f.g.cfg.ID, index, at, pos, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// fetchStream asks the node at addr for a stream group's items from
// position from on (a kindStreamRead request: the group's id, from and
// max; its answer statusOK and the items, or statusError and why).
func (n *Node) fetchStream(addr, id string, from uint64, max int) ([][]byte, error) {
	c, err := n.groupLinks.dial(addr, n.groupLayer, groupDialTimeout, n.groupLinkConfig())
	if err != nil {
		return nil, err
	}
	p, err := c.CallWait(kindStreamRead, Enc(nil).Str(id).Uvarint(from).Uvarint(uint64(max)), n.timeout())
	if err != nil {
		return nil, err
	}
	d := NewDec(p)
	switch st := d.U8(); {
	case d.Err() != nil:
		return nil, d.Err()
	case st == statusUnknownGroup:
		return nil, errUnknownGroup
	case st != statusOK:
		return nil, errors.New(string(d.Rest()))
	}
	k := d.Count(1)
	items := make([][]byte, 0, k)
	for i := 0; i < k && d.Err() == nil; i++ {
		items = append(items, d.Bytes())
	}
	return items, d.End()
}

// readStream answers a kindStreamRead request (on the link's reader: a
// read of at most about fetchBytes, for a member catching up).
func (g *Group) readStream(d *Dec) answer {
	from, max := d.Uvarint(), d.Uvarint()
	f, ok := g.cfg.machine.(*streamFSM)
	switch {
	case d.End() != nil:
		return answer{status: statusError, extra: Enc(nil).Raw([]byte(ErrMalformed.Error()))}
	case !ok:
		return answer{status: statusUnknownGroup}
	}
	items, err := f.m.Read(from, int(min(max, fetchBytes)))
	if err != nil {
		return answer{status: statusError, extra: Enc(nil).Raw([]byte(err.Error()))}
	}
	out := Enc(nil).Uvarint(uint64(len(items)))
	for _, it := range items {
		out = out.Bytes(it)
	}
	return answer{extra: out}
}
