package vhost

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/railmq/railmq/amqp"
)

// federationForward is the x-federation-upstream exchange's route check
// (rabbit_federation_upstream_exchange.erl route/2 and
// rabbit_federation_util.erl should_forward/4, v3.10.8): a message whose
// x-received-from array already has x-max-hops entries, or names the
// exchange's downstream (x-downstream-name and x-downstream-vhost as
// cluster-name and vhost), goes nowhere; any other goes to every binding.
func federationForward(args, headers amqp.Table) bool {
	been, ok := headers["x-received-from"].([]any)
	if !ok {
		return true
	}
	maxHops, _ := amqp.Int(args["x-max-hops"])
	if int64(len(been)) >= maxHops {
		return false
	}
	name, _ := args["x-downstream-name"].(string)
	vh, _ := args["x-downstream-vhost"].(string)
	for _, e := range been {
		t, ok := e.(amqp.Table)
		if ok && t["cluster-name"] == name && t["vhost"] == vh {
			return false
		}
	}
	return true
}

// federationExchangeArgs is the type's validate/1: x-max-hops must be
// there, a long (rabbit_federation_util.erl validate_arg/3, v3.10.8).
func federationExchangeArgs(args amqp.Table) error {
	v, ok := args["x-max-hops"]
	if !ok {
		return amqp.Errorf(amqp.PreconditionFailed, "Argument x-max-hops missing")
	}
	if _, isLong := v.(int64); !isLong { // RabbitMQ's long is the 64-bit l
		return amqp.Errorf(amqp.PreconditionFailed, "Argument x-max-hops must be of type long")
	}
	return nil
}

// federationPolicyKeys are the federation plugin's policy keys; what is
// set under them names upstreams (rabbit_federation_parameters.erl
// validate_policy/1, v3.10.8, with the pattern key of later versions).
var federationPolicyKeys = map[string]string{
	"federation-upstream":         "upstream",
	"federation-upstream-set":     "upstream set",
	"federation-upstream-pattern": "upstream pattern",
}

// checkFederationPolicy is validate_policy/1 over def's federation keys.
func checkFederationPolicy(def map[string]any) error {
	n := 0
	for k := range def {
		if federationPolicyKeys[k] != "" {
			n++
		}
	}
	if n >= 2 {
		return invalidPolicy("cannot specify federation-upstream, federation-upstream-set or federation-upstream-pattern together")
	}
	for k, v := range def {
		what := federationPolicyKeys[k]
		if what == "" {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return invalidPolicy("%s is not a valid federation %s name", erlTerm(v), what)
		}
		if k == "federation-upstream-pattern" {
			if _, err := regexp.Compile(s); err != nil {
				return invalidPolicy("could not compile pattern %s to a regular expression. Error: %s", s, pcreError(s, err))
			}
		}
	}
	return nil
}

// pcreError is how Erlang's re:compile/1 reports what Go's regexp
// refused, as {"text",Offset} (texts of PCRE, checked with Erlang/OTP's
// re on this machine); an error PCRE words otherwise keeps Go's text.
func pcreError(pattern string, err error) string {
	var se *syntax.Error
	if !errors.As(err, &se) {
		return fmt.Sprintf("{%q,0}", err.Error())
	}
	at := max(strings.Index(pattern, se.Expr), 0)
	text := se.Code.String()
	switch se.Code {
	case syntax.ErrMissingParen:
		text, at = "missing )", len(pattern)
	case syntax.ErrUnexpectedParen:
		text = "unmatched parentheses"
	case syntax.ErrMissingBracket:
		text, at = "missing terminating ] for character class", len(pattern)
	case syntax.ErrMissingRepeatArgument:
		text = "nothing to repeat"
	case syntax.ErrTrailingBackslash:
		text, at = `\ at end of pattern`, len(pattern)
	case syntax.ErrInvalidCharRange:
		text = "range out of order in character class"
	}
	return fmt.Sprintf("{%q,%d}", text, at)
}

// HasFederationPolicy reports whether any of the vhost's policies sets a
// federation key (so that nothing else need be looked at when none does).
func (v *VHost) HasFederationPolicy() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, p := range v.policies {
		for k := range p.Definition {
			if federationPolicyKeys[k] != "" {
				return true
			}
		}
	}
	return false
}

// FederationPolicy is the federation key and value the policy applying
// to exchange name (args nil) or queue name (its arguments) sets: key ""
// when it sets none.
func (v *VHost) FederationPolicy(name string, forQueue bool, args amqp.Table) (key, val string) {
	v.mu.RLock()
	pols := v.policies
	v.mu.RUnlock()
	if forQueue {
		pols = ofQueueType(pols, args)
	}
	p := best(pols, name, forQueue)
	if p == nil {
		return "", ""
	}
	for k, x := range p.Definition {
		if federationPolicyKeys[k] != "" {
			s, _ := x.(string)
			return k, s
		}
	}
	return "", ""
}
