package vhost

import (
	"testing"

	"github.com/railmq/railmq/amqp"
)

// TestFederationPolicyKeys: the policy keys' texts of RabbitMQ 3.10.8
// (rabbit_federation_parameters.erl validate_policy/1; the regular
// expression errors as Erlang/OTP's re:compile/1 words them), and that
// an operator policy does not take them.
func TestFederationPolicyKeys(t *testing.T) {
	for _, tc := range []struct {
		def  map[string]any
		want string
	}{
		{map[string]any{"federation-upstream": float64(5)}, "5 is not a valid federation upstream name"},
		{map[string]any{"federation-upstream-set": float64(5)}, "5 is not a valid federation upstream set name"},
		{map[string]any{"federation-upstream": "a", "federation-upstream-set": "b"},
			"cannot specify federation-upstream, federation-upstream-set or federation-upstream-pattern together"},
		{map[string]any{"federation-upstream-pattern": "("}, `could not compile pattern ( to a regular expression. Error: {"missing )",1}`},
		{map[string]any{"federation-upstream-pattern": ")"}, `could not compile pattern ) to a regular expression. Error: {"unmatched parentheses",0}`},
		{map[string]any{"federation-upstream-pattern": "["}, `could not compile pattern [ to a regular expression. Error: {"missing terminating ] for character class",1}`},
		{map[string]any{"federation-upstream-pattern": "*"}, `could not compile pattern * to a regular expression. Error: {"nothing to repeat",0}`},
		{map[string]any{"federation-upstream": "nosuch"}, ""},
		{map[string]any{"federation-upstream-set": "all", "max-length": float64(3)}, ""},
	} {
		_, err := NewPolicyDef("p", ".*", "all", 0, tc.def, false)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.(*PolicyError).Detail != tc.want) {
			t.Errorf("%v: got %v, want %q", tc.def, err, tc.want)
		}
	}
	if _, err := NewPolicyDef("op", ".*", "queues", 0, map[string]any{"federation-upstream": "u"}, true); err == nil {
		t.Error("an operator policy took federation-upstream")
	}
}

// TestFederationUpstreamExchange: the x-federation-upstream exchange
// routes as fanout what has fewer hops than x-max-hops and has not been
// to its downstream (should_forward/4, v3.10.8); its declare wants
// x-max-hops as a long (validate_arg/3).
func TestFederationUpstreamExchange(t *testing.T) {
	args := amqp.Table{"x-max-hops": int64(2), "x-downstream-name": "d@n", "x-downstream-vhost": "dv"}
	hop := func(cluster, vh string) amqp.Table { return amqp.Table{"cluster-name": cluster, "vhost": vh} }
	for _, tc := range []struct {
		headers amqp.Table
		want    bool
	}{
		{nil, true},
		{amqp.Table{"x-received-from": []any{hop("x", "v")}}, true},
		{amqp.Table{"x-received-from": []any{hop("x", "v"), hop("y", "v")}}, false}, // two hops made
		{amqp.Table{"x-received-from": []any{hop("d@n", "dv")}}, false},             // been downstream
		{amqp.Table{"x-received-from": []any{hop("d@n", "other")}}, true},
		{amqp.Table{"x-received-from": "not an array"}, true},
	} {
		if got := federationForward(args, tc.headers); got != tc.want {
			t.Errorf("%v: forward %v, want %v", tc.headers, got, tc.want)
		}
	}
	for _, tc := range []struct {
		args amqp.Table
		want string
	}{
		{amqp.Table{}, "PRECONDITION_FAILED - Argument x-max-hops missing"},
		{amqp.Table{"x-max-hops": int32(1)}, "PRECONDITION_FAILED - Argument x-max-hops must be of type long"},
		{amqp.Table{"x-max-hops": int64(1)}, ""},
	} {
		err := federationExchangeArgs(tc.args)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.(*amqp.Error).Text != tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// FuzzFederationForward: whatever headers a message carries (any table
// the wire decoder accepts), the x-federation-upstream exchange's check
// answers without panicking.
func FuzzFederationForward(f *testing.F) {
	for _, h := range []amqp.Table{
		nil,
		{"x-received-from": []any{amqp.Table{"cluster-name": "a", "vhost": "v"}}},
		{"x-received-from": []any{int32(1), "x", nil}},
		{"x-received-from": amqp.Table{"a": 1}},
	} {
		b := amqp.AppendTable(nil, h)
		f.Add(b[4:], int64(1)) // without the length prefix
	}
	f.Fuzz(func(t *testing.T, raw []byte, hops int64) {
		h, err := amqp.DecodeTable(raw)
		if err != nil {
			return
		}
		federationForward(amqp.Table{"x-max-hops": hops, "x-downstream-name": "a", "x-downstream-vhost": "v"}, h)
	})
}
