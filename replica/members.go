package replica

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// Quorum queue membership, as RabbitMQ's rabbitmq-queues add_member,
// delete_member, grow and shrink (rabbit_quorum_queue.erl): a member is a
// voter of the queue's group; every node follows every group anyway, so
// adding one promotes a follower and deleting one demotes it.

// ErrNotQuorum is a membership change asked of a queue that is not a
// quorum queue.
var ErrNotQuorum = errors.New("not a quorum queue")

// MemberError is a membership change refused, in the words of
// rabbit_quorum_queue's errors.
type MemberError struct {
	Queue, VHost, Node string
	Err                error
}

func (e *MemberError) Error() string {
	return fmt.Sprintf("quorum queue '%s' in vhost '%s', node '%s': %v", e.Queue, e.VHost, e.Node, e.Err)
}

func (e *MemberError) Unwrap() error { return e.Err }

// AddMember makes node a member of quorum queue q (on its leader).
func AddMember(q *queue.Queue, node string) error {
	return memberChange(q, node, (*cluster.Group).AddMember)
}

// DeleteMember makes node no longer a member of quorum queue q (on its
// leader); the last member stays.
func DeleteMember(q *queue.Queue, node string) error {
	return memberChange(q, node, (*cluster.Group).RemoveMember)
}

func memberChange(q *queue.Queue, node string, f func(*cluster.Group, string) error) error {
	qq, ok := q.Config().Replica.(*quorumQueue)
	if !ok {
		return ErrNotQuorum
	}
	if err := f(qq.g, node); err != nil {
		cfg := q.Config()
		return &MemberError{Queue: cfg.Name, VHost: cfg.VHost, Node: node, Err: err}
	}
	return nil
}

// MemberResult is one queue's outcome of Grow or Shrink.
type MemberResult struct {
	VHost, Queue string
	Size         int   // its members after the change
	Err          error // nil: changed
}

// Grow adds node as a member of the quorum queues this node leads whose
// vhost and name match the patterns (regular expressions, as RabbitMQ's
// grow): all of them, or with strategy "even" only those with an even
// number of members. Queues led by other nodes are grown there.
func (m *Manager) Grow(node, vhostPattern, queuePattern, strategy string) ([]MemberResult, error) {
	vre, err := regexp.Compile(vhostPattern)
	if err != nil {
		return nil, err
	}
	qre, err := regexp.Compile(queuePattern)
	if err != nil {
		return nil, err
	}
	if strategy != "all" && strategy != "even" {
		return nil, fmt.Errorf("strategy must be all or even, not %q", strategy)
	}
	var out []MemberResult
	for _, qq := range m.quorumQueues() {
		cfg := qq.q.Config()
		if !qq.g.IsLeader() || !vre.MatchString(cfg.VHost) || !qq.matchName(qre) {
			continue
		}
		vs := qq.g.Voters()
		if contains(vs, node) || (strategy == "even" && len(vs)%2 != 0) {
			continue
		}
		err := qq.g.AddMember(node)
		if err == nil {
			vs = append(vs, node)
		}
		out = append(out, MemberResult{VHost: cfg.VHost, Queue: cfg.Name, Size: len(vs), Err: err})
	}
	return out, nil
}

// Shrink removes node from the quorum queues this node leads, but where
// it is the last member.
func (m *Manager) Shrink(node string) []MemberResult {
	var out []MemberResult
	for _, qq := range m.quorumQueues() {
		cfg := qq.q.Config()
		vs := qq.g.Voters()
		if !qq.g.IsLeader() || !contains(vs, node) {
			continue
		}
		err := qq.g.RemoveMember(node)
		n := len(vs)
		if err == nil {
			n--
		}
		out = append(out, MemberResult{VHost: cfg.VHost, Queue: cfg.Name, Size: n, Err: err})
	}
	return out
}

// quorumQueues lists this node's quorum queues, by vhost and name.
func (m *Manager) quorumQueues() []*quorumQueue {
	m.quorumMu.Lock()
	qs := make([]*quorumQueue, 0, len(m.quorum))
	for qq := range m.quorum {
		qs = append(qs, qq)
	}
	m.quorumMu.Unlock()
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i].q.Config(), qs[j].q.Config()
		return a.VHost < b.VHost || (a.VHost == b.VHost && a.Name < b.Name)
	})
	return qs
}

func (qq *quorumQueue) matchName(re *regexp.Regexp) bool { return re.MatchString(qq.q.Config().Name) }

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// MemberStatus is one member of a quorum queue, as RabbitMQ's
// GET /api/queues/quorum/{vhost}/{queue}/status shows it
// (rabbit_quorum_queue:status/2).
type MemberStatus struct {
	Node         string `json:"Node Name"`
	State        string `json:"Raft State"`
	Membership   string `json:"Membership"`
	LastApplied  uint64 `json:"Last Applied"`
	CommitIndex  uint64 `json:"Commit Index"`
	Term         uint64 `json:"Term"`
	LastLogIndex uint64 `json:"Last Log Index,omitempty"`
}

// Status lists quorum queue q's members (voters, then the nodes that
// follow its log), asked of each within 300 ms; false if q is not one.
func Status(q *queue.Queue) ([]MemberStatus, bool) {
	qq, ok := q.Config().Replica.(*quorumQueue)
	if !ok {
		return nil, false
	}
	st := qq.g.Status()
	out := []MemberStatus{}
	for _, m := range qq.g.Members(300 * time.Millisecond) {
		ms := MemberStatus{Node: m.Name, State: "follower", Membership: "voter", LastApplied: m.Applied, CommitIndex: m.Commit, Term: st.Term}
		switch {
		case !m.Online:
			ms.State = "noproc"
		case m.Name == st.Leader:
			ms.State = "leader"
		}
		if !m.Voter {
			ms.Membership = "non_voter"
		}
		out = append(out, ms)
	}
	return out, true
}
