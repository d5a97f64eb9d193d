package persistence

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// QueueMetrics is one queue as the periodic metrics read sees it.
type QueueMetrics struct {
	Name QueueName
	// Pending counts the messages after the queue-mode cursor (competing consumers), leased
	// or not: from the first one still stored to the partition's head, so messages that
	// retention or eviction deleted unread are not counted.
	Pending int64
	// OldestPendingSeconds is the age of the oldest of them, 0 when there is none.
	OldestPendingSeconds float64
	DeadLetters          int64 // dead-letter entries (one per message and consumer group)
}

// GroupMetrics is one (named consumer group, queue) pair: its backlog over the partitions the
// group has a cursor on, counted as QueueMetrics.Pending is.
type GroupMetrics struct {
	Group      string
	Queue      QueueName
	Lag        int64
	LagSeconds float64 // age of the oldest unconsumed message, 0 when caught up
}

// MetricsSnapshot is what one periodic metrics read returns.
type MetricsSnapshot struct {
	Queues []QueueMetrics // every queue
	Groups []GroupMetrics // every named group on every queue it has cursors on
	// Counters are the cluster's lifetime counters, the sums over the brokers of
	// queen.stats_totals, by counter name (BrokerStats.Counters).
	Counters map[string]int64
	Streams  []StreamMetrics // every registered stream query
}

// firstUnconsumed is the oldest message of partition p (an alias whose id and last_seq it
// reads) after cursor (an expression): the first segment after the cursor that holds one (the
// first it reads, unless messages were deleted), then the first of its messages after the
// cursor. Both steps read in index and array order, without a sort (see claimReadSQL). A
// partition read up to its last message is not looked up at all: PostgreSQL checks
// "last_seq > cursor" before the segment index, which the backlog reads would otherwise probe
// once per partition, most of them caught up.
func firstUnconsumed(p, cursor string) string {
	return `(SELECT s.first_seq + u.o - 1 AS seq, s.created_at
		FROM (SELECT * FROM queen.segments s WHERE ` + p + `.last_seq > ` + cursor + `
		        AND s.partition_id = ` + p + `.id AND s.last_seq > ` + cursor + `
		        AND EXISTS (SELECT 1 FROM unnest(s.ids) WITH ORDINALITY AS u(id, o)
		                    WHERE u.id IS NOT NULL AND s.first_seq + u.o - 1 > ` + cursor + `)
		      ORDER BY s.last_seq LIMIT 1) s
		CROSS JOIN LATERAL unnest(s.ids) WITH ORDINALITY AS u(id, o)
		WHERE s.first_seq + u.o - 1 > ` + cursor + ` AND u.id IS NOT NULL
		LIMIT 1)`
}

// clusterTotalsSQL sums the brokers' lifetime rows, one column per counter of brokerCounters.
var clusterTotalsSQL = func() string {
	sums := make([]string, len(brokerCounters))
	for i, c := range columns(brokerCounters) {
		sums[i] = "COALESCE(sum(" + c + "), 0)::int8"
	}
	return `SELECT ` + strings.Join(sums, ", ") + ` FROM queen.stats_totals`
}()

// queueBacklogSQL is, per queue, the messages queue-mode consumers have not consumed, the age
// of the oldest, and the dead letters; groupBacklogSQL the same per named group and queue.
var (
	queueBacklogSQL = `
		WITH backlog AS (
			SELECT p.queue_id, sum(p.last_seq - f.seq + 1)::int8 AS pending, min(f.created_at) AS oldest
			FROM queen.partitions p
			LEFT JOIN queen.partition_consumers qm
			       ON qm.partition_id = p.id AND qm.consumer_group = '` + QueueMode + `'
			CROSS JOIN LATERAL ` + firstUnconsumed("p", "COALESCE(qm.cursor_seq, 0)") + ` f
			GROUP BY p.queue_id),
		dead AS (
			SELECT p.queue_id, count(*) AS n
			FROM queen.dead_letter_queue d JOIN queen.partitions p ON p.id = d.partition_id
			GROUP BY p.queue_id)
		SELECT q.name, COALESCE(b.pending, 0), COALESCE(extract(epoch FROM now() - b.oldest), 0)::float8,
		       COALESCE(d.n, 0)
		FROM queen.queues q
		LEFT JOIN backlog b ON b.queue_id = q.id
		LEFT JOIN dead d ON d.queue_id = q.id`
	groupBacklogSQL = `
		SELECT pc.consumer_group, q.name, COALESCE(sum(p.last_seq - f.seq + 1), 0)::int8,
		       COALESCE(extract(epoch FROM now() - min(f.created_at)), 0)::float8
		FROM queen.partition_consumers pc
		JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN LATERAL ` + firstUnconsumed("p", "pc.cursor_seq") + ` f ON true
		WHERE pc.consumer_group <> '` + QueueMode + `'
		GROUP BY pc.consumer_group, q.name`
)

// ReadMetrics reads the cluster's lifetime counters (the sums of the brokers' rows of
// queen.stats_totals, which the statistics flush adds to) with the per-queue and per-group
// backlogs, in one round trip. Its cost grows with the number of queues and partitions (hash
// joins) and with the partitions that have a backlog (an index probe each), not with the number
// of messages.
func (s *Store) ReadMetrics(ctx context.Context) (MetricsSnapshot, error) {
	var snap MetricsSnapshot
	b := &pgx.Batch{}
	b.Queue(clusterTotalsSQL)
	b.Queue(queueBacklogSQL)
	b.Queue(groupBacklogSQL)
	// A scan of the state table: stream state is windows and aggregates, small beside messages.
	b.Queue(`SELECT q.name, count(s.key), COALESCE(sum(pg_column_size(s.value)), 0)::int8
		FROM queen_streams.queries q LEFT JOIN queen_streams.state s ON s.query_id = q.id
		GROUP BY q.id, q.name`)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var totals BrokerStats
	if err := br.QueryRow().Scan(targets(brokerCounters, &totals)...); err != nil {
		return snap, fmt.Errorf("cannot read the cluster's counters: %w", err)
	}
	snap.Counters = totals.Counters()
	rows, err := br.Query()
	if err != nil {
		return snap, fmt.Errorf("cannot read the queue backlogs: %w", err)
	}
	snap.Queues, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueMetrics, error) {
		var q QueueMetrics
		err := row.Scan(&q.Name, &q.Pending, &q.OldestPendingSeconds, &q.DeadLetters)
		return q, err
	})
	if err != nil {
		return snap, fmt.Errorf("cannot read the queue backlogs: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return snap, fmt.Errorf("cannot read the consumer group backlogs: %w", err)
	}
	snap.Groups, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupMetrics, error) {
		var g GroupMetrics
		err := row.Scan(&g.Group, &g.Queue, &g.Lag, &g.LagSeconds)
		return g, err
	})
	if err != nil {
		return snap, fmt.Errorf("cannot read the consumer group backlogs: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return snap, fmt.Errorf("cannot read the stream state sizes: %w", err)
	}
	snap.Streams, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StreamMetrics, error) {
		var m StreamMetrics
		err := row.Scan(&m.Query, &m.Rows, &m.Bytes)
		return m, err
	})
	if err != nil {
		return snap, fmt.Errorf("cannot read the stream state sizes: %w", err)
	}
	if err := br.Close(); err != nil {
		return snap, fmt.Errorf("cannot finish the metrics read: %w", err)
	}
	return snap, nil
}
