package mgmt

import (
	"net/url"
	"testing"
)

// The list query parameters (columns with dotted paths, page, page_size,
// name, use_regex, sort, sort_reverse, and the samples' lengths_age and
// lengths_incr) on every kind of list: any query string is answered, never
// with a 5xx, and a 4xx is RabbitMQ's {"error","reason"}. And the bodies
// of the global parameters, the cluster name, the queue actions and a
// policy with classic mirroring keys.

func FuzzListQuery(f *testing.F) {
	for _, s := range []string{
		"columns=name,message_stats.publish_details.rate", "columns=message_stats.publish_details.rate,recv_oct_details.rate,,.",
		"page=1&page_size=1", "page=2&page_size=500&name=fz", "page=0", "page=x", "page=1&page_size=501", "page=-1&page_size=-1",
		"page=1&name=(&use_regex=true", "page=1&name=%5Efz-.*%24&use_regex=true&sort=name&sort_reverse=true",
		"sort=message_stats.publish_details.rate&sort_reverse=true", "sort=...", "columns=a.b.c.d.e.f&sort=a.b",
		"lengths_age=60&lengths_incr=5&msg_rates_age=600&msg_rates_incr=5", "lengths_age=-1&lengths_incr=0", "lengths_age=99999999999999999999",
		"page=9223372036854775807&page_size=1", "columns=%00&name=%ff",
	} {
		f.Add(s)
	}
	h := fuzzAPI(f)
	paths := []string{"/api/queues", "/api/exchanges", "/api/bindings", "/api/connections", "/api/channels", "/api/consumers",
		"/api/vhosts", "/api/users", "/api/policies", "/api/permissions", "/api/global-parameters", "/api/feature-flags",
		"/api/vhosts/%2F/connections", "/api/queues/%2F/fz-q", "/api/overview", "/api/nodes", "/api/vhost-limits"}
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return // no client sends it
		}
		q = v.Encode() // as a client sends it: a request line has no raw spaces
		for _, p := range paths {
			code, out := fuzzCall(h, "GET", p+"?"+q, nil)
			checkAnswer(t, code, out, []byte(p+"?"+q))
		}
	})
}

func FuzzPutGlobalParameter(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/global-parameters/fz-g", `{"value":"v"}`, `{"value":{"a":[1,2,{"b":null}]}}`, `{"value":null}`, `{"x":1}`)
}

func FuzzPutClusterName(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/cluster-name", `{"name":"fz"}`, `{"name":5}`, `{"name":""}`, `{"name":null}`)
}

func FuzzQueueActions(f *testing.F) {
	fuzzRoute(f, "POST", "/api/queues/%2F/fz-q/actions", `{"action":"sync"}`, `{"action":"cancel_sync"}`, `{"action":5}`, `{"action":"foo"}`)
}

func FuzzPutPolicyMirroring(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/policies/%2F/fz-ha",
		`{"pattern":".*","definition":{"ha-mode":"exactly","ha-params":2,"ha-sync-mode":"automatic"}}`,
		`{"pattern":".*","definition":{"ha-mode":["x"],"ha-promote-on-shutdown":{"a":1},"max-length":1}}`,
		`{"pattern":"(","definition":{"ha-mode":"all"}}`)
}
