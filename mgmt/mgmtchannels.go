package mgmt

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/railmq/railmq/broker"
)

// /api/channels and /api/consumers[/{vh}]: what the connections' channels
// hold, under RabbitMQ's names (a channel is "<connection name> (<n>)").

// channelsOf lists the open channels u may see, by connection then number.
func (a *API) channelsOf(r *http.Request) []broker.Channel {
	u := apiUser(r)
	var out []broker.Channel
	for _, ch := range a.srv.Channels() {
		if seesAll(u) || ch.Conn.User == u.Name {
			out = append(out, ch)
		}
	}
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

func channelName(ch broker.Channel) string { return fmt.Sprintf("%s (%d)", ch.Conn.Name, ch.Number) }

func (a *API) apiChannels(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, ch := range a.channelsOf(r) {
		out = append(out, a.channelJSON(ch))
	}
	writeList(w, r, out)
}

func (a *API) apiConsumers(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if vh != "" && a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return
	}
	writeList(w, r, a.consumersOf(r, vh, ""))
}

// consumersOf lists the consumers u sees (channelsOf) in vhost vh ("":
// every vhost) on queue qname ("": every queue); a stream's consumers
// with their offsets (stream.go).
func (a *API) consumersOf(r *http.Request, vh, qname string) []map[string]any {
	out := []map[string]any{}
	ix := newStreamIndex(a)
	for _, ch := range a.channelsOf(r) {
		ci := ch.Conn
		if vh != "" && ci.VHost != vh {
			continue
		}
		cons := ch.Consumers
		sort.Slice(cons, func(i, j int) bool { return cons[i].Tag < cons[j].Tag })
		for _, x := range cons {
			if qname != "" && x.Queue != qname {
				continue
			}
			m := map[string]any{"consumer_tag": x.Tag, "ack_required": !x.NoAck, "exclusive": x.Exclusive,
				"prefetch_count": x.Prefetch, "active": true, "activity_status": "up", "arguments": jsonTable(x.Args),
				"queue": map[string]any{"name": x.Queue, "vhost": ci.VHost},
				"channel_details": map[string]any{"name": channelName(ch), "number": ch.Number, "user": ci.User, "connection_name": ci.Name,
					"peer_host": ci.PeerHost, "peer_port": ci.PeerPort, "node": a.srv.NodeName()}}
			if sc, ok := ix.consumer(ci.VHost, x.Queue, x.Tag); ok {
				describeStreamConsumer(m, sc)
			}
			out = append(out, m)
		}
	}
	return out
}
