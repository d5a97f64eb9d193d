package persistence

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The per-minute statistics (migrations/0003_stats.sql): each broker adds what it counted to
// its rows of queen.stats_queues and queen.stats_brokers (FlushStats), the retention job adds
// what it deleted and prunes old rows, and the status and analytics routes sum the brokers'
// rows (stats_read.go).

// QueueCounters are the counts of one queue: what a broker counted since its previous flush,
// or the sums over the brokers of a span of minutes.
type QueueCounters struct {
	PushRequests int64 // push requests that stored messages in the queue (or tried to)
	PushMessages int64 // messages stored, by pushes and transactions
	PopRequests  int64
	PopMessages  int64
	PopEmpty     int64 // pops that delivered nothing
	AckRequests  int64 // ack requests with an acknowledgement applied on the queue
	AckSuccess   int64 // applied acknowledgements that completed a message
	AckFailed    int64 // applied acknowledgements that reported a failure (failed, retry, dlq)
	DLQ          int64 // messages dead-lettered by them
	Transactions int64 // committed transactions that pushed to or acknowledged on the queue
	LagSumMs     int64 // ages of the delivered messages when popped, summed
	LagMaxMs     int64
}

// QueueStats is what a broker counted for one queue since its previous flush.
type QueueStats struct {
	Queue QueueName
	QueueCounters
	ParkedSum int64 // parked long-polls, summed over the broker's samples
}

// counter is one counter of the statistics: its column in queen.stats_queues or
// queen.stats_brokers, and its field. The tables below are the only lists of the counters:
// the flushes' columns and values, the reads' sums and scan targets, and the additions are
// made from them, so adding a counter is a field, a line here and a migration.
type counter[T any] struct {
	column string
	of     func(*T) *int64
}

// queueCounters are QueueCounters' counters that add up (LagMaxMs is merged apart: the
// largest wins).
var queueCounters = []counter[QueueCounters]{
	{"push_requests", func(c *QueueCounters) *int64 { return &c.PushRequests }},
	{"push_messages", func(c *QueueCounters) *int64 { return &c.PushMessages }},
	{"pop_requests", func(c *QueueCounters) *int64 { return &c.PopRequests }},
	{"pop_messages", func(c *QueueCounters) *int64 { return &c.PopMessages }},
	{"pop_empty", func(c *QueueCounters) *int64 { return &c.PopEmpty }},
	{"ack_requests", func(c *QueueCounters) *int64 { return &c.AckRequests }},
	{"ack_success", func(c *QueueCounters) *int64 { return &c.AckSuccess }},
	{"ack_failed", func(c *QueueCounters) *int64 { return &c.AckFailed }},
	{"dlq", func(c *QueueCounters) *int64 { return &c.DLQ }},
	{"transactions", func(c *QueueCounters) *int64 { return &c.Transactions }},
	{"lag_sum_ms", func(c *QueueCounters) *int64 { return &c.LagSumMs }},
}

// columns are the columns of a counter table, in its order.
func columns[T any](table []counter[T]) []string {
	out := make([]string, len(table))
	for i, c := range table {
		out[i] = c.column
	}
	return out
}

// values are the counters of v, in the order of table.
func values[T any](table []counter[T], v *T) []int64 {
	out := make([]int64, len(table))
	for i, c := range table {
		out[i] = *c.of(v)
	}
	return out
}

// targets are scan targets of the counters of v, in the order of table.
func targets[T any](table []counter[T], v *T) []any {
	out := make([]any, len(table))
	for i, c := range table {
		out[i] = c.of(v)
	}
	return out
}

// parkedColumn is the queue statistic that is not a counter: parked long-polls summed over
// the samples, a gauge.
const parkedColumn = "parked_sum"

// queueStatsColumns are the columns of queen.stats_queues a flush adds to, in the order of
// QueueStats.counters.
var queueStatsColumns = append(columns(queueCounters), parkedColumn)

func (q QueueStats) counters() []int64 {
	return append(values(queueCounters, &q.QueueCounters), q.ParkedSum)
}

// Add adds o's counters to c; the larger lag wins.
func (c *QueueCounters) Add(o QueueCounters) {
	for _, f := range queueCounters {
		*f.of(c) += *f.of(&o)
	}
	c.LagMaxMs = max(c.LagMaxMs, o.LagMaxMs)
}

// Since are the counters counted between prev and c (both counted since the same start); the
// largest lag is c's.
func (c QueueCounters) Since(prev QueueCounters) QueueCounters {
	for _, f := range queueCounters {
		*f.of(&c) -= *f.of(&prev)
	}
	return c
}

// Gauge is a figure sampled several times between two flushes.
type Gauge struct {
	Samples       int
	Sum, Min, Max float64
	Last          float64
}

// Add records one sample.
func (g *Gauge) Add(v float64) {
	if g.Samples == 0 || v < g.Min {
		g.Min = v
	}
	if g.Samples == 0 || v > g.Max {
		g.Max = v
	}
	g.Samples++
	g.Sum += v
	g.Last = v
}

// nullable returns v, or nil when nothing was sampled.
func (g Gauge) nullable(v float64) *float64 {
	if g.Samples == 0 {
		return nil
	}
	return &v
}

// BrokerGauge names one of the figures a broker samples.
type BrokerGauge int

// The sampled figures, in the order of BrokerStats.Gauges.
const (
	GaugeCPUUser    BrokerGauge = iota // CPU time in user mode over wall time, in 1/100 %
	GaugeCPUSystem                     // the same in system mode
	GaugeRSS                           // resident memory, bytes
	GaugeVSZ                           // virtual memory, bytes
	GaugePoolSize                      // connections the pool may open
	GaugePoolIdle                      // open connections not in use
	GaugePoolActive                    // connections in use
	GaugePoolFree                      // connections the pool could still hand out (size - in use)
	NGauges
)

// brokerGaugeColumns are the column prefixes of the gauges in queen.stats_brokers.
var brokerGaugeColumns = [NGauges]string{"cpu_user", "cpu_system", "rss", "vsz", "pool_size", "pool_idle", "pool_active", "pool_free"}

// BrokerStats is what a broker counted over every queue since its previous flush, and the
// figures it sampled.
type BrokerStats struct {
	PushRequests, PushMessages, PopRequests, PopMessages, PopEmpty   int64
	AckRequests, AckMessages, AckFailed, Transactions, DLQ, DBErrors int64
	StreamCycles, LagSumMs, LagMaxMs                                 int64
	Samples                                                          int
	Gauges                                                           [NGauges]Gauge
}

// brokerCounters are BrokerStats' counters that add up: the columns a flush adds to in
// queen.stats_brokers (the minute) and queen.stats_totals (the broker's lifetime), named as the
// broker-wide counters of telemetry.Counters where the broker counts them itself.
var brokerCounters = []counter[BrokerStats]{
	{"push_requests", func(b *BrokerStats) *int64 { return &b.PushRequests }},
	{"push_messages", func(b *BrokerStats) *int64 { return &b.PushMessages }},
	{"pop_requests", func(b *BrokerStats) *int64 { return &b.PopRequests }},
	{"pop_messages", func(b *BrokerStats) *int64 { return &b.PopMessages }},
	{"pop_empty", func(b *BrokerStats) *int64 { return &b.PopEmpty }},
	{"ack_requests", func(b *BrokerStats) *int64 { return &b.AckRequests }},
	{"ack_messages", func(b *BrokerStats) *int64 { return &b.AckMessages }},
	{"ack_failed", func(b *BrokerStats) *int64 { return &b.AckFailed }},
	{"transactions", func(b *BrokerStats) *int64 { return &b.Transactions }},
	{"dlq", func(b *BrokerStats) *int64 { return &b.DLQ }},
	{"db_errors", func(b *BrokerStats) *int64 { return &b.DBErrors }},
	{"stream_cycles", func(b *BrokerStats) *int64 { return &b.StreamCycles }},
	{"lag_sum_ms", func(b *BrokerStats) *int64 { return &b.LagSumMs }},
}

// AddCounters adds o's counters and samples to b; the larger lag wins. The gauges are left
// alone: merging them is the reader's choice (a mean of means, the extremes).
func (b *BrokerStats) AddCounters(o BrokerStats) {
	for _, f := range brokerCounters {
		*f.of(b) += *f.of(&o)
	}
	b.LagMaxMs = max(b.LagMaxMs, o.LagMaxMs)
	b.Samples += o.Samples
}

// SetCounters sets the counters of b that byName names (the broker-wide counters of
// telemetry, by name); the others are left as they are.
func (b *BrokerStats) SetCounters(byName map[string]int64) {
	for _, f := range brokerCounters {
		if v, ok := byName[f.column]; ok {
			*f.of(b) = v
		}
	}
}

// Counters are b's counters by name.
func (b BrokerStats) Counters() map[string]int64 {
	out := make(map[string]int64, len(brokerCounters))
	for _, f := range brokerCounters {
		out[f.column] = *f.of(&b)
	}
	return out
}

// StatsFlush is one broker's flush into one minute.
type StatsFlush struct {
	ServerID string
	Port     int
	Bucket   time.Time // the start of the minute
	Broker   BrokerStats
	// Queues are the queues with something to add; only those that exist get rows.
	Queues []QueueStats
}

// brokerUpsert adds a flush to its broker row: counters and gauge sums add up, the smallest
// and largest samples are kept, the last sample replaces the previous one.
var brokerUpsert = func() string {
	cols := append([]string{"bucket", "server_id", "port", "samples", "lag_max_ms"}, columns(brokerCounters)...)
	sets := []string{"port = EXCLUDED.port", "updated_at = now()", "samples = s.samples + EXCLUDED.samples",
		"lag_max_ms = GREATEST(s.lag_max_ms, EXCLUDED.lag_max_ms)"}
	for _, c := range columns(brokerCounters) {
		sets = append(sets, c+" = s."+c+" + EXCLUDED."+c)
	}
	for _, g := range brokerGaugeColumns {
		cols = append(cols, g+"_sum", g+"_min", g+"_max", g+"_last")
		sets = append(sets, g+"_sum = s."+g+"_sum + EXCLUDED."+g+"_sum",
			g+"_min = LEAST(s."+g+"_min, EXCLUDED."+g+"_min)",
			g+"_max = GREATEST(s."+g+"_max, EXCLUDED."+g+"_max)",
			g+"_last = COALESCE(EXCLUDED."+g+"_last, s."+g+"_last)")
	}
	params := make([]string, len(cols))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return `INSERT INTO queen.stats_brokers AS s (` + strings.Join(cols, ", ") + `)
		VALUES (` + strings.Join(params, ", ") + `)
		ON CONFLICT (bucket, server_id) DO UPDATE SET ` + strings.Join(sets, ", ")
}()

// totalsUpsert adds a flush's counters to the broker's lifetime row.
var totalsUpsert = func() string {
	cols := columns(brokerCounters)
	params, sets := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		params[i] = fmt.Sprintf("$%d", i+2)
		sets[i] = c + " = t." + c + " + EXCLUDED." + c
	}
	return `INSERT INTO queen.stats_totals AS t (server_id, ` + strings.Join(cols, ", ") + `)
		VALUES ($1, ` + strings.Join(params, ", ") + `)
		ON CONFLICT (server_id) DO UPDATE SET updated_at = now(), ` + strings.Join(sets, ", ")
}()

// queueUpsert adds a flush's queues to their rows ($1 bucket, $2 server id, $3 samples, $4 the
// stored names, $5 the largest lags, then one array per counter column). Queues that do not
// exist are left out; each row records the queue's partition count. Rows are written in queue
// id order, the lock order of two brokers sharing a server id.
var queueUpsert = func() string {
	cols, sel, args, sets := []string{}, []string{}, []string{}, []string{}
	for i, c := range queueStatsColumns {
		cols = append(cols, c)
		sel = append(sel, "t."+c)
		args = append(args, fmt.Sprintf("$%d::int8[]", i+6))
		sets = append(sets, c+" = s."+c+" + EXCLUDED."+c)
	}
	return `INSERT INTO queen.stats_queues AS s (bucket, queue_id, server_id, samples, lag_max_ms, partition_count, ` +
		strings.Join(cols, ", ") + `)
		SELECT $1::timestamptz, q.id, $2::text, $3::int4, t.lag_max_ms,
		       (SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id), ` + strings.Join(sel, ", ") + `
		FROM unnest($4::text[], $5::int8[], ` + strings.Join(args, ", ") + `) AS t(name, lag_max_ms, ` + strings.Join(cols, ", ") + `)
		JOIN queen.queues q ON q.name = t.name
		WHERE t.lag_max_ms <> 0 OR t.` + strings.Join(cols, " <> 0 OR t.") + ` <> 0
		ORDER BY q.id
		ON CONFLICT (bucket, queue_id, server_id) DO UPDATE SET
			samples = s.samples + EXCLUDED.samples, lag_max_ms = GREATEST(s.lag_max_ms, EXCLUDED.lag_max_ms),
			partition_count = EXCLUDED.partition_count, ` + strings.Join(sets, ", ") + `
		RETURNING partition_count, (SELECT namespace FROM queen.queues WHERE id = queue_id),
			(SELECT task FROM queen.queues WHERE id = queue_id)`
}()

// FlushedStats is what a flush wrote.
type FlushedStats struct {
	Exist      map[QueueName]bool // the flush's queues that exist; the others got no row
	Queues     int                // queue rows added to (queues with something to add)
	Partitions int64              // the partitions of those queues
	Namespaces int                // their distinct namespaces and tasks ("" included)
	Tasks      int
}

// FlushStats adds f to the broker's rows, its minute's and its lifetime's, in one round trip
// and one implicit transaction (a failure adds nothing, and the caller keeps the counts for its
// next flush). A queue of f with
// nothing to add gets no row, but is looked up all the same: Exist tells the caller which of
// its queues still exist.
func (s *Store) FlushStats(ctx context.Context, f StatsFlush) (FlushedStats, error) {
	out := FlushedStats{Exist: map[QueueName]bool{}}
	b := f.Broker
	counters := values(brokerCounters, &b)
	args := []any{f.Bucket, f.ServerID, f.Port, b.Samples, b.LagMaxMs}
	targs := []any{f.ServerID}
	for _, v := range counters {
		args, targs = append(args, v), append(targs, v)
	}
	for _, g := range b.Gauges {
		args = append(args, g.Sum, g.nullable(g.Min), g.nullable(g.Max), g.nullable(g.Last))
	}
	names := make([]string, len(f.Queues))
	lagMax := make([]int64, len(f.Queues))
	columns := make([][]int64, len(queueStatsColumns))
	for i, q := range f.Queues {
		names[i], lagMax[i] = q.Queue.Stored(), q.LagMaxMs
		for c, v := range q.counters() {
			columns[c] = append(columns[c], v)
		}
	}
	qargs := []any{f.Bucket, f.ServerID, b.Samples, names, lagMax}
	for _, c := range columns {
		qargs = append(qargs, c)
	}

	batch := &pgx.Batch{}
	batch.Queue(brokerUpsert, args...)
	// A flush of nothing (an idle broker flushes at every metrics read) leaves the lifetime
	// row alone rather than writing a new version of it.
	counted := slices.ContainsFunc(counters, func(v int64) bool { return v != 0 })
	if counted {
		batch.Queue(totalsUpsert, targs...)
	}
	batch.Queue(queueUpsert, qargs...)
	batch.Queue(`SELECT name FROM queen.queues WHERE name = ANY($1::text[])`, names)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("cannot add to the broker's statistics: %w", err)
	}
	if counted {
		if _, err := br.Exec(); err != nil {
			return out, fmt.Errorf("cannot add to the broker's lifetime counters: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return out, fmt.Errorf("cannot add to the queues' statistics: %w", err)
	}
	namespaces, tasks := map[string]bool{}, map[string]bool{}
	var partitions int64
	var namespace, task string
	_, err = pgx.ForEachRow(rows, []any{&partitions, &namespace, &task}, func() error {
		out.Queues++
		out.Partitions += partitions
		namespaces[namespace], tasks[task] = true, true
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("cannot add to the queues' statistics: %w", err)
	}
	out.Namespaces, out.Tasks = len(namespaces), len(tasks)
	if rows, err = br.Query(); err != nil {
		return out, fmt.Errorf("cannot look up the counted queues: %w", err)
	}
	var name QueueName
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error { out.Exist[name] = true; return nil }); err != nil {
		return out, fmt.Errorf("cannot look up the counted queues: %w", err)
	}
	if err := br.Close(); err != nil {
		return out, fmt.Errorf("cannot finish the statistics flush: %w", err)
	}
	return out, nil
}

// cleanupKind is what a retention step deleted, the column of queen.stats_queues it adds to.
type cleanupKind string

const (
	cleanupRetention  cleanupKind = "retention_messages" // older than retention_seconds
	cleanupCompleted  cleanupKind = "completed_messages" // consumed, older than completed_retention_seconds
	cleanupEviction   cleanupKind = "eviction_messages"  // waited longer than max_wait_time_seconds
	cleanupPartitions cleanupKind = "partitions_deleted" // idle empty partitions
)

// recordCleanup adds what a retention step deleted, by queue id, to the current minute's rows.
// They belong to no broker (server_id ”): one broker at a time cleans up for the cluster. A
// deletion of messages counts as one cleanup event per queue.
func (s *Store) recordCleanup(ctx context.Context, kind cleanupKind, byQueue map[uuid.UUID]int64) error {
	ids := make([]uuid.UUID, 0, len(byQueue))
	counts := make([]int64, 0, len(byQueue))
	for id, n := range byQueue {
		if n > 0 {
			ids, counts = append(ids, id), append(counts, n)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	events := 1
	if kind == cleanupPartitions {
		events = 0
	}
	col := string(kind)
	_, err := s.pool.Exec(ctx, `
		INSERT INTO queen.stats_queues AS s (bucket, queue_id, server_id, `+col+`, cleanup_events)
		SELECT date_trunc('minute', now()), t.id, '', t.n, $3::int8 FROM unnest($1::uuid[], $2::int8[]) AS t(id, n)
		ORDER BY t.id
		ON CONFLICT (bucket, queue_id, server_id) DO UPDATE SET
			`+col+` = s.`+col+` + EXCLUDED.`+col+`, cleanup_events = s.cleanup_events + EXCLUDED.cleanup_events`,
		ids, counts, events)
	if err != nil {
		return fmt.Errorf("cannot record the %s of retention: %w", strings.ReplaceAll(col, "_", " "), err)
	}
	return nil
}

// pruneStats deletes the statistics older than days, batch rows per statement.
func (s *Store) pruneStats(ctx context.Context, days, batch int) (int64, error) {
	var total int64
	for _, table := range []string{"queen.stats_queues", "queen.stats_brokers"} {
		for {
			tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE ctid IN (
				SELECT ctid FROM `+table+` WHERE bucket < now() - make_interval(days => $1) LIMIT $2)`, days, batch)
			if err != nil {
				return total, fmt.Errorf("cannot delete old statistics from %s: %w", table, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return total, nil
}
