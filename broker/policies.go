package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/vhost"
)

// Policies and operator policies through the HTTP API, stored as
// definitions (kinds defPolicy and defOpPolicy, named vhost and policy).
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
	return had, nil
}

func policyJSON(vh string, p *vhost.PolicyDef) map[string]any {
	return map[string]any{"vhost": vh, "name": p.Name, "pattern": p.Pattern, "apply-to": p.ApplyTo,
		"definition": p.Definition, "priority": p.Priority}
}

// policyAccess lets in administrators, and policymakers in the vhosts
// they have permissions in (RabbitMQ's policymaker tag).
func (s *Server) policyAccess(w http.ResponseWriter, r *http.Request, vh string) bool {
	u := apiUser(r)
	if u.HasTag("administrator") || u.HasTag("policymaker") && (vh == "" || s.reg.Grant(vh, u.Name).Permission() != nil) {
		return true
	}
	apiError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
	return false
}

func (s *Server) policiesHandlers(operator bool) (list, get, put, del http.HandlerFunc) {
	pick := func(st *vhostState) []*vhost.PolicyDef {
		pols, ops := st.v.Policies()
		if operator {
			return ops
		}
		return pols
	}
	list = func(w http.ResponseWriter, r *http.Request) {
		vh := r.PathValue("vhost")
		if !s.policyAccess(w, r, vh) {
			return
		}
		if vh != "" && s.vhostByName(vh) == nil {
			notFound(w)
			return
		}
		out := []map[string]any{}
		for _, st := range s.allVHosts() {
			if vh != "" && st.v.Name() != vh || !s.canSee(apiUser(r), st.v.Name()) {
				continue
			}
			for _, p := range pick(st) {
				out = append(out, policyJSON(st.v.Name(), p))
			}
		}
		writeList(w, r, out)
	}
	get = func(w http.ResponseWriter, r *http.Request) {
		st := s.vhostByName(r.PathValue("vhost"))
		if !s.policyAccess(w, r, r.PathValue("vhost")) {
			return
		}
		if st != nil {
			for _, p := range pick(st) {
				if p.Name == r.PathValue("name") {
					writeJSON(w, policyJSON(st.v.Name(), p))
					return
				}
			}
		}
		notFound(w)
	}
	put = func(w http.ResponseWriter, r *http.Request) {
		vh, name := r.PathValue("vhost"), r.PathValue("name")
		if !s.policyAccess(w, r, vh) {
			return
		}
		st := s.vhostByName(vh)
		if st == nil {
			notFound(w)
			return
		}
		body, ok := readBody(w, r)
		if !ok || keysMissing(w, body, "pattern", "definition") {
			return
		}
		pattern, _ := str(body, "pattern")
		applyTo, _ := str(body, "apply-to")
		prio, _ := intArg(body["priority"])
		def, _ := body["definition"].(map[string]any)
		p, err := vhost.NewPolicyDef(name, pattern, applyTo, prio, def, operator)
		if err != nil {
			var pe *vhost.PolicyError
			if errors.As(err, &pe) {
				badRequest(w, pe.Reason())
			} else {
				badRequest(w, err.Error())
			}
			return
		}
		had, err := s.putPolicy(st, operator, name, p)
		if err != nil {
			internalError(w, err)
			return
		}
		answerPut(w, !had)
	}
	del = func(w http.ResponseWriter, r *http.Request) {
		vh, name := r.PathValue("vhost"), r.PathValue("name")
		if !s.policyAccess(w, r, vh) {
			return
		}
		st := s.vhostByName(vh)
		found := false
		if st != nil {
			for _, p := range pick(st) {
				found = found || p.Name == name
			}
		}
		if !found {
			notFound(w)
			return
		}
		if _, err := s.putPolicy(st, operator, name, nil); err != nil {
			internalError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	return list, get, put, del
}
