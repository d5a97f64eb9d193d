package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"queen/background"
	"queen/config"
	"queen/persistence"
)

// jobs runs retention and eviction in the background. Every broker runs them; the cleanup
// advisory lock lets one broker of the cluster work at a time and the others skip.
type jobs struct {
	loop *background.Group
	runs chan<- jobRun // nil outside tests
}

// jobRun is what a test learns of each completed or failed run (Options.jobRuns), instead of
// reading the log to know a job ran.
type jobRun struct {
	job     string // "retention" or "eviction"
	deleted int64  // messages, partitions and statistics rows removed
	err     error
}

// startJobs starts the loop. Each job first runs one interval after start; an interval of 0
// disables that job. runs, when not nil, receives every run that was not skipped.
func startJobs(store *persistence.Store, cfg config.Config, log *slog.Logger, runs chan<- jobRun) *jobs {
	j := &jobs{loop: background.NewGroup(), runs: runs}
	log.Info("background jobs started", "retention_interval", cfg.RetentionInterval, "eviction_interval", cfg.EvictionInterval)
	j.loop.Go(func(ctx context.Context) { j.run(ctx, store, cfg, log) })
	return j
}

// stop cancels a run in progress (its statement is cancelled on the server) and waits for the
// loop to end, so the pool can close under nothing.
func (j *jobs) stop() {
	if j == nil {
		return
	}
	j.loop.Stop()
}

// run runs both jobs from one goroutine: they take the same cluster-wide lock, so running them
// side by side in one broker would only make one of them skip.
func (j *jobs) run(ctx context.Context, store *persistence.Store, cfg config.Config, log *slog.Logger) {
	retention := tick(cfg.RetentionInterval)
	defer retention.Stop()
	eviction := tick(cfg.EvictionInterval)
	defer eviction.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retention.C:
			start := time.Now()
			rep, err := store.RunRetention(ctx, persistence.RetentionOptions{
				BatchSize: cfg.RetentionBatchSize, PartitionCleanupDays: cfg.PartitionCleanupDays,
				StatsRetentionDays: cfg.StatsRetentionDays,
			})
			counts := []any{"expired_messages", rep.Expired, "completed_messages", rep.Completed,
				"partitions", rep.Partitions, "duration", time.Since(start), "stats_rows", rep.Stats,
				"stream_state_rows", rep.StreamState, "cursor_rows", rep.Cursors}
			deleted := rep.Expired + rep.Completed + rep.Partitions + rep.Stats + rep.StreamState + rep.Cursors
			if ok(ctx, log, "retention", err, counts) && deleted > 0 {
				log.Info("retention deleted", counts...)
			}
			j.signal(ctx, "retention", deleted, err)
		case <-eviction.C:
			start := time.Now()
			n, err := store.RunEviction(ctx, cfg.EvictionBatchSize)
			counts := []any{"messages", n, "duration", time.Since(start)}
			if ok(ctx, log, "eviction", err, counts) && n > 0 {
				log.Info("eviction deleted", counts...)
			}
			j.signal(ctx, "eviction", int64(n), err)
		}
	}
}

// signal hands a run to the test that asked for them; skipped runs and shutdown are not runs.
func (j *jobs) signal(ctx context.Context, job string, deleted int64, err error) {
	if j.runs == nil || errors.Is(err, persistence.ErrCleanupBusy) || ctx.Err() != nil {
		return
	}
	select {
	case j.runs <- jobRun{job: job, deleted: deleted, err: err}:
	case <-ctx.Done():
	}
}

// ok tells whether a run completed, and logs one that did not: a failed run with what it
// deleted before failing (each batch commits), a skipped one (routine on all but one broker of a
// cluster) at debug level, one cut short by shutdown not at all.
func ok(ctx context.Context, log *slog.Logger, job string, err error, counts []any) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, persistence.ErrCleanupBusy):
		log.Debug(job + " skipped: another broker is cleaning up")
	case ctx.Err() == nil:
		log.Warn(job+" failed", append([]any{"err", err}, counts...)...)
	}
	return false
}

// tick returns a ticker firing every d, or one that never fires when d is 0.
func tick(d time.Duration) *time.Ticker {
	if d <= 0 {
		t := time.NewTicker(time.Hour)
		t.Stop()
		return t
	}
	return time.NewTicker(d)
}
