package mgmt

import (
	"net/http"
	"time"

	"github.com/railmq/railmq/broker"
)

// A vhost's figures over time, as RabbitMQ 3.10.8's GET
// /api/vhosts/{vhost} shows them: message_stats (publish, deliver_get,
// ack, redeliver with their rates), recv_oct and send_oct (its
// connections' bytes) with rates, and with lengths_age/lengths_incr (or
// msg_rates_age/msg_rates_incr) each figure's *_details.samples
// ([{sample, timestamp}], newest first). The sampler keeps every vhost's
// history (there are few vhosts), from sampleVHosts.

// vhostPoint is one vhost's sample.
type vhostPoint struct {
	hp               histPoint
	recvOct, sendOct int64
}

// vhostSample is a vhost's last sample, its rates, and its history.
type vhostSample struct {
	last  vhostPoint
	rates [6]float64 // publish, deliver_get, ack, redeliver, recv_oct, send_oct
	hist  *history
}

// sampleVHosts samples every vhost's totals (the broker read before
// qstats.mu is taken).
func (a *API) sampleVHosts() {
	now := time.Now().UnixNano()
	pts := map[string]*vhostPoint{}
	for _, st := range a.srv.VHosts() {
		p := &vhostPoint{hp: histPoint{at: now}}
		for _, q := range st.Queues() {
			pub, d, ak, r := q.Counters()
			p.hp.ready += q.Ready()
			p.hp.unacked += q.Unacked()
			p.hp.publish += pub
			p.hp.deliverGet += d
			p.hp.ack += ak
			p.hp.redelivers += r
		}
		pts[st.Name()] = p
	}
	for _, c := range a.srv.Connections() {
		if p := pts[c.VHost]; p != nil {
			p.recvOct += c.Net.RecvOct
			p.sendOct += c.Net.SendOct
		}
	}
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	next := make(map[string]*vhostSample, len(pts))
	for name, p := range pts {
		vs := &vhostSample{last: *p}
		if old := a.qstats.vhosts[name]; old != nil {
			vs.hist = old.hist
			if dt := float64(now-old.last.hp.at) / float64(time.Second); dt > 0 {
				o := old.last
				vs.rates = [6]float64{float64(p.hp.publish-o.hp.publish) / dt, float64(p.hp.deliverGet-o.hp.deliverGet) / dt,
					float64(p.hp.ack-o.hp.ack) / dt, float64(p.hp.redelivers-o.hp.redelivers) / dt,
					float64(p.recvOct-o.recvOct) / dt, float64(p.sendOct-o.sendOct) / dt}
			}
		} else {
			vs.hist = newHistory(a.opts.StatsInterval)
		}
		vs.hist.add(p.hp)
		next[name] = vs
	}
	a.qstats.vhosts = next
}

// vhostStats adds a vhost's message_stats and traffic to m, its JSON.
func (a *API) vhostStats(st *broker.VHostInfo, m map[string]any) {
	var rates [6]float64
	a.qstats.mu.Lock()
	if vs := a.qstats.vhosts[st.Name()]; vs != nil {
		rates = vs.rates
	}
	a.qstats.mu.Unlock()
	var pub, d, ak, r int64
	for _, q := range st.Queues() {
		p1, d1, a1, r1 := q.Counters()
		pub, d, ak, r = pub+p1, d+d1, ak+a1, r+r1
	}
	var in, out int64
	for _, c := range a.srv.Connections() {
		if c.VHost == st.Name() {
			in, out = in+c.Net.RecvOct, out+c.Net.SendOct
		}
	}
	m["message_stats"] = map[string]any{"publish": pub, "publish_details": rateJSON(rates[0]),
		"deliver_get": d, "deliver_get_details": rateJSON(rates[1]), "ack": ak, "ack_details": rateJSON(rates[2]),
		"redeliver": r, "redeliver_details": rateJSON(rates[3])}
	m["recv_oct"], m["recv_oct_details"] = in, rateJSON(rates[4])
	m["send_oct"], m["send_oct_details"] = out, rateJSON(rates[5])
}

// vhostSamples adds the samples the request asks for (historyParams) to
// m, vhost vh's JSON.
func (a *API) vhostSamples(r *http.Request, vh string, m map[string]any) {
	age, incr, ok := historyParams(r)
	if !ok {
		return
	}
	a.qstats.mu.Lock()
	var pts []histPoint
	if vs := a.qstats.vhosts[vh]; vs != nil {
		pts = vs.hist.newest(time.Now().UnixNano(), age, incr)
	}
	a.qstats.mu.Unlock()
	addSamples(m, pts)
	delete(m, "head_message_age_details") // railmq's, of a queue
}
