package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// A quorum queue's members: the voters of its group (every other node of
// the cluster follows the log as a non-voter, so that it serves the
// queue's consumers). AddMember makes a node a voter, RemoveMember makes
// it a non-voter again; both on the group's leader, as RabbitMQ's
// rabbit_quorum_queue:add_member/delete_member, which ask the leader.

// membershipTimeout bounds a membership change (RabbitMQ's ?ADD_MEMBER_TIMEOUT
// in rabbit_quorum_queue is 5 s; a raft configuration change here commits
// one entry, so it is quick or the group has no quorum).
const membershipTimeout = 30 * time.Second

// ErrAlreadyMember, ErrNotMember, ErrLastMember and ErrUnknownNode are a
// membership change's refusals.
var (
	ErrAlreadyMember = errors.New("already a member")
	ErrNotMember     = errors.New("not a member")
	ErrLastMember    = errors.New("cannot remove the last member")
	ErrUnknownNode   = errors.New("no such node in the cluster")
)

// NotLeaderError is a membership change asked of a member that does not
// lead the group.
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "the queue has no leader"
	}
	return fmt.Sprintf("not the queue's leader; its leader is on node '%s'", e.Leader)
}

// Voters are the group's voting members, by name.
func (g *Group) Voters() []string {
	f := g.r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	return out
}

func (g *Group) leaderCheck() error {
	if g.r.State() != raft.Leader {
		return &NotLeaderError{Leader: g.Leader()}
	}
	return nil
}

// AddMember makes node a voting member of the group; on the leader.
func (g *Group) AddMember(node string) error {
	if err := g.leaderCheck(); err != nil {
		return err
	}
	addr := g.n.Addrs()[node]
	if addr == "" {
		return ErrUnknownNode
	}
	for _, v := range g.Voters() {
		if v == node {
			return ErrAlreadyMember
		}
	}
	return g.r.AddVoter(raft.ServerID(node), raft.ServerAddress(addr), 0, membershipTimeout).Error()
}

// RemoveMember makes node a non-voter of the group (it goes on following
// the log, as every node of the cluster does); on the leader. The last
// voter stays.
func (g *Group) RemoveMember(node string) error {
	if err := g.leaderCheck(); err != nil {
		return err
	}
	vs := g.Voters()
	found := false
	for _, v := range vs {
		found = found || v == node
	}
	switch {
	case !found:
		return ErrNotMember
	case len(vs) == 1:
		return ErrLastMember
	}
	return g.r.DemoteVoter(raft.ServerID(node), 0, membershipTimeout).Error()
}
