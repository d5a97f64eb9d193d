package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"queen/actors"
	"queen/background"
	"queen/config"
	"queen/persistence"
	"queen/spool"
	"queen/telemetry"
)

// observability is the broker's metrics service (docs/operations.md, Observability): the
// telemetry that the HTTP handlers feed and the other subsystems register their counters in,
// the live gauges of what server wires (pool, spool, maintenance), the periodic database read
// behind the per-queue, per-group and cluster-wide families, the per-minute statistics of the
// status and analytics routes (stats.go), and the rates log line.
type observability struct {
	cfg config.Config
	log *slog.Logger
	tel *telemetry.Broker

	store *persistence.Store
	stats *stats
	loops *background.Group // nil until start
	// reads asks the read loop for a read now and takes its outcome (RefreshMetrics).
	reads chan chan error
	// flushes asks the read loop for a statistics flush now (FlushStats, POST /api/v1/stats/refresh).
	flushes chan chan flushOutcome
	// flushFailing: the last statistics flush failed (logged once per outage).
	flushFailing bool
	failing      bool // the last read failed (logged once per outage)
	dropping     bool // the last read left queues or groups out (logged once)
	lastRead     atomic.Int64
	// readAfter is when the next periodic read is due: later than the next tick after a slow
	// read (see readPeriod); paced says the last one was (logged once per stretch).
	readAfter time.Time
	paced     bool
}

func newObservability(cfg config.Config, log *slog.Logger) *observability {
	return &observability{
		cfg: cfg, log: log.With("subsystem", "metrics"), tel: telemetry.New(),
		reads: make(chan chan error), flushes: make(chan chan flushOutcome),
	}
}

// flushOutcome is what a statistics flush wrote and how many queues it forgot, or why it
// failed.
type flushOutcome struct {
	flushed   persistence.FlushedStats
	forgotten int
	err       error
}

// start registers the live gauges of the subsystems and starts the read loop (the periodic
// read when QUEEN_METRICS_REFRESH_MS is not 0, which flushes the statistics first, and the
// flush at the start of every minute) and the rates window.
func (o *observability) start(store *persistence.Store, sp *spool.Spool, flags *actors.Maintenance, healthy *atomic.Bool, act *actors.System) {
	o.store = store
	o.stats = newStats(o.cfg, o.tel, store, act)
	set := o.tel.Set
	gauge := func(name string, f func() float64) { set.NewGauge(name, f) }
	flag := func(on bool) float64 {
		if on {
			return 1
		}
		return 0
	}
	gauge("queen_db_pool_size", func() float64 { return float64(store.PoolStats().Max) })
	gauge("queen_db_pool_idle", func() float64 { return float64(store.PoolStats().Idle) })
	gauge("queen_db_pool_active", func() float64 { return float64(store.PoolStats().Acquired) })
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := store.PoolStats()
		metrics.WriteCounterUint64(w, "queen_db_pool_waits_total", uint64(st.EmptyAcquires))
		metrics.WriteCounterFloat64(w, "queen_db_pool_wait_seconds_total", st.EmptyAcquireWait.Seconds())
	})
	gauge("queen_file_buffer_pending", func() float64 { return float64(sp.Stats().Records) })
	gauge("queen_file_buffer_failed", func() float64 { return float64(sp.Stats().Failed) })
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := sp.Stats()
		metrics.WriteCounterUint64(w, "queen_file_buffer_paced_pushes_total", uint64(st.PacedAppends))
		metrics.WriteCounterFloat64(w, "queen_file_buffer_paced_wait_seconds_total", st.PacedWait.Seconds())
	})
	gauge("queen_file_buffer_db_healthy", func() float64 { return flag(healthy.Load()) })
	gauge("queen_maintenance_mode_enabled", func() float64 { return flag(flags.Push()) })
	gauge("queen_pop_maintenance_mode_enabled", func() float64 { return flag(flags.Pop()) })

	if o.cfg.MetricsRefresh > 0 {
		gauge("queen_metrics_refresh_age_seconds", func() float64 {
			if at := o.lastRead.Load(); at != 0 {
				return time.Since(time.Unix(0, at)).Seconds()
			}
			return -1
		})
	}
	o.loops = background.NewGroup()
	o.loops.Go(o.readLoop)
	o.startRates(act, sp)
}

// stop ends both loops, then flushes what was counted since the last flush, so that a restart
// loses none of it.
func (o *observability) stop() {
	if o.loops == nil {
		return
	}
	o.loops.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	o.flush(ctx)
}

// readLoop reads at once, then every QUEEN_METRICS_REFRESH_MS or slower (readPeriod),
// sampling the statistics' figures every QUEEN_METRICS_REFRESH_MS; it flushes the statistics at
// the start of every minute; and it does either whenever asked.
func (o *observability) readLoop(ctx context.Context) {
	if o.cfg.MetricsRefresh > 0 {
		o.periodicRead(ctx)
	}
	reads := tick(o.cfg.MetricsRefresh)
	defer reads.Stop()
	minute := time.NewTimer(nextMinute())
	defer minute.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reads.C:
			o.stats.sample()
			o.periodicRead(ctx)
		case reply := <-o.reads:
			reply <- o.read(ctx)
		case <-minute.C:
			o.flush(ctx)
			minute.Reset(nextMinute())
		case reply := <-o.flushes:
			reply <- o.flush(ctx)
		}
	}
}

// flush adds the window's statistics to this broker's rows. A failure is counted as a
// database error and logged once per outage; the window waits for the next flush.
func (o *observability) flush(ctx context.Context) flushOutcome {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.RequestDeadline)
	defer cancel()
	out, forgotten, err := o.stats.flush(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			o.tel.DBError()
		}
		if !o.flushFailing {
			o.log.Warn("statistics flush failed; the counts wait for the next one", "err", err)
		}
		o.flushFailing = true
		return flushOutcome{err: err}
	}
	if o.flushFailing {
		o.log.Info("statistics flush recovered")
	}
	o.flushFailing = false
	return flushOutcome{flushed: out, forgotten: forgotten}
}

// flushNow runs a statistics flush through the read loop and returns its outcome.
func (o *observability) flushNow(ctx context.Context) (flushOutcome, error) {
	reply := make(chan flushOutcome, 1)
	select {
	case o.flushes <- reply:
	case <-ctx.Done():
		return flushOutcome{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r, r.err
	case <-ctx.Done():
		return flushOutcome{}, ctx.Err()
	}
}

// FlushStats flushes this broker's per-minute statistics now (tests, which would otherwise
// wait for the minute to end).
func (b *Broker) FlushStats(ctx context.Context) error {
	_, err := b.obs.flushNow(ctx)
	return err
}

// The periodic read's cost grows with the partitions that hold a backlog (seconds of
// PostgreSQL at 100k of them). After a read that took d the next one waits readPace×d, so that
// the read keeps to about a twentieth of one database connection's time, but never more than
// maxReadPeriod, so that the refresh age stays under the 60 s QueenMetricsReadStale alert. A
// QUEEN_METRICS_REFRESH_MS above that is kept as it is.
const (
	readPace      = 20
	maxReadPeriod = 45 * time.Second
)

// readPeriod is the time from the start of a read that took took to the next one.
func readPeriod(refresh, took time.Duration) time.Duration {
	return max(refresh, min(readPace*took, maxReadPeriod))
}

// periodicRead reads unless the last read was slow enough to push the next one past this tick
// (see readPeriod), and says so in the log when the period stretches and when it is back.
func (o *observability) periodicRead(ctx context.Context) {
	start := time.Now()
	if start.Before(o.readAfter) {
		return
	}
	period := o.cfg.MetricsRefresh
	if err := o.read(ctx); err == nil {
		period = readPeriod(period, time.Since(start))
	}
	o.readAfter = start.Add(period)
	switch paced := period > o.cfg.MetricsRefresh; {
	case paced && !o.paced:
		o.log.Warn("the metrics read is slow: the per-queue and per-group families are read less often than QUEEN_METRICS_REFRESH_MS until it is fast again",
			"took", time.Since(start).Round(time.Millisecond), "period", period.Round(time.Second), "refresh", o.cfg.MetricsRefresh)
		o.paced = true
	case !paced && o.paced:
		o.log.Info("the metrics read is fast again: back to QUEEN_METRICS_REFRESH_MS", "refresh", o.cfg.MetricsRefresh)
		o.paced = false
	}
}

// read flushes the statistics, so that the cluster's counters include this broker's counts up
// to now, then reads the backlogs and the cluster's counters and publishes the families. A
// failed read keeps the families of the last one (their age shows in
// queen_metrics_refresh_age_seconds); a failed flush keeps its window for the next.
func (o *observability) read(ctx context.Context) error {
	o.flush(ctx)
	ctx, cancel := context.WithTimeout(ctx, o.cfg.RequestDeadline)
	defer cancel()
	counted := o.tel.QueueCounts()
	start := time.Now()
	snap, err := o.store.ReadMetrics(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) { // not the broker stopping
			o.tel.DBError()
		}
		if !o.failing {
			o.log.Warn("metrics read failed; the per-queue and cluster families keep their last values", "err", err)
		}
		o.failing = true
		return err
	}
	if o.failing {
		o.log.Info("metrics read recovered")
	}
	o.failing = false
	o.lastRead.Store(time.Now().UnixNano())
	d := o.tel.Publish(telemetry.Read{MetricsSnapshot: snap, MaxSeries: o.cfg.MetricsMaxSeries,
		Took: time.Since(start), Counted: counted})
	if dropping := d.Queues+d.Groups > 0; dropping && !o.dropping {
		o.log.Warn("more queues or consumer groups than QUEEN_METRICS_MAX_SERIES: the rest have no series of their own (queen_metrics_series_dropped)",
			"max_series", o.cfg.MetricsMaxSeries, "queues_left_out", d.Queues, "groups_left_out", d.Groups)
		o.dropping = true
	} else if !dropping {
		o.dropping = false
	}
	return nil
}

// refresh runs a read now through the read loop and returns its outcome.
func (o *observability) refresh(ctx context.Context) error {
	if o.cfg.MetricsRefresh == 0 {
		return errors.New("the periodic metrics read is off (QUEEN_METRICS_REFRESH_MS=0)")
	}
	reply := make(chan error, 1)
	select {
	case o.reads <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RefreshMetrics runs the periodic metrics read now and returns once the scrapes show its
// families (tests, which would otherwise wait for QUEEN_METRICS_REFRESH_MS).
func (b *Broker) RefreshMetrics(ctx context.Context) error { return b.obs.refresh(ctx) }

// startRates closes a rates window every QUEEN_LOG_RATES_MS (every 10 s when the line is off:
// GET /metrics still reports rates) and logs it.
func (o *observability) startRates(act *actors.System, sp *spool.Spool) {
	every := o.cfg.LogRates
	if every == 0 {
		every = 10 * time.Second
	}
	s := o.tel.NewSampler(o.store.PoolStats().EmptyAcquireWait)
	o.loops.Every(every, nil, func(context.Context) {
		pool := o.store.PoolStats()
		r := s.Sample(pool.EmptyAcquireWait)
		if o.cfg.LogRates > 0 {
			o.logRates(r, pool, act.Parked(), sp.Stats().Records)
		}
	})
}

// logRates writes the rates line, then one line per busiest queue.
func (o *observability) logRates(r telemetry.Rates, pool persistence.PoolStats, parked, spooled int64) {
	per := r.PerSecond
	emptyPct := 0.0
	if per["pop_requests"] > 0 {
		emptyPct = 100 * per["pop_empty"] / per["pop_requests"]
	}
	attrs := []any{
		"push_s", round1(per["push_messages"]), "pop_s", round1(per["pop_messages"]),
		"ack_s", round1(per["ack_messages"]), "txn_s", round1(per["transactions"]),
	}
	for _, op := range []telemetry.Op{telemetry.Push, telemetry.Pop, telemetry.Ack, telemetry.Transaction} {
		attrs = append(attrs, "p50_"+op.String()+"_ms", round1(r.P50[op]), "p99_"+op.String()+"_ms", round1(r.P99[op]))
	}
	attrs = append(attrs, "pop_empty_pct", round1(emptyPct), "parked", parked, "pool", pool.Acquired,
		"pool_size", pool.Max, "pool_waiting", round1(r.PoolWaiting), "spool_pending", spooled)
	o.log.Info("rates", attrs...)
	for _, q := range r.Busiest {
		attrs := []any{"queue", q.Queue.Name}
		if q.Queue.Tenant != "" {
			attrs = append(attrs, "tenant", q.Queue.Tenant)
		}
		o.log.Info("queue rates", append(attrs, "push_s", round1(q.Push), "pop_s", round1(q.Pop), "ack_s", round1(q.Ack))...)
	}
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
