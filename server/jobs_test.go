package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"queen/config"
	"queen/persistence"
	"queen/pg/pgtest"
	"queen/testkit"
)

// newJobsLog is a log that a background goroutine (a job loop, a listener) writes while the
// test reads it, and its logger.
func newJobsLog() (*testkit.LogBuffer, *slog.Logger) {
	l := &testkit.LogBuffer{}
	return l, slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func jobsExec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// nextRun waits for the next job run the loop signals.
func nextRun(t *testing.T, runs <-chan jobRun) jobRun {
	t.Helper()
	select {
	case r := <-runs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no job ran within 10 s")
		return jobRun{}
	}
}

// stopWithin stops the loop and fails when that takes longer than d.
func stopWithin(t *testing.T, j *jobs, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { j.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("jobs did not stop within %s", d)
	}
}

func TestJobsRunRetentionAndEviction(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	store := persistence.NewStore(pool)
	items := []persistence.PushItem{
		{Queue: persistence.QueueName{Name: "ret"}, Partition: "p", TransactionID: "a", Payload: json.RawMessage(`1`)},
		{Queue: persistence.QueueName{Name: "ret"}, Partition: "p", TransactionID: "b", Payload: json.RawMessage(`1`)},
		{Queue: persistence.QueueName{Name: "ev"}, Partition: "p", TransactionID: "a", Payload: json.RawMessage(`1`)},
	}
	if _, err := store.Push(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	jobsExec(t, pool, `UPDATE queen.queues SET retention_enabled = true, retention_seconds = 60 WHERE name = 'ret'`)
	jobsExec(t, pool, `UPDATE queen.queues SET max_wait_time_seconds = 60 WHERE name = 'ev'`)
	jobsExec(t, pool, `UPDATE queen.segments SET created_at = now() - interval '1 hour'`)

	logs, log := newJobsLog()
	runs := make(chan jobRun, 16)
	j := startJobs(store, config.Config{
		RetentionInterval: 20 * time.Millisecond, RetentionBatchSize: 10,
		EvictionInterval: 30 * time.Millisecond, EvictionBatchSize: 10,
	}, log, runs)
	defer j.stop()
	// Each job's first run deletes what it owns; the runs after it find nothing.
	deleted := map[string]int64{}
	for deleted["retention"] < 2 || deleted["eviction"] < 1 {
		r := nextRun(t, runs)
		if r.err != nil {
			t.Fatalf("%s failed: %v", r.job, r.err)
		}
		deleted[r.job] += r.deleted
	}
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 || deleted["retention"] != 2 || deleted["eviction"] != 1 {
		t.Fatalf("%d messages left, deleted %v", left, deleted)
	}
	stopWithin(t, j, 5*time.Second)

	out := logs.String()
	for _, want := range []string{
		`msg="background jobs started" retention_interval=20ms eviction_interval=30ms`,
		`msg="retention deleted" expired_messages=2 completed_messages=0 partitions=0 duration=`,
		`msg="eviction deleted" messages=1 duration=`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// Runs that delete nothing stay quiet.
	if n := strings.Count(out, "retention deleted") + strings.Count(out, "eviction deleted"); n != 2 {
		t.Errorf("%d deletion lines, want 2:\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN") {
		t.Errorf("warnings logged:\n%s", out)
	}
}

// A run that fails is logged as a warning, and the loop goes on.
func TestJobsWarnOnError(t *testing.T) {
	cs := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every statement now fails
	logs, log := newJobsLog()
	runs := make(chan jobRun, 16)
	j := startJobs(persistence.NewStore(pool), config.Config{
		RetentionInterval: 10 * time.Millisecond, EvictionInterval: 10 * time.Millisecond,
	}, log, runs)
	defer j.stop()
	failed := map[string]int{}
	for failed["retention"] < 2 || failed["eviction"] < 1 {
		r := nextRun(t, runs)
		if r.err == nil {
			t.Fatalf("%s succeeded on a closed pool", r.job)
		}
		failed[r.job]++
	}
	stopWithin(t, j, 5*time.Second)
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "err=") {
		t.Errorf("warning without level or error:\n%s", out)
	}
}

// Stopping does not wait for the next tick, and an interval of 0 disables its job.
func TestJobsStopPromptly(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	logs, log := newJobsLog()
	j := startJobs(persistence.NewStore(pool), config.Config{RetentionInterval: time.Hour}, log, nil)
	stopWithin(t, j, time.Second)
	j.stop() // a second stop returns at once
	if out := logs.String(); strings.Count(out, "\n") != 1 {
		t.Errorf("want only the boot line, got:\n%s", out)
	}
	var none *jobs
	none.stop() // a broker whose jobs never started
}

// A broker runs the jobs and stops them on Shutdown.
func TestJobsStartAndStopWithBroker(t *testing.T) {
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"RETENTION_INTERVAL": "20", "EVICTION_INTERVAL": "20"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.BindAddr, cfg.Port = "127.0.0.1", 0
	cfg.SpoolDir = t.TempDir()
	_, log := newJobsLog()
	runs := make(chan jobRun, 16)
	b, err := Start(context.Background(), cfg, log, Options{ConnString: pgtest.NewDatabase(t), jobRuns: runs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store().Push(context.Background(), []persistence.PushItem{
		{Queue: persistence.QueueName{Name: "ev"}, Partition: "p", TransactionID: "a", Payload: json.RawMessage(`1`)},
	}); err != nil {
		t.Fatal(err)
	}
	jobsExec(t, b.Store().Pool(), `UPDATE queen.queues SET max_wait_time_seconds = 1`)
	jobsExec(t, b.Store().Pool(), `UPDATE queen.segments SET created_at = now() - interval '1 minute'`)
	for r := nextRun(t, runs); r.job != "eviction" || r.deleted != 1; r = nextRun(t, runs) {
		if r.err != nil {
			t.Fatalf("%s failed: %v", r.job, r.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.jobs.loop.Done():
	default:
		t.Error("job loop still running after Shutdown")
	}
}
