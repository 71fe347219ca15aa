package mgmt

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// More of RabbitMQ 3.10.8's health checks, the queue actions and one
// exchange's topic permission. Who may: the health checks any
// management user (rabbit_mgmt_util:is_authorized), the queue actions
// and topic permissions administrators (is_authorized_admin).

// extraRoutes adds the routes (routes() calls it).
func (a *API) extraRoutes(add func(method, pattern string, h http.HandlerFunc)) {
	add("GET", "/api/health/checks/certificate-expiration/{within}/{unit}", a.apiHealthCertificates)
	add("GET", "/api/health/checks/node-is-quorum-critical", a.apiHealthQuorumCritical)
	add("GET", "/api/health/checks/node-is-mirror-sync-critical", a.apiHealthMirrorSyncCritical)
	add("POST", "/api/queues/{vhost}/{queue}/actions", admin(a.apiQueueActions))
	// RabbitMQ routes /api/topic-permissions/{vhost}/{user}/{exchange}
	// to the same resource as without the exchange: GET and PUT answer
	// as there (the body names the exchange); DELETE removes that
	// exchange's entry only.
	add("GET", "/api/topic-permissions/{vhost}/{user}/{exchange}", admin(a.apiTopicPermission))
	add("PUT", "/api/topic-permissions/{vhost}/{user}/{exchange}", admin(a.apiPutTopicPermission))
	add("DELETE", "/api/topic-permissions/{vhost}/{user}/{exchange}", admin(a.apiDeleteTopicExchangePermission))
}

// certUnits are the units certificate-expiration takes, in seconds
// (rabbit_mgmt_wm_health_check_certificate_expiration.erl: a month is 30
// days, a year 365).
var certUnits = map[string]int64{"days": 86400, "weeks": 7 * 86400, "months": 30 * 86400, "years": 365 * 86400}

// apiHealthCertificates is GET
// /api/health/checks/certificate-expiration/{within}/{unit}: 200
// {"status":"ok"} when no certificate of a TLS listener (its certfile and
// cacertfile) expires within that time, else 503 with the listeners
// whose do, as RabbitMQ lists them. A bad number is 400 "Invalid
// expiration value.", a bad unit 400 "Time unit not recognised.
// Supported units: days, weeks, months, years." (RabbitMQ 3.10.8).
func (a *API) apiHealthCertificates(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.PathValue("within"), 10, 64)
	if err != nil {
		badRequest(w, "Invalid expiration value.")
		return
	}
	unit, ok := certUnits[strings.ToLower(r.PathValue("unit"))]
	if !ok {
		badRequest(w, "Time unit not recognised. Supported units: days, weeks, months, years.")
		return
	}
	now := time.Now().UTC()
	deadline := now.Add(time.Duration(min(max(n, -1<<32), 1<<32)*unit) * time.Second)
	expiring := []map[string]any{}
	for _, l := range a.srv.TLSListeners() {
		certs, cas := certExpiring(l.CertFile, now, deadline), certExpiring(l.CACertFile, now, deadline)
		if isEmptyList(certs) && isEmptyList(cas) {
			continue
		}
		expiring = append(expiring, map[string]any{"node": a.srv.NodeName(), "protocol": l.Protocol, "interface": l.Interface,
			"port": l.Port, "certfile": l.CertFile, "cacertfile": l.CACertFile,
			"certfile_expires_on": certs, "cacertfile_expires_on": cas})
	}
	if len(expiring) > 0 {
		healthFailed(w, map[string]any{"reason": "Certificates expiring", "expired": expiring})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func isEmptyList(v any) bool { l, ok := v.([]string); return ok && len(l) == 0 }

// certExpiring reads a PEM file's certificates and answers when those
// that expire before deadline do ("2026-12-31 23:59:59"), or
// {"error": why} as RabbitMQ answers a file it cannot use ("" file: none).
func certExpiring(file string, now, deadline time.Time) any {
	out := []string{}
	if file == "" {
		return out
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	found := false
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		found = true
		if blk.Type != "CERTIFICATE" {
			return map[string]string{"error": fmt.Sprintf("The certificate file provided contains a '%s' entry", blk.Type)}
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		if c.NotBefore.After(now) {
			return map[string]string{"error": "Certificate is not yet valid"}
		}
		if c.NotAfter.Before(deadline) {
			out = append(out, c.NotAfter.UTC().Format("2006-01-02 15:04:05"))
		}
	}
	if !found {
		return map[string]string{"error": "The certificate file provided does not contain any PEM entry."}
	}
	return out
}

// apiHealthQuorumCritical is GET
// /api/health/checks/node-is-quorum-critical: on a node that is not
// clustered 200 {"status":"ok","reason":"single node cluster"} (RabbitMQ
// 3.10.8); in a cluster 503 listing the quorum queues with a member here
// that would lose their majority if this node stopped (the members up,
// this one counted, are no more than a bare majority:
// rabbit_quorum_queue.erl filter_quorum_critical), each as RabbitMQ
// prints it (amqqueue:to_printable), else 200 {"status":"ok"}.
func (a *API) apiHealthQuorumCritical(w http.ResponseWriter, _ *http.Request) {
	if a.srv.Cluster() == nil {
		writeJSON(w, map[string]string{"status": "ok", "reason": "single node cluster"})
		return
	}
	self := a.srv.NodeName()
	critical := []map[string]any{}
	for _, st := range a.srv.VHosts() {
		for _, q := range st.Queues() {
			if a.srv.QueueReplica(q).Kind != "quorum" {
				continue
			}
			m := map[string]any{}
			a.srv.DescribeQueue(q, m, true /* members */)
			members, _ := m["members"].([]string)
			online, _ := m["online"].([]string)
			if !contains(members, self) {
				continue
			}
			up := len(online)
			if !contains(online, self) {
				up++
			}
			if up <= len(members)/2+1 {
				critical = append(critical, map[string]any{"name": q.Name(), "virtual_host": st.Name(), "type": "quorum",
					"readable_name": fmt.Sprintf("queue '%s' in vhost '%s'", q.Name(), st.Name())})
			}
		}
	}
	if len(critical) > 0 {
		healthFailed(w, map[string]any{"reason": "There are quorum queues that would lose their quorum if the target node is shut down",
			"queues": critical})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// apiHealthMirrorSyncCritical is GET
// /api/health/checks/node-is-mirror-sync-critical: there is no classic
// mirroring, so no queue whose only synchronised mirror is here; 200
// {"status":"ok"}, with RabbitMQ 3.10.8's reason on a node that is not
// clustered.
func (a *API) apiHealthMirrorSyncCritical(w http.ResponseWriter, _ *http.Request) {
	if a.srv.Cluster() == nil {
		writeJSON(w, map[string]string{"status": "ok", "reason": "single node cluster"})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

// apiQueueActions is POST /api/queues/{vhost}/{queue}/actions
// {"action": "sync" | "cancel_sync"}: mirror synchronisation, which
// RabbitMQ 3.10.8 starts in the background and answers 204 for any
// queue (a classic queue without mirrors too); with no mirrors there is
// nothing to do. Another action is 400 ["unknown","foo"], no action 400
// "[{key_missing,action}]"; a queue that does not exist 404 (RabbitMQ
// 3.10.8 crashes: 500).
func (a *API) apiQueueActions(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "action") {
		return
	}
	if _, _, ok := a.findQueue(w, r); !ok {
		return
	}
	switch act, _ := body["action"].(string); act {
	case "sync", "cancel_sync":
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		writeJSONBody(w, map[string]any{"error": "bad_request", "reason": []string{"unknown", act}})
	}
}

// apiDeleteTopicExchangePermission is DELETE
// /api/topic-permissions/{vhost}/{user}/{exchange}: that exchange's entry
// goes, the user's others stay; 204 whether it had one or not, 404 for
// a user or vhost that does not exist (RabbitMQ 3.10.8).
func (a *API) apiDeleteTopicExchangePermission(w http.ResponseWriter, r *http.Request) {
	vh, user, ex := pathName(r, "vhost"), pathName(r, "user"), pathName(r, "exchange")
	if a.srv.LookupVHost(vh) == nil || a.srv.Access().User(user) == nil {
		notFound(w)
		return
	}
	if err := a.srv.ClearTopicExchangePermission(vh, user, ex); err != nil {
		internalError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
