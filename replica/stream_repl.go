package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/stream"
)

// A stream in a cluster: its records go through a Raft group of its own
// (cluster.StartStreamGroup), whose voters are the stream's members
// (x-initial-cluster-size) and which every other node follows as a
// non-voter, so that every node holds the whole log and serves the
// stream's consumers from its own copy (the stream queue's consumers
// read sq.log whatever the node). A publish on any node is an item
// proposed to the group (forwarded to its leader from a follower) and
// confirmed once committed: a quorum of the voters has it fsynced in its
// Raft log. Every member, the leader included, applies each committed
// entry by appending its records to its own log, tagged with the entry's
// index (AppendTagged); an entry its log already holds (applied again
// after a restart: the log's LastTag) is skipped, so each record is in
// each copy once, at the same offset everywhere (offsets follow the
// Raft log's order).
//
// replStream is the stream queue's appender (streamQueue.app) and the
// group's state machine (cluster.StreamMachine); raft's FSM goroutine
// calls the latter's methods, the log's writer goroutine the append
// callbacks. applied and durable are atomics: no lock.

type replStream struct {
	sq  *streamQueue
	g   *cluster.StreamGroup
	log *stream.Log
	// applied is the last entry handed to the log (at start: the last
	// it holds); durable the last the log has fsynced.
	applied, durable atomic.Uint64
}

// replicate makes sq's appender its group's: this node's member of the
// stream's group, started (or resumed), bootstrapped if this node
// declared the stream.
func (m *Manager) replicate(sq *streamQueue, voters []string, id string, mine bool) error {
	r := &replStream{sq: sq, log: sq.log}
	last := sq.log.LastTag()
	r.applied.Store(last)
	r.durable.Store(last)
	g, err := m.node.StartStreamGroup(cluster.StreamConfig{ID: id, Voters: voters, Bootstrap: mine, Machine: r})
	if err != nil {
		return err
	}
	r.g = g
	sq.app = r
	return nil
}

// Append proposes each record to the group; done learns the outcome of
// the last (the others' came before it: one publisher's items reach the
// log in order), or the first failure. The offset is not known here.
func (r *replStream) Append(recs []stream.Record, done func(first uint64, err error)) {
	if len(recs) == 0 {
		done(0, nil)
		return
	}
	left := atomic.Int32{}
	left.Store(int32(len(recs)))
	var failed atomic.Bool
	for i := range recs {
		r.g.Append(encodeItem(&recs[i]), func(err error) {
			if err != nil && failed.CompareAndSwap(false, true) {
				done(0, err)
			}
			if left.Add(-1) == 0 && !failed.Load() {
				done(0, nil)
			}
		})
	}
}

// An item is a record: its timestamp (8 bytes), its filter value's
// length (2 bytes), the value, the data.
func encodeItem(rec *stream.Record) []byte {
	f := rec.Filter[:min(len(rec.Filter), math.MaxUint16)] // as the log keeps it
	b := make([]byte, 0, 10+len(f)+len(rec.Data))
	b = binary.BigEndian.AppendUint64(b, uint64(rec.Timestamp))
	b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
	b = append(b, f...)
	return append(b, rec.Data...)
}

var errCorruptItem = errors.New("replicated stream: corrupt item")

func decodeItem(p []byte) (stream.Record, error) {
	if len(p) < 10 {
		return stream.Record{}, errCorruptItem
	}
	ts, n := int64(binary.BigEndian.Uint64(p)), int(binary.BigEndian.Uint16(p[8:]))
	if len(p) < 10+n {
		return stream.Record{}, errCorruptItem
	}
	return stream.Record{Timestamp: ts, Filter: string(p[10 : 10+n]), Data: p[10+n:]}, nil
}

// Applied: cluster.StreamMachine.
func (r *replStream) Applied() uint64 { return r.applied.Load() }

// Apply appends a committed entry's records to this node's log, tagged
// with its index (cluster.StreamMachine).
func (r *replStream) Apply(index uint64, items [][]byte) {
	recs := make([]stream.Record, 0, len(items))
	for _, it := range items {
		rec, err := decodeItem(it)
		if err != nil {
			r.sq.m.log.Error("replicated stream entry does not decode", zap.String("queue", r.name()), zap.Uint64("index", index), zap.Error(err))
			continue
		}
		recs = append(recs, rec)
	}
	r.applied.Store(index)
	r.log.AppendTagged(recs, index, func(_ uint64, err error) {
		if err != nil {
			if !errors.Is(err, stream.ErrClosed) {
				r.sq.m.log.Error("replicated stream append failed", zap.String("queue", r.name()), zap.Uint64("index", index), zap.Error(err))
			}
			return
		}
		for d := r.durable.Load(); d < index && !r.durable.CompareAndSwap(d, index); d = r.durable.Load() {
		}
	})
}

// syncTimeout bounds Sync: raft's snapshot waits for it, on its FSM
// goroutine; past it the snapshot fails, and raft tries again later.
const syncTimeout = 30 * time.Second

// Sync waits until the log holds every applied entry durably
// (cluster.StreamMachine: raft takes a snapshot next).
func (r *replStream) Sync() error {
	want := r.applied.Load()
	deadline := time.Now().Add(syncTimeout)
	for r.durable.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("replicated stream %q: entry %d not yet durable", r.name(), want)
		}
		// The log's Changed closes as records become durable; the append's
		// callback may run just after it.
		select {
		case <-r.log.Changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Position is how far the log goes durably (cluster.StreamMachine).
func (r *replStream) Position() uint64 {
	_, next := r.log.Bounds()
	return next
}

// Read returns the records the log holds from offset from on, about max
// bytes of them, as items (cluster.StreamMachine: a member catching up
// asks the leader).
func (r *replStream) Read(from uint64, max int) ([][]byte, error) {
	first, next := r.log.Bounds()
	if from < first {
		return nil, fmt.Errorf("offset %d no longer kept (the stream starts at %d)", from, first)
	}
	if from >= next {
		return nil, nil
	}
	rd, err := r.log.NewReader(stream.Spec{Kind: stream.Offset, Offset: from}, nil)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var items [][]byte
	size := 0
	for size < max {
		e, ok, err := rd.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if len(items) == 0 && e.Offset != from {
			return nil, fmt.Errorf("offset %d no longer kept (read from %d)", from, e.Offset)
		}
		rec := stream.Record{Timestamp: e.Timestamp, Filter: e.Filter, Data: e.Data}
		it := encodeItem(&rec)
		items = append(items, it)
		size += len(it)
	}
	return items, nil
}

// Fill appends records fetched from the leader and waits until they
// are durable (cluster.StreamMachine). Tagged 0: if this node stops
// before the fill is done, its log's last tag does not claim entries it
// lacks, and the next start fills again.
func (r *replStream) Fill(items [][]byte) error {
	recs := make([]stream.Record, 0, len(items))
	for _, it := range items {
		rec, err := decodeItem(it)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	done := make(chan error, 1)
	r.log.AppendTagged(recs, 0, func(_ uint64, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-time.After(syncTimeout):
		return fmt.Errorf("replicated stream %q: a fill not durable within %v", r.name(), syncTimeout)
	}
}

func (r *replStream) name() string {
	if r.sq.q == nil {
		return ""
	}
	return r.sq.q.Name()
}

// tick, once a second on the group's leader, has the nodes that joined
// the cluster follow the stream (and those that left it leave).
func (r *replStream) tick() {
	if added, removed := r.g.Group().SyncMembers(); len(added)+len(removed) > 0 {
		r.sq.m.log.Info("stream members follow the cluster", zap.String("queue", r.name()),
			zap.Strings("added", added), zap.Strings("removed", removed))
	}
}

// describe adds a replicated stream's leader, members and the ones
// online to its management view (as a quorum queue's: describe).
func (r *replStream) describe(m map[string]any) {
	st := r.g.Group().Status()
	m["leader"], m["node"] = nullIfEmpty(st.Leader), nullIfEmpty(st.Leader)
	members, online := []string{}, []string{}
	for _, mb := range st.Members {
		if mb.Voter {
			members = append(members, mb.Name)
		}
		if mb.Name == st.Leader || mb.Name == r.sq.m.node.Name() {
			online = append(online, mb.Name)
		}
	}
	m["members"], m["online"] = members, online
}

// streamRepl is a stream's replicated appender, nil on a standalone node.
func streamRepl(sq *streamQueue) *replStream {
	r, _ := sq.app.(*replStream)
	return r
}

// closeRepl stops this node's member of the stream's group before its
// log closes (shutdown: its state stays) or is deleted (removed).
func closeRepl(sq *streamQueue, remove bool) {
	r := streamRepl(sq)
	if r == nil {
		return
	}
	var err error
	if remove {
		err = r.g.Remove()
	} else {
		err = r.g.Close()
	}
	if err != nil {
		sq.m.log.Warn("stream group not stopped", zap.String("queue", r.name()), zap.Error(err))
	}
}
