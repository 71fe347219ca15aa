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

// policyAccess lets in administrators, and policymakers in the vhosts
// they have permissions in (RabbitMQ's policymaker tag).
func (a *API) policyAccess(w http.ResponseWriter, r *http.Request, vh string) bool {
	u := apiUser(r)
	if u.HasTag("administrator") || u.HasTag("policymaker") && (vh == "" || a.srv.Access().Grant(vh, u.Name).Permission() != nil) {
		return true
	}
	apiError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
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
	list = func(w http.ResponseWriter, r *http.Request) {
		vh := r.PathValue("vhost")
		if !a.policyAccess(w, r, vh) {
			return
		}
		if vh != "" && a.srv.LookupVHost(vh) == nil {
			notFound(w)
			return
		}
		out := []map[string]any{}
		for _, st := range a.srv.VHosts() {
			if vh != "" && st.Name() != vh || !a.canSee(apiUser(r), st.Name()) {
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
		if !a.policyAccess(w, r, r.PathValue("vhost")) {
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
		if !a.policyAccess(w, r, vh) {
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
		had, err := a.srv.PutPolicy(vh, operator, name, p)
		if err != nil {
			internalError(w, err)
			return
		}
		answerPut(w, !had)
	}
	del = func(w http.ResponseWriter, r *http.Request) {
		vh, name := r.PathValue("vhost"), r.PathValue("name")
		if !a.policyAccess(w, r, vh) {
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
