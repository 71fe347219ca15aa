package broker

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/persist"
)

// Limits, as RabbitMQ's: per vhost max-connections and max-queues, per
// user max-connections and max-channels. Absent means none; a negative
// value too; 0 allows none.

var (
	vhostLimitNames = []string{"max-connections", "max-queues"}
	userLimitNames  = []string{"max-connections", "max-channels"}
)

// limitOf is limit name in m, or -1 (none).
func limitOf(m map[string]int64, name string) int64 {
	if v, ok := m[name]; ok && v >= 0 {
		return v
	}
	return -1
}

// openLimits refuses connection.open, as rabbit_reader does and in its
// order, when the vhost or the user is at its max-connections.
func (s *Server) openLimits(st *vhostState, u *auth.User) *amqp.Error {
	vl, ul := limitOf(st.rec.Limits, "max-connections"), limitOf(u.Limits, "max-connections")
	if vl < 0 && ul < 0 {
		return nil
	}
	var nv, nu int64
	for _, c := range s.openConns() {
		if c.vh == st.v {
			nv++
		}
		if c.user == u.Name {
			nu++
		}
	}
	if vl >= 0 && nv >= vl {
		return amqp.Errorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", st.v.Name(), u.Name, vl)
	}
	if ul >= 0 && nu >= ul {
		return amqp.Errorf(amqp.NotAllowed, "connection refused for user '%s': user connection limit (%d) is reached", u.Name, ul)
	}
	return nil
}

// channelLimit refuses channel.open when the user has max-channels open
// over all its connections (RabbitMQ: a connection error, 530).
func (c *conn) channelLimit() error {
	u := c.authUser
	if u == nil {
		return nil
	}
	cur := c.srv.reg.User(u.Name) // limits set since the connection opened count
	if cur == nil {
		return nil
	}
	l := limitOf(cur.Limits, "max-channels")
	if l < 0 {
		return nil
	}
	var n int64
	for _, o := range c.srv.openConns() {
		if o.user == u.Name {
			n += int64(o.nchan.Load())
		}
	}
	if n >= l {
		return amqp.Errorf(amqp.NotAllowed, "number of channels opened for user '%s' has reached the maximum allowed user limit of (%d)", u.Name, l)
	}
	return nil
}

// --- the HTTP API: /api/vhost-limits, /api/user-limits -------------------

type limitsEntry struct {
	VHost string           `json:"vhost,omitempty"`
	User  string           `json:"user,omitempty"`
	Value map[string]int64 `json:"value"`
}

func (s *Server) apiVHostLimits(w http.ResponseWriter, r *http.Request) {
	want := r.PathValue("vhost")
	out := []limitsEntry{}
	for _, st := range s.allVHosts() {
		if len(st.rec.Limits) > 0 && (want == "" || st.v.Name() == want) && s.canSee(apiUser(r), st.v.Name()) {
			out = append(out, limitsEntry{VHost: st.v.Name(), Value: st.rec.Limits})
		}
	}
	writeJSON(w, out)
}

func (s *Server) apiUserLimits(w http.ResponseWriter, r *http.Request) {
	want := r.PathValue("user")
	out := []limitsEntry{}
	for _, u := range s.reg.Users() {
		if len(u.Limits) > 0 && (want == "" || u.Name == want) {
			out = append(out, limitsEntry{User: u.Name, Value: u.Limits})
		}
	}
	writeJSON(w, out)
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

func (s *Server) apiPutVHostLimit(w http.ResponseWriter, r *http.Request) {
	vh, name := r.PathValue("vhost"), r.PathValue("name")
	n, ok := limitValue(w, r, name, vhostLimitNames, "Validation failed\n\nUnrecognised terms [{<<%q>>,%s}] in limits\n")
	if !ok {
		return
	}
	s.setVHostLimit(w, vh, name, &n)
}

func (s *Server) apiDeleteVHostLimit(w http.ResponseWriter, r *http.Request) {
	s.setVHostLimit(w, r.PathValue("vhost"), r.PathValue("name"), nil)
}

func (s *Server) setVHostLimit(w http.ResponseWriter, vh, name string, n *int64) {
	st := s.vhostByName(vh)
	if st == nil {
		apiError(w, http.StatusNotFound, "not_found", "vhost_not_found")
		return
	}
	rec := st.rec
	rec.Limits = withLimit(st.rec.Limits, name, n)
	if _, err := s.putVHost(vh, rec); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiPutUserLimit(w http.ResponseWriter, r *http.Request) {
	user, name := r.PathValue("user"), r.PathValue("name")
	n, ok := limitValue(w, r, name, userLimitNames, "Unrecognised terms [{<<%q>>,%s}] in user-limits")
	if !ok {
		return
	}
	s.setUserLimit(w, user, name, &n)
}

func (s *Server) apiDeleteUserLimit(w http.ResponseWriter, r *http.Request) {
	s.setUserLimit(w, r.PathValue("user"), r.PathValue("name"), nil)
}

func (s *Server) setUserLimit(w http.ResponseWriter, user, name string, n *int64) {
	old := s.reg.User(user)
	if old == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": "bad_request", "reason": []string{"no_such_user", user}})
		return
	}
	u := *old
	u.Limits = withLimit(old.Limits, name, n)
	b := &persist.Batch{}
	putUserDef(b, &u)
	if !s.commitDefsOr500(w, b, func() { s.reg.PutUser(&u) }) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
