// Package stats turns the per-minute statistics every broker flushes (persistence/stats*.go)
// into what the status and analytics routes show: the window and the width of its points, and
// the brokers' figures merged over the brokers. It knows nothing of HTTP: the handlers read
// their parameters, ask the store for points, merge them here and encode.
package stats

import (
	"math"
	"slices"
	"time"

	"queen/persistence"
)

// BucketWidth is the reference's width of a point for a window: 1 minute up to an hour, 5 up
// to 6 hours, 15 up to a day, an hour up to a week, 6 hours beyond.
func BucketWidth(span time.Duration) time.Duration {
	switch {
	case span <= time.Hour:
		return time.Minute
	case span <= 6*time.Hour:
		return 5 * time.Minute
	case span <= 24*time.Hour:
		return 15 * time.Minute
	case span <= 7*24*time.Hour:
		return time.Hour
	}
	return 6 * time.Hour
}

// Window is the time a statistics route covers, and the width of its points.
type Window struct {
	From, To time.Time
	Width    time.Duration
}

// NewWindow is the window from..to with the reference's width for its span.
func NewWindow(from, to time.Time) Window {
	return Window{From: from, To: to, Width: BucketWidth(to.Sub(from))}
}

// BucketMinutes is the width of a point in minutes.
func (w Window) BucketMinutes() int { return int(w.Width / time.Minute) }

// PerSecond is n over the width of a point, rounded to hundredths.
func (w Window) PerSecond(n int64) float64 { return Round2(float64(n) / w.Width.Seconds()) }

// Round2 rounds to hundredths.
func Round2(v float64) float64 { return math.Round(v*100) / 100 }

// BrokerFigures are the brokers' figures of one point, or of one broker over a span, merged:
// the counters summed, each gauge as the mean of the brokers' means and the extremes.
type BrokerFigures struct {
	persistence.BrokerStats // counters summed over the brokers
	means, meanOf           [persistence.NGauges]float64
	minOf, maxOf            [persistence.NGauges]*float64
}

// Add merges one broker's point.
func (f *BrokerFigures) Add(p persistence.BrokerPoint) {
	f.BrokerStats.AddCounters(p.BrokerStats)
	for i, g := range p.Gauges {
		if g.Samples == 0 {
			continue
		}
		f.means[i] += g.Sum / float64(g.Samples)
		f.meanOf[i]++
		if f.minOf[i] == nil || g.Min < *f.minOf[i] {
			f.minOf[i] = &g.Min
		}
		if f.maxOf[i] == nil || g.Max > *f.maxOf[i] {
			f.maxOf[i] = &g.Max
		}
	}
}

// Mean is the mean over the brokers of their mean of gauge g, scaled and rounded to places
// decimals; nil when no broker sampled it.
func (f *BrokerFigures) Mean(g persistence.BrokerGauge, scale float64, places int) *float64 {
	if f.meanOf[g] == 0 {
		return nil
	}
	p := math.Pow(10, float64(places))
	v := math.Round(f.means[g]/f.meanOf[g]*scale*p) / p
	return &v
}

// Min and Max are the extremes of gauge g over the brokers' samples; nil when none sampled it.
func (f *BrokerFigures) Min(g persistence.BrokerGauge) *float64 { return f.minOf[g] }

func (f *BrokerFigures) Max(g persistence.BrokerGauge) *float64 { return f.maxOf[g] }

// ByBucket merges the brokers' points of each bucket, keyed by its Unix time.
func ByBucket(points []persistence.BrokerPoint) map[int64]*BrokerFigures {
	out := map[int64]*BrokerFigures{}
	for _, p := range points {
		f := out[p.Bucket.Unix()]
		if f == nil {
			f = &BrokerFigures{}
			out[p.Bucket.Unix()] = f
		}
		f.Add(p)
	}
	return out
}

// ByBroker merges the points of each broker: its server ids in order, its figures, and when
// it last flushed.
func ByBroker(points []persistence.BrokerPoint) ([]string, map[string]*BrokerFigures, map[string]time.Time) {
	figures, seen := map[string]*BrokerFigures{}, map[string]time.Time{}
	var ids []string
	for _, p := range points {
		f := figures[p.ServerID]
		if f == nil {
			f = &BrokerFigures{}
			figures[p.ServerID] = f
			ids = append(ids, p.ServerID)
		}
		f.Add(p)
		if p.LastSeen.After(seen[p.ServerID]) {
			seen[p.ServerID] = p.LastSeen
		}
	}
	slices.Sort(ids)
	return ids, figures, seen
}

// AvgLag is the mean age of the messages a point's pops delivered, nil when it has none.
func AvgLag(c persistence.QueueCounters) *int64 {
	if c.PopMessages == 0 {
		return nil
	}
	v := c.LagSumMs / c.PopMessages
	return &v
}

// MaxLag is the largest of them, nil when the point has no pop.
func MaxLag(c persistence.QueueCounters) *int64 {
	if c.PopMessages == 0 {
		return nil
	}
	return &c.LagMaxMs
}
