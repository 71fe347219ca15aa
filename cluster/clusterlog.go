package cluster

// The cluster's own lines, naming nodes and queues as RabbitMQ's do
// ("node rabbit@b down", "queue 'q' in vhost '/': ... leader"):
//
//	quorum queue 'q' in vhost '/': leader moved to rabbit2 (term 4)
//	quorum queue 'q' in vhost '/': no leader (an election is under way)
//	node rabbit2 down      (the metadata leader stopped reaching it)
//	node rabbit2 up        (reached again)
//
// with the group, queue, node and term as fields.

import (
	"strconv"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// logLeader logs a group's change of leader (raft's LeaderObservation).
func (g *Group) logLeader(d raft.LeaderObservation, r *raft.Raft) {
	what := "quorum queue " + g.cfg.Label
	if g.cfg.Label == "" {
		what = "group " + g.cfg.ID
	}
	var term uint64
	if r != nil {
		term, _ = strconv.ParseUint(r.Stats()["term"], 10, 64)
	}
	f := []zap.Field{zap.String("raft_group", g.cfg.ID), zap.String("queue", g.cfg.Label),
		zap.String("leader", string(d.LeaderID)), zap.Uint64("term", term), zap.String("node", g.n.cfg.Name)}
	if d.LeaderID == "" {
		g.n.log().Info(what+": no leader (an election is under way)", f...)
		return
	}
	g.n.log().Info(what+": leader moved to "+string(d.LeaderID)+" (term "+strconv.FormatUint(term, 10)+")", f...)
}

// watchNodes logs the nodes the metadata leader stops and starts
// reaching (raft's failed and resumed heartbeats), and the metadata
// group's leader changes, until stop is closed.
func (n *Node) watchNodes(ch <-chan raft.Observation, stop <-chan struct{}) {
	defer n.rpcWG.Done()
	down := map[raft.ServerID]bool{}
	for {
		select {
		case <-stop:
			return
		case o := <-ch:
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				if !down[d.PeerID] {
					down[d.PeerID] = true
					n.log().Warn("node "+string(d.PeerID)+" down", zap.String("peer", string(d.PeerID)),
						zap.Time("last_contact", d.LastContact), zap.String("node", n.cfg.Name))
				}
			case raft.ResumedHeartbeatObservation:
				if down[d.PeerID] {
					delete(down, d.PeerID)
					n.log().Info("node "+string(d.PeerID)+" up", zap.String("peer", string(d.PeerID)), zap.String("node", n.cfg.Name))
				}
			case raft.LeaderObservation:
				clear(down) // a new term: the new leader watches afresh
				if d.LeaderID == "" {
					n.log().Info("cluster: no metadata leader (an election is under way)", zap.String("node", n.cfg.Name))
				} else {
					n.log().Info("cluster: metadata leader is "+string(d.LeaderID), zap.String("leader", string(d.LeaderID)), zap.String("node", n.cfg.Name))
				}
			}
		}
	}
}
