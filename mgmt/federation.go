package mgmt

import (
	"net/http"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
)

// /api/federation-links (rabbitmq_federation_management's routes,
// rabbit_federation_mgmt.erl v3.10.8): the links the broker runs, for
// monitoring users and administrators (is_authorized_monitor); a user who
// is not an administrator sees the links of the vhosts it may use.

func (a *API) federationRoutes(add func(method, pattern string, h http.HandlerFunc)) {
	add("GET", "/api/federation-links", monitor(a.apiFederationLinks))
	add("GET", "/api/federation-links/{vhost}", monitor(a.apiFederationLinks))
	add("GET", "/api/federation-links/state/down/", monitor(a.apiFederationLinksDown))
	add("GET", "/api/federation-links/{vhost}/state/down", monitor(a.apiFederationLinksDown))
	add("DELETE", "/api/federation-links/vhost/{vhost}/{id}/{node}/restart", monitor(a.apiRestartFederationLink))
}

func (a *API) apiFederationLinks(w http.ResponseWriter, r *http.Request) {
	a.federationLinks(w, r, false)
}

func (a *API) apiFederationLinksDown(w http.ResponseWriter, r *http.Request) {
	a.federationLinks(w, r, true)
}

// federationLinks lists the links of the path's vhost (all when none),
// only those neither running nor starting when down.
func (a *API) federationLinks(w http.ResponseWriter, r *http.Request, down bool) {
	u := apiUser(r)
	vh := r.PathValue("vhost")
	if vh != "" && a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	out := []map[string]any{}
	for _, l := range a.srv.FederationLinks(vh) {
		if down && (l.State == "running" || l.State == "starting") {
			continue
		}
		if !a.federationVisible(u, l.Vhost) {
			continue
		}
		out = append(out, a.federationLinkJSON(l))
	}
	writeBareList(w, r, out)
}

// federationVisible: administrators see every vhost's links, other
// monitoring users those of the vhosts they have permissions in
// (rabbit_mgmt_util:filter_vhost/3).
func (a *API) federationVisible(u *auth.User, vh string) bool {
	return u.HasTag("administrator") || a.srv.Access().Grant(vh, u.Name).Permission() != nil
}

func (a *API) federationLinkJSON(l broker.FederationLink) map[string]any {
	m := l.Status.JSON()
	m["node"] = a.srv.NodeName()
	if l.Node != "" {
		m["node"] = l.Node
	}
	if l.LocalConnection != "" {
		m["local_connection"] = l.LocalConnection
	}
	if l.LocalChannel != nil {
		m["local_channel"] = a.channelJSON(*l.LocalChannel)
	}
	return m
}

// apiRestartFederationLink restarts a link: 204, or 404 when the vhost,
// the node or the link is not known.
func (a *API) apiRestartFederationLink(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if a.srv.LookupVHost(vh) == nil || !a.federationVisible(apiUser(r), vh) ||
		!a.srv.RestartFederationLink(vh, r.PathValue("id"), r.PathValue("node")) {
		notFound(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
