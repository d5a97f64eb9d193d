package persistence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads of the per-minute statistics for the status and analytics routes. Every read sums the
// rows of every broker, so each broker answers the same; none reads a message.

// StatsFilter selects the statistics of a read.
type StatsFilter struct {
	Scope     Scope     // the caller's tenant: only its queues count
	Queue     QueueName // zero: every queue of the scope
	Namespace string    // "" matches any
	Task      string    // "" matches any
	From, To  time.Time
	// Bucket is the width of one point; points start at multiples of it since the Unix epoch,
	// and the first covers From.
	Bucket time.Duration
}

// queueConditions are the conditions on the queue q that f selects.
func (f StatsFilter) queueConditions(a *sqlArgs) {
	a.add(inScope("q.name", "?"), f.Scope.Tenant)
	if f.Queue != (QueueName{}) {
		a.add("q.name = ?", f.Queue.Stored())
	}
	if f.Namespace != "" {
		a.add("q.namespace = ?", f.Namespace)
	}
	if f.Task != "" {
		a.add("q.task = ?", f.Task)
	}
}

// QueuePoint is the statistics of one point: one queue, or every selected queue together.
type QueuePoint struct {
	Bucket time.Time
	Queue  QueueName // zero when the point sums every selected queue
	QueueCounters
	// Parked is the mean number of parked long-polls, over the broker's samples of each
	// minute summed over the brokers, then over the minutes of the point that have rows.
	Parked float64
	// Partitions is the largest partition count a broker flushed in the point; nil when none.
	Partitions        *int64
	PartitionsCreated int64 // partitions (still stored) created in the point
	PartitionsDeleted int64 // idle partitions the retention job deleted
	Retention         int64 // messages retention deleted for being older than retention_seconds
	Completed         int64 // consumed messages retention deleted (completed_retention_seconds)
	Evicted           int64 // messages eviction deleted (max_wait_time_seconds)
	CleanupEvents     int64 // retention and eviction passes that deleted messages
}

// QueueSeries reads the points of the selected queues in f's window, oldest first: one point
// per queue and bucket with byQueue (then by queue name), one per bucket otherwise. A bucket
// with nothing recorded has no point.
func (s *Store) QueueSeries(ctx context.Context, f StatsFilter, byQueue bool) ([]QueuePoint, error) {
	var a sqlArgs
	width, from, to := a.param(f.Bucket), a.param(f.From), a.param(f.To)
	f.queueConditions(&a)
	key, join, name := "", "", "NULL::text"
	if byQueue {
		key, join, name = ", queue_id", " AND c.queue_id = b.queue_id", "q.name"
	}
	sums := make([]string, 0, len(queueStatsColumns))
	for _, c := range columns(queueCounters) {
		sums = append(sums, "sum("+c+")::int8 AS "+c)
	}
	cleanup := "sum(partitions_deleted)::int8 AS partitions_deleted, sum(retention_messages)::int8 AS retention_messages, " +
		"sum(completed_messages)::int8 AS completed_messages, sum(eviction_messages)::int8 AS eviction_messages, " +
		"sum(cleanup_events)::int8 AS cleanup_events"
	out := make([]string, 0, len(sums))
	for _, c := range columns(queueCounters) {
		out = append(out, "COALESCE(b."+c+", 0)")
	}
	sql := `
		WITH minutes AS (
			SELECT s.bucket, s.queue_id, ` + strings.Join(sums, ", ") + `, max(s.lag_max_ms) AS lag_max_ms,
			       sum(s.parked_sum::float8 / NULLIF(s.samples, 0)) AS parked,
			       max(s.partition_count) AS partition_count, ` + cleanup + `
			FROM queen.stats_queues s JOIN queen.queues q ON q.id = s.queue_id
			WHERE s.bucket >= date_bin(` + width + `, ` + from + `, 'epoch') AND s.bucket <= ` + to + ` AND ` + a.where() + `
			GROUP BY s.bucket, s.queue_id),
		bins AS (
			SELECT date_bin(` + width + `, bucket, 'epoch') AS bin` + key + `, ` + strings.Join(sums, ", ") + `,
			       max(lag_max_ms) AS lag_max_ms, COALESCE(avg(parked), 0) AS parked,
			       max(partition_count) AS partition_count, ` + cleanup + `
			FROM minutes GROUP BY 1` + key + `),
		created AS (
			SELECT date_bin(` + width + `, p.created_at, 'epoch') AS bin` + strings.ReplaceAll(key, "queue_id", "p.queue_id") + `, count(*) AS n
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE p.created_at >= date_bin(` + width + `, ` + from + `, 'epoch') AND p.created_at <= ` + to + ` AND ` + a.where() + `
			GROUP BY 1` + strings.ReplaceAll(key, "queue_id", "p.queue_id") + `)
		SELECT COALESCE(b.bin, c.bin), ` + name + `, ` + strings.Join(out, ", ") + `, COALESCE(b.lag_max_ms, 0),
		       COALESCE(b.parked, 0), b.partition_count, COALESCE(c.n, 0), COALESCE(b.partitions_deleted, 0),
		       COALESCE(b.retention_messages, 0), COALESCE(b.completed_messages, 0), COALESCE(b.eviction_messages, 0),
		       COALESCE(b.cleanup_events, 0)
		FROM bins b FULL JOIN created c ON c.bin = b.bin` + join
	if byQueue {
		sql += ` JOIN queen.queues q ON q.id = COALESCE(b.queue_id, c.queue_id) ORDER BY 1, q.name COLLATE "C"`
	} else {
		sql += ` ORDER BY 1`
	}
	rows, err := s.pool.Query(ctx, sql, a.args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the queue statistics: %w", err)
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueuePoint, error) {
		var p QueuePoint
		targets := append([]any{&p.Bucket, &p.Queue}, targets(queueCounters, &p.QueueCounters)...)
		targets = append(targets, &p.LagMaxMs, &p.Parked, &p.Partitions, &p.PartitionsCreated, &p.PartitionsDeleted,
			&p.Retention, &p.Completed, &p.Evicted, &p.CleanupEvents)
		err := row.Scan(targets...)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the queue statistics: %w", err)
	}
	return points, nil
}

// ParkedPoint is the mean number of long-polls parked on one queue on one broker over a point.
type ParkedPoint struct {
	Bucket   time.Time
	Queue    QueueName
	ServerID string
	Parked   float64
}

// ParkedSeries reads the parked long-polls of the selected queues by broker, oldest first, then
// by queue name and server id. Only minutes a broker sampled count.
func (s *Store) ParkedSeries(ctx context.Context, f StatsFilter) ([]ParkedPoint, error) {
	var a sqlArgs
	width, from, to := a.param(f.Bucket), a.param(f.From), a.param(f.To)
	f.queueConditions(&a)
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin(`+width+`, s.bucket, 'epoch'), q.name, s.server_id, avg(s.parked_sum::float8 / NULLIF(s.samples, 0))
		FROM queen.stats_queues s JOIN queen.queues q ON q.id = s.queue_id
		WHERE s.samples > 0 AND s.bucket >= date_bin(`+width+`, `+from+`, 'epoch') AND s.bucket <= `+to+` AND `+a.where()+`
		GROUP BY 1, q.name, s.server_id
		ORDER BY 1, q.name COLLATE "C", s.server_id COLLATE "C"`, a.args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the parked long-polls: %w", err)
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ParkedPoint, error) {
		var p ParkedPoint
		err := row.Scan(&p.Bucket, &p.Queue, &p.ServerID, &p.Parked)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the parked long-polls: %w", err)
	}
	return points, nil
}

// BrokerPoint is one broker's statistics over one point: its counters summed, its gauges
// merged (Samples and Sum added, the smallest Min, the largest Max, the latest Last).
type BrokerPoint struct {
	Bucket   time.Time
	ServerID string
	Port     int
	LastSeen time.Time // its latest flush into the point
	BrokerStats
}

// BrokerSeries reads the brokers' points between from and to, oldest first, then by server id;
// serverID "" reads every broker.
func (s *Store) BrokerSeries(ctx context.Context, from, to time.Time, bucket time.Duration, serverID string) ([]BrokerPoint, error) {
	cols := make([]string, 0, len(brokerCounters)+4*int(NGauges))
	for _, c := range columns(brokerCounters) {
		cols = append(cols, "sum("+c+")::int8")
	}
	for _, g := range brokerGaugeColumns {
		cols = append(cols, "sum("+g+"_sum)", "min("+g+"_min)", "max("+g+"_max)",
			"(array_agg("+g+"_last ORDER BY bucket DESC) FILTER (WHERE "+g+"_last IS NOT NULL))[1]")
	}
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($1, bucket, 'epoch'), server_id, max(port), max(updated_at), sum(samples)::int4,
		       max(lag_max_ms), `+strings.Join(cols, ", ")+`
		FROM queen.stats_brokers
		WHERE bucket >= date_bin($1, $2, 'epoch') AND bucket <= $3 AND ($4 = '' OR server_id = $4)
		GROUP BY 1, 2
		ORDER BY 1, server_id COLLATE "C"`, bucket, from, to, serverID)
	if err != nil {
		return nil, fmt.Errorf("cannot read the broker statistics: %w", err)
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (BrokerPoint, error) {
		var p BrokerPoint
		var gauges [NGauges][3]*float64
		targets := append([]any{&p.Bucket, &p.ServerID, &p.Port, &p.LastSeen, &p.Samples, &p.LagMaxMs}, targets(brokerCounters, &p.BrokerStats)...)
		for i := range gauges {
			targets = append(targets, &p.Gauges[i].Sum, &gauges[i][0], &gauges[i][1], &gauges[i][2])
		}
		if err := row.Scan(targets...); err != nil {
			return p, err
		}
		for i, g := range gauges {
			if g[0] != nil && g[1] != nil && g[2] != nil {
				p.Gauges[i].Samples = p.Samples
				p.Gauges[i].Min, p.Gauges[i].Max, p.Gauges[i].Last = *g[0], *g[1], *g[2]
			}
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the broker statistics: %w", err)
	}
	return points, nil
}

// StatsAge is the time since a broker last flushed its statistics; negative when none has.
func (s *Store) StatsAge(ctx context.Context) (time.Duration, error) {
	var secs *float64
	err := s.pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - max(updated_at))::float8 FROM queen.stats_brokers`).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("cannot read the age of the statistics: %w", err)
	}
	if secs == nil {
		return -1, nil
	}
	return time.Duration(*secs * float64(time.Second)), nil
}

// LeaseSummary describes the active leases on the queues of a scope.
type LeaseSummary struct {
	Active     int64 // (partition, consumer group) leases not expired
	Partitions int64 // partitions with at least one
	BatchSize  int64 // messages they cover
	// Acked are the messages of those leases already acknowledged: the cursor's progress into
	// the lease (exact while the leased messages are contiguous).
	Acked int64
}

// DeadLetterSummary describes the dead letters of the queues of a scope.
type DeadLetterSummary struct {
	Messages   int64 // dead-letter entries (one per message and consumer group)
	Partitions int64 // partitions with at least one
	TopErrors  []ErrorCount
}

// ErrorCount is one error message of the dead-letter queue and how many entries carry it.
type ErrorCount struct {
	Error string
	Count int64
}

// LiveStatus reads the active leases and the dead letters of the queues of scope, in one round
// trip.
func (s *Store) LiveStatus(ctx context.Context, scope Scope) (LeaseSummary, DeadLetterSummary, error) {
	var l LeaseSummary
	var d DeadLetterSummary
	b := &pgx.Batch{}
	b.Queue(`SELECT count(*), count(DISTINCT pc.partition_id), COALESCE(sum(pc.batch_size), 0)::int8,
			COALESCE(sum(GREATEST(0, pc.batch_size - (pc.lease_end_seq - pc.cursor_seq))), 0)::int8
		FROM queen.partition_consumers pc
		JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE pc.lease_expires_at > now() AND `+inScope("q.name", "$1"), scope.Tenant)
	b.Queue(`SELECT count(*), count(DISTINCT d.partition_id)
		FROM queen.dead_letter_queue d
		JOIN queen.partitions p ON p.id = d.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE `+inScope("q.name", "$1"), scope.Tenant)
	b.Queue(`SELECT COALESCE(d.error_message, 'unknown'), count(*)
		FROM queen.dead_letter_queue d
		JOIN queen.partitions p ON p.id = d.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE `+inScope("q.name", "$1")+`
		GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5`, scope.Tenant)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if err := br.QueryRow().Scan(&l.Active, &l.Partitions, &l.BatchSize, &l.Acked); err != nil {
		return l, d, fmt.Errorf("cannot read the active leases: %w", err)
	}
	if err := br.QueryRow().Scan(&d.Messages, &d.Partitions); err != nil {
		return l, d, fmt.Errorf("cannot read the dead letters: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return l, d, fmt.Errorf("cannot read the dead letters' errors: %w", err)
	}
	d.TopErrors, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ErrorCount, error) {
		var e ErrorCount
		err := row.Scan(&e.Error, &e.Count)
		return e, err
	})
	if err != nil {
		return l, d, fmt.Errorf("cannot read the dead letters' errors: %w", err)
	}
	return l, d, br.Close()
}
