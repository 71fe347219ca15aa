package broker

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/vhost"
)

// The management API's users, vhosts and permissions, with RabbitMQ's JSON
// shapes, status codes and {"error","reason"} bodies, and its rules on
// who may use what: any management-family tag (management, policymaker,
// monitoring, administrator) may log in; monitoring and administrator see
// every connection, the others only their own; only administrators manage
// users, vhosts and permissions (rabbit_mgmt_util:is_authorized_admin).

type userKey struct{}

func apiUser(r *http.Request) *auth.User { u, _ := r.Context().Value(userKey{}).(*auth.User); return u }

func isManagementUser(u *auth.User) bool {
	return u.HasTag("management") || u.HasTag("policymaker") || u.HasTag("monitoring") || u.HasTag("administrator")
}

// seesAll reports whether u sees every connection and queue, not only
// its own (RabbitMQ: monitoring or administrator).
func seesAll(u *auth.User) bool { return u.HasTag("monitoring") || u.HasTag("administrator") }

func apiError(w http.ResponseWriter, code int, kind, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // reasons quote Erlang terms: <<"x">>
	_ = enc.Encode(map[string]string{"error": kind, "reason": reason})
}

func notFound(w http.ResponseWriter) {
	apiError(w, http.StatusNotFound, "Object Not Found", "Not Found")
}

func internalError(w http.ResponseWriter, err error) {
	apiError(w, http.StatusInternalServerError, "internal_error", err.Error())
}

// answerPut ends a PUT as RabbitMQ does: 201 when it made the object, 204
// when it updated one.
func answerPut(w http.ResponseWriter, created bool) {
	if created {
		w.WriteHeader(http.StatusCreated)
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
}

func badRequest(w http.ResponseWriter, reason string) {
	apiError(w, http.StatusBadRequest, "bad_request", reason)
}

// admin wraps a handler that only administrators may use.
func admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !apiUser(r).HasTag("administrator") {
			apiError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
			return
		}
		h(w, r)
	}
}

// pathName is a path segment, unescaped (%2F is the vhost "/"; see
// accessRouter).
func pathName(r *http.Request, key string) string { return r.PathValue(key) }

// accessRouter routes the users, vhosts and permissions paths itself, by
// the escaped path split at "/" and each segment unescaped: RabbitMQ's
// clients name the vhost "/" as %2F, which http.ServeMux, matching the
// unescaped path (and cleaning its "//"), cannot take as one segment.
// Other paths go to next.
func (s *Server) accessRouter(next http.Handler) http.Handler {
	type route struct {
		method string
		path   []string // literal segments, or {name}
		h      http.HandlerFunc
	}
	var routes []route
	add := func(method, pattern string, h http.HandlerFunc) {
		routes = append(routes, route{method, strings.Split(strings.Trim(pattern, "/"), "/"), h})
	}
	add("GET", "/api/whoami", s.apiWhoami)
	add("GET", "/api/cluster", s.apiCluster)
	add("PUT", "/api/cluster/members/{name}", admin(s.apiPutClusterMember))
	add("DELETE", "/api/cluster/members/{name}", admin(s.apiDeleteClusterMember))
	add("GET", "/api/overview", s.apiOverview)
	add("GET", "/api/channels", s.apiChannels)
	add("GET", "/api/connections", s.apiConnections)
	add("GET", "/api/connections/{name}", s.apiConnection)
	add("DELETE", "/api/connections/{name}", s.apiCloseConnection)
	add("GET", "/api/queues/{vhost}/{queue}/bindings", s.apiQueueBindings)
	add("GET", "/api/exchanges/{vhost}/{exchange}/bindings/{side}", s.apiExchangeBindings)
	add("GET", "/api/consumers", s.apiConsumers)
	add("GET", "/api/consumers/{vhost}", s.apiConsumers)
	add("GET", "/api/nodes", s.apiNodes)
	add("GET", "/api/nodes/{node}", s.apiNode)
	add("PUT", "/api/vm-memory-high-watermark", admin(s.apiSetWatermark))
	add("GET", "/api/vhosts", s.apiVHosts)
	add("GET", "/api/vhosts/{vhost}", s.apiVHost)
	add("PUT", "/api/vhosts/{vhost}", admin(s.apiPutVHost))
	add("DELETE", "/api/vhosts/{vhost}", admin(s.apiDeleteVHost))
	add("GET", "/api/users", admin(s.apiUsers))
	add("GET", "/api/users/{user}", admin(s.apiUserGet))
	add("PUT", "/api/users/{user}", admin(s.apiPutUser))
	add("DELETE", "/api/users/{user}", admin(s.apiDeleteUser))
	add("GET", "/api/permissions", admin(s.apiPermissions))
	add("GET", "/api/permissions/{vhost}/{user}", admin(s.apiPermission))
	add("PUT", "/api/permissions/{vhost}/{user}", admin(s.apiPutPermission))
	add("DELETE", "/api/permissions/{vhost}/{user}", admin(s.apiDeletePermission))
	add("GET", "/api/topic-permissions", admin(s.apiTopicPermissions))
	add("GET", "/api/topic-permissions/{vhost}/{user}", admin(s.apiTopicPermission))
	add("PUT", "/api/topic-permissions/{vhost}/{user}", admin(s.apiPutTopicPermission))
	add("DELETE", "/api/topic-permissions/{vhost}/{user}", admin(s.apiDeleteTopicPermission))
	add("GET", "/api/vhosts/{vhost}/permissions", admin(s.apiPermissions))
	add("GET", "/api/users/{user}/permissions", admin(s.apiPermissions))
	add("GET", "/api/vhosts/{vhost}/topic-permissions", admin(s.apiTopicPermissions))
	add("GET", "/api/users/{user}/topic-permissions", admin(s.apiTopicPermissions))
	add("GET", "/api/exchanges", s.apiExchanges)
	add("GET", "/api/exchanges/{vhost}", s.apiExchanges)
	add("GET", "/api/exchanges/{vhost}/{exchange}", s.apiExchange)
	add("PUT", "/api/exchanges/{vhost}/{exchange}", s.apiPutExchange)
	add("DELETE", "/api/exchanges/{vhost}/{exchange}", s.apiDeleteExchange)
	add("GET", "/api/queues", s.apiVHostQueues)
	add("GET", "/api/queues/{vhost}", s.apiVHostQueues)
	add("GET", "/api/queues/{vhost}/{queue}", s.apiQueue)
	add("PUT", "/api/queues/{vhost}/{queue}", s.apiPutQueue)
	add("DELETE", "/api/queues/{vhost}/{queue}", s.apiDeleteQueue)
	add("DELETE", "/api/queues/{vhost}/{queue}/contents", s.apiPurgeQueue)
	add("POST", "/api/exchanges/{vhost}/{exchange}/publish", s.apiPublish)
	add("POST", "/api/queues/{vhost}/{queue}/get", s.apiGet)
	add("POST", "/api/queues/{vhost}/{queue}/redrive", s.apiRedrive)
	add("POST", "/api/queues/{vhost}/{queue}/peek", s.apiPeek)
	add("GET", "/api/bindings", s.apiBindings)
	add("GET", "/api/bindings/{vhost}", s.apiBindings)
	add("GET", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}", s.apiBindingsBetween)
	add("POST", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}", s.apiPostBinding)
	add("GET", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}/{props}", s.apiBindingsBetween)
	add("DELETE", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}/{props}", s.apiDeleteBinding)
	add("GET", "/api/health/checks/alarms", s.apiHealthAlarms)
	add("GET", "/api/health/checks/local-alarms", s.apiHealthLocalAlarms)
	add("GET", "/api/health/checks/port-listener/{port}", s.apiHealthPortListener)
	add("GET", "/api/health/checks/protocol-listener/{protocol}", s.apiHealthProtocolListener)
	add("GET", "/api/health/checks/virtual-hosts", s.apiHealthVirtualHosts)
	add("GET", "/api/aliveness-test/{vhost}", s.apiAliveness)
	add("GET", "/api/definitions", admin(s.apiGetDefinitions))
	add("GET", "/api/definitions/{vhost}", admin(s.apiGetDefinitions))
	add("POST", "/api/definitions", admin(s.apiPostDefinitions))
	add("POST", "/api/definitions/{vhost}", admin(s.apiPostDefinitions))
	for _, kind := range []struct {
		path     string
		operator bool
	}{{"policies", false}, {"operator-policies", true}} {
		list, get, put, del := s.policiesHandlers(kind.operator)
		add("GET", "/api/"+kind.path, list)
		add("GET", "/api/"+kind.path+"/{vhost}", list)
		add("GET", "/api/"+kind.path+"/{vhost}/{name}", get)
		add("PUT", "/api/"+kind.path+"/{vhost}/{name}", put)
		add("DELETE", "/api/"+kind.path+"/{vhost}/{name}", del)
	}
	add("GET", "/api/vhost-limits", s.apiVHostLimits)
	add("GET", "/api/vhost-limits/{vhost}", s.apiVHostLimits)
	add("PUT", "/api/vhost-limits/{vhost}/{name}", admin(s.apiPutVHostLimit))
	add("DELETE", "/api/vhost-limits/{vhost}/{name}", admin(s.apiDeleteVHostLimit))
	add("GET", "/api/user-limits", admin(s.apiUserLimits))
	add("GET", "/api/user-limits/{user}", admin(s.apiUserLimits))
	add("PUT", "/api/user-limits/{user}/{name}", admin(s.apiPutUserLimit))
	add("DELETE", "/api/user-limits/{user}/{name}", admin(s.apiDeleteUserLimit))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		segs := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
		for i, sg := range segs {
			u, err := url.PathUnescape(sg)
			if err != nil {
				badRequest(w, "bad path")
				return
			}
			segs[i] = u
		}
		pathMatched := false
		for _, rt := range routes {
			if len(rt.path) != len(segs) {
				continue
			}
			ok := true
			for i, p := range rt.path {
				if (!strings.HasPrefix(p, "{") && p != segs[i]) || (p == "{dtype}" && segs[i] != "e" && segs[i] != "q") || (p == "{side}" && segs[i] != "source" && segs[i] != "destination") {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			pathMatched = true
			if rt.method != r.Method && !(rt.method == "GET" && r.Method == "HEAD") {
				continue
			}
			for i, p := range rt.path {
				if strings.HasPrefix(p, "{") {
					r.SetPathValue(strings.Trim(p, "{}"), segs[i])
				}
			}
			rt.h(w, r)
			return
		}
		if pathMatched {
			apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method Not Allowed")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readBody decodes a JSON object body; an empty body is an empty object.
func readBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		badRequest(w, err.Error())
		return nil, false
	}
	m := map[string]any{}
	if len(strings.TrimSpace(string(b))) == 0 {
		return m, true
	}
	if err := json.Unmarshal(b, &m); err != nil {
		badRequest(w, "not_json") // RabbitMQ's reason
		return nil, false
	}
	return m, true
}

// keysMissing answers 400 as RabbitMQ does when a body lacks keys it
// requires ("[{key_missing,configure},...]"), and reports whether it did.
func keysMissing(w http.ResponseWriter, body map[string]any, keys ...string) bool {
	var miss []string
	for _, k := range keys {
		if _, ok := body[k]; !ok {
			miss = append(miss, "{key_missing,"+k+"}")
		}
	}
	if len(miss) == 0 {
		return false
	}
	badRequest(w, "["+strings.Join(miss, ",")+"]")
	return true
}

func str(m map[string]any, k string) (string, bool) { s, ok := m[k].(string); return s, ok }

func (s *Server) apiWhoami(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	writeJSON(w, map[string]any{"name": u.Name, "tags": tagList(u.Tags)})
}

func tagList(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

func (s *Server) vhostJSON(st *vhostState) map[string]any {
	tags := tagList(st.rec.Tags)
	var ready, unacked int64
	for _, q := range st.v.Queues() {
		ready += q.Ready()
		unacked += q.Unacked()
	}
	zero := map[string]float64{"rate": 0}
	return map[string]any{"name": st.v.Name(), "description": st.rec.Description, "tags": tags,
		"default_queue_type": "undefined", "metadata": map[string]any{"description": st.rec.Description, "tags": tags},
		"tracing": false, "cluster_state": map[string]string{s.nodeName(): "running"},
		"messages": ready + unacked, "messages_details": zero, "messages_ready": ready, "messages_ready_details": zero,
		"messages_unacknowledged": unacked, "messages_unacknowledged_details": zero}
}

// canSee reports whether u may see vhost vh: administrators and
// monitoring users see all, others those they have permissions in.
func (s *Server) canSee(u *auth.User, vh string) bool {
	return seesAll(u) || s.reg.Grant(vh, u.Name).Permission() != nil
}

func (s *Server) apiVHosts(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, st := range s.allVHosts() {
		if s.canSee(apiUser(r), st.v.Name()) {
			out = append(out, s.vhostJSON(st))
		}
	}
	writeList(w, r, out)
}

func (s *Server) apiVHost(w http.ResponseWriter, r *http.Request) {
	name := pathName(r, "vhost")
	if !s.canSee(apiUser(r), name) {
		// RabbitMQ 3.10 answers so whether the vhost exists or not.
		apiError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
		return
	}
	st := s.vhostByName(name)
	if st == nil {
		notFound(w)
		return
	}
	writeJSON(w, s.vhostJSON(st))
}

func (s *Server) apiPutVHost(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := pathName(r, "vhost")
	rec := vhostRec{Tags: []string{}}
	if st := s.vhostByName(name); st != nil {
		rec = st.rec
	}
	if d, ok := str(body, "description"); ok {
		rec.Description = d
	}
	if t, ok := body["tags"]; ok {
		tags, err := auth.ParseTags(t)
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		rec.Tags = tags
	}
	created, err := s.putVHost(name, rec)
	if err == nil && created {
		// RabbitMQ grants the user who made the vhost every permission
		// in it.
		p, _ := auth.NewPermission(".*", ".*", ".*")
		b := &persist.Batch{}
		putPermDef(b, name, apiUser(r).Name, p)
		err = s.commitDefs(b, func() { s.reg.SetPermission(name, apiUser(r).Name, p) })
	}
	if err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, created)
}

func (s *Server) apiDeleteVHost(w http.ResponseWriter, r *http.Request) {
	found, err := s.deleteVHost(pathName(r, "vhost"))
	switch {
	case !found:
		notFound(w)
	case err != nil:
		internalError(w, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func userJSON(u *auth.User) map[string]any {
	algo := u.Algo
	if algo == "" {
		algo = auth.SHA256
	}
	limits := map[string]int64{}
	for k, v := range u.Limits {
		limits[k] = v
	}
	return map[string]any{"name": u.Name, "password_hash": auth.EncodeHash(u.Hash), "hashing_algorithm": algo,
		"tags": tagList(u.Tags), "limits": limits}
}

func (s *Server) apiUsers(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, u := range s.reg.Users() {
		out = append(out, userJSON(u))
	}
	writeList(w, r, out)
}

func (s *Server) apiUserGet(w http.ResponseWriter, r *http.Request) {
	u := s.reg.User(pathName(r, "user"))
	if u == nil {
		notFound(w)
		return
	}
	writeJSON(w, userJSON(u))
}

// apiPutUser creates or updates a user: password (hashed with SHA-256), or
// password_hash with hashing_algorithm, or neither (no password login);
// tags as a comma-separated string or a list.
func (s *Server) apiPutUser(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := pathName(r, "user")
	old := s.reg.User(name)
	u := &auth.User{Name: name, Algo: auth.SHA256}
	if old != nil {
		u.Limits = old.Limits
	}
	if _, ok := body["tags"]; !ok {
		badRequest(w, "tags_not_present") // RabbitMQ requires them, if only ""
		return
	}
	tags, err := auth.ParseTags(body["tags"])
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	u.Tags = tags
	pass, hasPass := str(body, "password")
	hash, hasHash := str(body, "password_hash")
	switch {
	case hasPass:
		if u.Hash, err = auth.HashPassword(auth.SHA256, pass); err != nil {
			internalError(w, err)
			return
		}
	case hasHash:
		if a, ok := str(body, "hashing_algorithm"); ok {
			u.Algo = a
		}
		if u.Hash, err = auth.DecodeHash(u.Algo, hash); err != nil {
			badRequest(w, err.Error())
			return
		}
	}
	b := &persist.Batch{}
	putUserDef(b, u)
	if !s.commitDefsOr500(w, b, func() { s.reg.PutUser(u) }) {
		return
	}
	answerPut(w, old == nil)
}

func (s *Server) apiDeleteUser(w http.ResponseWriter, r *http.Request) {
	name := pathName(r, "user")
	if s.reg.User(name) == nil {
		notFound(w)
		return
	}
	b := &persist.Batch{}
	b.DeleteDef(defUser, vhost.DefName(name))
	for _, p := range s.reg.Permissions() {
		if p.User == name {
			b.DeleteDef(defPerm, vhost.DefName(p.VHost, name))
		}
	}
	for _, t := range s.reg.TopicPermissions() {
		if t.User == name {
			b.DeleteDef(defTopicPerm, vhost.DefName(t.VHost, name, t.Exchange))
		}
	}
	if !s.commitDefsOr500(w, b, func() {
		s.reg.DeleteUser(name)
		s.closeConnsWhere(func(c *conn) bool { return c.user == name },
			amqp.Errorf(amqp.ConnectionForced, "user '%s' is deleted", name), "user deleted")
	}) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func permJSON(p auth.PermissionEntry) map[string]any {
	return map[string]any{"user": p.User, "vhost": p.VHost, "configure": p.Configure, "write": p.Write, "read": p.Read}
}

// apiPermissions lists permissions: all, or a vhost's, or a user's (by
// the path's {vhost} or {user}).
func (s *Server) apiPermissions(w http.ResponseWriter, r *http.Request) {
	vh, user := r.PathValue("vhost"), r.PathValue("user")
	if !s.pathObjectExists(w, vh, user) {
		return
	}
	out := []map[string]any{}
	for _, p := range s.reg.Permissions() {
		if (vh == "" || p.VHost == vh) && (user == "" || p.User == user) {
			out = append(out, permJSON(p))
		}
	}
	writeJSON(w, out)
}

// pathObjectExists answers 404 for a vhost or user the path names that
// does not exist.
func (s *Server) pathObjectExists(w http.ResponseWriter, vh, user string) bool {
	if (vh != "" && s.vhostByName(vh) == nil) || (user != "" && s.reg.User(user) == nil) {
		notFound(w)
		return false
	}
	return true
}

func (s *Server) apiPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	p := s.reg.Grant(vh, user).Permission()
	if p == nil || s.vhostByName(vh) == nil {
		notFound(w)
		return
	}
	writeJSON(w, permJSON(auth.PermissionEntry{VHost: vh, User: user, Permission: p}))
}

// userAndVHost checks that both exist, answering 400 as RabbitMQ when
// either does not.
func (s *Server) userAndVHost(w http.ResponseWriter, vh, user string) bool {
	if s.vhostByName(vh) == nil || s.reg.User(user) == nil {
		badRequest(w, "vhost_or_user_not_found")
		return false
	}
	return true
}

func (s *Server) apiPutPermission(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if !s.userAndVHost(w, vh, user) || keysMissing(w, body, "configure", "write", "read") {
		return
	}
	c, _ := str(body, "configure")
	wr, _ := str(body, "write")
	rd, _ := str(body, "read")
	p, err := auth.NewPermission(c, wr, rd)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	had := s.reg.Grant(vh, user).Permission() != nil
	b := &persist.Batch{}
	putPermDef(b, vh, user, p)
	if !s.commitDefsOr500(w, b, func() { s.reg.SetPermission(vh, user, p) }) {
		return
	}
	answerPut(w, !had)
}

func (s *Server) apiDeletePermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if s.reg.Grant(vh, user).Permission() == nil {
		notFound(w)
		return
	}
	b := &persist.Batch{}
	b.DeleteDef(defPerm, vhost.DefName(vh, user))
	if !s.commitDefsOr500(w, b, func() { s.reg.ClearPermission(vh, user) }) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func topicJSON(t auth.TopicPermissionEntry) map[string]any {
	return map[string]any{"user": t.User, "vhost": t.VHost, "exchange": t.Exchange, "write": t.Write, "read": t.Read}
}

func (s *Server) apiTopicPermissions(w http.ResponseWriter, r *http.Request) {
	vh, user := r.PathValue("vhost"), r.PathValue("user")
	if !s.pathObjectExists(w, vh, user) {
		return
	}
	out := []map[string]any{}
	for _, t := range s.reg.TopicPermissions() {
		if (vh == "" || t.VHost == vh) && (user == "" || t.User == user) {
			out = append(out, topicJSON(t))
		}
	}
	writeJSON(w, out)
}

func (s *Server) apiTopicPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	out := []map[string]any{}
	for _, t := range s.reg.TopicPermissions() {
		if t.VHost == vh && t.User == user {
			out = append(out, topicJSON(t))
		}
	}
	if len(out) == 0 {
		notFound(w)
		return
	}
	writeJSON(w, out)
}

func (s *Server) apiPutTopicPermission(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if !s.userAndVHost(w, vh, user) || keysMissing(w, body, "exchange", "write", "read") {
		return
	}
	ex, _ := str(body, "exchange")
	wr, _ := str(body, "write")
	rd, _ := str(body, "read")
	tp, err := auth.NewTopicPermission(ex, wr, rd, user, vh)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	had := s.reg.Grant(vh, user).TopicChecked(ex)
	b := &persist.Batch{}
	putTopicDef(b, vh, user, tp)
	if !s.commitDefsOr500(w, b, func() { s.reg.SetTopicPermission(vh, user, tp) }) {
		return
	}
	answerPut(w, !had)
}

func (s *Server) apiDeleteTopicPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	b := &persist.Batch{}
	n := 0
	for _, t := range s.reg.TopicPermissions() {
		if t.VHost == vh && t.User == user {
			b.DeleteDef(defTopicPerm, vhost.DefName(vh, user, t.Exchange))
			n++
		}
	}
	if n == 0 {
		notFound(w)
		return
	}
	if !s.commitDefsOr500(w, b, func() { s.reg.ClearTopicPermission(vh, user, "") }) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// withUser authenticates a request by HTTP basic auth against the
// broker's users (loopback-only users from loopback only) and lets in
// management users.
func (s *Server) withUser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		var u *auth.User
		if ok {
			u, ok = s.login(name, pass, remoteAddr(r))
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
			apiError(w, http.StatusUnauthorized, "not_authorized", "Login failed")
			return
		}
		if !isManagementUser(u) {
			apiError(w, http.StatusUnauthorized, "not_authorised", "Not management user")
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

func remoteAddr(r *http.Request) net.Addr {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return &net.TCPAddr{IP: net.ParseIP(host)}
}
