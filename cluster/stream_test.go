package cluster

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// memStream is a test's stream storage: the items in the order applied,
// each with its entry's index. It outlives its node (a restart keeps
// what it holds, as the stream's files do).
type memStream struct {
	mu    sync.Mutex
	items [][]byte
	tags  []uint64
	last  uint64
	fills int // Fill calls: items fetched from the leader
}

func (m *memStream) Applied() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

func (m *memStream) Apply(index uint64, items [][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range items {
		m.items = append(m.items, it)
		m.tags = append(m.tags, index)
	}
	m.last = index
}

func (m *memStream) Sync() error { return nil }

func (m *memStream) Position() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(len(m.items))
}

func (m *memStream) Read(from uint64, max int) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for i, size := from, 0; i < uint64(len(m.items)) && size < max; i++ {
		out = append(out, m.items[i])
		size += len(m.items[i])
	}
	return out, nil
}

func (m *memStream) Fill(items [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fills++
	for _, it := range items {
		m.items = append(m.items, it)
		m.tags = append(m.tags, 0)
	}
	return nil
}

func (m *memStream) got() ([]string, []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, len(m.items))
	for i, it := range m.items {
		out[i] = string(it)
	}
	return out, append([]uint64(nil), m.tags...)
}

// appendAll appends items from g, concurrently, and fails on any refusal.
func appendAll(t *testing.T, g *StreamGroup, prefix string, n int) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		g.Append([]byte(fmt.Sprintf("%s-%d", prefix, i)), func(err error) { errs <- err })
	}
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("append %s: %v", prefix, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("append %s: no answer", prefix)
		}
	}
}

// sameEverywhere waits until every storage holds want items, then checks
// that they hold the same ones, in the same order, each once, with the
// entries' indexes rising.
func sameEverywhere(t *testing.T, ms []*memStream, want int) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, func() bool {
		for _, m := range ms {
			if items, _ := m.got(); len(items) < want {
				return false
			}
		}
		return true
	}, "every member applies every item")
	ref, _ := ms[0].got()
	for k, m := range ms {
		items, tags := m.got()
		if len(items) != want {
			t.Fatalf("member %d holds %d items, want %d", k, len(items), want)
		}
		seen := map[string]bool{}
		for i := range items {
			if items[i] != ref[i] {
				t.Fatalf("member %d item %d is %q, member 0's %q", k, i, items[i], ref[i])
			}
			if seen[items[i]] {
				t.Fatalf("member %d holds %q twice", k, items[i])
			}
			seen[items[i]] = true
			if i > 0 && tags[i] < tags[i-1] && tags[i] != 0 && tags[i-1] != 0 {
				t.Fatalf("member %d: item %d from entry %d after entry %d", k, i, tags[i], tags[i-1])
			}
		}
	}
}

// TestStreamGroupReplicates: a stream's group on three nodes; items
// appended on the leader and on a follower (forwarded) are confirmed
// once committed and every member's storage holds all of them, in one
// order, once each. The group's leader's node stopped, appends go on
// through the new leader; started again on its data (its storage kept),
// it catches up, and the entries it applied before are not applied twice.
func TestStreamGroupReplicates(t *testing.T) {
	nodes, cfgs := startNodes(t, 3)
	nodeLeader(t, nodes)
	ms := []*memStream{{}, {}, {}}
	gs := make([]*StreamGroup, 3)
	voters := []string{"rabbit0", "rabbit1", "rabbit2"}
	start := func(i int) {
		g, err := nodes[i].StartStreamGroup(StreamConfig{ID: "s1", Voters: voters, Bootstrap: i == 0, Machine: ms[i]})
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	for i := range nodes {
		start(i)
	}
	poll.Eventually(t, 10*time.Second, func() bool { return gs[0].Group().Leader() != "" }, "no stream leader")
	li := -1
	for i := range nodes {
		if gs[i].Group().IsLeader() {
			li = i
		}
	}
	if li < 0 {
		t.Fatal("no member leads")
	}
	fi := (li + 1) % 3
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); appendAll(t, gs[li], "leader", 300) }()
	go func() { defer wg.Done(); appendAll(t, gs[fi], "follower", 300) }()
	wg.Wait()
	sameEverywhere(t, ms, 600)

	// The leader's node goes away; a survivor appends through the new
	// leader.
	if err := nodes[li].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[li] = nil
	poll.Eventually(t, 15*time.Second, func() bool {
		l := gs[fi].Group().Leader()
		return l != "" && l != fmt.Sprintf("rabbit%d", li)
	}, "no new stream leader")
	appendAll(t, gs[fi], "after", 200)
	var alive []*memStream
	for i := range ms {
		if i != li {
			alive = append(alive, ms[i])
		}
	}
	sameEverywhere(t, alive, 800)

	// Back on its data: what it applied before is skipped, the rest comes.
	nd, err := StartNode(cfgs[li])
	if err != nil {
		t.Fatal(err)
	}
	nodes[li] = nd
	start(li)
	appendAll(t, gs[fi], "back", 50)
	sameEverywhere(t, ms, 850)
	for _, m := range ms {
		if m.fills != 0 {
			t.Fatal("a member within the trailing log fetched items from the leader")
		}
	}
}

// TestStreamGroupCatchesUpPastSnapshot: with snapshots every few
// entries and few kept behind them, a member stopped while the others
// went on is given a snapshot when it comes back, and fetches the items
// it misses from the leader before applying later entries: its storage
// ends the same as the others', each item once, in order.
func TestStreamGroupCatchesUpPastSnapshot(t *testing.T) {
	every, trailing, interval := streamSnapshotEvery, streamTrailing, streamSnapshotInterval
	streamSnapshotEvery, streamTrailing, streamSnapshotInterval = 16, 4, 100*time.Millisecond
	defer func() { streamSnapshotEvery, streamTrailing, streamSnapshotInterval = every, trailing, interval }()
	nodes, cfgs := startNodes(t, 3)
	nodeLeader(t, nodes)
	ms := []*memStream{{}, {}, {}}
	gs := make([]*StreamGroup, 3)
	voters := []string{"rabbit0", "rabbit1", "rabbit2"}
	start := func(i int) {
		g, err := nodes[i].StartStreamGroup(StreamConfig{ID: "s2", Voters: voters, Bootstrap: i == 0, Machine: ms[i]})
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	for i := range nodes {
		start(i)
	}
	poll.Eventually(t, 10*time.Second, func() bool { return gs[0].Group().Leader() != "" }, "no stream leader")
	appendAll(t, gs[0], "early", 20)
	sameEverywhere(t, ms, 20)
	li := -1
	for i := range gs {
		if gs[i].Group().IsLeader() {
			li = i
		}
	}
	away := (li + 1) % 3
	if err := nodes[away].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[away] = nil
	// One entry per item (each waited for), far past the trailing log.
	for i := range 200 {
		appendAll(t, gs[li], fmt.Sprintf("late%d", i), 1)
	}
	poll.Eventually(t, 30*time.Second, func() bool {
		first, err := gs[li].g.logs.FirstIndex()
		return err == nil && first > 100
	}, "the leader's raft log is not compacted")
	nd, err := StartNode(cfgs[away])
	if err != nil {
		t.Fatal(err)
	}
	nodes[away] = nd
	start(away)
	appendAll(t, gs[li], "after", 10)
	sameEverywhere(t, ms, 230)
	if ms[away].fills == 0 {
		t.Fatal("the member back fetched nothing: it did not catch up past a snapshot")
	}
}

// TestStreamFSMSnapshot: a snapshot is taken once the storage holds
// every applied item durably and records how far it holds them; a
// member restoring one that it holds as far fetches nothing.
func TestStreamFSMSnapshot(t *testing.T) {
	synced := 0
	m := &syncCounting{memStream: &memStream{}, synced: &synced}
	f := &streamFSM{m: m}
	m.Apply(7, [][]byte{[]byte("a")})
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if synced != 1 {
		t.Fatalf("snapshot taken after %d syncs, want 1", synced)
	}
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	buf := &sink.Buffer
	if at, pos := binary.BigEndian.Uint64(buf.Bytes()), binary.BigEndian.Uint64(buf.Bytes()[8:]); at != 7 || pos != 1 {
		t.Fatalf("snapshot at index %d position %d, want 7 and 1", at, pos)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if m.fills != 0 || f.owed != nil {
		t.Fatal("a member holding the snapshot's items fetches")
	}
}

type syncCounting struct {
	*memStream
	synced *int
}

func (s *syncCounting) Sync() error { *s.synced++; return nil }
