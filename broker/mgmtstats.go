package broker

import (
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
	utilisation                       float64 // consumer_utilisation over the sample, or -1
}

// queueStats holds the last sample of every queue.
type queueStats struct {
	mu sync.Mutex // guards m; a leaf lock
	m  map[*queue.Queue]*queueSample
}

// sample reads every queue's counters and updates its rates.
func (s *Server) sample() {
	now := time.Now().UnixNano()
	next := map[*queue.Queue]*queueSample{}
	s.qstats.mu.Lock()
	defer s.qstats.mu.Unlock()
	for _, st := range s.allVHosts() {
		for _, q := range st.v.Queues() {
			p, d, a, r := q.Counters()
			ns := &queueSample{at: now, publish: p, deliverGet: d, ack: a, redeliv: r, limited: q.LimitedNanos(), utilisation: -1}
			if old := s.qstats.m[q]; old != nil {
				dt := float64(now-old.at) / float64(time.Second)
				if dt > 0 {
					ns.rates = [4]float64{float64(p-old.publish) / dt, float64(d-old.deliverGet) / dt,
						float64(a-old.ack) / dt, float64(r-old.redeliv) / dt}
					if q.Consumers() > 0 {
						ns.utilisation = max(0, 1-float64(ns.limited-old.limited)/float64(now-old.at))
					}
				}
			}
			next[q] = ns
		}
	}
	s.qstats.m = next
}

// sampler samples until Shutdown.
func (s *Server) sampler() {
	defer close(s.sampled)
	t := time.NewTicker(s.opts.StatsInterval)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// messageStats is a queue's message_stats: counts and the rates of the
// last sample.
func (s *Server) messageStats(q *queue.Queue) map[string]any {
	p, d, a, r := q.Counters()
	var rates [4]float64
	s.qstats.mu.Lock()
	if ns := s.qstats.m[q]; ns != nil {
		rates = ns.rates
	}
	s.qstats.mu.Unlock()
	rate := func(v float64) map[string]float64 { return map[string]float64{"rate": float64(int64(v*10)) / 10} }
	return map[string]any{
		"publish": p, "publish_details": rate(rates[0]),
		"deliver_get": d, "deliver_get_details": rate(rates[1]),
		"ack": a, "ack_details": rate(rates[2]),
		"redeliver": r, "redeliver_details": rate(rates[3]),
	}
}

// consumerUtilisation is RabbitMQ's consumer_utilisation for q: the
// fraction of the last sample in which its consumers could take messages
// at once; 0 without consumers or a sample yet, as RabbitMQ 3.10.8 shows.
func (s *Server) consumerUtilisation(q *queue.Queue) float64 {
	s.qstats.mu.Lock()
	defer s.qstats.mu.Unlock()
	if ns := s.qstats.m[q]; ns != nil && ns.utilisation >= 0 && q.Consumers() > 0 {
		return ns.utilisation
	}
	return 0
}
