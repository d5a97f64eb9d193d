package server

import (
	"testing"
	"time"
)

// A slow metrics read spaces the next one out to readPace times its duration, within the
// stale-read alert's minute; a fast one keeps QUEEN_METRICS_REFRESH_MS, and so does a period
// set longer than the cap.
func TestSlowMetricsReadsComeLessOften(t *testing.T) {
	for _, tc := range []struct {
		refresh, took, want time.Duration
	}{
		{10 * time.Second, 100 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 500 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, time.Second, 20 * time.Second},
		{10 * time.Second, 2 * time.Second, 40 * time.Second},
		{10 * time.Second, 5 * time.Second, maxReadPeriod},
		{10 * time.Second, time.Minute, maxReadPeriod},
		{2 * time.Minute, 5 * time.Second, 2 * time.Minute},
	} {
		if got := readPeriod(tc.refresh, tc.took); got != tc.want {
			t.Errorf("readPeriod(%s, %s) = %s, want %s", tc.refresh, tc.took, got, tc.want)
		}
	}
	if maxReadPeriod >= time.Minute {
		t.Errorf("maxReadPeriod %s would let the refresh age pass the 60 s QueenMetricsReadStale alert", maxReadPeriod)
	}
}
