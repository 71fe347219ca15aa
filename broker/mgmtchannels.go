package broker

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/railmq/railmq/channel"
)

// /api/channels and /api/consumers[/{vh}]: what the connections' channels
// hold, under RabbitMQ's names (a channel is "<connection name> (<n>)").

type chanRef struct {
	c  *conn
	n  uint16
	ch *channel.Channel
}

// channelsOf lists the open channels u may see, by connection then number.
func (s *Server) channelsOf(r *http.Request) []chanRef {
	u := apiUser(r)
	var out []chanRef
	for _, c := range s.openConns() {
		if !seesAll(u) && c.user != u.Name {
			continue
		}
		c.snapMu.Lock()
		for n, ch := range c.snap {
			out = append(out, chanRef{c, n, ch})
		}
		c.snapMu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].c.id != out[j].c.id {
			return out[i].c.id < out[j].c.id
		}
		return out[i].n < out[j].n
	})
	return out
}

// channelState is a channel's state as RabbitMQ shows it: "flow" while
// flow control holds its connection back, else "running" (an alarm
// blocks the connection, not the channel).
func channelState(connState string) string {
	if connState == "flow" {
		return "flow"
	}
	return "running"
}

func channelName(c *conn, n uint16) string { return fmt.Sprintf("%s (%d)", c.info.Load().Name, n) }

func (s *Server) apiChannels(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, cr := range s.channelsOf(r) {
		ci := cr.c.info.Load()
		in := cr.ch.Info()
		out = append(out, map[string]any{"name": channelName(cr.c, cr.n), "number": cr.n, "user": ci.User, "vhost": ci.VHost,
			"node": s.nodeName(), "state": channelState(s.connState(cr.c)), "consumer_count": len(in.Consumers), "messages_unacknowledged": in.Unacked,
			"messages_unconfirmed": in.Unconfirmed, "prefetch_count": in.Prefetch, "global_prefetch_count": in.GlobalPrefetch,
			"confirm": in.Confirm, "transactional": false,
			"connection_details": map[string]any{"name": ci.Name, "peer_host": ci.PeerHost, "peer_port": ci.PeerPort}})
	}
	writeList(w, r, out)
}

func (s *Server) apiConsumers(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if vh != "" && s.vhostByName(vh) == nil {
		notFound(w)
		return
	}
	out := []map[string]any{}
	for _, cr := range s.channelsOf(r) {
		ci := cr.c.info.Load()
		if vh != "" && ci.VHost != vh {
			continue
		}
		cons := cr.ch.Info().Consumers
		sort.Slice(cons, func(i, j int) bool { return cons[i].Tag < cons[j].Tag })
		for _, x := range cons {
			out = append(out, map[string]any{"consumer_tag": x.Tag, "ack_required": !x.NoAck, "exclusive": x.Exclusive,
				"prefetch_count": x.Prefetch, "active": true, "activity_status": "up", "arguments": map[string]any{},
				"queue": map[string]any{"name": x.Queue, "vhost": ci.VHost},
				"channel_details": map[string]any{"name": channelName(cr.c, cr.n), "number": cr.n, "user": ci.User, "connection_name": ci.Name,
					"peer_host": ci.PeerHost, "peer_port": ci.PeerPort, "node": s.nodeName()}})
		}
	}
	writeList(w, r, out)
}
