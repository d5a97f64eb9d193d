package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"queen/persistence"
	"queen/pg/pgtest"
)

func statsCount(t *testing.T, pool *pgxpool.Pool, table string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(retentionCtx(t), `SELECT count(*) FROM queen.`+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A flush adds to the rows of its minute: counters add up, the largest lag and the extreme
// samples are kept, the last sample wins, parked is a mean over the samples (2 parked in each
// flush, over 2 then 1 samples: 4/3). Queues that do not exist get no row, idle ones none
// either, and the flush says which of its queues exist.
func TestFlushStatsAddsUp(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	busy, idle := persistence.QueueName{Name: "busy"}, persistence.QueueName{Name: "idle"}
	retentionPush(t, s, busy, "a", 1)
	retentionPush(t, s, busy, "b", 1)
	retentionPush(t, s, idle, "a", 1)
	bucket := time.Now().Truncate(time.Minute)
	flush := func(pushed, lagMax int64, cpu ...float64) persistence.FlushedStats {
		t.Helper()
		f := persistence.StatsFlush{ServerID: "b1", Port: 6632, Bucket: bucket, Queues: []persistence.QueueStats{
			{Queue: busy, QueueCounters: persistence.QueueCounters{PushRequests: 1, PushMessages: pushed, PopMessages: 1,
				LagSumMs: lagMax, LagMaxMs: lagMax}, ParkedSum: 2},
			{Queue: idle},
			{Queue: persistence.QueueName{Name: "ghost"}, QueueCounters: persistence.QueueCounters{PopEmpty: 1}},
		}}
		f.Broker.PushMessages, f.Broker.Samples = pushed, len(cpu)
		for _, v := range cpu {
			f.Broker.Gauges[persistence.GaugeCPUUser].Add(v)
		}
		out, err := s.FlushStats(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := flush(3, 40, 100, 300)
	if !out.Exist[busy] || !out.Exist[idle] || len(out.Exist) != 2 || out.Queues != 1 || out.Partitions != 2 {
		t.Fatalf("flush: %+v", out)
	}
	flush(2, 10, 50)

	f := persistence.StatsFilter{From: bucket.Add(-time.Minute), To: bucket.Add(time.Minute), Bucket: time.Minute}
	points, err := s.QueueSeries(ctx, f, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].Queue != busy || points[1].Queue != idle {
		t.Fatalf("points %+v, want busy's counts and idle's partition", points)
	}
	p := points[0]
	if p.PushRequests != 2 || p.PushMessages != 5 || p.PopMessages != 2 || p.LagSumMs != 50 || p.LagMaxMs != 40 ||
		p.Parked != 4.0/3 || p.Partitions == nil || *p.Partitions != 2 || p.PartitionsCreated != 2 {
		t.Errorf("busy: %+v", p)
	}
	if q := points[1]; q.PushMessages != 0 || q.PartitionsCreated != 1 || q.Partitions != nil {
		t.Errorf("idle: %+v", q)
	}
	if n := statsCount(t, pool, "stats_queues"); n != 1 {
		t.Errorf("%d queue rows, want busy's only", n)
	}
	brokers, err := s.BrokerSeries(ctx, f.From, f.To, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(brokers) != 1 {
		t.Fatalf("broker points %+v", brokers)
	}
	b, g := brokers[0], brokers[0].Gauges[persistence.GaugeCPUUser]
	if b.ServerID != "b1" || b.Port != 6632 || b.PushMessages != 5 || b.Samples != 3 ||
		g.Samples != 3 || g.Sum != 450 || g.Min != 50 || g.Max != 300 || g.Last != 50 {
		t.Errorf("broker: %+v, cpu %+v", b, g)
	}
	if rss := b.Gauges[persistence.GaugeRSS]; rss.Samples != 0 {
		t.Errorf("rss was never sampled: %+v", rss)
	}
}

// The retention job deletes the statistics older than QUEEN_STATS_RETENTION_DAYS and keeps
// the rest; without a setting it keeps them all.
func TestRetentionPrunesOldStatistics(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	q := persistence.QueueName{Name: "q"}
	retentionPush(t, s, q, "p", 1)
	for _, minutesAgo := range []int{0, 10} {
		_, err := s.FlushStats(ctx, persistence.StatsFlush{ServerID: "b1", Bucket: time.Now().Add(-time.Duration(minutesAgo) * time.Minute).Truncate(time.Minute),
			Queues: []persistence.QueueStats{{Queue: q, QueueCounters: persistence.QueueCounters{PushMessages: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The older minute is now 8 days old.
	retentionExec(t, pool, `UPDATE queen.stats_queues SET bucket = bucket - interval '8 days' WHERE bucket < now() - interval '5 minutes'`)
	retentionExec(t, pool, `UPDATE queen.stats_brokers SET bucket = bucket - interval '8 days' WHERE bucket < now() - interval '5 minutes'`)
	if statsCount(t, pool, "stats_queues") != 2 || statsCount(t, pool, "stats_brokers") != 2 {
		t.Fatal("two minutes were flushed")
	}

	if rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1}); err != nil || rep.Stats != 0 {
		t.Fatalf("without a setting: %+v %v", rep, err)
	}
	if rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1, StatsRetentionDays: 9}); err != nil || rep.Stats != 0 {
		t.Fatalf("kept 9 days: %+v %v", rep, err)
	}
	rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1, StatsRetentionDays: 7})
	if err != nil || rep.Stats != 2 {
		t.Fatalf("kept 7 days: %+v %v, want the old queue and broker rows deleted", rep, err)
	}
	var recent int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.stats_queues WHERE bucket > now() - interval '1 day'`).Scan(&recent); err != nil {
		t.Fatal(err)
	}
	if recent != 1 || statsCount(t, pool, "stats_queues") != 1 || statsCount(t, pool, "stats_brokers") != 1 {
		t.Errorf("the recent minute must stay")
	}
}

// What retention and eviction delete is recorded in the statistics, by queue.
func TestRetentionRecordsItsDeletions(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	ret, ev := persistence.QueueName{Name: "ret"}, persistence.QueueName{Name: "ev"}
	p := retentionPush(t, s, ret, "p", 3)
	e := retentionPush(t, s, ev, "p", 2)
	retentionExec(t, pool, `UPDATE queen.queues SET retention_enabled = true, retention_seconds = 3600 WHERE name = 'ret'`)
	retentionExec(t, pool, `UPDATE queen.queues SET max_wait_time_seconds = 60 WHERE name = 'ev'`)
	retentionAge(t, pool, p, 1, 2)
	retentionAge(t, pool, e, 1, 2)
	if _, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunEviction(ctx, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	points, err := s.QueueSeries(context.Background(), persistence.StatsFilter{From: now.Add(-time.Hour), To: now.Add(time.Minute),
		Bucket: time.Hour}, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, pt := range points {
		got[pt.Queue.Name] = [2]int64{pt.Retention + pt.Evicted, pt.CleanupEvents}
	}
	if got["ret"] != [2]int64{2, 1} || got["ev"] != [2]int64{2, 1} {
		t.Errorf("recorded deletions %v, want 2 by retention on ret and 2 by eviction on ev, one event each", got)
	}
}
