package vhost

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

// Policies and operator policies, as RabbitMQ 3.10 applies them: the
// matching policy of the highest priority (then the first by name) gives
// a queue or exchange its settings; where the queue's arguments set one
// too, the argument wins, except for the limits (message-ttl, expires,
// max-length, max-length-bytes, delivery-limit), where the lower value
// wins (measured: a policy's max-length 10 trims a queue declared with
// x-max-length 20). The matching operator policy of the highest priority
// caps those limits too. Changes apply to live queues at once
// (queue.SetPolicy).

// PolicyDef is a policy as the HTTP API and definitions carry one.
type PolicyDef struct {
	Name       string
	Pattern    string
	ApplyTo    string // queues, classic_queues, exchanges, all
	Priority   int
	Definition map[string]any // JSON values: float64 numbers, strings
	re         *regexp.Regexp
}

// policyKeys maps a policy key to the queue argument it stands for
// (exchange keys map to ""), and what values it takes.
var policyKeys = map[string]struct {
	arg  string
	kind string // "int", "pos" (> 0), "string", "overflow", "mode", "backoff" (>= 1), "fraction" (0 to 1)
}{
	"dead-letter-exchange":    {"x-dead-letter-exchange", "string"},
	"dead-letter-routing-key": {"x-dead-letter-routing-key", "string"},
	"message-ttl":             {"x-message-ttl", "int"},
	"expires":                 {"x-expires", "pos"},
	"max-length":              {"x-max-length", "int"},
	"max-length-bytes":        {"x-max-length-bytes", "int"},
	"overflow":                {"x-overflow", "overflow"},
	"delivery-limit":          {"x-delivery-limit", "anyint"},
	"consumer-timeout":        {"x-consumer-timeout", "int"},
	// RabbitMQ 4.3's delayed retry (retry_args.go), checked there.
	"delayed-retry-type": {"x-delayed-retry-type", "checked"},
	"delayed-retry-min":  {"x-delayed-retry-min", "checked"},
	"delayed-retry-max":  {"x-delayed-retry-max", "checked"},
	"queue-mode":         {"", "mode"},
	// Streams' retention (rabbit_policies.erl validate_policy0).
	"max-age":                       {"x-max-age", "age"},
	"stream-max-segment-size-bytes": {"x-stream-max-segment-size-bytes", "int"},
	"alternate-exchange":            {"", "string"},
	// railmq's own: retry with backoff (queue/retry.go).
	"retry-delay":     {"x-retry-delay", "int"},
	"retry-backoff":   {"x-retry-backoff", "backoff"},
	"retry-delay-max": {"x-retry-delay-max", "pos"},
	"retry-jitter":    {"x-retry-jitter", "fraction"},
	// railmq's message groups (queue/groups.go): a header name.
	"message-group-header": {"x-message-group-header", "nonempty"},
	// The rabbitmq-message-deduplication plugin's keys
	// (rabbit_message_deduplication_policies.ex), with its checks.
	"x-message-deduplication": {"x-message-deduplication", "dedup-bool"},
	"x-cache-size":            {"", "dedup-pos"},
	"x-cache-ttl":             {"", "dedup-pos"},
	"x-cache-persistence":     {"", "dedup-persistence"},
}

// limitArgs are the arguments whose lower value wins between a queue's
// own and its policy's (mergeLimit); x-consumer-timeout too, as
// RabbitMQ 3.12+ reads it (args_policy_lookup with min:
// rabbit_queue_type.erl v4.3.5 get_consumer_timeout).
var limitArgs = map[string]bool{"x-message-ttl": true, "x-expires": true, "x-max-length": true, "x-max-length-bytes": true, "x-delivery-limit": true,
	"x-consumer-timeout": true, "x-delayed-retry-min": true, "x-delayed-retry-max": true}

// operatorKeys are the keys an operator policy may set (numeric caps;
// RabbitMQ 4.3's delayed-retry keys, merged as mergeOperator says).
var operatorKeys = map[string]bool{"message-ttl": true, "expires": true, "max-length": true, "max-length-bytes": true, "delivery-limit": true,
	"delayed-retry-type": true, "delayed-retry-min": true, "delayed-retry-max": true}

// PolicyError is a policy RabbitMQ's validation refuses; Reason is the
// reason it gives ("Validation failed\n\n...\n").
type PolicyError struct{ Detail string }

func (e *PolicyError) Error() string { return "invalid policy: " + e.Detail }

// Reason is RabbitMQ's text for the refusal.
func (e *PolicyError) Reason() string { return "Validation failed\n\n" + e.Detail + "\n" }

func invalidPolicy(format string, args ...any) error {
	return &PolicyError{Detail: fmt.Sprintf(format, args...)}
}

// NewPolicyDef checks a policy as RabbitMQ's validation does (its
// reasons) and compiles its pattern.
func NewPolicyDef(name, pattern, applyTo string, priority int, def map[string]any, operator bool) (*PolicyDef, error) {
	if applyTo == "" {
		applyTo = "all"
	}
	switch applyTo {
	case "queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all":
	default:
		return nil, invalidPolicy("apply-to '%s' unrecognised; should be 'queues', 'exchanges' or 'all'", applyTo)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, invalidPolicy("<<%q>> is not a valid regular expression", pattern)
	}
	if len(def) == 0 {
		return nil, invalidPolicy("no policy settings given")
	}
	if !operator {
		if err := checkFederationPolicy(def); err != nil {
			return nil, err
		}
	}
	var unknown []string
	for k, v := range def {
		if federationPolicyKeys[k] != "" && !operator {
			continue // checkFederationPolicy
		}
		pk, ok := policyKeys[k]
		if !ok || (operator && !operatorKeys[k]) {
			unknown = append(unknown, fmt.Sprintf("{<<%q>>,%s}", k, erlTerm(v)))
			continue
		}
		bad := false
		switch pk.kind {
		case "int", "pos":
			f, isNum := v.(float64)
			bad = !isNum || f != math.Trunc(f) || f < 0 || (pk.kind == "pos" && f < 1)
		case "anyint":
			f, isNum := v.(float64)
			if !isNum || f != math.Trunc(f) {
				// rabbit_policies.erl v4.3.5 validate_policy0
				return nil, invalidPolicy("%s is not a valid delivery limit", erlTerm(v))
			}
		case "string":
			_, isStr := v.(string)
			bad = !isStr
		case "nonempty":
			s, _ := v.(string)
			bad = s == ""
		case "backoff":
			f, isNum := v.(float64)
			bad = !isNum || backoff(f) != ""
		case "fraction":
			f, isNum := v.(float64)
			bad = !isNum || fraction(f) != ""
		case "overflow":
			s, _ := v.(string)
			bad = s != "drop-head" && s != "reject-publish" && s != "reject-publish-dlx"
		case "mode":
			s, _ := v.(string)
			bad = s != "default" && s != "lazy"
		case "age":
			if s, _ := v.(string); maxAgeCheck(s, nil) != "" {
				return nil, invalidPolicy("%s is not a valid max age", erlTerm(v))
			}
		case "dedup-bool":
			if _, isBool := v.(bool); !isBool {
				return nil, invalidPolicy("\"%s\" must be a boolean, got %s", k, erlTerm(v))
			}
		case "dedup-pos":
			if f, isNum := v.(float64); !isNum || f != math.Trunc(f) || f < 1 {
				return nil, invalidPolicy("\"%s\" must be an integer greater than 0, got %s", k, erlTerm(v))
			}
		case "dedup-persistence":
			if s, _ := v.(string); s != "disk" && s != "memory" {
				return nil, invalidPolicy("\"%s\" must be either \"disk\" or \"memory\", got %s", k, erlTerm(v))
			}
		}
		if bad {
			return nil, invalidPolicy("%s %v is invalid", k, v)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, invalidPolicy("[%s] are not recognised policy settings", strings.Join(unknown, ","))
	}
	if err := checkDelayedRetryPolicy(def); err != nil {
		return nil, err
	}
	return &PolicyDef{Name: name, Pattern: pattern, ApplyTo: applyTo, Priority: priority, Definition: def, re: re}, nil
}

func (p *PolicyDef) appliesToQueues() bool {
	return p.ApplyTo == "queues" || p.ApplyTo == "classic_queues" || p.ApplyTo == "quorum_queues" || p.ApplyTo == "streams" || p.ApplyTo == "all"
}

// best is the matching policy for name of the highest priority, then the
// first by name; nil if none matches.
func best(ps []*PolicyDef, name string, forQueue bool) *PolicyDef {
	var b *PolicyDef
	for _, p := range ps {
		if forQueue && !p.appliesToQueues() || !forQueue && p.ApplyTo != "exchanges" && p.ApplyTo != "all" {
			continue
		}
		if !p.re.MatchString(name) {
			continue
		}
		if b == nil || p.Priority > b.Priority || p.Priority == b.Priority && p.Name < b.Name {
			b = p
		}
	}
	return b
}

// AppliedPolicy is what a queue shows of its policies.
type AppliedPolicy struct {
	Policy, OperatorPolicy string         // names, "" for none
	Effective              map[string]any // effective_policy_definition
}

// SetPolicies replaces the vhost's policies and operator policies and
// applies them to every queue and exchange. It must be called with none
// of the vhost's locks held (it waits on queues).
func (v *VHost) SetPolicies(pols, ops []*PolicyDef) {
	v.mu.Lock()
	v.policies, v.opPolicies = pols, ops
	qs := make([]*queue.Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	xs := make([]*exchange.Exchange, 0, len(v.exchanges))
	for _, x := range v.exchanges {
		xs = append(xs, x)
	}
	v.mu.Unlock()
	for _, x := range xs {
		v.exchangePolicy(x, pols)
	}
	for _, q := range qs {
		c := q.Config()
		_, pol, applied := v.policyFor(c.Name, c.Args, pols, ops)
		v.mu.Lock()
		// Kept only for a queue that has a policy and is still here (one
		// deleted meanwhile must not come back into the map).
		if (applied.Policy != "" || applied.OperatorPolicy != "") && v.queues[c.Name] == q {
			v.applied[q] = applied
		} else {
			delete(v.applied, q)
		}
		v.mu.Unlock()
		if err := q.SetPolicy(pol); err != nil && err != queue.ErrDeleted {
			v.log.Warn("applying a policy", zap.String("queue", c.Name), zap.Error(err))
		}
	}
}

// exchangePolicy applies to x what the matching policy of pols (if any)
// sets for exchanges: its alternate exchange and, for a deduplication
// exchange, its window.
func (v *VHost) exchangePolicy(x *exchange.Exchange, pols []*PolicyDef) {
	ae := ""
	p := best(pols, x.Name, false)
	if p != nil {
		ae, _ = p.Definition["alternate-exchange"].(string)
	}
	x.SetPolicyAE(ae)
	if x.Dedup != nil {
		v.dedupPolicy(x, p)
	}
}

// Policies returns the vhost's policies and operator policies.
func (v *VHost) Policies() (pols, ops []*PolicyDef) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.policies, v.opPolicies
}

// AppliedPolicy is what policies give q.
func (v *VHost) AppliedPolicy(q *queue.Queue) AppliedPolicy {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.applied[q]
}

// policyFor merges a queue's arguments with the policies that match it:
// the effective arguments, the queue policy they make (dead-lettering and
// expiry wired to the registry) and what the API shows.
func (v *VHost) policyFor(name string, args amqp.Table, pols, ops []*PolicyDef) (queueArgs, queue.Policy, AppliedPolicy) {
	p, op := best(ofQueueType(pols, args), name, true), best(ofQueueType(ops, args), name, true)
	eff := amqp.Table{}
	shown := map[string]any{}
	if p != nil {
		for k, val := range p.Definition {
			if a := policyKeys[k].arg; a != "" {
				eff[a] = policyValue(val, policyKeys[k].kind)
				shown[k] = val
			}
		}
	}
	for k, val := range args {
		// The queue's own arguments win, but for the limits, the lower,
		// and for x-delayed-retry-type, the policy's (RabbitMQ 4.3:
		// get_delayed_retry_config, policy_has_precedence).
		if _, ok := eff[k]; ok && k == "x-delayed-retry-type" {
			continue
		}
		if cur, ok := amqp.Int(eff[k]); ok && limitArgs[k] {
			if n, isInt := amqp.Int(val); isInt && mergeLimit(k, cur, n) == cur {
				continue
			}
		}
		eff[k] = val
	}
	if p != nil {
		// The plugin reads the policy before the arguments
		// (dedup_arg?): here the policy wins.
		if d, ok := p.Definition["x-message-deduplication"]; ok {
			eff["x-message-deduplication"] = d
		}
	}
	if op != nil {
		for k, val := range op.Definition {
			a := policyKeys[k].arg
			cur, ok := eff[a]
			eff[a] = mergeOperator(k, cur, ok, val)
			// What the API shows: the policy's value merged with the
			// operator's, as JSON numbers.
			if f, isNum := shown[k].(float64); isNum {
				if m, isInt := amqp.Int(mergeOperator(k, int64(f), true, val)); isInt {
					shown[k] = float64(m)
				}
			} else {
				shown[k] = val
			}
		}
	}
	if IsQuorum(args) || IsStream(args) {
		// Its type is checked by its declare (quorum.go, stream.go), not here.
		eff, args = withoutType(eff), withoutType(args)
	}
	qa, err := validateQueueArgs(name, v.name, eff)
	if err != nil {
		// A policy value this queue's arguments make invalid: the
		// queue keeps what its arguments alone give it.
		qa, _ = validateQueueArgs(name, v.name, args)
	}
	applied := AppliedPolicy{Effective: shown}
	if p != nil {
		applied.Policy = p.Name
	}
	if op != nil {
		applied.OperatorPolicy = op.Name
	}
	pol := qa.policy
	pol.ConsumerTimeout = qa.consumerTimeout
	if qa.dlx != nil {
		v.setDeadLetter(&pol, *qa.dlx, qa.dlrk)
	}
	pol.OnExpire = v.forgetQueue
	return qa, pol, applied
}

// erlTerm prints a JSON value as RabbitMQ prints it in its reasons.
func erlTerm(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("<<%q>>", x)
	case float64:
		if x == math.Trunc(x) {
			return fmt.Sprintf("%d", int64(x))
		}
	}
	return fmt.Sprint(v)
}

// policyValue is a JSON policy value as a queue argument: an integer,
// but for the keys that take fractions.
func policyValue(v any, kind string) any {
	if f, ok := v.(float64); ok && kind != "backoff" && kind != "fraction" {
		return int64(f)
	}
	return v
}
