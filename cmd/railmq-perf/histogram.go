package main

import (
	"math"
	"math/bits"
)

// The histogram is log-bucketed in the manner of HdrHistogram: values below
// 2^histExactBits are counted exactly, and every power-of-two range above is
// split into 2^(histExactBits-1) equal sub-buckets. A bucket's width is then
// at most 1/64 of its lower bound, and reporting its midpoint is within 0.8%
// of any value recorded in it.
const (
	histExactBits = 7
	histExact     = 1 << histExactBits       // 128 exact buckets
	histSub       = 1 << (histExactBits - 1) // 64 sub-buckets per power of two
	histBuckets   = histExact + (64-histExactBits)*histSub
)

// histogram counts non-negative int64 values (nanoseconds here). The zero
// value is ready to use; it is not safe for concurrent use, so each consumer
// owns one and they are merged at the end.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
	max    int64
}

func histIndex(v uint64) int {
	if v < histExact {
		return int(v)
	}
	k := bits.Len64(v) - 1 // v is in [2^k, 2^(k+1)), k >= histExactBits
	shift := k - (histExactBits - 1)
	sub := int(v>>shift) - histSub // 0..histSub-1
	return histExact + (k-histExactBits)*histSub + sub
}

// histBounds returns the smallest and largest value counted in bucket i.
func histBounds(i int) (lo, hi uint64) {
	if i < histExact {
		return uint64(i), uint64(i)
	}
	j := i - histExact
	k := j/histSub + histExactBits
	shift := k - (histExactBits - 1)
	lo = uint64(j%histSub+histSub) << shift
	return lo, lo + (1 << shift) - 1
}

// record counts v; negative values (clock steps) count as 0.
func (h *histogram) record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(uint64(v))]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0 < q <= 1): the midpoint of the
// bucket holding the ceil(q*total)-th smallest value, capped at the maximum,
// which is exact. It returns 0 for an empty histogram.
func (h *histogram) quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	if rank == h.total {
		return h.max // exact, unlike a bucket midpoint
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			mid := lo + (hi-lo)/2
			return min(int64(mid), h.max)
		}
	}
	return h.max
}
