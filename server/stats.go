package server

import (
	"context"
	"time"

	"queen/actors"
	"queen/config"
	"queen/persistence"
	"queen/telemetry"
)

// stats is the one way what this broker counts (telemetry) reaches PostgreSQL
// (persistence.FlushStats): at each flush, what was counted since the previous one, and the
// process figures sampled since, added to the per-minute statistics and to the lifetime
// counters behind queen_cluster_*. The metrics service's loop drives it (server/metrics.go), so
// only one goroutine uses it.
type stats struct {
	cfg   config.Config
	tel   *telemetry.Broker
	store *persistence.Store
	act   *actors.System

	// since starts the window not flushed yet; the counters below are as they were then.
	since  time.Time
	totals map[string]int64
	queues map[*telemetry.QueueCounts]persistence.QueueCounters // by pointer: a forgotten queue starts over
	// lagMax holds the largest lags taken from the counts by flushes that failed.
	lagMax map[*telemetry.QueueCounts]int64

	// The samples of the window.
	samples int
	gauges  [persistence.NGauges]persistence.Gauge
	parked  map[persistence.QueueName]int64 // parked long-polls summed over the samples
	// The previous sample's CPU times, for the CPU share of the next.
	sampledAt       time.Time
	cpuUser, cpuSys time.Duration
}

// countersOf are a queue's counters now, as the statistics keep them: the broker counts every
// applied acknowledgement and the failed ones among them; the statistics split them by outcome.
func countersOf(c *telemetry.QueueCounts) persistence.QueueCounters {
	acked, failed := c.Acked.Load(), c.AckFailed.Load()
	return persistence.QueueCounters{PushRequests: c.PushRequests.Load(), PushMessages: c.Pushed.Load(),
		PopRequests: c.PopRequests.Load(), PopMessages: c.Popped.Load(), PopEmpty: c.PopEmpty.Load(),
		AckRequests: c.AckRequests.Load(), AckSuccess: acked - failed, AckFailed: failed, DLQ: c.DeadLettered.Load(),
		Transactions: c.Transactions.Load(), LagSumMs: c.LagSumMs.Load()}
}

func newStats(cfg config.Config, tel *telemetry.Broker, store *persistence.Store, act *actors.System) *stats {
	p := telemetry.ReadProcess()
	now := time.Now()
	return &stats{cfg: cfg, tel: tel, store: store, act: act, since: now, totals: tel.Totals(),
		queues: map[*telemetry.QueueCounts]persistence.QueueCounters{}, lagMax: map[*telemetry.QueueCounts]int64{},
		parked: map[persistence.QueueName]int64{}, sampledAt: now, cpuUser: p.CPUUser, cpuSys: p.CPUSystem}
}

// sample records the process figures, the pool and the parked long-polls of this instant.
func (s *stats) sample() {
	now, p, pool := time.Now(), telemetry.ReadProcess(), s.store.PoolStats()
	if wall := now.Sub(s.sampledAt); wall > 0 {
		// CPU time over wall time in hundredths of a percent, as the reference stores it.
		s.gauges[persistence.GaugeCPUUser].Add(float64(p.CPUUser-s.cpuUser) / float64(wall) * 10000)
		s.gauges[persistence.GaugeCPUSystem].Add(float64(p.CPUSystem-s.cpuSys) / float64(wall) * 10000)
	}
	s.sampledAt, s.cpuUser, s.cpuSys = now, p.CPUUser, p.CPUSystem
	s.gauges[persistence.GaugeRSS].Add(float64(p.RSS))
	s.gauges[persistence.GaugeVSZ].Add(float64(p.Virtual))
	s.gauges[persistence.GaugePoolSize].Add(float64(pool.Max))
	s.gauges[persistence.GaugePoolIdle].Add(float64(pool.Idle))
	s.gauges[persistence.GaugePoolActive].Add(float64(pool.Acquired))
	s.gauges[persistence.GaugePoolFree].Add(float64(pool.Max - pool.Acquired))
	for q, n := range s.act.ParkedByQueue() {
		s.parked[q] += int64(n)
	}
	s.samples++
}

// flush adds the window to this broker's rows, its lifetime's and the minute's that holds the
// middle of the window (a flush on the minute lands in the minute that ended), and forgets the
// counts of queues that no longer exist (it says how many). A window without a sample yet
// (QUEEN_METRICS_REFRESH_MS=0) is sampled first, so that every flushed minute has its figures.
// A failed flush keeps the window for the next one.
func (s *stats) flush(ctx context.Context) (persistence.FlushedStats, int, error) {
	if s.samples == 0 {
		s.sample()
	}
	now := time.Now()
	counts, totals := s.tel.QueueCounts(), s.tel.Totals()
	marks := make(map[*telemetry.QueueCounts]persistence.QueueCounters, len(counts))
	f := persistence.StatsFlush{ServerID: s.cfg.ServerID, Port: s.cfg.Port,
		Bucket: s.since.Add(now.Sub(s.since) / 2).Truncate(time.Minute)}
	b := &f.Broker
	for name, c := range counts {
		marks[c] = countersOf(c)
		s.lagMax[c] = max(s.lagMax[c], c.TakeLagMax())
		q := persistence.QueueStats{Queue: name, QueueCounters: marks[c].Since(s.queues[c]), ParkedSum: s.parked[name]}
		q.LagMaxMs = s.lagMax[c]
		f.Queues = append(f.Queues, q)
		b.AckFailed += q.AckFailed
		b.LagSumMs += q.LagSumMs
		b.LagMaxMs = max(b.LagMaxMs, q.LagMaxMs)
	}
	// Pops parked on a queue nothing was counted for yet.
	for name, n := range s.parked {
		if _, ok := counts[name]; !ok {
			f.Queues = append(f.Queues, persistence.QueueStats{Queue: name, ParkedSum: n})
		}
	}
	delta := make(map[string]int64, len(totals))
	for name, v := range totals {
		delta[name] = v - s.totals[name]
	}
	b.SetCounters(delta)
	b.Samples, b.Gauges = s.samples, s.gauges

	out, err := s.store.FlushStats(ctx, f)
	if err != nil {
		return out, 0, err
	}
	forgotten := 0
	for name, c := range counts {
		if !out.Exist[name] {
			s.tel.ForgetQueue(name, c)
			delete(marks, c)
			forgotten++
		}
	}
	s.since, s.totals, s.queues = now, totals, marks
	clear(s.lagMax)
	clear(s.parked)
	s.samples, s.gauges = 0, [persistence.NGauges]persistence.Gauge{}
	return out, forgotten, nil
}

// nextMinute is the time until the next minute starts.
func nextMinute() time.Duration {
	now := time.Now()
	return now.Truncate(time.Minute).Add(time.Minute).Sub(now)
}
