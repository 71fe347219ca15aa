package federation

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/railmq/railmq/shovel"
)

// AckMode says when an upstream message is acknowledged (ack-mode).
type AckMode string

// The ack modes, as RabbitMQ spells them.
const (
	// OnConfirm acks upstream after the downstream accepted the message
	// (Publisher.Publish returned nil): at-least-once. The default.
	OnConfirm AckMode = "on-confirm"
	// OnPublish acks upstream once the message is handed to the
	// downstream, before it is known to be stored.
	OnPublish AckMode = "on-publish"
	// NoAck consumes upstream with auto-ack.
	NoAck AckMode = "no-ack"
)

// Defaults, as rabbit_federation_upstream.erl (v3.10.8 from_upstream_or_set).
const (
	DefaultPrefetchCount  = 1000
	DefaultReconnectDelay = 5 * time.Second
	DefaultMaxHops        = 1
)

// Upstream is a federation-upstream (or one upstream as an upstream set
// names it, with the set entry's keys over the upstream's).
type Upstream struct {
	Name string
	// URIs are tried in turn on each (re)connect; RabbitMQ picks one at
	// random.
	URIs []string
	// Exchange and Queue override the upstream exchange or queue name
	// (default: the downstream's name).
	Exchange, Queue string
	// ConsumerTag is the queue link's consumer tag upstream (default
	// "federation-link-" + Name).
	ConsumerTag    string
	PrefetchCount  int
	ReconnectDelay time.Duration
	MaxHops        int
	// Expires and MessageTTL are the upstream queue's x-expires and
	// x-message-ttl in ms (exchange links); 0 means none.
	Expires, MessageTTL int64
	TrustUserID         bool
	AckMode             AckMode
	HAPolicy            string
	// ResourceCleanupMode "never" keeps the upstream queue and exchange
	// when a link is removed.
	ResourceCleanupMode string
}

// ErrorLines is a validation failure: the lines RabbitMQ 3.10.8 prints
// after "Validation failed\n\n", in its order, with Erlang's ~p rendering
// of values (<<"x">> for a string), not yet HTML-escaped (the management
// API escapes them, as RabbitMQ's does).
type ErrorLines []string

func (e ErrorLines) Error() string {
	return "Validation failed\n\n" + strings.Join(e, "\n") + "\n"
}

// constraint is one entry of rabbit_parameter_validation:proplist/3's list.
type constraint struct {
	key       string
	check     func(k string, v any) string // "" if valid
	mandatory bool
}

func number(k string, v any) string {
	if _, ok := v.(float64); ok {
		return ""
	}
	return fmt.Sprintf("%s should be a number, actually was %s", k, Erl(v))
}

func binary(k string, v any) string {
	if _, ok := v.(string); ok {
		return ""
	}
	return fmt.Sprintf("%s should be binary, actually was %s", k, Erl(v))
}

func boolean(k string, v any) string {
	if _, ok := v.(bool); ok {
		return ""
	}
	return fmt.Sprintf("%s should be boolean, actually was %s", k, Erl(v))
}

func enum(vals ...string) func(string, any) string {
	return func(k string, v any) string {
		if s, ok := v.(string); ok {
			for _, x := range vals {
				if s == x {
					return ""
				}
			}
		}
		q := make([]string, len(vals))
		for i, x := range vals {
			q[i] = Erl(x)
		}
		return fmt.Sprintf("%s should be one of [%s], actually was %s", k, strings.Join(q, ","), Erl(v))
	}
}

// shared is rabbit_federation_parameters.erl's shared_validation (v3.10.8).
var shared = []constraint{
	{"exchange", binary, false},
	{"queue", binary, false},
	{"consumer-tag", binary, false},
	{"prefetch-count", number, false},
	{"reconnect-delay", number, false},
	{"max-hops", number, false},
	{"expires", number, false},
	{"message-ttl", number, false},
	{"trust-user-id", boolean, false},
	{"ack-mode", enum("no-ack", "on-publish", "on-confirm"), false},
	{"resource-cleanup-mode", enum("default", "never"), false},
	{"ha-policy", binary, false},
	{"bind-nowait", boolean, false},
	{"channel-use-mode", enum("multiple", "single"), false},
}

// proplist is rabbit_parameter_validation:proplist/3: the unrecognised
// keys first, then each constraint's failure in reverse order.
func proplist(name string, cons []constraint, def map[string]any) []string {
	var res []string
	seen := map[string]bool{}
	for _, c := range cons {
		v, ok := def[c.key]
		seen[c.key] = true
		switch {
		case ok:
			if e := c.check(c.key, v); e != "" {
				res = append(res, e)
			}
		case c.mandatory:
			res = append(res, fmt.Sprintf("Key %q not found in %s", c.key, name))
		}
	}
	var rest []string
	for k := range def {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	for i, j := 0, len(res)-1; i < j; i, j = i+1, j-1 {
		res[i], res[j] = res[j], res[i]
	}
	if len(rest) > 0 {
		sort.Strings(rest)
		terms := make([]string, len(rest))
		for i, k := range rest {
			terms[i] = "{" + Erl(k) + "," + Erl(def[k]) + "}"
		}
		res = append([]string{fmt.Sprintf("Unrecognised terms [%s] in %s", strings.Join(terms, ","), name)}, res...)
	}
	return res
}

// validateURI is validate_uri/2: a string or a list of strings, the first
// bad URI's error.
func validateURI(k string, v any) string {
	switch t := v.(type) {
	case string:
		return uriError(t)
	case []any:
		for _, u := range t {
			if e := validateURI(k, u); e != "" {
				return e
			}
		}
		return ""
	}
	return fmt.Sprintf("%s should be list, actually was %s", k, Erl(v))
}

// uriError is amqp_uri:parse's complaint as validate_uri prints it; the
// scheme and empty cases have RabbitMQ's exact text, others carry
// amqp091-go's reason in the same frame.
func uriError(u string) string {
	if u == "" {
		return `"" not a valid URI: {{unable_to_parse_uri,no_scheme},[]}`
	}
	if pu, err := url.Parse(u); err == nil && pu.Scheme != "amqp" && pu.Scheme != "amqps" {
		if pu.Scheme == "" {
			return fmt.Sprintf(`"%s" not a valid URI: {{unable_to_parse_uri,no_scheme},%q}`, u, u)
		}
		return fmt.Sprintf(`"%s" not a valid URI: {{unexpected_uri_scheme,%q},%q}`, u, pu.Scheme, u)
	}
	if shovel.IsLocal(u) {
		return ""
	}
	if _, err := shovel.ParseURI(u); err != nil {
		return fmt.Sprintf(`"%s" not a valid URI: {%q,%q}`, u, err.Error(), u)
	}
	return ""
}

// ValidateUpstream checks a federation-upstream value as RabbitMQ 3.10.8
// does (name is the parameter's name, quoted in "not found" texts); nil
// or ErrorLines.
func ValidateUpstream(name string, def map[string]any) error {
	cons := append([]constraint{{"uri", validateURI, true}}, shared...)
	if e := proplist(name, cons, def); len(e) > 0 {
		return ErrorLines(e)
	}
	return nil
}

// ValidateSet checks a federation-upstream-set value (a JSON array of
// objects); nil or ErrorLines.
func ValidateSet(name string, def []any) error {
	cons := append([]constraint{{"upstream", binary, true}}, shared...)
	var lines []string
	for _, e := range def {
		m, ok := e.(map[string]any)
		if !ok {
			lines = append(lines, fmt.Sprintf("%s should be a JSON object, actually was %s", name, Erl(e)))
			continue
		}
		lines = append(lines, proplist(name, cons, m)...)
	}
	if len(lines) > 0 {
		return ErrorLines(lines)
	}
	return nil
}

// ParseUpstream validates and reads a federation-upstream value, filling
// RabbitMQ's defaults.
func ParseUpstream(name string, def map[string]any) (Upstream, error) {
	if err := ValidateUpstream(name, def); err != nil {
		return Upstream{}, err
	}
	u := Upstream{Name: name}
	switch t := def["uri"].(type) {
	case string:
		u.URIs = []string{t}
	case []any:
		for _, x := range t {
			u.URIs = append(u.URIs, x.(string))
		}
	}
	u.apply(def, true)
	return u, nil
}

// apply reads the shared keys of def over u's; with defaults it first
// sets RabbitMQ's defaults.
func (u *Upstream) apply(def map[string]any, defaults bool) {
	if defaults {
		u.PrefetchCount, u.ReconnectDelay, u.MaxHops = DefaultPrefetchCount, DefaultReconnectDelay, DefaultMaxHops
		u.AckMode, u.ConsumerTag, u.ResourceCleanupMode = OnConfirm, "federation-link-"+u.Name, "default"
	}
	str := func(k string, p *string) {
		if v, ok := def[k].(string); ok {
			*p = v
		}
	}
	num := func(k string) (float64, bool) { v, ok := def[k].(float64); return v, ok }
	str("exchange", &u.Exchange)
	str("queue", &u.Queue)
	str("consumer-tag", &u.ConsumerTag)
	str("ha-policy", &u.HAPolicy)
	str("resource-cleanup-mode", &u.ResourceCleanupMode)
	if v, ok := def["ack-mode"].(string); ok {
		u.AckMode = AckMode(v)
	}
	if v, ok := num("prefetch-count"); ok {
		u.PrefetchCount = int(v)
	}
	if v, ok := num("reconnect-delay"); ok {
		u.ReconnectDelay = time.Duration(v * float64(time.Second))
	}
	if v, ok := num("max-hops"); ok {
		u.MaxHops = int(v)
	}
	if v, ok := num("expires"); ok {
		u.Expires = int64(v)
	}
	if v, ok := num("message-ttl"); ok {
		u.MessageTTL = int64(v)
	}
	if v, ok := def["trust-user-id"].(bool); ok {
		u.TrustUserID = v
	}
}

// SetEntry is one element of a federation-upstream-set: the upstream it
// names and the keys overriding that upstream's.
type SetEntry struct {
	Upstream  string
	Overrides map[string]any
}

// ParseSet validates and reads a federation-upstream-set value.
func ParseSet(name string, def []any) ([]SetEntry, error) {
	if err := ValidateSet(name, def); err != nil {
		return nil, err
	}
	out := make([]SetEntry, 0, len(def))
	for _, e := range def {
		m := e.(map[string]any)
		out = append(out, SetEntry{Upstream: m["upstream"].(string), Overrides: m})
	}
	return out, nil
}

// Resolve is the upstreams a policy's federation-upstream-set names: the
// entries of set whose upstream exists in upstreams (unknown names are
// skipped, as RabbitMQ does), each with the entry's keys over the
// upstream's; set name "all" is every upstream of the vhost, by name.
func Resolve(setName string, set []SetEntry, upstreams map[string]Upstream) []Upstream {
	if setName == "all" {
		names := make([]string, 0, len(upstreams))
		for n := range upstreams {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]Upstream, 0, len(names))
		for _, n := range names {
			out = append(out, upstreams[n])
		}
		return out
	}
	var out []Upstream
	for _, e := range set {
		u, ok := upstreams[e.Upstream]
		if !ok {
			continue
		}
		u.apply(e.Overrides, false)
		out = append(out, u)
	}
	return out
}

// Erl renders a JSON-decoded value as Erlang's ~p prints the term
// RabbitMQ made of it: <<"x">> for a string, 5 or 1.5 for a number,
// true/false, [..] for a list, a proplist for an object (no line
// wrapping at 80 columns).
func Erl(v any) string {
	switch t := v.(type) {
	case string:
		return "<<" + strconv.Quote(t) + ">>"
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1e15 {
			return strconv.FormatInt(int64(t), 10)
		}
		return strconv.FormatFloat(t, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(t)
	case nil:
		return "null"
	case []any:
		s := make([]string, len(t))
		for i, x := range t {
			s[i] = Erl(x)
		}
		return "[" + strings.Join(s, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := make([]string, len(keys))
		for i, k := range keys {
			s[i] = "{" + Erl(k) + "," + Erl(t[k]) + "}"
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	return fmt.Sprint(v)
}
