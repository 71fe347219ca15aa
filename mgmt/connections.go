package mgmt

import (
	"net/http"
	"strings"
	"time"

	"github.com/railmq/railmq/broker"
)

// Connections and channels as RabbitMQ 3.10.8's management API shows
// them (GET /api/connections with a pika connection open, compared key
// by key): the socket (host, port, peer_host, peer_port, ssl and its
// protocol, cipher, hash and key exchange), the negotiation
// (auth_mechanism, timeout, frame_max, channel_max), the traffic
// (recv_oct, recv_cnt, send_oct, send_cnt, send_pend, with
// recv_oct_details and send_oct_details rates), user_provided_name when
// the client named the connection; a channel's message_stats (publish,
// confirm, return_unroutable, drop_unroutable once it published; ack,
// deliver, deliver_get, deliver_no_ack, get, get_empty, get_no_ack,
// redeliver once it received; none before either, as RabbitMQ). The
// Erlang process figures (garbage_collection, reductions) have no
// counterpart here and are not shown.

// connSample is a connection's (or channel's) counters at the last
// sample, and their rates over the interval before it.
type connSample struct {
	at     int64 // unix nanos
	counts []int64
	rates  []float64
}

// chanKey names a channel across samples.
type chanKey struct {
	conn uint64
	n    uint16
}

// rated puts in next the sample of counts at key k, with its rates since
// m's sample at k (the caller holds a.qstats.mu).
func rated[K comparable](m map[K]*connSample, next map[K]*connSample, k K, now int64, counts []int64) {
	ns := &connSample{at: now, counts: counts, rates: make([]float64, len(counts))}
	if old := m[k]; old != nil && len(old.counts) == len(counts) {
		if dt := float64(now-old.at) / float64(time.Second); dt > 0 {
			for i := range counts {
				ns.rates[i] = float64(counts[i]-old.counts[i]) / dt
			}
		}
	}
	next[k] = ns
}

// connCounts are the counters a connection's rates follow: recv_oct,
// send_oct.
func connCounts(c broker.Connection) []int64 { return []int64{c.Net.RecvOct, c.Net.SendOct} }

// sampleConns samples every connection's and channel's counters into
// their rates. The broker is read before qstats.mu is taken (the
// management plane holds no lock while it asks the broker).
func (a *API) sampleConns() {
	conns, chans := a.srv.Connections(), a.srv.Channels()
	now := time.Now().UnixNano()
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	nc := make(map[uint64]*connSample, len(conns))
	for _, c := range conns {
		rated(a.qstats.conns, nc, c.ID, now, connCounts(c))
	}
	nch := make(map[chanKey]*connSample, len(chans))
	for _, ch := range chans {
		rated(a.qstats.chans, nch, chanKey{ch.Conn.ID, ch.Number}, now, chanCounts(ch.Stats))
	}
	a.qstats.conns, a.qstats.chans = nc, nch
}

// connRates and chanRates are the rates of the last sample (zeros
// before one).
func (a *API) connRates(id uint64) []float64 {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if s := a.qstats.conns[id]; s != nil {
		return s.rates
	}
	return make([]float64, 2)
}

func (a *API) chanRates(k chanKey) []float64 {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if s := a.qstats.chans[k]; s != nil {
		return s.rates
	}
	return make([]float64, len(chanStatKeys))
}

// rateJSON is a rate as RabbitMQ shows it: {"rate": r}, one decimal.
func rateJSON(v float64) map[string]float64 {
	return map[string]float64{"rate": float64(int64(v*10)) / 10}
}

// connView is a connection as /api/connections shows it.
func (a *API) connView(c broker.Connection) map[string]any {
	n := c.Net
	rates := a.connRates(c.ID)
	m := map[string]any{"name": c.Name, "user": c.User, "user_who_performed_action": c.User, "vhost": c.VHost,
		"node": c.Node, "protocol": c.Protocol, "type": c.Type, "state": c.State, "connected_at": c.ConnectedAt,
		"client_properties": jsonTable(c.ClientProperties), "channels": c.Channels,
		"host": n.Host, "port": n.Port, "peer_host": c.PeerHost, "peer_port": c.PeerPort,
		"auth_mechanism": n.AuthMechanism, "timeout": n.Timeout, "frame_max": n.FrameMax, "channel_max": n.ChannelMax,
		"recv_oct": n.RecvOct, "recv_cnt": n.RecvCnt, "send_oct": n.SendOct, "send_cnt": n.SendCnt, "send_pend": n.SendPend,
		"recv_oct_details": rateJSON(rates[0]), "send_oct_details": rateJSON(rates[1]),
		"ssl": n.SSL, "ssl_protocol": nil, "ssl_cipher": nil, "ssl_hash": nil, "ssl_key_exchange": nil,
		"peer_cert_issuer": nil, "peer_cert_subject": nil, "peer_cert_validity": nil}
	if n.SSL {
		m["ssl_protocol"] = n.SSLProtocol
		m["ssl_key_exchange"], m["ssl_cipher"], m["ssl_hash"] = cipherParts(n.SSLCipher)
	}
	if s, ok := c.ClientProperties["connection_name"].(string); ok {
		m["user_provided_name"] = s
	}
	return m
}

// cipherParts splits Go's name of a cipher suite into RabbitMQ's
// ssl_key_exchange, ssl_cipher and ssl_hash:
// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 is ecdhe_rsa, aes_128_gcm,
// sha256; a TLS 1.3 suite (TLS_AES_128_GCM_SHA256) has the key exchange
// "any", as Erlang's ssl names it.
func cipherParts(suite string) (kex, cipher, hash string) {
	s := strings.TrimPrefix(suite, "TLS_")
	kex = "any"
	if k, rest, ok := strings.Cut(s, "_WITH_"); ok {
		kex, s = strings.ToLower(k), rest
	}
	if i := strings.LastIndexByte(s, '_'); i > 0 {
		return kex, strings.ToLower(s[:i]), strings.ToLower(s[i+1:])
	}
	return kex, strings.ToLower(s), ""
}

// chanStatKeys are a channel's message_stats, in chanCounts' order; the
// first four are the publishing side, the rest the receiving side.
var chanStatKeys = []string{"publish", "confirm", "return_unroutable", "drop_unroutable",
	"deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack", "deliver_get"}

const chanPublishKeys = 4

func chanCounts(s broker.ChannelStats) []int64 {
	return []int64{s.Publish, s.Confirm, s.ReturnUnroutable, s.DropUnroutable,
		s.Deliver, s.DeliverNoAck, s.Get, s.GetNoAck, s.GetEmpty, s.Redeliver, s.Ack,
		s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck}
}

// chanMessageStats is a channel's message_stats, or nil before it
// published or received anything (RabbitMQ shows none then).
func chanMessageStats(counts []int64, rates []float64) map[string]any {
	var pub, recv bool
	for i, v := range counts {
		if v != 0 {
			pub, recv = pub || i < chanPublishKeys, recv || i >= chanPublishKeys
		}
	}
	if !pub && !recv {
		return nil
	}
	ms := map[string]any{}
	for i, k := range chanStatKeys {
		if (i < chanPublishKeys && pub) || (i >= chanPublishKeys && recv) {
			ms[k], ms[k+"_details"] = counts[i], rateJSON(rates[i])
		}
	}
	return ms
}

// channelJSON is a channel as /api/channels shows it.
func (a *API) channelJSON(ch broker.Channel) map[string]any {
	ci := ch.Conn
	m := map[string]any{"name": channelName(ch), "number": ch.Number, "user": ci.User, "user_who_performed_action": ci.User,
		"vhost": ci.VHost, "node": a.srv.NodeName(), "state": channelState(ci.State), "consumer_count": len(ch.Consumers),
		"messages_unacknowledged": ch.Unacked, "messages_unconfirmed": ch.Unconfirmed,
		"messages_uncommitted": ch.Stats.UncommittedMsgs, "acks_uncommitted": ch.Stats.UncommittedAcks,
		"prefetch_count": ch.Prefetch, "global_prefetch_count": ch.GlobalPrefetch,
		"confirm": ch.Confirm, "transactional": ch.Stats.Transactional,
		"connection_details": map[string]any{"name": ci.Name, "peer_host": ci.PeerHost, "peer_port": ci.PeerPort}}
	if ms := chanMessageStats(chanCounts(ch.Stats), a.chanRates(chanKey{ci.ID, ch.Number})); ms != nil {
		m["message_stats"] = ms
	}
	return m
}

// apiChannel is GET /api/channels/{name}: one channel of /api/channels,
// with its consumers (consumer_details, as /api/consumers shows them)
// and its per-exchange and per-queue figures (publishes, deliveries:
// empty, as RabbitMQ 3.10.8's default basic rates mode answers them).
func (a *API) apiChannel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	u := apiUser(r)
	for _, ch := range a.srv.Channels() {
		if channelName(ch) != name {
			continue
		}
		if !seesAll(u) && ch.Conn.User != u.Name {
			notAuthorised(w, reasonObject)
			return
		}
		m := a.channelJSON(ch)
		cons := []map[string]any{}
		for _, x := range a.consumersOf(r, ch.Conn.VHost, "") {
			if cd, _ := x["channel_details"].(map[string]any); cd != nil && cd["name"] == name {
				cons = append(cons, x)
			}
		}
		m["consumer_details"], m["publishes"], m["deliveries"] = cons, []any{}, []any{}
		m["pending_acks"] = a.pendingAcksJSON(ch) // lease.go
		writeJSON(w, m)
		return
	}
	notFound(w)
}

// apiConnectionChannels is GET /api/connections/{name}/channels.
func (a *API) apiConnectionChannels(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	u := apiUser(r)
	var conn *broker.Connection
	for _, c := range a.srv.Connections() {
		if c.Name == name {
			conn = &c
			break
		}
	}
	if conn == nil {
		notFound(w)
		return
	}
	if !seesAll(u) && conn.User != u.Name {
		notAuthorised(w, reasonObject)
		return
	}
	out := []map[string]any{}
	for _, ch := range a.srv.Channels() {
		if ch.Conn.ID == conn.ID {
			out = append(out, a.channelJSON(ch))
		}
	}
	writeList(w, r, out)
}

// vhostListed lets in users who may use vh (vhostAccess: RabbitMQ's
// is_authorized_vhost, "User not authorised to access virtual host" to
// the others) and answers 404 for a vhost that does not exist; it
// reports whether the list may be answered.
func (a *API) vhostListed(w http.ResponseWriter, r *http.Request, vh string) bool {
	if !a.vhostAccess(apiUser(r), vh) {
		notAuthorised(w, reasonVHost)
		return false
	}
	if a.srv.LookupVHost(vh) == nil {
		notFound(w)
		return false
	}
	return true
}

// apiVHostConnections is GET /api/vhosts/{vhost}/connections: the
// connections of /api/connections in vhost.
func (a *API) apiVHostConnections(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if !a.vhostListed(w, r, vh) {
		return
	}
	out := []map[string]any{}
	for _, c := range a.visibleConns(r) {
		if c.VHost == vh {
			out = append(out, a.connView(c))
		}
	}
	writeList(w, r, out)
}

// apiVHostChannels is GET /api/vhosts/{vhost}/channels: the channels of
// /api/channels in vhost.
func (a *API) apiVHostChannels(w http.ResponseWriter, r *http.Request) {
	vh := r.PathValue("vhost")
	if !a.vhostListed(w, r, vh) {
		return
	}
	out := []map[string]any{}
	for _, ch := range a.channelsOf(r) {
		if ch.Conn.VHost == vh {
			out = append(out, a.channelJSON(ch))
		}
	}
	writeList(w, r, out)
}
