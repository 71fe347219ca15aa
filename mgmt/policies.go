package mgmt

import (
	"errors"
	"net/http"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/vhost"
)

// /api/policies and /api/operator-policies: RabbitMQ's policies and
// operator policies, stored by the broker (broker.Server.PutPolicy).

func policyJSON(vh string, p *vhost.PolicyDef) map[string]any {
	return map[string]any{"vhost": vh, "name": p.Name, "pattern": p.Pattern, "apply-to": p.ApplyTo,
		"definition": p.Definition, "priority": p.Priority}
}

// policyAccess lets in those who may read or change one policy (a
// path's {name}): administrators, and for policies (not operator
// policies) policymakers in the vhosts they have permissions in. RabbitMQ
// 3.10.8 keeps operator policies to administrators: a policymaker is
// answered 401 "Not administrator user" on every one of their named
// routes.
func (a *API) policyAccess(w http.ResponseWriter, r *http.Request, vh string, operator bool) bool {
	u := apiUser(r)
	switch {
	case u.HasTag("administrator"):
		return true
	case operator:
		notAuthorised(w, reasonAdmin)
	case !u.HasTag("policymaker"):
		notAuthorised(w, reasonObject)
	case !a.vhostAccess(u, vh):
		notAuthorised(w, reasonVHost)
	default:
		return true
	}
	return false
}

func (a *API) policiesHandlers(operator bool) (list, get, put, del http.HandlerFunc) {
	pick := func(st *broker.VHostInfo) []*vhost.PolicyDef {
		pols, ops := st.Policies()
		if operator {
			return ops
		}
		return pols
	}
	// Any management user lists the policies (of either kind) of the
	// vhosts they have permissions in, as RabbitMQ 3.10.8 does.
	list = func(w http.ResponseWriter, r *http.Request) {
		vh := r.PathValue("vhost")
		if vh != "" && !a.vhostAccess(apiUser(r), vh) {
			notAuthorised(w, reasonVHost)
			return
		}
		if vh != "" && a.srv.LookupVHost(vh) == nil {
			notFound(w)
			return
		}
		out := []map[string]any{}
		for _, st := range a.srv.VHosts() {
			if vh != "" && st.Name() != vh || !a.vhostAccess(apiUser(r), st.Name()) {
				continue
			}
			for _, p := range pick(st) {
				out = append(out, policyJSON(st.Name(), p))
			}
		}
		writeList(w, r, out)
	}
	get = func(w http.ResponseWriter, r *http.Request) {
		st := a.srv.LookupVHost(r.PathValue("vhost"))
		if !a.policyAccess(w, r, r.PathValue("vhost"), operator) {
			return
		}
		if st != nil {
			for _, p := range pick(st) {
				if p.Name == r.PathValue("name") {
					writeJSON(w, policyJSON(st.Name(), p))
					return
				}
			}
		}
		notFound(w)
	}
	put = func(w http.ResponseWriter, r *http.Request) {
		vh, name := r.PathValue("vhost"), r.PathValue("name")
		if !a.policyAccess(w, r, vh, operator) {
			return
		}
		st := a.srv.LookupVHost(vh)
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
		warnMirroring(a.log, vh, name, def)
		had, err := a.srv.PutPolicy(vh, operator, name, p)
		if err != nil {
			internalError(w, err)
			return
		}
		answerPut(w, !had)
	}
	del = func(w http.ResponseWriter, r *http.Request) {
		vh, name := r.PathValue("vhost"), r.PathValue("name")
		if !a.policyAccess(w, r, vh, operator) {
			return
		}
		st := a.srv.LookupVHost(vh)
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
		if _, err := a.srv.PutPolicy(vh, operator, name, nil); err != nil {
			internalError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	return list, get, put, del
}
