package mgmt

import (
	"errors"
	"net/http"

	"github.com/railmq/railmq/cluster"
)

// The cluster, on the management API (railmq's own routes; RabbitMQ's
// CLI does this with rabbitmqctl cluster_status, join_cluster and
// forget_cluster_node):
//
//	GET    /api/cluster                 this node's view: name, state, leader, term, members
//	PUT    /api/cluster/members/{name}  {"address": "host:port"}: add a node started with --cluster-join (on the leader)
//	DELETE /api/cluster/members/{name}  remove a node (on the leader)
//
// A write on a node that is not the leader is a 409 that names the
// leader, for the caller to retry there.

func (a *API) apiCluster(w http.ResponseWriter, _ *http.Request) {
	node := a.srv.Cluster()
	if node == nil {
		writeJSON(w, map[string]any{"name": a.srv.NodeName(), "clustered": false, "state": "Leader", "leader": a.srv.NodeName(),
			"members": []map[string]any{{"name": a.srv.NodeName(), "voter": true}}})
		return
	}
	writeJSON(w, clusterJSON(node.Status()))
}

func clusterJSON(st cluster.Status) map[string]any {
	members := []map[string]any{}
	for _, m := range st.Members {
		members = append(members, map[string]any{"name": m.Name, "address": m.Addr, "voter": m.Voter, "leader": m.Name == st.Leader})
	}
	return map[string]any{"name": st.Name, "clustered": true, "state": st.State, "leader": st.Leader, "term": st.Term,
		"commit_index": st.Commit, "applied_index": st.Applied, "last_log_index": st.LastLog,
		"last_contact_seconds": st.LastContact.Seconds(), "members": members}
}

func (a *API) apiPutClusterMember(w http.ResponseWriter, r *http.Request) {
	if !a.clustered(w) {
		return
	}
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "address") {
		return
	}
	addr, _ := str(body, "address")
	a.clusterAnswer(w, a.srv.Cluster().AddMember(r.PathValue("name"), addr), http.StatusCreated)
}

func (a *API) apiDeleteClusterMember(w http.ResponseWriter, r *http.Request) {
	if a.clustered(w) {
		a.clusterAnswer(w, a.srv.Cluster().RemoveMember(r.PathValue("name")), http.StatusNoContent)
	}
}

func (a *API) clustered(w http.ResponseWriter) bool {
	if a.srv.Cluster() == nil {
		badRequest(w, "this node is not clustered (start it with --cluster-listen and --cluster-peers)")
		return false
	}
	return true
}

func (a *API) clusterAnswer(w http.ResponseWriter, err error, ok int) {
	switch {
	case err == nil:
		w.WriteHeader(ok)
	case errors.Is(err, cluster.ErrNotLeader):
		apiError(w, http.StatusConflict, "not_leader", "this node is not the cluster's leader; the leader is "+a.srv.Cluster().Status().Leader)
	default:
		internalError(w, err)
	}
}
