package stats

import (
	"slices"
	"testing"
	"time"

	"queen/persistence"
)

func TestBucketWidth(t *testing.T) {
	for _, tc := range []struct {
		span, want time.Duration
	}{
		{time.Minute, time.Minute}, {time.Hour, time.Minute}, {time.Hour + time.Second, 5 * time.Minute},
		{6 * time.Hour, 5 * time.Minute}, {24 * time.Hour, 15 * time.Minute}, {7 * 24 * time.Hour, time.Hour},
		{8 * 24 * time.Hour, 6 * time.Hour},
	} {
		if got := BucketWidth(tc.span); got != tc.want {
			t.Errorf("BucketWidth(%v) = %v, want %v", tc.span, got, tc.want)
		}
	}
	w := NewWindow(time.Unix(0, 0), time.Unix(3*3600, 0))
	if w.Width != 5*time.Minute || w.BucketMinutes() != 5 || w.PerSecond(100) != 0.33 {
		t.Errorf("a 3-hour window: width %v, %d minutes, 100 a point is %v/s", w.Width, w.BucketMinutes(), w.PerSecond(100))
	}
}

// point is one broker's point with one gauge sampled (or not, with no samples).
func point(server string, bucket int64, pushed int64, lag int64, rss persistence.Gauge) persistence.BrokerPoint {
	p := persistence.BrokerPoint{Bucket: time.Unix(bucket, 0), ServerID: server, LastSeen: time.Unix(bucket+30, 0)}
	p.PushMessages, p.LagMaxMs, p.Samples = pushed, lag, rss.Samples
	p.Gauges[persistence.GaugeRSS] = rss
	return p
}

// The brokers of a point add their counters; a gauge is the mean of the means of the brokers
// that sampled it, with the extremes of their samples; the largest lag wins.
func TestBrokersMergeByBucket(t *testing.T) {
	points := []persistence.BrokerPoint{
		point("a", 60, 10, 5, persistence.Gauge{Samples: 2, Sum: 200, Min: 90, Max: 110}),  // mean 100
		point("b", 60, 5, 9, persistence.Gauge{Samples: 4, Sum: 1200, Min: 250, Max: 350}), // mean 300
		point("c", 60, 1, 0, persistence.Gauge{}),                                          // sampled nothing
		point("a", 120, 7, 1, persistence.Gauge{}),
	}
	byBucket := ByBucket(points)
	f := byBucket[60]
	if f.PushMessages != 16 || f.LagMaxMs != 9 || f.Samples != 6 {
		t.Errorf("counters of minute 60: %+v", f.BrokerStats)
	}
	if m := f.Mean(persistence.GaugeRSS, 1, 0); m == nil || *m != 200 {
		t.Errorf("mean of the means: %v, want 200 (c sampled nothing)", m)
	}
	if lo, hi := f.Min(persistence.GaugeRSS), f.Max(persistence.GaugeRSS); lo == nil || *lo != 90 || hi == nil || *hi != 350 {
		t.Errorf("extremes: %v %v, want 90 and 350", lo, hi)
	}
	if m := byBucket[120].Mean(persistence.GaugeRSS, 1, 0); m != nil {
		t.Errorf("a bucket without samples has mean %v, want none", *m)
	}
	ids, figures, seen := ByBroker(points)
	if !slices.Equal(ids, []string{"a", "b", "c"}) || figures["a"].PushMessages != 17 || !seen["a"].Equal(time.Unix(150, 0)) {
		t.Errorf("by broker: %v, a pushed %d, last seen %v", ids, figures["a"].PushMessages, seen["a"])
	}
}

func TestLags(t *testing.T) {
	if AvgLag(persistence.QueueCounters{}) != nil || MaxLag(persistence.QueueCounters{}) != nil {
		t.Error("a point without pops has lags")
	}
	c := persistence.QueueCounters{PopMessages: 4, LagSumMs: 100, LagMaxMs: 40}
	if a, m := AvgLag(c), MaxLag(c); *a != 25 || *m != 40 {
		t.Errorf("lags %d %d, want 25 and 40", *a, *m)
	}
}
