package mgmt

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
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
			notAuthorised(w, reasonAdmin)
			return
		}
		h(w, r)
	}
}

// monitor wraps a handler that only monitoring users and administrators
// may use (RabbitMQ's is_authorized_monitor: /api/nodes).
func monitor(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !seesAll(apiUser(r)) {
			notAuthorised(w, "Not monitor user")
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
func (a *API) accessRouter(next http.Handler) http.Handler {
	routes := a.routes()
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

// route is one of the API's routes: a method, the path's segments
// (literal, or {name}) and its handler.
type route struct {
	method string
	path   []string // literal segments, or {name}
	h      http.HandlerFunc
}

// routes are every route of the API (authz_test.go checks each one's
// access rules against RabbitMQ's).
func (a *API) routes() []route {
	var routes []route
	add := func(method, pattern string, h http.HandlerFunc) {
		routes = append(routes, route{method, strings.Split(strings.Trim(pattern, "/"), "/"), h})
	}
	add("GET", "/api/whoami", a.apiWhoami)
	add("GET", "/api/cluster", monitor(a.apiCluster)) // what /api/nodes shows
	add("PUT", "/api/cluster/members/{name}", admin(a.apiPutClusterMember))
	add("DELETE", "/api/cluster/members/{name}", admin(a.apiDeleteClusterMember))
	add("POST", "/api/queues/quorum/{vhost}/{queue}/replicas/add", admin(a.apiQuorumAddMember))
	add("DELETE", "/api/queues/quorum/{vhost}/{queue}/replicas/delete", admin(a.apiQuorumDeleteMember))
	add("POST", "/api/queues/quorum/replicas/on/{node}/grow", admin(a.apiQuorumGrow))
	add("DELETE", "/api/queues/quorum/replicas/on/{node}/shrink", admin(a.apiQuorumShrink))
	add("GET", "/api/queues/quorum/{vhost}/{queue}/status", a.apiQuorumStatus)
	add("GET", "/api/overview", a.apiOverview)
	add("GET", "/api/channels", a.apiChannels)
	add("GET", "/api/connections", a.apiConnections)
	add("GET", "/api/connections/{name}", a.apiConnection)
	add("GET", "/api/connections/{name}/channels", a.apiConnectionChannels)
	add("GET", "/api/channels/{name}", a.apiChannel)
	add("GET", "/api/vhosts/{vhost}/connections", a.apiVHostConnections)
	add("GET", "/api/vhosts/{vhost}/channels", a.apiVHostChannels)
	add("DELETE", "/api/connections/{name}", a.apiCloseConnection)
	add("GET", "/api/queues/{vhost}/{queue}/bindings", a.apiQueueBindings)
	add("GET", "/api/exchanges/{vhost}/{exchange}/bindings/{side}", a.apiExchangeBindings)
	add("GET", "/api/consumers", a.apiConsumers)
	add("GET", "/api/consumers/{vhost}", a.apiConsumers)
	add("GET", "/api/nodes", monitor(a.apiNodes))
	add("GET", "/api/nodes/{node}", monitor(a.apiNode))
	add("PUT", "/api/vm-memory-high-watermark", admin(a.apiSetWatermark))
	add("GET", "/api/vhosts", a.apiVHosts)
	add("GET", "/api/vhosts/{vhost}", admin(a.apiVHost))
	add("PUT", "/api/vhosts/{vhost}", admin(a.apiPutVHost))
	add("DELETE", "/api/vhosts/{vhost}", admin(a.apiDeleteVHost))
	add("GET", "/api/users", admin(a.apiUsers))
	add("GET", "/api/users/{user}", admin(a.apiUserGet))
	add("PUT", "/api/users/{user}", admin(a.apiPutUser))
	add("DELETE", "/api/users/{user}", admin(a.apiDeleteUser))
	add("GET", "/api/permissions", admin(a.apiPermissions))
	add("GET", "/api/permissions/{vhost}/{user}", admin(a.apiPermission))
	add("PUT", "/api/permissions/{vhost}/{user}", admin(a.apiPutPermission))
	add("DELETE", "/api/permissions/{vhost}/{user}", admin(a.apiDeletePermission))
	add("GET", "/api/topic-permissions", admin(a.apiTopicPermissions))
	add("GET", "/api/topic-permissions/{vhost}/{user}", admin(a.apiTopicPermission))
	add("PUT", "/api/topic-permissions/{vhost}/{user}", admin(a.apiPutTopicPermission))
	add("DELETE", "/api/topic-permissions/{vhost}/{user}", admin(a.apiDeleteTopicPermission))
	add("GET", "/api/vhosts/{vhost}/permissions", admin(a.apiPermissions))
	add("GET", "/api/users/{user}/permissions", admin(a.apiPermissions))
	add("GET", "/api/vhosts/{vhost}/topic-permissions", admin(a.apiTopicPermissions))
	add("GET", "/api/users/{user}/topic-permissions", admin(a.apiTopicPermissions))
	add("GET", "/api/exchanges", a.apiExchanges)
	add("GET", "/api/exchanges/{vhost}", a.apiExchanges)
	add("GET", "/api/exchanges/{vhost}/{exchange}", a.apiExchange)
	add("PUT", "/api/exchanges/{vhost}/{exchange}", a.apiPutExchange)
	add("DELETE", "/api/exchanges/{vhost}/{exchange}", a.apiDeleteExchange)
	add("GET", "/api/queues", a.apiVHostQueues)
	add("GET", "/api/queues/{vhost}", a.apiVHostQueues)
	add("GET", "/api/queues/{vhost}/{queue}", a.apiQueue)
	add("PUT", "/api/queues/{vhost}/{queue}", a.apiPutQueue)
	add("DELETE", "/api/queues/{vhost}/{queue}", a.apiDeleteQueue)
	add("DELETE", "/api/queues/{vhost}/{queue}/contents", a.apiPurgeQueue)
	add("POST", "/api/exchanges/{vhost}/{exchange}/publish", a.apiPublish)
	add("POST", "/api/queues/{vhost}/{queue}/get", a.apiGet)
	add("POST", "/api/queues/{vhost}/{queue}/redrive", a.apiRedrive)
	add("POST", "/api/queues/{vhost}/{queue}/peek", a.apiPeek)
	add("GET", "/api/bindings", a.apiBindings)
	add("GET", "/api/bindings/{vhost}", a.apiBindings)
	add("GET", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}", a.apiBindingsBetween)
	add("POST", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}", a.apiPostBinding)
	add("GET", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}/{props}", a.apiBindingsBetween)
	add("DELETE", "/api/bindings/{vhost}/e/{exchange}/{dtype}/{dest}/{props}", a.apiDeleteBinding)
	add("GET", "/api/health/checks/alarms", a.apiHealthAlarms)
	add("GET", "/api/health/checks/local-alarms", a.apiHealthLocalAlarms)
	add("GET", "/api/health/checks/port-listener/{port}", a.apiHealthPortListener)
	add("GET", "/api/health/checks/protocol-listener/{protocol}", a.apiHealthProtocolListener)
	add("GET", "/api/health/checks/virtual-hosts", a.apiHealthVirtualHosts)
	add("GET", "/api/aliveness-test/{vhost}", a.apiAliveness)
	add("GET", "/api/definitions", admin(a.apiGetDefinitions))
	add("GET", "/api/definitions/{vhost}", admin(a.apiGetDefinitions))
	add("POST", "/api/definitions", admin(a.apiPostDefinitions))
	add("POST", "/api/definitions/{vhost}", admin(a.apiPostDefinitions))
	for _, kind := range []struct {
		path     string
		operator bool
	}{{"policies", false}, {"operator-policies", true}} {
		list, get, put, del := a.policiesHandlers(kind.operator)
		add("GET", "/api/"+kind.path, list)
		add("GET", "/api/"+kind.path+"/{vhost}", list)
		add("GET", "/api/"+kind.path+"/{vhost}/{name}", get)
		add("PUT", "/api/"+kind.path+"/{vhost}/{name}", put)
		add("DELETE", "/api/"+kind.path+"/{vhost}/{name}", del)
	}
	add("GET", "/api/vhost-limits", a.apiVHostLimits)
	add("GET", "/api/vhost-limits/{vhost}", a.apiVHostLimits)
	add("PUT", "/api/vhost-limits/{vhost}/{name}", admin(a.apiPutVHostLimit))
	add("DELETE", "/api/vhost-limits/{vhost}/{name}", admin(a.apiDeleteVHostLimit))
	// Every management user reads the users' limits, as in RabbitMQ 3.10.8.
	add("GET", "/api/user-limits", a.apiUserLimits)
	add("GET", "/api/user-limits/{user}", a.apiUserLimits)
	add("PUT", "/api/user-limits/{user}/{name}", admin(a.apiPutUserLimit))
	add("DELETE", "/api/user-limits/{user}/{name}", admin(a.apiDeleteUserLimit))
	a.parameterRoutes(add)
	a.federationRoutes(add)
	a.globalRoutes(add) // globalparams.go
	a.extraRoutes(add)  // healthextra.go
	return routes
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

func (a *API) apiWhoami(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	writeJSON(w, map[string]any{"name": u.Name, "tags": tagList(u.Tags)})
}

func tagList(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

func (a *API) vhostJSON(st *broker.VHostInfo) map[string]any {
	tags := tagList(st.Rec.Tags)
	var ready, unacked int64
	for _, q := range st.Queues() {
		ready += q.Ready()
		unacked += q.Unacked()
	}
	zero := map[string]float64{"rate": 0}
	// As RabbitMQ 3.10.8 shows a vhost with and without a default queue
	// type: "undefined", and no default_queue_type in the metadata, when
	// it has none.
	dqt, meta := "undefined", map[string]any{"description": st.Rec.Description, "tags": tags}
	if t := st.Rec.DefaultQueueType; t != "" {
		dqt, meta["default_queue_type"] = t, t
	}
	m := map[string]any{"name": st.Name(), "description": st.Rec.Description, "tags": tags,
		"default_queue_type": dqt, "metadata": meta,
		"tracing": st.Tracing(), "cluster_state": map[string]string{a.srv.NodeName(): "running"},
		"messages": ready + unacked, "messages_details": zero, "messages_ready": ready, "messages_ready_details": zero,
		"messages_unacknowledged": unacked, "messages_unacknowledged_details": zero}
	a.vhostStats(st, m) // vhoststats.go
	return m
}

// canSee reports whether u may see vhost vh in the vhosts' list and
// their limits: administrators and monitoring users see all, others
// those they have permissions in.
func (a *API) canSee(u *auth.User, vh string) bool {
	return seesAll(u) || a.srv.Access().Grant(vh, u.Name).Permission() != nil
}

// vhostAccess reports whether u may use vh's queues, exchanges,
// bindings, policies and aliveness test: administrators in every vhost,
// other users (monitoring users too) in those they have permissions in
// (RabbitMQ 3.10.8 answers a monitoring user without permissions in the
// vhost 401 "User not authorised to access virtual host", and lists no
// queue of it).
func (a *API) vhostAccess(u *auth.User, vh string) bool {
	return u.HasTag("administrator") || a.srv.Access().Grant(vh, u.Name).Permission() != nil
}

// RabbitMQ's reasons for a 401 to a user who may log in.
const (
	reasonVHost  = "User not authorised to access virtual host"
	reasonObject = "User not authorised to access object"
	reasonAdmin  = "Not administrator user"
)

func notAuthorised(w http.ResponseWriter, reason string) {
	apiError(w, http.StatusUnauthorized, "not_authorised", reason)
}

func (a *API) apiVHosts(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, st := range a.srv.VHosts() {
		if a.canSee(apiUser(r), st.Name()) {
			out = append(out, a.vhostJSON(st))
		}
	}
	writeList(w, r, out)
}

// apiVHost is GET /api/vhosts/{vhost}, for administrators only (RabbitMQ
// 3.10.8 answers others 401 "Not administrator user", whatever their
// permissions, whether the vhost exists or not).
func (a *API) apiVHost(w http.ResponseWriter, r *http.Request) {
	st := a.srv.LookupVHost(pathName(r, "vhost"))
	if st == nil {
		notFound(w)
		return
	}
	m := a.vhostJSON(st)
	a.vhostSamples(r, st.Name(), m) // vhoststats.go
	writeJSON(w, m)
}

func (a *API) apiPutVHost(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := pathName(r, "vhost")
	rec := broker.VHostRecord{Tags: []string{}}
	if st := a.srv.LookupVHost(name); st != nil {
		rec = st.Rec
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
	if t, ok := defaultQueueTypeOf(body); ok {
		dqt, err := vhost.ParseDefaultQueueType(t)
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		rec.DefaultQueueType = dqt
	}
	tracing, err := tracingOf(body) // trace.go
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	created, err := a.srv.PutVHost(name, rec)
	if err == nil && created {
		// RabbitMQ grants the user who made the vhost every permission
		// in it.
		p, _ := auth.NewPermission(".*", ".*", ".*")
		err = a.srv.PutAccess(nil, []auth.PermissionEntry{{VHost: name, User: apiUser(r).Name, Permission: p}}, nil)
	}
	if err == nil && tracing != nil {
		err = a.srv.SetTracing(name, *tracing)
	}
	if err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, created)
}

// defaultQueueTypeOf is a PUT /api/vhosts body's default queue type:
// default_queue_type, or defaultqueuetype, the name RabbitMQ 3.10 and 3.11
// read (rabbit_mgmt_wm_vhost.erl, v3.10.8 and v4.3.5; rabbitmq-server#7734).
// A vhost that exists keeps its type when the body names none (RabbitMQ
// 3.10.8 keeps it; 4.x resets it to the node's default).
func defaultQueueTypeOf(body map[string]any) (any, bool) {
	if t, ok := body["default_queue_type"]; ok {
		return t, true
	}
	t, ok := body["defaultqueuetype"]
	return t, ok
}

func (a *API) apiDeleteVHost(w http.ResponseWriter, r *http.Request) {
	found, err := a.srv.DeleteVHost(pathName(r, "vhost"))
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

func (a *API) apiUsers(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, u := range a.srv.Access().Users() {
		out = append(out, userJSON(u))
	}
	writeList(w, r, out)
}

func (a *API) apiUserGet(w http.ResponseWriter, r *http.Request) {
	u := a.srv.Access().User(pathName(r, "user"))
	if u == nil {
		notFound(w)
		return
	}
	writeJSON(w, userJSON(u))
}

// apiPutUser creates or updates a user: password (hashed with SHA-256), or
// password_hash with hashing_algorithm, or neither (no password login);
// tags as a comma-separated string or a list.
func (a *API) apiPutUser(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := pathName(r, "user")
	old := a.srv.Access().User(name)
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
		if algo, ok := str(body, "hashing_algorithm"); ok {
			u.Algo = algo
		}
		if u.Hash, err = auth.DecodeHash(u.Algo, hash); err != nil {
			badRequest(w, err.Error())
			return
		}
	}
	if err := a.srv.PutAccess([]*auth.User{u}, nil, nil); err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, old == nil)
}

func (a *API) apiDeleteUser(w http.ResponseWriter, r *http.Request) {
	name := pathName(r, "user")
	if a.srv.Access().User(name) == nil {
		notFound(w)
		return
	}
	if err := a.srv.DeleteUser(name); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func permJSON(p auth.PermissionEntry) map[string]any {
	return map[string]any{"user": p.User, "vhost": p.VHost, "configure": p.Configure, "write": p.Write, "read": p.Read}
}

// apiPermissions lists permissions: all, or a vhost's, or a user's (by
// the path's {vhost} or {user}).
func (a *API) apiPermissions(w http.ResponseWriter, r *http.Request) {
	vh, user := r.PathValue("vhost"), r.PathValue("user")
	if !a.pathObjectExists(w, vh, user) {
		return
	}
	out := []map[string]any{}
	for _, p := range a.srv.Access().Permissions() {
		if (vh == "" || p.VHost == vh) && (user == "" || p.User == user) {
			out = append(out, permJSON(p))
		}
	}
	writeList(w, r, out)
}

// pathObjectExists answers 404 for a vhost or user the path names that
// does not exist.
func (a *API) pathObjectExists(w http.ResponseWriter, vh, user string) bool {
	if (vh != "" && a.srv.LookupVHost(vh) == nil) || (user != "" && a.srv.Access().User(user) == nil) {
		notFound(w)
		return false
	}
	return true
}

func (a *API) apiPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	p := a.srv.Access().Grant(vh, user).Permission()
	if p == nil || a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	writeJSON(w, permJSON(auth.PermissionEntry{VHost: vh, User: user, Permission: p}))
}

// userAndVHost checks that both exist, answering 400 as RabbitMQ when
// either does not.
func (a *API) userAndVHost(w http.ResponseWriter, vh, user string) bool {
	if a.srv.LookupVHost(vh) == nil || a.srv.Access().User(user) == nil {
		badRequest(w, "vhost_or_user_not_found")
		return false
	}
	return true
}

func (a *API) apiPutPermission(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if !a.userAndVHost(w, vh, user) || keysMissing(w, body, "configure", "write", "read") {
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
	had := a.srv.Access().Grant(vh, user).Permission() != nil
	if err := a.srv.PutAccess(nil, []auth.PermissionEntry{{VHost: vh, User: user, Permission: p}}, nil); err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, !had)
}

func (a *API) apiDeletePermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if a.srv.Access().Grant(vh, user).Permission() == nil {
		notFound(w)
		return
	}
	if err := a.srv.ClearPermission(vh, user); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func topicJSON(t auth.TopicPermissionEntry) map[string]any {
	return map[string]any{"user": t.User, "vhost": t.VHost, "exchange": t.Exchange, "write": t.Write, "read": t.Read}
}

func (a *API) apiTopicPermissions(w http.ResponseWriter, r *http.Request) {
	vh, user := r.PathValue("vhost"), r.PathValue("user")
	if !a.pathObjectExists(w, vh, user) {
		return
	}
	out := []map[string]any{}
	for _, t := range a.srv.Access().TopicPermissions() {
		if (vh == "" || t.VHost == vh) && (user == "" || t.User == user) {
			out = append(out, topicJSON(t))
		}
	}
	writeList(w, r, out)
}

func (a *API) apiTopicPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	out := []map[string]any{}
	for _, t := range a.srv.Access().TopicPermissions() {
		if t.VHost == vh && t.User == user {
			out = append(out, topicJSON(t))
		}
	}
	if len(out) == 0 {
		notFound(w)
		return
	}
	writeList(w, r, out)
}

func (a *API) apiPutTopicPermission(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	if !a.userAndVHost(w, vh, user) || keysMissing(w, body, "exchange", "write", "read") {
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
	// 201 only when the user had no topic permission in the vhost, 204
	// when it had one, for this exchange or another (RabbitMQ 3.10.8:
	// a second exchange's PUT answers 204).
	had := false
	for _, t := range a.srv.Access().TopicPermissions() {
		had = had || (t.VHost == vh && t.User == user)
	}
	if err := a.srv.PutAccess(nil, nil, []auth.TopicPermissionEntry{{VHost: vh, User: user, TopicPermission: tp}}); err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, !had)
}

func (a *API) apiDeleteTopicPermission(w http.ResponseWriter, r *http.Request) {
	vh, user := pathName(r, "vhost"), pathName(r, "user")
	n := 0
	for _, t := range a.srv.Access().TopicPermissions() {
		if t.VHost == vh && t.User == user {
			n++
		}
	}
	if n == 0 {
		notFound(w)
		return
	}
	if err := a.srv.ClearTopicPermissions(vh, user); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// withUser authenticates a request by HTTP basic auth against the
// broker's users (loopback-only users from loopback only) and lets in
// management users. Failed logins are slowed (loginlimit.go).
func (a *API) withUser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		var u *auth.User
		if ok {
			src := source(r)
			if ok = a.logins.admit(src); ok { // else refused unchecked: loginlimit.go
				if u, ok = a.srv.Login(name, pass, remoteAddr(r)); !ok {
					a.auditLoginFailed(r, name, "invalid credentials") // audit.go
					a.logins.failed(r.Context(), src)
				}
			} else {
				a.auditLoginFailed(r, name, "too many failed logins")
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
			apiError(w, http.StatusUnauthorized, "not_authorized", "Login failed")
			return
		}
		if !isManagementUser(u) {
			a.auditLoginFailed(r, name, "Not management user")
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
