package conformance

import (
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

// In a cluster a federated exchange's link runs on one node (the one that
// runs the shovels), every node's /api/federation-links lists it with
// that node (RabbitMQ's rabbit_federation_mgmt.erl asks every node), a
// restart through another node restarts it where it runs, and when that
// node stops the link runs on another and messages published upstream
// reach the downstream's bindings again.
func TestFederationClusterLinkMoves(t *testing.T) {
	testutil.InProcess(t)
	up := testutil.Start(t, broker.Options{})
	ua := newAPI(t, up)
	sapiVhosts(t, ua, "fcl-up")
	sapiWantStatus(t, ua, "PUT", "/api/exchanges/fcl-up/fx", `{"type":"fanout","durable":true}`, 201)

	nodes := startCluster(t, 3)
	first := &api{t: t, url: nodes[0].api}
	poll.Eventually(t, 30*time.Second, func() bool {
		got, _ := sapiGuest(t, first, "PUT", "/api/vhosts/fcl-down", "")
		return got == 201 || got == 204
	}, "vhost made")
	if got, _ := sapiGuest(t, first, "PUT", "/api/permissions/fcl-down/guest", `{"configure":".*","write":".*","read":".*"}`); got != 201 && got != 204 {
		t.Fatalf("permissions: %d", got)
	}
	sapiWantStatus(t, first, "PUT", "/api/exchanges/fcl-down/fx", `{"type":"fanout","durable":true}`, 201)
	sapiWantStatus(t, first, "PUT", "/api/queues/fcl-down/sink", `{"durable":true,"arguments":{"x-queue-type":"quorum"}}`, 201)
	sapiWantStatus(t, first, "POST", "/api/bindings/fcl-down/e/fx/q/sink", `{"routing_key":""}`, 201)
	sapiWantStatus(t, first, "PUT", "/api/parameters/federation-upstream/fcl-down/up",
		`{"value":{"uri":"amqp://guest:guest@`+up.Addr+`/fcl-up","reconnect-delay":1}}`, 201)
	sapiWantStatus(t, first, "PUT", "/api/policies/fcl-down/fed", `{"pattern":"^fx$","apply-to":"exchanges","definition":{"federation-upstream":"up"}}`, 201)

	// runner is the node every live node lists the running link on.
	runner := func(live []*clusterNode) (*clusterNode, string) {
		var r *clusterNode
		var id string
		poll.Eventually(t, 60*time.Second, func() bool {
			r = nil
			on := map[any]bool{}
			for _, nd := range live {
				l := fapiLinks(t, &api{t: t, url: nd.api}, "/api/federation-links/fcl-down")
				if len(l) != 1 || l[0]["status"] != "running" {
					return false
				}
				on[l[0]["node"]] = true
				id, _ = l[0]["id"].(string)
			}
			for _, nd := range live {
				if on[nd.name] {
					r = nd
				}
			}
			return len(on) == 1 && r != nil
		}, "the link running on one node, listed so by every node")
		return r, id
	}
	r1, id := runner(nodes)
	var live []*clusterNode
	for _, n := range nodes {
		if n != r1 {
			live = append(live, n)
		}
	}
	other := &api{t: t, url: live[0].api}
	sapiWantStatus(t, other, "DELETE", "/api/federation-links/vhost/fcl-down/"+id+"/"+r1.name+"/restart", "", 204)

	uch := openChannel(t, dial(t, up.URL+"fcl-up"))
	dch := openChannel(t, dial(t, live[0].b.URL+"fcl-down"))
	// While sink's leader moves with a stopped node a get may fail with
	// 541 (which closes the connection): read again on a new one.
	// Published upstream until one arrives (the binding upstream is made
	// as the link starts).
	arrives := func(body string) {
		t.Helper()
		poll.Eventually(t, 60*time.Second, func() bool {
			if err := uch.Publish("fx", "", false, false, rmq.Publishing{Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			m, ok, err := dch.Get("sink", true)
			if err != nil {
				dch = openChannel(t, dial(t, live[0].b.URL+"fcl-down"))
				return false
			}
			return ok && string(m.Body) == body
		}, "%s at the downstream sink", body)
	}
	arrives("before")
	r1.stop()
	if r2, _ := runner(live); r2 == r1 {
		t.Fatal("the link still on the stopped node")
	}
	arrives("after")
}

// A link removed for good (its policy deleted) removes the queue and the
// exchange it made upstream, as RabbitMQ's does
// (rabbit_federation_exchange_link.erl terminate/2, v3.10.8), unless the
// upstream's resource-cleanup-mode is never.
func TestFederationLinkRemovedCleansUpstream(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fcu-up", "fcu-down")
	node := sapiClusterName(t, a)
	for _, x := range []string{"kx", "nx"} {
		for _, v := range []string{"fcu-up", "fcu-down"} {
			sapiWantStatus(t, a, "PUT", "/api/exchanges/"+v+"/"+x, `{"type":"fanout","durable":true}`, 201)
		}
	}
	uri := "amqp://guest:guest@" + b.Addr + "/fcu-up"
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fcu-down/clean", `{"value":{"uri":"`+uri+`"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fcu-down/keep", `{"value":{"uri":"`+uri+`","resource-cleanup-mode":"never"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fcu-down/k", `{"pattern":"^kx$","apply-to":"exchanges","definition":{"federation-upstream":"clean"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fcu-down/n", `{"pattern":"^nx$","apply-to":"exchanges","definition":{"federation-upstream":"keep"}}`, 201)
	esc := func(s string) string {
		return strings.NewReplacer(" ", "%20", ">", "%3E", ":", "%3A", "@", "%40").Replace(s)
	}
	exists := func(kind, name string) bool {
		got, _ := sapiGuest(t, a, "GET", "/api/"+kind+"/fcu-up/"+esc(name), "")
		return got == 200
	}
	qname := func(x string) string { return "federation: " + x + " -> " + node + ":fcu-down:" + x }
	poll.Eventually(t, 30*time.Second, func() bool {
		return exists("queues", qname("kx")) && exists("queues", qname("nx")) &&
			exists("exchanges", qname("kx")+" B") && exists("exchanges", qname("nx")+" B")
	}, "both links' upstream queues and exchanges made")
	sapiWantStatus(t, a, "DELETE", "/api/policies/fcu-down/k", "", 204)
	sapiWantStatus(t, a, "DELETE", "/api/policies/fcu-down/n", "", 204)
	poll.Eventually(t, 30*time.Second, func() bool {
		return len(fapiLinks(t, a, "/api/federation-links/fcu-down")) == 0 &&
			!exists("queues", qname("kx")) && !exists("exchanges", qname("kx")+" B")
	}, "kx's link gone with its upstream queue and exchange")
	if !exists("queues", qname("nx")) {
		t.Fatal("resource-cleanup-mode never: the upstream queue was deleted")
	}
}

// A binding made downstream after the link runs is repeated upstream, and
// one removed downstream is removed upstream (the link follows the
// exchange's bindings as they change).
func TestFederationBindingsFollowed(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	sapiVhosts(t, a, "fbf-up", "fbf-down")
	for _, v := range []string{"fbf-up", "fbf-down"} {
		sapiWantStatus(t, a, "PUT", "/api/exchanges/"+v+"/fx", `{"type":"topic","durable":true}`, 201)
	}
	sapiWantStatus(t, a, "PUT", "/api/queues/fbf-down/sink", `{"durable":true}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/parameters/federation-upstream/fbf-down/up",
		`{"value":{"uri":"amqp://guest:guest@`+b.Addr+`/fbf-up"}}`, 201)
	sapiWantStatus(t, a, "PUT", "/api/policies/fbf-down/f", `{"pattern":"^fx$","apply-to":"exchanges","definition":{"federation-upstream":"up"}}`, 201)
	poll.Eventually(t, 30*time.Second, func() bool {
		l := fapiLink(t, a, "fbf-down", "exchange", "fx")
		return l != nil && l["status"] == "running"
	}, "link running")
	upKeys := func() []string {
		var bs []map[string]any
		a.call("GET", "/api/exchanges/fbf-up/fx/bindings/source", "guest", "guest", nil, &bs)
		var keys []string
		for _, x := range bs {
			keys = append(keys, x["routing_key"].(string))
		}
		return keys
	}
	sapiWantStatus(t, a, "POST", "/api/bindings/fbf-down/e/fx/q/sink", `{"routing_key":"k.#"}`, 201)
	poll.Eventually(t, 30*time.Second, func() bool { k := upKeys(); return len(k) == 1 && k[0] == "k.#" },
		"the new binding upstream: %v", upKeys())
	uch := openChannel(t, dial(t, b.URL+"fbf-up"))
	if err := uch.Publish("fx", "k.1", false, false, rmq.Publishing{Body: []byte("k1")}); err != nil {
		t.Fatal(err)
	}
	dch := openChannel(t, dial(t, b.URL+"fbf-down"))
	if m := fedGet(t, dch, "sink"); string(m.Body) != "k1" {
		t.Fatalf("sink got %q", m.Body)
	}
	sapiWantStatus(t, a, "DELETE", "/api/bindings/fbf-down/e/fx/q/sink/k.%2523", "", 204)
	poll.Eventually(t, 30*time.Second, func() bool { return len(upKeys()) == 0 }, "the binding still upstream: %v", upKeys())
}
