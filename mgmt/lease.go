package mgmt

import (
	"github.com/railmq/railmq/broker"
)

// maxPendingAcks bounds a channel's pending_acks in GET
// /api/channels/{name}: the first deliveries by tag, the oldest.
const maxPendingAcks = 1000

// pendingAcksJSON is a channel's pending_acks: each unacked delivery,
// in tag order, with its ack deadline (amq.railmq.lease moves it;
// docs/leases.md). Times are ms since the epoch, as connected_at; a
// delivery without a consumer timeout has deadline null.
func (a *API) pendingAcksJSON(ch broker.Channel) []map[string]any {
	ps := a.srv.PendingAcks(ch.Conn.ID, ch.Number, maxPendingAcks)
	out := make([]map[string]any, 0, len(ps))
	for _, p := range ps {
		m := map[string]any{"delivery_tag": p.Tag, "queue": p.Queue, "consumer_tag": p.ConsumerTag,
			"delivered_at": p.DeliveredAt / 1e6, "deadline": nil, "leased": p.Leased}
		if p.Deadline != 0 {
			m["deadline"] = p.Deadline / 1e6
		}
		out = append(out, m)
	}
	return out
}

// addLeaseStats adds the broker's lease counts to /api/overview's
// message_stats, for a user who sees every vhost (they are the whole
// broker's): lease_extended, retry_scheduled and lease_refused.
func (a *API) addLeaseStats(ms map[string]any, all bool) {
	if !all {
		return
	}
	lc := a.srv.LeaseCounts()
	ms["lease_extended"], ms["retry_scheduled"], ms["lease_refused"] = lc.Extended, lc.Retried, lc.Refused
}
