package persist

import (
	"sync/atomic"
	"time"
)

// Histogram counts observations by bucket, lock-free: the committer adds,
// the broker's metrics read it when scraped.
type Histogram struct {
	bounds []float64      // upper bounds, ascending
	counts []atomic.Int64 // per bucket; the last is over every bound
	sum    atomic.Int64   // of the observed values, in units of scale
	scale  float64
}

func newHistogram(scale float64, bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1), scale: scale}
}

// Observe adds one value v, given in units of scale.
func (h *Histogram) Observe(v int64) {
	f := float64(v) * h.scale
	i := 0
	for i < len(h.bounds) && f > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// Snapshot is the histogram as Prometheus wants it: the count, the sum and
// the cumulative count for each upper bound.
func (h *Histogram) Snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.bounds))
	var c uint64
	for i, b := range h.bounds {
		c += uint64(h.counts[i].Load())
		buckets[b] = c
	}
	c += uint64(h.counts[len(h.bounds)].Load())
	return c, float64(h.sum.Load()) * h.scale, buckets
}

// Metrics are the store's figures for the broker's metrics.
type Metrics struct {
	// Batches is how many batches each group commit wrote with one fsync.
	Batches *Histogram
	// Fsync is how long each fsync took, in seconds.
	Fsync *Histogram
	// DelayedLate is how long after its due time each delayed message
	// was routed, in seconds (observed in µs by the vhosts' delayers).
	DelayedLate *Histogram
}

func newMetrics() Metrics {
	return Metrics{
		Batches:     newHistogram(1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
		Fsync:       newHistogram(1e-9, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
		DelayedLate: newHistogram(1e-6, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
	}
}

// Metrics returns the store's histograms (shared, updated as it commits).
func (s *Store) Metrics() Metrics { return s.metrics }

// Size is the bytes of the store's files on disk: its LSM tree and its
// value log, as Badger counts them (updated by Badger once a minute).
func (s *Store) Size() (lsm, vlog int64) { return s.db.Size() }

func since(t time.Time) int64 { return int64(time.Since(t)) }
