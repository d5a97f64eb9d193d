package server

import (
	"context"
	"testing"
	"time"

	"queen/config"
	"queen/persistence"
	"queen/pg/pgtest"
)

// The retention job prunes the per-minute statistics older than QUEEN_STATS_RETENTION_DAYS.
func TestJobsPruneOldStatistics(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	store := persistence.NewStore(pool)
	ctx := context.Background()
	for _, server := range []string{"old", "recent"} {
		if _, err := store.FlushStats(ctx, persistence.StatsFlush{ServerID: server, Bucket: time.Now().Truncate(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	jobsExec(t, pool, `UPDATE queen.stats_brokers SET bucket = bucket - interval '8 days' WHERE server_id = 'old'`)

	_, log := newJobsLog()
	runs := make(chan jobRun, 16)
	j := startJobs(store, config.Config{RetentionInterval: 20 * time.Millisecond, RetentionBatchSize: 10, StatsRetentionDays: 7}, log, runs)
	defer j.stop()
	if r := nextRun(t, runs); r.job != "retention" || r.err != nil || r.deleted != 1 {
		t.Fatalf("first run: %+v, want the old row deleted", r)
	}
	var servers []string
	rows, err := pool.Query(ctx, `SELECT server_id FROM queen.stats_brokers`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	if rows.Err() != nil || len(servers) != 1 || servers[0] != "recent" {
		t.Fatalf("rows left: %v %v", servers, rows.Err())
	}
}
