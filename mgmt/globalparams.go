package mgmt

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/railmq/railmq/broker"
)

// Global runtime parameters (/api/global-parameters[/{name}]),
// /api/cluster-name and /api/feature-flags, as RabbitMQ 3.10.8 answers
// them. A global parameter is stored as a runtime parameter of no vhost
// under globalComponent (the broker's store replicates and keeps it as
// any other), so it survives restarts and reaches every cluster node.
// Who may: the global parameters are policymakers' and administrators'
// (rabbit_web_dispatch_access_control:is_authorized_global_parameters,
// "User not authorised to access object" to the others); the cluster
// name any management user reads and administrators set; the feature
// flags are administrators' (RabbitMQ 3.10.8 answers the others 401).

// globalComponent is the component a global parameter is stored under
// (a vhost-scoped parameter always has a vhost: they never meet).
const globalComponent = "global"

// The global parameters RabbitMQ itself sets.
const (
	clusterNameParam = "cluster_name"
	clusterIDParam   = "internal_cluster_id"
)

// globalRoutes adds the routes (routes() calls it).
func (a *API) globalRoutes(add func(method, pattern string, h http.HandlerFunc)) {
	add("GET", "/api/global-parameters", policymaker(a.apiGlobalParameters))
	add("GET", "/api/global-parameters/{name}", policymaker(a.apiGlobalParameter))
	add("PUT", "/api/global-parameters/{name}", policymaker(a.apiPutGlobalParameter))
	add("DELETE", "/api/global-parameters/{name}", policymaker(a.apiDeleteGlobalParameter))
	add("GET", "/api/cluster-name", a.apiClusterName)
	add("PUT", "/api/cluster-name", admin(a.apiPutClusterName))
	add("GET", "/api/feature-flags", admin(a.apiFeatureFlags))
	add("PUT", "/api/feature-flags/{name}/enable", admin(a.apiEnableFeatureFlag))
}

// policymaker wraps a handler that only policymakers and administrators
// may use.
func policymaker(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if u := apiUser(r); !u.HasTag("policymaker") && !u.HasTag("administrator") {
			notAuthorised(w, reasonObject)
			return
		}
		h(w, r)
	}
}

// globalParameters lists the global parameters by name, the cluster's id
// made (once, stored) if it has none yet: RabbitMQ's node makes its
// internal_cluster_id when it first starts.
func (a *API) globalParameters() []broker.Parameter {
	if _, ok := a.srv.LookupParameter(globalComponent, "", clusterIDParam); !ok {
		var id [16]byte
		_, _ = rand.Read(id[:])
		v, _ := json.Marshal("rabbitmq-cluster-id-" + base64.RawURLEncoding.EncodeToString(id[:]))
		if _, err := a.srv.PutParameter(broker.Parameter{Component: globalComponent, Name: clusterIDParam, Value: v}); err != nil {
			a.log.Warn("cannot store the cluster id" /* shown unstored until it can */)
		}
	}
	return a.srv.Parameters(globalComponent, "")
}

// globalParamJSON is a global parameter as RabbitMQ shows it.
func globalParamJSON(p broker.Parameter) map[string]any {
	return map[string]any{"name": p.Name, "value": decodeValue(p.Value)}
}

func (a *API) apiGlobalParameters(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, p := range a.globalParameters() {
		if p.VHost == "" {
			out = append(out, globalParamJSON(p))
		}
	}
	writeList(w, r, out)
}

func (a *API) apiGlobalParameter(w http.ResponseWriter, r *http.Request) {
	a.globalParameters()
	p, ok := a.srv.LookupParameter(globalComponent, "", r.PathValue("name"))
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, globalParamJSON(p))
}

// apiPutGlobalParameter is PUT /api/global-parameters/{name} {"value":
// any JSON}: 201 made, 204 changed; without value 400
// "[{key_missing,value}]" (RabbitMQ 3.10.8).
func (a *API) apiPutGlobalParameter(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		badRequest(w, "not_json")
		return
	}
	if b.Value == nil {
		badRequest(w, "[{key_missing,value}]")
		return
	}
	a.putGlobal(w, r.PathValue("name"), b.Value, true)
}

// putGlobal stores a global parameter and answers as RabbitMQ does (with
// created: 201 or 204; else 204).
func (a *API) putGlobal(w http.ResponseWriter, name string, val json.RawMessage, created bool) {
	made, err := a.srv.PutParameter(broker.Parameter{Component: globalComponent, Name: name, Value: val})
	if err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, made && created)
}

func (a *API) apiDeleteGlobalParameter(w http.ResponseWriter, r *http.Request) {
	found, err := a.srv.DeleteParameter(globalComponent, "", r.PathValue("name"))
	switch {
	case err != nil:
		internalError(w, err)
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// clusterName is the cluster_name global parameter, else the node's
// name (RabbitMQ's default).
func (a *API) clusterName() string {
	if p, ok := a.srv.LookupParameter(globalComponent, "", clusterNameParam); ok {
		if s, ok := decodeValue(p.Value).(string); ok {
			return s
		}
	}
	return a.srv.NodeName()
}

func (a *API) apiClusterName(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]string{"name": a.clusterName()})
}

// apiPutClusterName is PUT /api/cluster-name {"name": "..."}: 204, made
// or changed; without name 400 "[{key_missing,name}]"; a name that is
// not a string 400 (RabbitMQ 3.10.8 crashes: 500).
func (a *API) apiPutClusterName(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "name") {
		return
	}
	name, ok := str(body, "name")
	if !ok {
		badRequest(w, "name must be a string")
		return
	}
	v, _ := json.Marshal(name)
	a.putGlobal(w, clusterNameParam, v, false)
}

// featureFlag is one of RabbitMQ 3.10.8's feature flags.
type featureFlag struct{ name, desc, docURL, providedBy string }

// featureFlags are the flags RabbitMQ 3.10.8 lists (GET
// /api/feature-flags, in its order), each "enabled" here: railmq has what
// each turns on (quorum and stream queues, user limits, vhost metadata,
// implicit default bindings, the maintenance status, the queue-version
// argument, and the drop_unroutable and get_empty counts that
// drop_unroutable_metric and empty_basic_get_metric add), so a tool that
// checks every stable flag is on before an upgrade finds them on.
var featureFlags = []featureFlag{
	{"classic_mirrored_queue_version", "Support setting version for classic mirrored queues", "", "rabbit"},
	{"drop_unroutable_metric", "Count unroutable publishes to be dropped in stats", "", "rabbitmq_management_agent"},
	{"empty_basic_get_metric", "Count AMQP `basic.get` on empty queues in stats", "", "rabbitmq_management_agent"},
	{"implicit_default_bindings", "Default bindings are now implicit, instead of being stored in the database", "", "rabbit"},
	{"maintenance_mode_status", "Maintenance mode status", "", "rabbit"},
	{"quorum_queue", "Support queues of type `quorum`", "https://www.rabbitmq.com/quorum-queues.html", "rabbit"},
	{"stream_queue", "Support queues of type `stream`", "https://www.rabbitmq.com/stream.html", "rabbit"},
	{"user_limits", "Configure connection and channel limits for a user", "", "rabbit"},
	{"virtual_host_metadata", "Virtual host metadata (description, tags, etc)", "", "rabbit"},
}

func (a *API) apiFeatureFlags(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, f := range featureFlags {
		out = append(out, map[string]any{"name": f.name, "desc": f.desc, "doc_url": f.docURL, "state": "enabled",
			"stability": "stable", "provided_by": f.providedBy})
	}
	writeList(w, r, out)
}

// apiEnableFeatureFlag is PUT /api/feature-flags/{name}/enable: 204 for
// a flag of the list (each is on), 400 "unsupported" for another name
// (RabbitMQ 3.10.8).
func (a *API) apiEnableFeatureFlag(w http.ResponseWriter, r *http.Request) {
	for _, f := range featureFlags {
		if f.name == r.PathValue("name") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	badRequest(w, "unsupported")
}
