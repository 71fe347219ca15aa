package mgmt

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/railmq/railmq/queue"
)

// Message rates for the management API (message_stats, as KEDA's
// RabbitMQ scaler reads them): each queue counts its messages with atomic
// counters (queue.Counters), and a sampler turns them into per-second
// rates every Options.StatsInterval, RabbitMQ's
// collect_statistics_interval (5 s).
const defaultStatsInterval = 5 * time.Second

type queueSample struct {
	at                                int64 // unix nanos
	publish, deliverGet, ack, redeliv int64
	limited                           int64 // queue.LimitedNanos
	rates                             [4]float64
	utilisation                       float64  // consumer_utilisation over the sample, or -1
	hist                              *history // the queue's recent samples, while it is watched
}

// queueStats holds the last sample of every queue, and the queues whose
// history is kept.
type queueStats struct {
	mu      sync.Mutex // guards m, watched and overview; a leaf lock
	m       map[*queue.Queue]*queueSample
	watched map[*queue.Queue]int64 // when the queue's history was last asked for (unix nanos)
	// The broker's totals over time (always kept: one history).
	overview *history
	// Connections' and channels' counters and rates (connections.go).
	conns map[uint64]*connSample
	chans map[chanKey]*connSample
	// Every vhost's totals and history (vhoststats.go).
	vhosts map[string]*vhostSample
}

// History: what the console plots over the last 10 minutes. Each sample
// keeps the depths and the cumulative counters, as RabbitMQ's samples do
// (a rate is the difference of two samples over their interval). The
// broker keeps the totals' history always, and a queue's while somebody
// looks at it (asked for it with lengths_age or msg_rates_age in the
// last historySpan): a history per queue for every queue would cost the
// brokers with 100,000 queues more than their queues.
const historySpan = 10 * time.Minute

// maxWatched bounds the queues whose history is kept at once, whatever
// API clients ask for: at the default interval, 120 samples of 64 bytes
// each, under 8 MiB in all. A queue asked for beyond it has no history
// until others are no longer watched.
const maxWatched = 1000

type histPoint struct {
	at                                   int64 // unix nanos
	ready, unacked                       int64
	publish, deliverGet, ack, redelivers int64
	age                                  float64 // of the oldest ready message, seconds
}

// history is a ring of the last len(pts) samples.
type history struct {
	pts  []histPoint
	next int
	n    int
}

func newHistory(interval time.Duration) *history {
	n := min(max(int(historySpan/interval), 2), 3000)
	return &history{pts: make([]histPoint, n)}
}

func (h *history) add(p histPoint) {
	h.pts[h.next] = p
	h.next = (h.next + 1) % len(h.pts)
	h.n = min(h.n+1, len(h.pts))
}

// newest returns the samples of the last age, at least incr apart,
// newest first (RabbitMQ's order).
func (h *history) newest(now int64, age, incr time.Duration) []histPoint {
	var out []histPoint
	last := int64(0)
	for i := 1; i <= h.n; i++ {
		p := h.pts[(h.next-i+len(h.pts))%len(h.pts)]
		if now-p.at > int64(age) {
			break
		}
		if last != 0 && last-p.at < int64(incr)-int64(incr)/10 {
			continue
		}
		out = append(out, p)
		last = p.at
	}
	return out
}

// sample reads every queue's counters and updates its rates.
func (a *API) sample() {
	now := time.Now().UnixNano()
	next := map[*queue.Queue]*queueSample{}
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if a.qstats.overview == nil {
		a.qstats.overview = newHistory(a.opts.StatsInterval)
	}
	var tot histPoint
	tot.at = now
	for _, st := range a.srv.VHosts() {
		for _, q := range st.Queues() {
			p, d, ak, r := q.Counters()
			ns := &queueSample{at: now, publish: p, deliverGet: d, ack: ak, redeliv: r, limited: q.LimitedNanos(), utilisation: -1}
			hp := histPoint{at: now, ready: q.Ready(), unacked: q.Unacked(), publish: p, deliverGet: d, ack: ak, redelivers: r}
			if at := q.HeadEnqueuedAt(); at > 0 {
				hp.age = max(0, float64(now-at)/1e9)
			}
			tot.ready += hp.ready
			tot.unacked += hp.unacked
			tot.age = max(tot.age, hp.age)
			if w, ok := a.qstats.watched[q]; ok {
				if now-w > int64(historySpan) {
					delete(a.qstats.watched, q)
				} else {
					if old := a.qstats.m[q]; old != nil && old.hist != nil {
						ns.hist = old.hist
					} else {
						ns.hist = newHistory(a.opts.StatsInterval)
					}
					ns.hist.add(hp)
				}
			}
			if old := a.qstats.m[q]; old != nil {
				dt := float64(now-old.at) / float64(time.Second)
				if dt > 0 {
					ns.rates = [4]float64{float64(p-old.publish) / dt, float64(d-old.deliverGet) / dt,
						float64(ak-old.ack) / dt, float64(r-old.redeliv) / dt}
					if q.Consumers() > 0 {
						ns.utilisation = max(0, 1-float64(ns.limited-old.limited)/float64(now-old.at))
					}
				}
			}
			next[q] = ns
		}
	}
	for q := range a.qstats.watched {
		if next[q] == nil {
			delete(a.qstats.watched, q) // deleted
		}
	}
	t := a.srv.Totals().Sum()
	tot.publish = t.Received
	tot.deliverGet = t.DeliveredConsume[0] + t.DeliveredConsume[1] + t.DeliveredGet[0] + t.DeliveredGet[1]
	tot.ack = t.Acknowledged
	tot.redelivers = t.Redelivered
	a.qstats.overview.add(tot)
	a.qstats.m = next
}

// historyParams reads RabbitMQ's sample parameters: lengths_age and
// msg_rates_age (seconds of history wanted), lengths_incr and
// msg_rates_incr (seconds between samples). ok is false without them.
func historyParams(r *http.Request) (age, incr time.Duration, ok bool) {
	qv := r.URL.Query()
	for _, k := range []string{"lengths_age", "msg_rates_age"} {
		if n, err := strconv.Atoi(qv.Get(k)); err == nil && n > 0 {
			age = max(age, time.Duration(n)*time.Second)
		}
	}
	for _, k := range []string{"lengths_incr", "msg_rates_incr"} {
		if n, err := strconv.Atoi(qv.Get(k)); err == nil && n > 0 {
			incr = max(incr, time.Duration(n)*time.Second)
		}
	}
	return min(age, historySpan), incr, age > 0
}

// addSamples puts a history's samples in m (a queue's or the overview's
// JSON) where RabbitMQ's API has them: messages*_details.samples and
// message_stats.*_details.samples, each [{sample, timestamp (ms)}],
// newest first; and railmq's head_message_age_details.samples.
func addSamples(m map[string]any, pts []histPoint) {
	series := func(f func(p histPoint) float64) []map[string]any {
		out := make([]map[string]any, len(pts))
		for i, p := range pts {
			out[i] = map[string]any{"sample": f(p), "timestamp": p.at / int64(time.Millisecond)}
		}
		return out
	}
	details := func(rate float64, f func(p histPoint) float64) map[string]any {
		return map[string]any{"rate": rate, "samples": series(f)}
	}
	m["messages_details"] = details(0, func(p histPoint) float64 { return float64(p.ready + p.unacked) })
	m["messages_ready_details"] = details(0, func(p histPoint) float64 { return float64(p.ready) })
	m["messages_unacknowledged_details"] = details(0, func(p histPoint) float64 { return float64(p.unacked) })
	m["head_message_age_details"] = map[string]any{"samples": series(func(p histPoint) float64 { return p.age })}
	ms, _ := m["message_stats"].(map[string]any)
	if ms == nil {
		ms = map[string]any{}
		m["message_stats"] = ms
	}
	for k, f := range map[string]func(p histPoint) float64{
		"publish": func(p histPoint) float64 { return float64(p.publish) }, "deliver_get": func(p histPoint) float64 { return float64(p.deliverGet) },
		"ack": func(p histPoint) float64 { return float64(p.ack) }, "redeliver": func(p histPoint) float64 { return float64(p.redelivers) },
	} {
		d, _ := ms[k+"_details"].(map[string]float64)
		ms[k+"_details"] = details(d["rate"], f)
	}
}

// queueHistory marks q watched and returns its samples as asked.
func (a *API) queueHistory(q *queue.Queue, age, incr time.Duration) []histPoint {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if a.qstats.watched == nil {
		a.qstats.watched = map[*queue.Queue]int64{}
	}
	now := time.Now().UnixNano()
	if _, ok := a.qstats.watched[q]; ok || len(a.qstats.watched) < maxWatched {
		a.qstats.watched[q] = now
	}
	if ns := a.qstats.m[q]; ns != nil && ns.hist != nil {
		return ns.hist.newest(now, age, incr)
	}
	return nil
}

// overviewHistory returns the broker's totals' samples as asked.
func (a *API) overviewHistory(age, incr time.Duration) []histPoint {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if a.qstats.overview == nil {
		return nil
	}
	return a.qstats.overview.newest(time.Now().UnixNano(), age, incr)
}

// totalRates are the message rates summed over every queue u may see, as
// of the last sample: the overview's message_stats rates.
func (a *API) totalRates(visible func(*queue.Queue) bool) [4]float64 {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	var out [4]float64
	for q, ns := range a.qstats.m {
		if visible(q) {
			for i := range out {
				out[i] += ns.rates[i]
			}
		}
	}
	return out
}

// sampler samples until Close, or until the broker shuts down.
func (a *API) sampler() {
	defer close(a.sampled)
	t := time.NewTicker(a.opts.StatsInterval)
	defer t.Stop()
	a.sample()
	a.sampleConns()
	a.sampleVHosts()
	for {
		select {
		case <-a.stop:
			return
		case <-a.srv.Done():
			return
		case <-t.C:
			a.sample()
			a.sampleConns()
			a.sampleVHosts()
		}
	}
}

// messageStats is a queue's message_stats: counts and the rates of the
// last sample.
func (a *API) messageStats(q *queue.Queue) map[string]any {
	p, d, ak, r := q.Counters()
	var rates [4]float64
	a.qstats.mu.Lock()
	if ns := a.qstats.m[q]; ns != nil {
		rates = ns.rates
	}
	a.qstats.mu.Unlock()
	rate := func(v float64) map[string]float64 { return map[string]float64{"rate": float64(int64(v*10)) / 10} }
	return map[string]any{
		"publish": p, "publish_details": rate(rates[0]),
		"deliver_get": d, "deliver_get_details": rate(rates[1]),
		"ack": ak, "ack_details": rate(rates[2]),
		"redeliver": r, "redeliver_details": rate(rates[3]),
	}
}

// ConsumerUtilisation is RabbitMQ's consumer_utilisation for q: the
// fraction of the last sample in which its consumers could take messages
// at once; 0 without consumers or a sample yet, as RabbitMQ 3.10.8 shows.
// The metrics show it too (metrics.Options.Utilisation).
func (a *API) ConsumerUtilisation(q *queue.Queue) float64 {
	a.qstats.mu.Lock()
	defer a.qstats.mu.Unlock()
	if ns := a.qstats.m[q]; ns != nil && ns.utilisation >= 0 && q.Consumers() > 0 {
		return ns.utilisation
	}
	return 0
}
