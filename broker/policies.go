package broker

import (
	"encoding/json"
	"fmt"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/vhost"
)

// Policies and operator policies, stored as definitions (kinds defPolicy
// and defOpPolicy, named vhost and policy).
const (
	defPolicy   = persist.DefPolicy
	defOpPolicy = persist.DefOpPolicy
)

type policyRec struct {
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   int            `json:"priority"`
	Definition map[string]any `json:"definition"`
}

func policyKind(operator bool) byte {
	if operator {
		return defOpPolicy
	}
	return defPolicy
}

// storedPolicies are the stored policies and operator policies, by vhost.
type storedPolicies map[string][2][]*vhost.PolicyDef

// readPolicies reads the stored policies (at start, before the vhosts are
// recovered: recoverVHosts sets each vhost's before its recovery, so that
// they are in force on its queues and exchanges before any of them
// starts, and before any delayed message is routed).
func (s *Server) readPolicies() (storedPolicies, error) {
	type entry struct {
		vh       string
		operator bool
		p        *vhost.PolicyDef
	}
	var es []entry
	err := s.store.Definitions(func(kind byte, name, val []byte) error {
		if kind != defPolicy && kind != defOpPolicy {
			return nil
		}
		parts, err := vhost.SplitDefName(name)
		if err != nil || len(parts) != 2 {
			return fmt.Errorf("policy definition %x: %v", name, err)
		}
		var r policyRec
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("policy %q in %q: %w", parts[1], parts[0], err)
		}
		p, err := vhost.NewPolicyDef(parts[1], r.Pattern, r.ApplyTo, r.Priority, r.Definition, kind == defOpPolicy)
		if err != nil {
			return fmt.Errorf("policy %q in %q: %w", parts[1], parts[0], err)
		}
		es = append(es, entry{parts[0], kind == defOpPolicy, p})
		return nil
	})
	if err != nil {
		return nil, err
	}
	by := storedPolicies{}
	for _, e := range es {
		l := by[e.vh]
		i := 0
		if e.operator {
			i = 1
		}
		l[i] = append(l[i], e.p)
		by[e.vh] = l
	}
	return by, nil
}

// putPolicy adds, replaces (p) or removes (p nil, name given) a policy
// of st; it reports whether one of that name was there.
func (s *Server) putPolicy(st *vhostState, operator bool, name string, p *vhost.PolicyDef) (bool, error) {
	if s.node != nil {
		// In a cluster every node applies it, as it is committed.
		had := false
		pols, ops := st.v.Policies()
		if operator {
			pols = ops
		}
		for _, x := range pols {
			had = had || x.Name == name
		}
		op := cluster.Op{Key: metaKey(policyKind(operator), vhost.DefName(st.v.Name(), name)), Delete: p == nil}
		if p != nil {
			op.Val, _ = json.Marshal(policyRec{Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: p.Priority, Definition: p.Definition})
		}
		return had, s.node.Write([]cluster.Op{op})
	}
	return s.putPolicyLocal(st, operator, name, p)
}

func (s *Server) putPolicyLocal(st *vhostState, operator bool, name string, p *vhost.PolicyDef) (bool, error) {
	s.vhMu.Lock() // one policy change at a time
	defer s.vhMu.Unlock()
	pols, ops := st.v.Policies()
	list := pols
	if operator {
		list = ops
	}
	next := make([]*vhost.PolicyDef, 0, len(list)+1)
	had := false
	for _, x := range list {
		if x.Name == name {
			had = true
			continue
		}
		next = append(next, x)
	}
	b := &persist.Batch{}
	key := vhost.DefName(st.v.Name(), name)
	if p != nil {
		next = append(next, p)
		v, _ := json.Marshal(policyRec{Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: p.Priority, Definition: p.Definition})
		b.PutDef(policyKind(operator), key, v)
	} else {
		b.DeleteDef(policyKind(operator), key)
	}
	if err := s.store.CommitSync(b); err != nil {
		return had, err
	}
	if operator {
		st.v.SetPolicies(pols, next)
	} else {
		st.v.SetPolicies(next, ops)
	}
	s.kickFederation()
	return had, nil
}
