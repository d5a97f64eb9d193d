package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// GroupState is how a consumer group of the group list is doing.
type GroupState string

// Consumer group states.
const (
	GroupLagging GroupState = "Lagging" // the oldest unconsumed message is older than LaggingAfter
	GroupStable  GroupState = "Stable"  // consumed something
	GroupDead    GroupState = "Dead"    // never consumed anything
)

// LaggingAfter is the time lag past which a group is Lagging.
const LaggingAfter = 300 // seconds

// ConsumerGroupSummary is one (consumer group, queue) pair of the group list.
type ConsumerGroupSummary struct {
	Name                  string
	Queue                 QueueName
	Members               int64 // partitions the group has a cursor on
	PartitionsWithLag     int64
	TotalLag              int64 // messages after the cursors (sum of last_seq - cursor_seq)
	MaxTimeLag            int64 // seconds since the oldest unconsumed message was stored
	Consumed              bool
	SubscriptionMode      *string // nil without a recorded subscription
	SubscriptionTimestamp *time.Time
	SubscriptionCreatedAt *time.Time
}

// State is Lagging, Stable or Dead.
func (g ConsumerGroupSummary) State() GroupState {
	switch {
	case g.MaxTimeLag > LaggingAfter:
		return GroupLagging
	case g.Consumed:
		return GroupStable
	}
	return GroupDead
}

// groupPositions is, for every partition_consumers row pc (the caller filters), its partition p,
// queue q, offset lag and the time lag of its oldest unconsumed message (NULL when caught up):
// lag.seconds and lag.created_at.
var groupPositions = `
	FROM queen.partition_consumers pc
	JOIN queen.partitions p ON p.id = pc.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
	LEFT JOIN LATERAL (
		SELECT floor(extract(epoch FROM now() - m.created_at))::int8 AS seconds, m.created_at
		FROM ` + firstUnconsumed("p", "pc.cursor_seq") + ` m) lag ON true`

// ListConsumerGroups lists every (group, queue) pair in scope that has cursors or a recorded
// subscription, __QUEUE_MODE__ included, by group then queue.
func (s *Store) ListConsumerGroups(ctx context.Context, scope Scope) ([]ConsumerGroupSummary, error) {
	rows, err := s.pool.Query(ctx, `
		WITH agg AS (
			SELECT pc.consumer_group AS g, q.name AS queue, count(*) AS members,
			       count(lag.seconds) AS with_lag,
			       sum(GREATEST(p.last_seq - pc.cursor_seq, 0))::int8 AS total_lag,
			       COALESCE(max(GREATEST(lag.seconds, 0)), 0)::int8 AS max_time_lag,
			       bool_or(pc.cursor_seq > 0 OR pc.last_consumed_at IS NOT NULL) AS consumed
			`+groupPositions+`
			WHERE `+inScope("q.name", "$1")+`
			GROUP BY pc.consumer_group, q.name),
		meta AS (
			SELECT DISTINCT ON (consumer_group, queue_name) consumer_group AS g, queue_name AS queue,
			       subscription_mode, subscription_timestamp, created_at
			FROM queen.consumer_groups_metadata
			WHERE `+inScope("queue_name", "$1")+`
			ORDER BY consumer_group, queue_name, partition_name)
		SELECT COALESCE(a.g, md.g), COALESCE(a.queue, md.queue), COALESCE(a.members, 0), COALESCE(a.with_lag, 0),
		       COALESCE(a.total_lag, 0), COALESCE(a.max_time_lag, 0), COALESCE(a.consumed, false),
		       md.subscription_mode, md.subscription_timestamp, md.created_at
		FROM agg a FULL JOIN meta md ON md.g = a.g AND md.queue = a.queue
		ORDER BY COALESCE(a.g, md.g) COLLATE "C", COALESCE(a.queue, md.queue) COLLATE "C"`, scope.Tenant)
	if err != nil {
		return nil, fmt.Errorf("cannot list consumer groups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConsumerGroupSummary, error) {
		var g ConsumerGroupSummary
		err := row.Scan(&g.Name, &g.Queue, &g.Members, &g.PartitionsWithLag, &g.TotalLag, &g.MaxTimeLag, &g.Consumed,
			&g.SubscriptionMode, &g.SubscriptionTimestamp, &g.SubscriptionCreatedAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list consumer groups: %w", err)
	}
	return out, nil
}

// GroupPartition is a consumer group's position on one partition.
type GroupPartition struct {
	Queue          QueueName
	Partition      string
	WorkerID       uuid.NullUUID // the lease id of the last claim
	LeaseActive    bool
	LastConsumedAt *time.Time
	TotalConsumed  int64
	OffsetLag      int64
	TimeLagSeconds int64
}

// ConsumerGroup returns a group's positions by queue then partition, and every queue the group
// has cursors or a recorded subscription on (none: the group does not exist), in scope.
func (s *Store) ConsumerGroup(ctx context.Context, scope Scope, group string) ([]GroupPartition, []QueueName, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT q.name, p.name, pc.lease_id, COALESCE(pc.lease_expires_at > now(), false), pc.last_consumed_at,
			pc.total_messages_consumed, GREATEST(p.last_seq - pc.cursor_seq, 0), COALESCE(GREATEST(lag.seconds, 0), 0)
		`+groupPositions+`
		WHERE pc.consumer_group = $1 AND `+inScope("q.name", "$2")+`
		ORDER BY q.name COLLATE "C", p.name COLLATE "C"`, group, scope.Tenant)
	b.Queue(`SELECT DISTINCT queue_name FROM queen.consumer_groups_metadata
		WHERE consumer_group = $1 AND `+inScope("queue_name", "$2"), group, scope.Tenant)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read consumer group %q: %w", group, err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupPartition, error) {
		var g GroupPartition
		err := row.Scan(&g.Queue, &g.Partition, &g.WorkerID, &g.LeaseActive, &g.LastConsumedAt, &g.TotalConsumed,
			&g.OffsetLag, &g.TimeLagSeconds)
		return g, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read consumer group %q: %w", group, err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the subscriptions of consumer group %q: %w", group, err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[QueueName])
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the subscriptions of consumer group %q: %w", group, err)
	}
	seen := map[QueueName]bool{}
	for _, q := range queues {
		seen[q] = true
	}
	for _, p := range parts {
		if !seen[p.Queue] {
			seen[p.Queue] = true
			queues = append(queues, p.Queue)
		}
	}
	return parts, queues, nil
}

// DeletedGroup is what deleting a consumer group removed.
type DeletedGroup struct {
	Partitions int64       // cursor rows deleted
	Queues     []QueueName // queues that had cursor rows
}

// DeleteConsumerGroup deletes a group's cursors on every queue in scope, or on queue only when
// it is not the zero QueueName, and with deleteMetadata its recorded subscriptions there too.
func (s *Store) DeleteConsumerGroup(ctx context.Context, scope Scope, group string, queue QueueName, deleteMetadata bool) (DeletedGroup, error) {
	var d DeletedGroup
	name := queue.Stored() // "" for the zero QueueName
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d = DeletedGroup{}
		b := &pgx.Batch{}
		b.Queue(`WITH d AS (
				DELETE FROM queen.partition_consumers pc USING queen.partitions p, queen.queues q
				WHERE pc.partition_id = p.id AND p.queue_id = q.id AND pc.consumer_group = $1 AND ($2 = '' OR q.name = $2)
				      AND `+inScope("q.name", "$3")+`
				RETURNING q.name)
			SELECT name, count(*) FROM d GROUP BY name ORDER BY name`, group, name, scope.Tenant)
		if deleteMetadata {
			b.Queue(`DELETE FROM queen.consumer_groups_metadata WHERE consumer_group = $1 AND ($2 = '' OR queue_name = $2)
				AND `+inScope("queue_name", "$3"), group, name, scope.Tenant)
		}
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var q QueueName
			var n int64
			if err := rows.Scan(&q, &n); err != nil {
				rows.Close()
				return err
			}
			d.Queues = append(d.Queues, q)
			d.Partitions += n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return d, fmt.Errorf("cannot delete consumer group %q: %w", group, err)
	}
	return d, nil
}

// UpdateSubscription moves every recorded subscription of a group on the queues in scope to ts
// and returns how many were changed. Only partitions the group has no cursor on yet are
// affected.
func (s *Store) UpdateSubscription(ctx context.Context, scope Scope, group string, ts time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE queen.consumer_groups_metadata SET subscription_timestamp = $2
		WHERE consumer_group = $1 AND `+inScope("queue_name", "$3"), group, ts, scope.Tenant)
	if err != nil {
		return 0, fmt.Errorf("cannot update the subscription of consumer group %q: %w", group, err)
	}
	return tag.RowsAffected(), nil
}

// releaseLease is the SET list that releases a partition_consumers lease.
const releaseLease = `lease_id = NULL, lease_expires_at = NULL, lease_end_seq = 0, batch_size = 0, batch_retry_count = 0`

// SeekQueue moves a group's cursor on every partition of queue it has a cursor on: to the
// partition's newest message when to is nil, else to the last message created at or before
// *to (the beginning when there is none). Leases are released. It returns the partitions moved.
func (s *Store) SeekQueue(ctx context.Context, group string, queue QueueName, to *time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the rows in the order acks lock them.
		rows, err := tx.Query(ctx, `SELECT pc.partition_id
			FROM queen.partition_consumers pc
			JOIN queen.partitions p ON p.id = pc.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE pc.consumer_group = $1 AND q.name = $2
			ORDER BY pc.partition_id FOR UPDATE OF pc`, group, queue.Stored())
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE queen.partition_consumers pc
			SET cursor_seq = CASE
			        WHEN $3::timestamptz IS NULL OR p.last_message_at <= $3 THEN p.last_seq
			        ELSE (SELECT COALESCE(max(s.last_seq), 0) FROM queen.segments s
			              WHERE s.partition_id = p.id AND s.created_at <= $3) END,
			    `+releaseLease+`
			FROM queen.partitions p
			WHERE pc.partition_id = p.id AND pc.consumer_group = $1 AND pc.partition_id = ANY($2::uuid[])`, group, ids, to)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cannot seek consumer group %q on queue %q: %w", group, queue, err)
	}
	return n, nil
}

// SeekPartition moves a group's cursor on one partition to its newest message, creating the
// cursor if missing, and releases the lease. It returns when the message now at the cursor was
// created (nil when the partition is empty); found is false when the partition does not
// exist.
func (s *Store) SeekPartition(ctx context.Context, group string, queue QueueName, partition string) (movedTo *time.Time, found bool, err error) {
	err = s.pool.QueryRow(ctx, `
		WITH target AS (
			SELECT p.id, p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = $2 AND p.name = $3),
		moved AS (
			INSERT INTO queen.partition_consumers AS pc (partition_id, consumer_group, cursor_seq)
			SELECT id, $1, last_seq FROM target
			ON CONFLICT (partition_id, consumer_group) DO UPDATE
			SET cursor_seq = EXCLUDED.cursor_seq, `+releaseLease+`
			RETURNING pc.partition_id, pc.cursor_seq)
		SELECT EXISTS (SELECT 1 FROM moved),
		       (SELECT s.created_at FROM moved JOIN queen.segments s ON s.partition_id = moved.partition_id
		        WHERE s.first_seq <= moved.cursor_seq ORDER BY s.last_seq DESC LIMIT 1)`, group, queue.Stored(), partition).Scan(&found, &movedTo)
	if err != nil {
		return movedTo, false, fmt.Errorf("cannot seek consumer group %q on partition %s/%s: %w", group, queue, partition, err)
	}
	return movedTo, found, nil
}

// LaggingPartition is one partition where a group's oldest unconsumed message is old.
type LaggingPartition struct {
	Group              string
	Queue              QueueName
	Partition          string
	PartitionID        uuid.UUID
	LeaseID            uuid.NullUUID
	OffsetLag          int64
	TimeLagSeconds     int64
	OldestUnconsumedAt time.Time
	LastConsumedAt     *time.Time
}

// LaggingPartitions lists the (group, partition) pairs whose oldest unconsumed message is at
// least minLag old, largest lag first, on the queues in scope.
func (s *Store) LaggingPartitions(ctx context.Context, scope Scope, minLag time.Duration) ([]LaggingPartition, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT pc.consumer_group, q.name, p.name, p.id, pc.lease_id, p.last_seq - pc.cursor_seq,
		       lag.seconds, lag.created_at, pc.last_consumed_at`+groupPositions+`
		WHERE p.last_seq > pc.cursor_seq AND lag.seconds >= $1 AND `+inScope("q.name", "$2")+`
		ORDER BY lag.seconds DESC, pc.consumer_group, q.name, p.name`, int64(minLag.Seconds()), scope.Tenant)
	if err != nil {
		return nil, fmt.Errorf("cannot list lagging partitions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LaggingPartition, error) {
		var l LaggingPartition
		err := r.Scan(&l.Group, &l.Queue, &l.Partition, &l.PartitionID, &l.LeaseID, &l.OffsetLag,
			&l.TimeLagSeconds, &l.OldestUnconsumedAt, &l.LastConsumedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list lagging partitions: %w", err)
	}
	return out, nil
}
