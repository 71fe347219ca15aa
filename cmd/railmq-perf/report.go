package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// result is the final report, printed as one JSON line.
type result struct {
	Status      string  `json:"status"` // ok, verify_failed or error
	Config      *config `json:"config"`
	DurationS   float64 `json:"duration_s"`
	Published   uint64  `json:"published"`
	Confirmed   uint64  `json:"confirmed"`
	Nacked      uint64  `json:"nacked"`
	Returned    uint64  `json:"returned"`
	Consumed    uint64  `json:"consumed"` // deliveries, redeliveries included
	PublishRate float64 `json:"publish_rate"`
	ConsumeRate float64 `json:"consume_rate"`
	DrainRate   float64 `json:"drain_rate,omitempty"`

	// LossChecked is false when lost and unreceived were not computed:
	// --drain, or no consumers.
	LossChecked bool   `json:"loss_checked"`
	Lost        uint64 `json:"lost"`       // gaps below the highest sequence received
	Unreceived  uint64 `json:"unreceived"` // published after the highest sequence received, never delivered
	Duplicated  uint64 `json:"duplicated"`
	OutOfOrder  uint64 `json:"out_of_order"`
	Redelivered uint64 `json:"redelivered"`
	Errors      int64  `json:"errors"`

	// PerfCPUS is this tool's own CPU time (user+system, getrusage) during
	// the run, all producers and consumers together; PerfCPUUSPerMsg divides
	// it by the deliveries (by the publishes when nothing was consumed), as
	// the broker's figure is.
	PerfCPUS        float64 `json:"perf_cpu_s"`
	PerfCPUUSPerMsg float64 `json:"perf_cpu_us_per_msg"`

	LatencyUS       latencyReport `json:"latency_us"`
	Broker          *brokerReport `json:"broker,omitempty"`
	IdleConnections idleReport    `json:"idle_connections"`
	Stream          *streamReport `json:"stream,omitempty"` // --queue-type stream
}

type latencyReport struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

type brokerReport struct {
	PID         int     `json:"pid"`
	CPUS        float64 `json:"cpu_s"`
	CPUUSPerMsg float64 `json:"cpu_us_per_msg"` // per delivery; per publish when nothing was consumed
	RSSStartKiB uint64  `json:"rss_start_kib"`
	RSSPeakKiB  uint64  `json:"rss_peak_kib"` // highest VmRSS sampled (start, every second, end)
	RSSEndKiB   uint64  `json:"rss_end_kib"`
	HWMKiB      uint64  `json:"vm_hwm_kib"` // VmHWM at the end: the process's lifetime peak
	// CPUUSPerPublished is the broker's CPU per message published.
	CPUUSPerPublished float64 `json:"cpu_us_per_published"`
	// From /proc/PID/io during the run (nil where it cannot be read):
	// bytes the broker caused to be written to storage, and those per byte
	// of message bodies published (published × --size).
	WriteBytes            *uint64  `json:"write_bytes,omitempty"`
	CancelledWriteBytes   *uint64  `json:"cancelled_write_bytes,omitempty"`
	WriteBytesPerBodyByte *float64 `json:"write_bytes_per_body_byte,omitempty"`
}

type idleReport struct {
	Requested int `json:"requested"`
	Opened    int `json:"opened"`
	OpenAtEnd int `json:"open_at_end"`
}

// collect gathers the figures once producers and consumers have stopped.
func (r *runner) collect(start, publishEnd, end time.Time) *result {
	cfg := r.cfg
	res := &result{Status: "ok", Config: cfg, DurationS: round(end.Sub(start).Seconds(), 3)}
	for _, p := range r.producers {
		res.Published += p.published.Load()
		res.Confirmed += p.confirmed.Load()
		res.Nacked += p.nacked.Load()
		res.Returned += p.returned.Load()
	}
	var hist histogram
	for _, c := range r.consumers {
		res.Consumed += c.consumed.Load()
		res.Duplicated += c.duplicated
		res.OutOfOrder += c.outOfOrder
		res.Redelivered += c.redelivered
		hist.merge(&c.hist)
	}
	if d := publishEnd.Sub(start).Seconds(); d > 0 {
		res.PublishRate = round(float64(res.Published)/d, 1)
	}
	consumeStart := start
	if !r.consumeStart.IsZero() {
		consumeStart = r.consumeStart
	}
	if d := r.lastDelivery(start).Sub(consumeStart).Seconds(); d > 0 {
		res.ConsumeRate = round(float64(res.Consumed)/d, 1)
	}
	if cfg.Drain {
		res.DrainRate = res.ConsumeRate
	}
	res.LatencyUS = latencyReport{
		P50:  micros(hist.quantile(0.50)),
		P95:  micros(hist.quantile(0.95)),
		P99:  micros(hist.quantile(0.99)),
		P999: micros(hist.quantile(0.999)),
		Max:  micros(hist.max),
	}

	res.PerfCPUS = round((r.selfEnd - r.selfStart).Seconds(), 3)
	if msgs := res.Consumed; msgs > 0 || res.Published > 0 {
		if msgs == 0 {
			msgs = res.Published
		}
		res.PerfCPUUSPerMsg = round(float64(r.selfEnd-r.selfStart)/1e3/float64(msgs), 3)
	}

	res.LossChecked = !cfg.Drain && len(r.consumers) > 0 && len(r.producers) > 0
	if cfg.stream() {
		r.collectStream(res, start, publishEnd, consumeStart)
	} else if res.LossChecked {
		fanout := cfg.ExchangeType == "fanout"
		for _, p := range r.producers {
			skip := p.skipped()
			for qi, q := range r.queues {
				if q.consumers == 0 || (!fanout && int(p.id)%len(r.queues) != qi) {
					continue
				}
				gaps, tail := q.set(p.id).missing(p.published.Load(), skip)
				res.Lost += gaps
				res.Unreceived += tail
			}
		}
	}

	if cfg.BrokerPID > 0 {
		b := &brokerReport{
			PID:         cfg.BrokerPID,
			RSSStartKiB: r.procStart.rssKiB,
			RSSPeakKiB:  r.rssPeak,
			RSSEndKiB:   r.procEnd.rssKiB,
			HWMKiB:      r.procEnd.hwmKiB,
		}
		if r.procEnd.cpuTicks >= r.procStart.cpuTicks {
			b.CPUS = float64(r.procEnd.cpuTicks-r.procStart.cpuTicks) / clockTicks
		}
		msgs := res.Consumed
		if msgs == 0 {
			msgs = res.Published
		}
		if msgs > 0 {
			b.CPUUSPerMsg = round(b.CPUS*1e6/float64(msgs), 3)
		}
		if res.Published > 0 {
			b.CPUUSPerPublished = round(b.CPUS*1e6/float64(res.Published), 3)
		}
		r.writeFigures(b, res.Published)
		res.Broker = b
	}

	res.IdleConnections = idleReport{Requested: cfg.IdleConnections, Opened: len(r.idle)}
	for _, c := range r.idle {
		if !c.IsClosed() {
			res.IdleConnections.OpenAtEnd++
		}
	}
	if n := cfg.IdleConnections; n > 0 && res.IdleConnections.OpenAtEnd < n {
		r.fail("%d of %d idle connections closed during the run", n-res.IdleConnections.OpenAtEnd, n)
	}
	return res
}

// write prints the report: with human set, a readable summary first, and
// always the JSON line last.
func (res *result) write(w io.Writer, human bool) error {
	if human {
		l := res.LatencyUS
		if _, err := fmt.Fprintf(w,
			"%s in %.2fs: published %d (%.0f msg/s), confirmed %d, nacked %d, returned %d; consumed %d (%.0f msg/s)\n"+
				"lost %d, unreceived %d, duplicated %d, out of order %d, redelivered %d, errors %d\n"+
				"latency us: p50 %.0f  p95 %.0f  p99 %.0f  max %.0f\n",
			res.Status, res.DurationS, res.Published, res.PublishRate, res.Confirmed, res.Nacked, res.Returned,
			res.Consumed, res.ConsumeRate, res.Lost, res.Unreceived, res.Duplicated, res.OutOfOrder,
			res.Redelivered, res.Errors, l.P50, l.P95, l.P99, l.Max); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "railmq-perf itself: cpu %.2fs (%.2f us/msg)\n", res.PerfCPUS, res.PerfCPUUSPerMsg); err != nil {
			return err
		}
		if s := res.Stream; s != nil {
			if _, err := fmt.Fprintf(w, "stream (offset %q, replay %t): replay %.0f msg/s over %.2fs, consumers %.0f..%.0f msg/s, latency p99.9 %.0f us\n",
				s.Offset, s.Replay, s.ReplayRate, s.ReplayS, s.ConsumerRateMin, s.ConsumerRateMax, l.P999); err != nil {
				return err
			}
		}
		if b := res.Broker; b != nil {
			if _, err := fmt.Fprintf(w, "broker pid %d: cpu %.2fs (%.1f us/msg), rss peak %d KiB, end %d KiB\n",
				b.PID, b.CPUS, b.CPUUSPerMsg, b.RSSPeakKiB, b.RSSEndKiB); err != nil {
				return err
			}
		}
	}
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// writeFigures fills in the broker's disk writes during the run.
func (r *runner) writeFigures(b *brokerReport, published uint64) {
	s, e := r.procStart, r.procEnd
	if !s.ioOK || !e.ioOK || e.writeBytes < s.writeBytes {
		return
	}
	w, c := e.writeBytes-s.writeBytes, e.cancelledWriteBytes-min(s.cancelledWriteBytes, e.cancelledWriteBytes)
	b.WriteBytes, b.CancelledWriteBytes = &w, &c
	if body := published * uint64(r.cfg.Size); body > 0 {
		v := round(float64(w)/float64(body), 3)
		b.WriteBytesPerBodyByte = &v
	}
}

func micros(nanos int64) float64 { return round(float64(nanos)/1e3, 1) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
