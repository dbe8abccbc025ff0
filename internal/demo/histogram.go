package demo

import (
	"time"

	dto "github.com/prometheus/client_model/go"
)

// hist is a cumulative histogram: counts[i] observations were at most bounds[i] (seconds), and
// total includes those above the last bound.
type hist struct {
	bounds []float64
	counts []uint64
	total  uint64
}

func histFrom(h *dto.Histogram) hist {
	out := hist{total: h.GetSampleCount()}
	for _, b := range h.GetBucket() {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.counts = append(out.counts, b.GetCumulativeCount())
	}
	return out
}

// since returns the observations made after older, a snapshot of the same histogram.
func (h hist) since(older hist) hist {
	if len(older.counts) != len(h.counts) {
		return h
	}
	out := hist{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total - older.total}
	for i := range h.counts {
		out.counts[i] = h.counts[i] - older.counts[i]
	}
	return out
}

// quantile estimates the q-quantile the way PromQL's histogram_quantile does: find the bucket
// that holds the rank and interpolate linearly inside it. A rank beyond the last bound gets the
// last bound. ok is false when there are no observations.
func (h hist) quantile(q float64) (d time.Duration, ok bool) {
	if h.total == 0 || len(h.bounds) == 0 {
		return 0, false
	}
	rank := q * float64(h.total)
	var lower float64
	var below uint64
	for i, upper := range h.bounds {
		if float64(h.counts[i]) >= rank {
			inBucket := float64(h.counts[i] - below)
			frac := 1.0
			if inBucket > 0 {
				frac = (rank - float64(below)) / inBucket
			}
			return seconds(lower + (upper-lower)*frac), true
		}
		lower, below = upper, h.counts[i]
	}
	return seconds(lower), true
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
