package cluster

// A quorum queue's Raft transport, watched: the leader's commit index as
// each append brings it (Group.Lag, Group.CatchUpTarget), and raft kept
// from backing off for long from a follower it could not reach.

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// rejoinGap is a silence from the leader (no append, no heartbeat: they
// come every 50-200 ms) after which a member sets a catch-up target: far
// below the leader's downAfter, above a slow round's wait.
const rejoinGap = 2 * time.Second

// watchedTransport is raft's transport with the leader's commit index
// noted from each append and heartbeat it brings, before raft sees it
// (see Lag), and the commit index the first append after a silence
// brings (see CatchUpTarget).
//
// It also keeps raft from backing off for long from a follower it could
// not reach (see linkWait).
type watchedTransport struct {
	innerTransport
	rpcs         chan raft.RPC
	done         chan struct{}
	closeOnce    sync.Once
	leaderCommit atomic.Uint64
	heard        atomic.Int64 // monoNanos of the last append or heartbeat
	silent       atomic.Bool  // heard after a silence; the next commit index is the target
	rejoinCommit atomic.Uint64

	linkMu      sync.Mutex
	down        map[raft.ServerAddress]chan struct{} // closed when the peer answers again
	quit        chan struct{}                        // closed by release
	releaseOnce sync.Once
}

// linkWait is how long a failed append or snapshot to a peer waits for
// the peer to answer again before raft learns of the failure.
//
// Raft's replication to a follower backs off after each failure in a
// row, doubling up to 10 s; a follower cut off for a few seconds, where
// each try fails at once (a closed port, a reset connection), ran up
// enough failures that the leader sent it nothing for up to 10 s after
// it was back, while it answered heartbeats. Had the other follower
// failed then, the queue would have stood still that long
// (TestClusterFaults: a partition of one follower, healed, then of the
// other: 10 s without a confirm). So a failed append waits until the
// peer answers a heartbeat again (raft retries them every half
// HeartbeatTimeout whatever the failures) before it fails: failures
// count at most one per linkWait, as when a dial times out, and
// replication resumes within a heartbeat of the peer's return.
const linkWait = 10 * time.Second

// monoStart anchors monoNanos, the monotonic clock in nanoseconds.
var monoStart = time.Now()

func monoNanos() int64 { return int64(time.Since(monoStart)) }

func storeMax(v *atomic.Uint64, x uint64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// innerTransport is what a group's raft transport is under the watch:
// raft's TCP transport over the Mux in a cluster, its in-memory one on a
// standalone node (local.go).
type innerTransport interface {
	raft.Transport
	raft.WithClose
}

func watchTransport(t innerTransport) *watchedTransport {
	w := &watchedTransport{innerTransport: t, rpcs: make(chan raft.RPC), done: make(chan struct{}),
		down: map[raft.ServerAddress]chan struct{}{}, quit: make(chan struct{})}
	go w.forward()
	return w
}

// AppendEntries sends an append or a heartbeat; a failed append waits
// for the peer to answer again (see linkWait) before raft learns of the
// failure. It is not sent again from here: raft builds a new one, with
// the commit index of the time (a member back from a silence takes the
// first append's as its catch-up target, which one built before the
// silence would set too low: TestClusterFaults saw acked messages
// delivered again, unflagged, when the failed append was sent again).
func (w *watchedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := w.innerTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		w.answered(target)
		return nil
	}
	if !isHeartbeat(args) {
		w.awaitPeer(target)
	}
	return err
}

// InstallSnapshot sends a snapshot; if that fails, it waits for the peer
// to answer again (see linkWait) before saying so.
func (w *watchedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := w.innerTransport.InstallSnapshot(id, target, args, resp, data)
	if err == nil {
		w.answered(target)
		return nil
	}
	w.awaitPeer(target)
	return err
}

// isHeartbeat reports whether an append is raft's heartbeat: term and
// leader only.
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// answered ends the waits for target.
func (w *watchedTransport) answered(target raft.ServerAddress) {
	w.linkMu.Lock()
	if ch := w.down[target]; ch != nil {
		close(ch)
		delete(w.down, target)
	}
	w.linkMu.Unlock()
}

// awaitPeer waits until target answers again, for at most linkWait.
func (w *watchedTransport) awaitPeer(target raft.ServerAddress) {
	w.linkMu.Lock()
	ch := w.down[target]
	if ch == nil {
		ch = make(chan struct{})
		w.down[target] = ch
	}
	w.linkMu.Unlock()
	t := time.NewTimer(linkWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-w.quit:
	}
}

// release ends every wait for a peer, and those to come: raft's Shutdown
// waits for its replication, which may be waiting here.
func (w *watchedTransport) release() { w.releaseOnce.Do(func() { close(w.quit) }) }

func (w *watchedTransport) forward() {
	in := w.innerTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			w.note(rpc)
			select {
			case w.rpcs <- rpc:
			case <-w.done:
				return
			}
		case <-w.done:
			return
		}
	}
}

func (w *watchedTransport) note(rpc raft.RPC) {
	a, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if !ok {
		return
	}
	now := monoNanos()
	if prev := w.heard.Swap(now); prev != 0 && now-prev >= int64(rejoinGap) {
		w.silent.Store(true)
	}
	if a.LeaderCommitIndex == 0 {
		return // a heartbeat: no commit index
	}
	storeMax(&w.leaderCommit, a.LeaderCommitIndex)
	if w.silent.Load() && w.silent.CompareAndSwap(true, false) {
		storeMax(&w.rejoinCommit, a.LeaderCommitIndex)
	}
}

// Consumer is the RPCs raft handles, once noted.
func (w *watchedTransport) Consumer() <-chan raft.RPC { return w.rpcs }

// SetHeartbeatHandler notes a heartbeat's commit index before raft's
// fast path handles it.
func (w *watchedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		w.innerTransport.SetHeartbeatHandler(nil)
		return
	}
	w.innerTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		w.note(rpc)
		cb(rpc)
	})
}

// Close stops the forwarding and closes raft's transport.
func (w *watchedTransport) Close() error {
	w.closeOnce.Do(func() { close(w.done) })
	return w.innerTransport.Close()
}
