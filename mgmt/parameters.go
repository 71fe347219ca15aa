package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
)

// /api/parameters/{component}/{vhost}/{name}: RabbitMQ's runtime
// parameters, for the components railmq runs (shovel) and the federation
// ones (stored and validated), with rabbit_shovel_mgmt.erl's
// /api/shovels beside them. The broker stores them
// (broker.Server.PutParameter) and runs the shovels; the validation texts
// are RabbitMQ 3.10.8's (paramvalid.go). Who may: the parameters are
// policymakers' and administrators' (is_authorized_policies) in the
// vhosts they may use; /api/shovels, its restart and its delete are
// monitoring users' and administrators' (is_authorized_monitor).

// parameterRoutes adds the routes (routes() calls it).
func (a *API) parameterRoutes(add func(method, pattern string, h http.HandlerFunc)) {
	add("GET", "/api/parameters", a.apiParameters)
	add("GET", "/api/parameters/{component}", a.apiParameters)
	add("GET", "/api/parameters/{component}/{vhost}", a.apiParameters)
	add("GET", "/api/parameters/{component}/{vhost}/{name}", a.apiParameter)
	add("PUT", "/api/parameters/{component}/{vhost}/{name}", a.apiPutParameter)
	add("DELETE", "/api/parameters/{component}/{vhost}/{name}", a.apiDeleteParameter)
	add("GET", "/api/shovels", monitor(a.apiShovels))
	add("GET", "/api/shovels/{vhost}", monitor(a.apiShovels))
	add("GET", "/api/shovels/vhost/{vhost}/{name}", monitor(a.apiShovels))
	add("DELETE", "/api/shovels/vhost/{vhost}/{name}", monitor(a.apiDeleteShovel))
	add("DELETE", "/api/shovels/vhost/{vhost}/{name}/restart", monitor(a.apiRestartShovel))
}

// paramComponents are the components whose values are checked
// (validateParameter); "federation" is registered but takes no parameter.
var paramComponents = map[string]bool{broker.ShovelComponent: true, "federation-upstream": true, "federation-upstream-set": true, "federation": true}

// parameterAccess lets in administrators and policymakers who may use vh
// (RabbitMQ 3.10.8 answers the others "User not authorised to access
// object").
func (a *API) parameterAccess(w http.ResponseWriter, u *auth.User, vh string) bool {
	if (u.HasTag("administrator") || u.HasTag("policymaker")) && a.vhostAccess(u, vh) {
		return true
	}
	notAuthorised(w, reasonObject)
	return false
}

func parameterJSON(p broker.Parameter) map[string]any {
	return map[string]any{"value": decodeValue(p.Value), "vhost": p.VHost, "component": p.Component, "name": p.Name}
}

// decodeValue decodes a stored value keeping its numbers as written.
func decodeValue(b []byte) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return v
}

func (a *API) apiParameters(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	comp, vh := r.PathValue("component"), r.PathValue("vhost")
	if !u.HasTag("administrator") && !u.HasTag("policymaker") {
		notAuthorised(w, reasonObject)
		return
	}
	if vh != "" && !a.parameterAccess(w, u, vh) {
		return
	}
	if vh != "" && a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	out := []map[string]any{}
	for _, p := range a.srv.Parameters(comp, vh) {
		if p.VHost != "" && a.vhostAccess(u, p.VHost) { // "": a global parameter (globalparams.go)
			out = append(out, parameterJSON(p))
		}
	}
	writeBareList(w, r, out)
}

func (a *API) apiParameter(w http.ResponseWriter, r *http.Request) {
	comp, vh, name := r.PathValue("component"), r.PathValue("vhost"), r.PathValue("name")
	if !a.parameterAccess(w, apiUser(r), vh) {
		return
	}
	p, ok := a.srv.LookupParameter(comp, vh, name)
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, parameterJSON(p))
}

// parameterError is a refused parameter: RabbitMQ's reason, unescaped.
type parameterError struct{ reason string }

func (e *parameterError) Error() string { return e.reason }

// validateParameter checks a value of component as RabbitMQ does; u is
// the acting user (nil: the definitions import, RabbitMQ's internal user).
// It answers the value as stored: compact JSON.
func (a *API) validateParameter(comp, name string, raw []byte, u *auth.User) (json.RawMessage, error) {
	var val any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return nil, &parameterError{"not_json"}
	}
	var lines []string
	switch comp {
	case broker.ShovelComponent:
		def, ok := val.(map[string]any)
		if !ok {
			// RabbitMQ 3.10.8 crashes (500); a refusal is what it means.
			return nil, &parameterError{validationFailed([]string{fmt.Sprintf("%s not a list %s", name, eterm(val))})}
		}
		lines = a.validateShovel(name, def, u)
	case "federation-upstream":
		def, ok := val.(map[string]any)
		if !ok {
			return nil, &parameterError{validationFailed([]string{fmt.Sprintf("%s not a list %s", name, eterm(val))})}
		}
		lines = proplist(name, append([]constraint{{"uri", a.vURI(nil), true}}, federationShared()...), def)
	case "federation-upstream-set":
		l, ok := val.([]any)
		if !ok {
			return nil, &parameterError{validationFailed([]string{fmt.Sprintf("%s not a list %s", name, eterm(val))})}
		}
		for _, e := range l {
			m, ok := e.(map[string]any)
			if !ok {
				lines = append(lines, fmt.Sprintf("%s not a list %s", name, eterm(e)))
				continue
			}
			lines = append(lines, proplist(name, append([]constraint{{"upstream", vBinary, true}}, federationShared()...), m)...)
		}
	case "federation":
		lines = []string{"name not recognised: " + eterm(name)}
	default:
		lines = []string{"component " + comp + " not found"}
	}
	if len(lines) > 0 {
		return nil, &parameterError{validationFailed(lines)}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, &parameterError{"not_json"}
	}
	return buf.Bytes(), nil
}

// federationShared is rabbit_federation_parameters.erl shared_validation
// (3.10.8).
func federationShared() []constraint {
	return []constraint{
		{key: "exchange", fn: vBinary}, {key: "queue", fn: vBinary}, {key: "consumer-tag", fn: vBinary},
		{key: "prefetch-count", fn: vNumber}, {key: "reconnect-delay", fn: vNumber}, {key: "max-hops", fn: vNumber},
		{key: "expires", fn: vNumber}, {key: "message-ttl", fn: vNumber}, {key: "trust-user-id", fn: vBoolean},
		{key: "ack-mode", fn: vEnum("no-ack", "on-publish", "on-confirm")},
		{key: "resource-cleanup-mode", fn: vEnum("default", "never")}, {key: "ha-policy", fn: vBinary},
		{key: "bind-nowait", fn: vBoolean}, {key: "channel-use-mode", fn: vEnum("multiple", "single")},
	}
}

func (a *API) apiPutParameter(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	comp, vh, name := r.PathValue("component"), r.PathValue("vhost"), r.PathValue("name")
	if !u.HasTag("administrator") && !u.HasTag("policymaker") {
		notAuthorised(w, reasonObject)
		return
	}
	if a.srv.LookupVHost(vh) == nil {
		apiError(w, http.StatusNotFound, "not_found", "vhost_not_found")
		return
	}
	if !a.parameterAccess(w, u, vh) {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			bodyTooLarge(w)
			return
		}
		badRequest(w, err.Error())
		return
	}
	var b struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		badRequest(w, "not_json")
		return
	}
	if b.Value == nil {
		badRequest(w, "[{key_missing,value}]")
		return
	}
	val, err := a.validateParameter(comp, name, b.Value, u)
	if err != nil {
		badRequest(w, htmlEscape(err.Error()))
		return
	}
	created, err := a.srv.PutParameter(broker.Parameter{VHost: vh, Component: comp, Name: name, Value: val})
	if err != nil {
		internalError(w, err)
		return
	}
	answerPut(w, created)
}

func (a *API) apiDeleteParameter(w http.ResponseWriter, r *http.Request) {
	comp, vh, name := r.PathValue("component"), r.PathValue("vhost"), r.PathValue("name")
	if !a.parameterAccess(w, apiUser(r), vh) {
		return
	}
	found, err := a.srv.DeleteParameter(comp, vh, name)
	switch {
	case err != nil:
		internalError(w, err)
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// shovelJSON is a shovel's status as rabbit_shovel_mgmt.erl (3.10.8)
// shows it: a starting one with no other key, a terminated one with its
// reason, a running one with its ends.
func (a *API) shovelJSON(s broker.ShovelStatus) map[string]any {
	ts := s.Timestamp.Local()
	m := map[string]any{"node": a.srv.NodeName(), "name": s.Name, "vhost": s.VHost, "type": "dynamic", "state": s.State,
		// format_ts: "~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w", the hour unpadded.
		"timestamp": fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", ts.Year(), ts.Month(), ts.Day(), ts.Hour(), ts.Minute(), ts.Second())}
	if s.Node != "" {
		m["node"] = s.Node
	}
	switch s.State {
	case "terminated":
		m["reason"] = s.Reason
	case "running":
		m["src_uri"], m["dest_uri"] = s.SrcURI, s.DestURI
		m["src_protocol"], m["dest_protocol"] = "amqp091", "amqp091"
		if s.SrcQueue != "" {
			m["src_queue"] = s.SrcQueue
		} else {
			m["src_exchange"], m["src_exchange_key"] = s.SrcExchange, s.SrcExchangeKey
		}
		switch {
		case s.DestQueue != "":
			m["dest_queue"] = s.DestQueue
		case s.DestExchange != "":
			m["dest_exchange"] = s.DestExchange
			if s.DestExchangeKey != nil {
				m["dest_exchange_key"] = *s.DestExchangeKey
			}
		}
	}
	return m
}

// apiShovels is GET /api/shovels[/{vhost}] and, as 3.10.8 answers it,
// /api/shovels/vhost/{vhost}/{name}: every shovel of the vhost, 404 when
// name is not one of them.
func (a *API) apiShovels(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	vh, name := r.PathValue("vhost"), r.PathValue("name")
	if vh != "" && a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	out := []map[string]any{}
	found := name == ""
	for _, s := range a.srv.Shovels(vh) {
		if !a.shovelAccess(u, s.VHost) {
			continue
		}
		found = found || s.Name == name
		out = append(out, a.shovelJSON(s))
	}
	if !found {
		notFound(w)
		return
	}
	writeBareList(w, r, out)
}

// shovelAccess says whether u sees vh's shovels: with permissions in it,
// administrators too (RabbitMQ 3.10.8 filters the shovels by the vhosts
// the user may open: an administrator without permissions in the vhost
// is answered 404 for its shovels).
func (a *API) shovelAccess(u *auth.User, vh string) bool {
	return a.srv.Access().Grant(vh, u.Name).Permission() != nil
}

func (a *API) shovelVisible(u *auth.User, vh, name string) bool {
	if a.srv.LookupVHost(vh) == nil || !a.shovelAccess(u, vh) {
		return false
	}
	_, ok := a.srv.LookupParameter(broker.ShovelComponent, vh, name)
	return ok
}

// apiDeleteShovel deletes the shovel and its parameter
// (rabbit_shovel_util:delete_shovel).
func (a *API) apiDeleteShovel(w http.ResponseWriter, r *http.Request) {
	vh, name := r.PathValue("vhost"), r.PathValue("name")
	if !a.shovelVisible(apiUser(r), vh, name) {
		notFound(w)
		return
	}
	found, err := a.srv.DeleteParameter(broker.ShovelComponent, vh, name)
	switch {
	case err != nil:
		internalError(w, err)
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *API) apiRestartShovel(w http.ResponseWriter, r *http.Request) {
	vh, name := r.PathValue("vhost"), r.PathValue("name")
	if !a.shovelVisible(apiUser(r), vh, name) || !a.srv.RestartShovel(vh, name) {
		notFound(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// erlangBinary prints s as Erlang's ~p prints a binary (the per-vhost
// definitions import's reason): <<"...">> with \n, \" and \\ escaped.
func erlangBinary(s string) string {
	return "<<\"" + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + "\">>"
}

// writeBareList answers a list as RabbitMQ's shovel and parameter lists
// do: the JSON array alone, no newline after it ("[]" when empty); with
// list query parameters (sort, page, name), as every other list.
func writeBareList(w http.ResponseWriter, r *http.Request, out []map[string]any) {
	if r.URL.RawQuery != "" {
		writeList(w, r, out)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		internalError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
