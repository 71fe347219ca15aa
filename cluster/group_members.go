package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A group's members: how far each has applied the log, and following
// the cluster's membership.

// MemberStatus is how far one member has applied the group's log.
type MemberStatus struct {
	Name            string
	Voter, Online   bool
	Applied, Commit uint64
}

// Members asks every member how far it has applied the log (each one
// within timeout; one that does not answer is not online).
func (g *Group) Members(timeout time.Duration) []MemberStatus {
	addrs := map[string]string{}
	var out []MemberStatus
	if f := g.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			addrs[string(s.ID)] = string(s.Address)
			out = append(out, MemberStatus{Name: string(s.ID), Voter: s.Suffrage == raft.Voter})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		m := &out[i]
		if m.Name == g.n.cfg.Name {
			m.Online, m.Applied, m.Commit = true, g.r.AppliedIndex(), g.r.CommitIndex()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, c, err := g.n.memberIndex(addrs[m.Name], g.cfg.ID, timeout)
			m.Online, m.Applied, m.Commit = err == nil, a, c
		}()
	}
	wg.Wait()
	return out
}

// SyncMembers, on the leader, makes the group follow the cluster's
// membership: a node that joined the cluster follows the log as a
// non-voter (so that it serves the queue too); a node that left it
// leaves the group. It reports what it changed.
func (g *Group) SyncMembers() (added, removed []string) {
	if g.r.State() != raft.Leader {
		return nil, nil
	}
	f := g.r.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	addrs := g.n.Addrs()
	if len(addrs) == 0 {
		return nil, nil
	}
	have := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		have[string(s.ID)] = true
		if _, ok := addrs[string(s.ID)]; !ok && string(s.ID) != g.n.cfg.Name {
			if g.r.RemoveServer(s.ID, 0, 5*time.Second).Error() == nil {
				removed = append(removed, string(s.ID))
			}
		}
	}
	for name, a := range addrs {
		if !have[name] {
			if g.r.AddNonvoter(raft.ServerID(name), raft.ServerAddress(a), 0, 5*time.Second).Error() == nil {
				added = append(added, name)
			}
		}
	}
	return added, removed
}
