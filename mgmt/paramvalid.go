package mgmt

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
)

// Runtime parameter validation as RabbitMQ 3.10.8 answers it:
// rabbit_parameter_validation.erl (proplist/3 and the per-key checks)
// and rabbit_shovel_parameters.erl (the shovel's keys), with the texts
// printed as Erlang's ~p prints the JSON terms (a string is <<"x">>) and
// HTML-escaped by the management plugin. Values are decoded with
// json.Number, so that an integer (5) and a float (5.0) differ as they do
// in Erlang.

// eterm prints a JSON value as Erlang's ~p prints it after RabbitMQ's
// JSON decoding.
func eterm(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "<<" + estr(x) + ">>"
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = eterm(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := sortedKeys(x)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = "<<" + estr(k) + ">> => " + eterm(x[k])
		}
		return "#{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprint(v)
}

// estr is an Erlang string literal ("x", with \" and \\).
func estr(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// check is one key's validation: the error lines for its value.
type check func(key string, v any) []string

// constraint is rabbit_parameter_validation's {Key, Fun, mandatory|optional}.
type constraint struct {
	key       string
	fn        check
	mandatory bool
}

// proplist is rabbit_parameter_validation:proplist/3: the keys' results
// in reverse order of the constraints (the fold prepends), after an
// "Unrecognised terms" line for the keys no constraint names (in key
// order: a JSON object is a sorted map).
func proplist(name string, cs []constraint, term map[string]any) []string {
	left := map[string]bool{}
	for k := range term {
		left[k] = true
	}
	var results [][]string
	for _, c := range cs {
		v, ok := term[c.key]
		switch {
		case ok && left[c.key]:
			delete(left, c.key)
			results = append(results, c.fn(c.key, v))
		case !ok && c.mandatory:
			results = append(results, []string{fmt.Sprintf("Key %s not found in %s", estr(c.key), name)})
		}
	}
	var out []string
	if len(left) > 0 {
		var terms []string
		for _, k := range sortedKeys(term) {
			if left[k] {
				terms = append(terms, "{<<"+estr(k)+">>,"+eterm(term[k])+"}")
			}
		}
		out = append(out, fmt.Sprintf("Unrecognised terms [%s] in %s", strings.Join(terms, ","), name))
	}
	for i := len(results) - 1; i >= 0; i-- {
		out = append(out, results[i]...)
	}
	return out
}

func fail(format string, args ...any) []string { return []string{fmt.Sprintf(format, args...)} }

func isInteger(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	_, err := strconv.ParseInt(n.String(), 10, 64)
	return err == nil
}

func vNumber(k string, v any) []string {
	if _, ok := v.(json.Number); ok {
		return nil
	}
	return fail("%s should be a number, actually was %s", k, eterm(v))
}

func vBinary(k string, v any) []string {
	if _, ok := v.(string); ok {
		return nil
	}
	return fail("%s should be binary, actually was %s", k, eterm(v))
}

func vBoolean(k string, v any) []string {
	if _, ok := v.(bool); ok {
		return nil
	}
	return fail("%s should be boolean, actually was %s", k, eterm(v))
}

func vQueueName(k string, v any) []string {
	s, ok := v.(string)
	switch {
	case !ok:
		return fail("%s should be binary, actually was %s", k, eterm(v))
	case len(s) > 255:
		return fail("%s should be less than 255 bytes, actually was %d", k, len(s))
	}
	return nil
}

func vEnum(options ...string) check {
	return func(k string, v any) []string {
		s, ok := v.(string)
		if !ok {
			return vBinary(k, v)
		}
		for _, o := range options {
			if s == o {
				return nil
			}
		}
		opts := make([]string, len(options))
		for i, o := range options {
			opts[i] = eterm(o)
		}
		return fail("%s should be one of [%s], actually was %s", k, strings.Join(opts, ","), eterm(v))
	}
}

// vKeys checks a table's keys against names (the values are not checked:
// rabbit_amqqueue's argument checks).
func vKeys(names ...string) check {
	return func(k string, v any) []string {
		m, ok := v.(map[string]any)
		if !ok {
			return fail("%s not a list %s", k, eterm(v))
		}
		cs := make([]constraint, len(names))
		for i, n := range names {
			cs[i] = constraint{key: n, fn: func(string, any) []string { return nil }}
		}
		return proplist(k, cs, m)
	}
}

// queueArgs are rabbit_amqqueue:declare_args() (3.10.8).
var queueArgs = []string{"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-dead-letter-strategy", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes",
	"x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer", "x-queue-type",
	"x-quorum-initial-group-size", "x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
	"x-queue-leader-locator"}

// vProperties is rabbit_shovel_parameters.erl validate_properties.
func vProperties(k string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return fail("%s not a list %s", k, eterm(v))
	}
	var cs []constraint
	for _, p := range []string{"content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
		"reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id"} {
		fn := vBinary
		if p == "delivery_mode" || p == "priority" || p == "timestamp" {
			fn = vNumber
		}
		cs = append(cs, constraint{key: p, fn: fn})
	}
	return proplist(k, cs, m)
}

func vDeleteAfter(k string, v any) []string {
	if v == "never" || v == "queue-length" {
		return nil
	}
	if isInteger(v) && !strings.HasPrefix(v.(json.Number).String(), "-") {
		return nil
	}
	return fail(`%s should be a number greater than or equal to 0, "never" or "queue-length", actually was %s`, k, eterm(v))
}

// uriError is amqp_uri:parse's error for uri ("" when it parses), as
// `"URI" not a valid URI: ~p` prints it: {Reason, URI}, wrapped as ~p
// wraps a term past 80 columns.
func uriError(uri string) string {
	var reason string
	scheme, rest, ok := strings.Cut(uri, "://")
	switch {
	case !ok || scheme == "":
		reason = "{unable_to_parse_uri,no_scheme}"
	case scheme != "amqp" && scheme != "amqps":
		reason = "{unexpected_uri_scheme," + estr(scheme) + "}"
	default:
		hostport, _, _ := strings.Cut(rest, "/")
		hostport, _, _ = strings.Cut(hostport, "?")
		if i := strings.LastIndex(hostport, "@"); i >= 0 {
			hostport = hostport[i+1:]
		}
		if i := strings.LastIndex(hostport, ":"); i >= 0 && !strings.Contains(hostport[i:], "]") {
			if p, err := strconv.Atoi(hostport[i+1:]); err == nil && (p < 0 || p > 65535) {
				reason = fmt.Sprintf("{port_out_of_range,%d}", p)
			}
		}
		if reason == "" && scheme == "amqps" && hostport == "" {
			reason = "{badrecord,amqp_params_direct}" // amqps needs a host
		}
	}
	if reason == "" {
		return ""
	}
	prefix := estr(uri) + " not a valid URI: "
	second := estr(uri)
	if uri == "" && !ok {
		second = "[]" // the rest of the input, an empty Erlang string
	}
	term := "{" + reason + "," + second + "}"
	if len(prefix)+len(term) > 80 {
		term = "{" + reason + ",\n" + strings.Repeat(" ", len(prefix)+1) + second + "}"
	}
	return prefix + term
}

// vURI is rabbit_shovel_parameters.erl validate_uri: a URI or a list of
// them (the first bad one's error); a direct URI (no host) names a vhost
// that must exist and that the acting user may open.
func (a *API) vURI(u *auth.User) check {
	var one func(k string, v any) []string
	one = func(k string, v any) []string {
		s, ok := v.(string)
		if !ok {
			l, isList := v.([]any)
			if !isList {
				return fail("%s should be list, actually was %s", k, eterm(v))
			}
			for _, e := range l {
				if errs := one(k, e); len(errs) > 0 {
					return errs
				}
			}
			return nil
		}
		if e := uriError(s); e != "" {
			return []string{e}
		}
		if vh, local := broker.LocalURIVhost(s); local && u != nil {
			if a.srv.LookupVHost(vh) == nil || a.srv.Access().Grant(vh, u.Name).Permission() == nil {
				return fail("user %s may not connect to vhost %s", estr(u.Name), estr(vh))
			}
		}
		return nil
	}
	return one
}

// validateShovel is rabbit_shovel_parameters.erl validate/5 (3.10.8):
// the cross-key checks, then proplist over the keys of the shovel's
// protocols. u is the acting user (nil: not checked, as RabbitMQ's
// internal user none).
func (a *API) validateShovel(name string, def map[string]any, u *auth.User) []string {
	src, dst := def["src-protocol"], def["dest-protocol"]
	srcAMQP10, dstAMQP10 := src == "amqp10", dst == "amqp10"
	var out []string
	if !srcAMQP10 {
		_, hasX := def["src-exchange"]
		_, hasQ := def["src-queue"]
		switch {
		case !hasX && !hasQ:
			out = append(out, "Must specify 'src-exchange' or 'src-queue'")
		case hasX && hasQ:
			out = append(out, "Cannot specify 'src-exchange' and 'src-queue'")
		}
		da, ok := def["src-delete-after"]
		if !ok {
			da = def["delete-after"]
		}
		if isInteger(da) && def["ack-mode"] == "no-ack" {
			out = append(out, "Cannot specify 'no-ack' and numerical 'delete-after'")
		}
	}
	if !dstAMQP10 {
		_, hasX := def["dest-exchange"]
		_, hasQ := def["dest-queue"]
		if hasX && hasQ {
			out = append(out, "Cannot specify 'dest-exchange' and 'dest-queue'")
		}
	}
	uri := a.vURI(u)
	cs := []constraint{
		{key: "reconnect-delay", fn: vNumber},
		{key: "ack-mode", fn: vEnum("no-ack", "on-publish", "on-confirm")},
		{key: "src-protocol", fn: vEnum("amqp10", "amqp091")},
		{key: "dest-protocol", fn: vEnum("amqp10", "amqp091")},
	}
	if srcAMQP10 {
		cs = append(cs, constraint{"src-uri", uri, true}, constraint{"src-address", vBinary, true},
			constraint{key: "src-prefetch-count", fn: vNumber}, constraint{key: "src-delete-after", fn: vDeleteAfter})
	} else {
		cs = append(cs, constraint{"src-uri", uri, true},
			constraint{key: "src-exchange", fn: vBinary}, constraint{key: "src-exchange-key", fn: vBinary},
			constraint{key: "src-queue", fn: vBinary}, constraint{key: "src-queue-args", fn: vKeys(queueArgs...)},
			constraint{key: "src-consumer-args", fn: vKeys("x-priority", "x-cancel-on-ha-failover", "x-stream-offset")},
			constraint{key: "prefetch-count", fn: vNumber}, constraint{key: "src-prefetch-count", fn: vNumber},
			constraint{key: "delete-after", fn: vDeleteAfter}, constraint{key: "src-delete-after", fn: vDeleteAfter})
	}
	if dstAMQP10 {
		cs = append(cs, constraint{"dest-uri", uri, true}, constraint{"dest-address", vBinary, true},
			constraint{key: "dest-add-forward-headers", fn: vBoolean}, constraint{key: "dest-add-timestamp-header", fn: vBoolean},
			constraint{key: "dest-application-properties"}, constraint{key: "dest-message-annotations"},
			constraint{key: "dest-properties"})
		for i := range cs {
			if cs[i].fn == nil {
				cs[i].fn = func(string, any) []string { return nil }
			}
		}
	} else {
		cs = append(cs, constraint{"dest-uri", uri, true},
			constraint{key: "dest-exchange", fn: vBinary}, constraint{key: "dest-exchange-key", fn: vBinary},
			constraint{key: "dest-queue", fn: vQueueName}, constraint{key: "dest-queue-args", fn: vKeys(queueArgs...)},
			constraint{key: "add-forward-headers", fn: vBoolean}, constraint{key: "add-timestamp-header", fn: vBoolean},
			constraint{key: "dest-add-forward-headers", fn: vBoolean}, constraint{key: "dest-add-timestamp-header", fn: vBoolean},
			constraint{key: "publish-properties", fn: vProperties}, constraint{key: "dest-publish-properties", fn: vProperties})
	}
	return append(out, proplist(name, cs, def)...)
}

// validationFailed is RabbitMQ's reason for a refused parameter:
// "Validation failed\n\n" and each line followed by "\n" (unescaped: the
// caller escapes it for the HTTP API).
func validationFailed(lines []string) string {
	return "Validation failed\n\n" + strings.Join(lines, "\n") + "\n"
}

// htmlEscape is the management plugin's escaping of a reason (<, >, &;
// quotes are left alone).
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
