package mgmt

import (
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/replica"
)

// Quorum queue membership, RabbitMQ 4's routes (rabbit_mgmt_dispatcher,
// rabbit_mgmt_wm_quorum_queue_replicas_*.erl; administrators only):
//
//	POST   /api/queues/quorum/{vhost}/{queue}/replicas/add     {"node": N}: 204
//	DELETE /api/queues/quorum/{vhost}/{queue}/replicas/delete  {"node": N}: 202
//	POST   /api/queues/quorum/replicas/on/{node}/grow          {"vhost_pattern", "queue_pattern", "strategy": "all"|"even"}: 204
//	DELETE /api/queues/quorum/replicas/on/{node}/shrink        202
//	GET    /api/queues/quorum/{vhost}/{queue}/status           each member's progress
//
// A change RabbitMQ cannot make is its 503 {"error": "Service
// Unavailable", "reason": ...}. railmq makes a queue's change on the
// node that leads it: asked elsewhere, the 503's reason names the leader;
// grow and shrink change the queues that the node asked leads.

func (a *API) apiQuorumAddMember(w http.ResponseWriter, r *http.Request) {
	a.quorumMember(w, r, true)
}

func (a *API) apiQuorumDeleteMember(w http.ResponseWriter, r *http.Request) {
	a.quorumMember(w, r, false)
}

func (a *API) quorumMember(w http.ResponseWriter, r *http.Request, add bool) {
	_, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "node") {
		return
	}
	node, _ := str(body, "node")
	var err error
	if add {
		err = replica.AddMember(q, node)
	} else {
		err = replica.DeleteMember(q, node)
	}
	switch {
	case err == nil && add:
		w.WriteHeader(http.StatusNoContent)
	case err == nil:
		w.WriteHeader(http.StatusAccepted)
	default: // not_quorum_queue too, as RabbitMQ's
		apiError(w, http.StatusServiceUnavailable, "Service Unavailable", err.Error())
	}
}

func (a *API) apiQuorumGrow(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "vhost_pattern", "queue_pattern", "strategy") {
		return
	}
	vp, _ := str(body, "vhost_pattern")
	qp, _ := str(body, "queue_pattern")
	strategy, _ := str(body, "strategy")
	res, err := a.srv.QuorumGrow(r.PathValue("node"), vp, qp, strategy)
	if errors.Is(err, errNoNode) {
		notFound(w)
		return
	}
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	a.logMemberResults("grow", res)
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) apiQuorumShrink(w http.ResponseWriter, r *http.Request) {
	res, err := a.srv.QuorumShrink(r.PathValue("node"))
	if err != nil {
		notFound(w)
		return
	}
	a.logMemberResults("shrink", res)
	w.WriteHeader(http.StatusAccepted)
}

func (a *API) apiQuorumStatus(w http.ResponseWriter, r *http.Request) {
	_, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	ms, ok := replica.Status(q)
	if !ok {
		apiError(w, http.StatusServiceUnavailable, "Service Unavailable", "classic_queue_not_supported")
		return
	}
	writeJSON(w, ms)
}

// errNoNode is a grow or shrink for a node the cluster does not have.
var errNoNode = broker.ErrNoSuchNode

// logMemberResults logs what a grow or shrink changed, queue by queue.
func (a *API) logMemberResults(op string, res []replica.MemberResult) {
	for _, m := range res {
		if m.Err != nil {
			a.log.Warn("quorum queue membership not changed", zap.String("op", op), zap.String("vhost", m.VHost), zap.String("queue", m.Queue), zap.Error(m.Err))
			continue
		}
		a.log.Info("quorum queue membership changed", zap.String("op", op), zap.String("vhost", m.VHost), zap.String("queue", m.Queue), zap.Int("members", m.Size))
	}
}
