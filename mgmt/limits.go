package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/railmq/railmq/auth"
)

// /api/vhost-limits and /api/user-limits: RabbitMQ's limits (per vhost
// max-connections and max-queues, per user max-connections and
// max-channels), kept in the vhosts' and users' stored records.

var (
	vhostLimitNames = []string{"max-connections", "max-queues"}
	userLimitNames  = []string{"max-connections", "max-channels"}
)

type limitsEntry struct {
	VHost string           `json:"vhost,omitempty"`
	User  string           `json:"user,omitempty"`
	Value map[string]int64 `json:"value"`
}

func (a *API) apiVHostLimits(w http.ResponseWriter, r *http.Request) {
	want := r.PathValue("vhost")
	if want != "" && !a.canSee(apiUser(r), want) {
		notAuthorised(w, reasonVHost) // RabbitMQ 3.10.8, to a management user without permissions there
		return
	}
	out := []limitsEntry{}
	for _, st := range a.srv.VHosts() {
		if len(st.Rec.Limits) > 0 && (want == "" || st.Name() == want) && a.canSee(apiUser(r), st.Name()) {
			out = append(out, limitsEntry{VHost: st.Name(), Value: st.Rec.Limits})
		}
	}
	writeList(w, r, asMaps(out))
}

func (a *API) apiUserLimits(w http.ResponseWriter, r *http.Request) {
	want := r.PathValue("user")
	out := []limitsEntry{}
	for _, u := range a.srv.Access().Users() {
		if len(u.Limits) > 0 && (want == "" || u.Name == want) {
			out = append(out, limitsEntry{User: u.Name, Value: u.Limits})
		}
	}
	writeList(w, r, asMaps(out))
}

// limitValue reads {"value": N} for limit name, answering 400 with
// RabbitMQ's reasons when it is missing or not a number.
func limitValue(w http.ResponseWriter, r *http.Request, name string, names []string, unknown string) (int64, bool) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "value") {
		return 0, false
	}
	v := body["value"]
	known := false
	for _, n := range names {
		known = known || n == name
	}
	if !known {
		badRequest(w, fmt.Sprintf(unknown, name, jsonTerm(v)))
		return 0, false
	}
	f, isNum := v.(float64)
	if !isNum || f != float64(int64(f)) {
		badRequest(w, fmt.Sprintf("Validation failed\n\n%s should be a number, actually was %s\n", name, jsonTerm(v)))
		return 0, false
	}
	return int64(f), true
}

// jsonTerm prints a JSON value as Erlang prints what the API decoded (a
// string as a binary).
func jsonTerm(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("<<%q>>", s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// withLimit is a copy of limits with name set to *n, or removed when n is
// nil (nil when none is left).
func withLimit(limits map[string]int64, name string, n *int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range limits {
		out[k] = v
	}
	if n != nil {
		out[name] = *n
	} else {
		delete(out, name)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (a *API) apiPutVHostLimit(w http.ResponseWriter, r *http.Request) {
	vh, name := r.PathValue("vhost"), r.PathValue("name")
	n, ok := limitValue(w, r, name, vhostLimitNames, "Validation failed\n\nUnrecognised terms [{<<%q>>,%s}] in limits\n")
	if !ok {
		return
	}
	a.setVHostLimit(w, vh, name, &n)
}

func (a *API) apiDeleteVHostLimit(w http.ResponseWriter, r *http.Request) {
	a.setVHostLimit(w, r.PathValue("vhost"), r.PathValue("name"), nil)
}

func (a *API) setVHostLimit(w http.ResponseWriter, vh, name string, n *int64) {
	st := a.srv.LookupVHost(vh)
	if st == nil {
		apiError(w, http.StatusNotFound, "not_found", "vhost_not_found")
		return
	}
	rec := st.Rec
	rec.Limits = withLimit(st.Rec.Limits, name, n)
	if _, err := a.srv.PutVHost(vh, rec); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) apiPutUserLimit(w http.ResponseWriter, r *http.Request) {
	user, name := r.PathValue("user"), r.PathValue("name")
	n, ok := limitValue(w, r, name, userLimitNames, "Unrecognised terms [{<<%q>>,%s}] in user-limits")
	if !ok {
		return
	}
	a.setUserLimit(w, user, name, &n)
}

func (a *API) apiDeleteUserLimit(w http.ResponseWriter, r *http.Request) {
	a.setUserLimit(w, r.PathValue("user"), r.PathValue("name"), nil)
}

func (a *API) setUserLimit(w http.ResponseWriter, user, name string, n *int64) {
	old := a.srv.Access().User(user)
	if old == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": "bad_request", "reason": []string{"no_such_user", user}})
		return
	}
	u := *old
	u.Limits = withLimit(old.Limits, name, n)
	if err := a.srv.PutAccess([]*auth.User{&u}, nil, nil); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
