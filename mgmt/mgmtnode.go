package mgmt

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

// /api/overview and /api/nodes: the figures operators' tools read, under
// RabbitMQ's names. rabbitmq_version and management_version say which
// RabbitMQ's API this one follows (tools pick features by them);
// product_name and product_version say what answers.

var exchangeTypes = func() []map[string]any {
	var out []map[string]any
	for _, k := range []exchange.Kind{exchange.Direct, exchange.Fanout, exchange.Headers, exchange.Topic} {
		out = append(out, map[string]any{"name": k.String(), "description": "AMQP " + k.String() + " exchange, as per the AMQP specification", "enabled": true})
	}
	// Built in: described as the rabbitmq-message-deduplication plugin
	// describes it (description/0).
	out = append(out, map[string]any{"name": exchange.Dedup.String(), "description": "Message Deduplication Exchange.", "enabled": true})
	// Built in; RabbitMQ lists it so with its plugin enabled.
	return append(out, map[string]any{"name": exchange.ConsistentHash.String(), "description": "Consistent Hashing Exchange", "enabled": true})
}()

func (a *API) apiOverview(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	var ready, unacked, pub, dlv, ack, redel int64
	var nq, nx, ncons int
	vis := map[*queue.Queue]bool{}
	for _, st := range a.srv.VHosts() {
		if !a.canSee(u, st.Name()) {
			continue
		}
		nx += len(st.Exchanges()) + 1
		for _, q := range st.Queues() {
			nq++
			vis[q] = true
			ready += q.Ready()
			unacked += q.Unacked()
			ncons += int(q.Consumers())
			p, d, ak, rd := q.Counters()
			pub, dlv, ack, redel = pub+p, dlv+d, ack+ak, redel+rd
		}
	}
	nconn, nch := 0, 0
	for _, c := range a.visibleConns(r) {
		nconn++
		nch += c.Channels
	}
	ns := a.srv.Status()
	var listeners []map[string]any
	for _, p := range ns.Listeners {
		listeners = append(listeners, map[string]any{"node": a.srv.NodeName(), "protocol": "amqp", "ip_address": "::", "port": p})
	}
	if listeners == nil {
		listeners = []map[string]any{}
	}
	rates := a.totalRates(func(q *queue.Queue) bool { return vis[q] })
	rate := func(v float64) map[string]float64 { return map[string]float64{"rate": float64(int64(v*10)) / 10} }
	m := map[string]any{
		"management_version": broker.CompatVersion, "rabbitmq_version": broker.CompatVersion, "rates_mode": "basic",
		"product_name": "railmq", "product_version": a.srv.Version(),
		"cluster_name": a.clusterName(), "node": a.srv.NodeName(), "erlang_version": runtime.Version(),
		"exchange_types": exchangeTypes, "disable_stats": false, "enable_queue_totals": false,
		"message_stats": map[string]any{"publish": pub, "publish_details": rate(rates[0]), "deliver_get": dlv, "deliver_get_details": rate(rates[1]),
			"ack": ack, "ack_details": rate(rates[2]), "redeliver": redel, "redeliver_details": rate(rates[3])},
		"queue_totals": map[string]any{"messages": ready + unacked, "messages_details": rate0, "messages_ready": ready,
			"messages_ready_details": rate0, "messages_unacknowledged": unacked, "messages_unacknowledged_details": rate0},
		"object_totals":             map[string]int{"connections": nconn, "channels": nch, "exchanges": nx, "queues": nq, "consumers": ncons},
		"statistics_db_event_queue": 0, "listeners": listeners, "contexts": []any{},
		"memory_used": ns.MemoryHeld,
	}
	a.addLeaseStats(m["message_stats"].(map[string]any), seesAll(u)) // lease.go
	// The totals' history is the whole broker's: for those who see it all.
	if age, incr, ok := historyParams(r); ok && seesAll(u) {
		qt := m["queue_totals"].(map[string]any)
		qt["message_stats"] = m["message_stats"] // addSamples adds the rates' samples to it
		addSamples(qt, a.overviewHistory(age, incr))
		delete(qt, "message_stats")
	}
	writeJSON(w, m)
}

// apiSetWatermark is PUT /api/vm-memory-high-watermark {"value": "0.4"}
// (railmq's own; rabbitmqctl set_vm_memory_high_watermark): a fraction
// of memory or an absolute size, as --vm-memory-high-watermark takes.
func (a *API) apiSetWatermark(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "value") {
		return
	}
	var text string
	switch v := body["value"].(type) {
	case string:
		text = v
	case float64:
		text = strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(text, ".") && v < 1 {
			text += ".0"
		}
	}
	wm, err := broker.ParseWatermark(text, broker.TotalMemory())
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	if wm == 0 {
		wm = -1 // 0 keeps the alarm on, as RabbitMQ's watermark 0 does
	}
	a.srv.SetMemoryHighWatermark(wm)
	w.WriteHeader(http.StatusNoContent)
}
