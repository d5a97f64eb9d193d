package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// QueuesByNamespace lists the queues in scope of a namespace and/or task ("" matches any),
// highest priority first.
func (s *Store) QueuesByNamespace(ctx context.Context, scope Scope, namespace, task string) ([]QueueName, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM queen.queues
		WHERE ($1 = '' OR namespace = $1) AND ($2 = '' OR task = $2) AND `+inScope("name", "$3")+`
		ORDER BY priority DESC, name`, namespace, task, scope.Tenant)
	if err != nil {
		return nil, fmt.Errorf("cannot list queues of namespace %q task %q: %w", namespace, task, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[QueueName])
	if err != nil {
		return nil, fmt.Errorf("cannot list queues of namespace %q task %q: %w", namespace, task, err)
	}
	return names, nil
}

// QueueOptions are a queue's settings, as configure stores them.
type QueueOptions struct {
	LeaseTime                 int
	RetryLimit                int
	RetryDelay                int
	MaxSize                   int
	TTL                       int
	Priority                  int
	DelayedProcessing         int
	WindowBuffer              int
	DeadLetterQueue           bool
	DLQAfterMaxRetries        bool
	RetentionSeconds          int
	CompletedRetentionSeconds int
	RetentionEnabled          bool
	EncryptionEnabled         bool
	MaxWaitTimeSeconds        int
}

// QueueOptionsPatch changes some options: a nil field keeps the stored value (the column
// default for a new queue).
type QueueOptionsPatch struct {
	LeaseTime                 *int
	RetryLimit                *int
	RetryDelay                *int
	MaxSize                   *int
	TTL                       *int
	Priority                  *int
	DelayedProcessing         *int
	WindowBuffer              *int
	DeadLetterQueue           *bool
	DLQAfterMaxRetries        *bool
	RetentionSeconds          *int
	CompletedRetentionSeconds *int
	RetentionEnabled          *bool
	EncryptionEnabled         *bool
	MaxWaitTimeSeconds        *int
}

// ConfigureRequest creates a queue or changes its settings. Nil Namespace or Task keep the
// stored value; a new queue derives them from its name as push does.
type ConfigureRequest struct {
	Queue     QueueName
	Namespace *string
	Task      *string
	Options   QueueOptionsPatch
}

// ConfiguredQueue is a queue's state after configure.
type ConfiguredQueue struct {
	ID          uuid.UUID
	PartitionID uuid.UUID // the Default partition
	Queue       QueueName
	Namespace   string
	Task        string
	Options     QueueOptions
}

// Configure creates the queue if missing, merges the given settings into the stored ones and
// makes sure the Default partition exists, in one transaction.
func (s *Store) Configure(ctx context.Context, r ConfigureRequest) (ConfiguredQueue, error) {
	var q ConfiguredQueue
	name := r.Queue.Stored()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		o := r.Options
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO queen.queues (name, namespace, task)
			VALUES ($1, COALESCE($2, split_part(`+unscoped("$1")+`, '.', 1)), COALESCE($3, split_part(`+unscoped("$1")+`, '.', 2)))
			ON CONFLICT (name) DO NOTHING`, name, r.Namespace, r.Task)
		b.Queue(`UPDATE queen.queues SET
				namespace = COALESCE($2, namespace),
				task = COALESCE($3, task),
				lease_time = COALESCE($4::int4, lease_time),
				retry_limit = COALESCE($5::int4, retry_limit),
				retry_delay = COALESCE($6::int4, retry_delay),
				max_size = COALESCE($7::int4, max_size),
				ttl = COALESCE($8::int4, ttl),
				priority = COALESCE($9::int4, priority),
				delayed_processing = COALESCE($10::int4, delayed_processing),
				window_buffer = COALESCE($11::int4, window_buffer),
				dead_letter_queue = COALESCE($12::bool, dead_letter_queue),
				dlq_after_max_retries = COALESCE($13::bool, dlq_after_max_retries),
				retention_seconds = COALESCE($14::int4, retention_seconds),
				completed_retention_seconds = COALESCE($15::int4, completed_retention_seconds),
				retention_enabled = COALESCE($16::bool, retention_enabled),
				encryption_enabled = COALESCE($17::bool, encryption_enabled),
				max_wait_time_seconds = COALESCE($18::int4, max_wait_time_seconds),
				updated_at = now()
			WHERE name = $1
			RETURNING id, name, namespace, task, lease_time, retry_limit, retry_delay, max_size, ttl, priority,
				delayed_processing, window_buffer, dead_letter_queue, dlq_after_max_retries, retention_seconds,
				completed_retention_seconds, retention_enabled, encryption_enabled, max_wait_time_seconds`,
			name, r.Namespace, r.Task, o.LeaseTime, o.RetryLimit, o.RetryDelay, o.MaxSize, o.TTL, o.Priority,
			o.DelayedProcessing, o.WindowBuffer, o.DeadLetterQueue, o.DLQAfterMaxRetries, o.RetentionSeconds,
			o.CompletedRetentionSeconds, o.RetentionEnabled, o.EncryptionEnabled, o.MaxWaitTimeSeconds)
		b.Queue(`INSERT INTO queen.partitions (queue_id, name)
			SELECT id, 'Default' FROM queen.queues WHERE name = $1
			ON CONFLICT (queue_id, name) DO NOTHING`, name)
		b.Queue(`SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = 'Default'`, name)
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		opt := &q.Options
		if err := br.QueryRow().Scan(&q.ID, &q.Queue, &q.Namespace, &q.Task, &opt.LeaseTime, &opt.RetryLimit,
			&opt.RetryDelay, &opt.MaxSize, &opt.TTL, &opt.Priority, &opt.DelayedProcessing, &opt.WindowBuffer,
			&opt.DeadLetterQueue, &opt.DLQAfterMaxRetries, &opt.RetentionSeconds, &opt.CompletedRetentionSeconds,
			&opt.RetentionEnabled, &opt.EncryptionEnabled, &opt.MaxWaitTimeSeconds); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&q.PartitionID); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return q, fmt.Errorf("cannot configure queue %q: %w", r.Queue, err)
	}
	return q, nil
}

// MessageCounts are the live message counts of a queue, in queue mode: Pending excludes
// Processing (the messages inside active __QUEUE_MODE__ leases).
type MessageCounts struct {
	Total      int64
	Pending    int64
	Processing int64
}

// QueueSummary is one queue of the queue list.
type QueueSummary struct {
	ID         uuid.UUID
	Queue      QueueName
	Namespace  string
	Task       string
	CreatedAt  time.Time
	Partitions int64
	Messages   MessageCounts
	// Completed are the messages consumed in queue mode and not dead-lettered, DeadLetter those
	// dead-lettered in queue mode (as PartitionStats counts them).
	Completed  int64
	DeadLetter int64
	// OldestPending is the creation time of the oldest message not yet consumed in queue mode;
	// nil when there is none.
	OldestPending *time.Time
}

// partitionCounts computes, for every partition p in scope (the caller joins it), the live
// queue-mode counts: total messages, unconsumed ones (after the __QUEUE_MODE__ cursor) and the
// unconsumed ones covered by an active __QUEUE_MODE__ lease. Each partition is one index scan.
const partitionCounts = `
	LEFT JOIN queen.partition_consumers qm ON qm.partition_id = p.id AND qm.consumer_group = '__QUEUE_MODE__'
	CROSS JOIN LATERAL (
		SELECT count(*) AS total,
		       count(*) FILTER (WHERE m.seq > COALESCE(qm.cursor_seq, 0)) AS unconsumed,
		       count(*) FILTER (WHERE qm.lease_expires_at > now() AND m.seq > qm.cursor_seq AND m.seq <= qm.lease_end_seq) AS processing
		FROM queen.message_seqs m WHERE m.partition_id = p.id) c`

// queueModeDeadLetters counts, for partition p joined with partitionCounts, the messages
// consumed in queue mode that were dead-lettered: one index probe per partition.
const queueModeDeadLetters = `(SELECT count(DISTINCT d.message_seq) FROM queen.dead_letter_queue d
	WHERE d.partition_id = p.id AND d.consumer_group = '__QUEUE_MODE__' AND d.message_seq <= COALESCE(qm.cursor_seq, 0))`

// QueueFilter selects and pages the queue list.
type QueueFilter struct {
	Scope     Scope  // the caller's tenant
	Namespace string // "" matches any
	Task      string // "" matches any
	Limit     int    // 0: every queue
	Offset    int
}

// ListQueues lists the queues f selects with their partition count and live message counts,
// newest first. Only the queues of the page are counted.
func (s *Store) ListQueues(ctx context.Context, f QueueFilter) ([]QueueSummary, error) {
	var a sqlArgs
	a.add(inScope("q.name", "?"), f.Scope.Tenant)
	if f.Namespace != "" {
		a.add("q.namespace = ?", f.Namespace)
	}
	if f.Task != "" {
		a.add("q.task = ?", f.Task)
	}
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	page := "LIMIT " + a.param(limit) + " OFFSET " + a.param(f.Offset)
	rows, err := s.pool.Query(ctx, `
		SELECT q.id, q.name, q.namespace, q.task, q.created_at, count(p.id),
		       COALESCE(sum(c.total), 0)::int8, COALESCE(sum(c.unconsumed - c.processing), 0)::int8,
		       COALESCE(sum(c.processing), 0)::int8, COALESCE(sum(c.total - c.unconsumed - dl.n), 0)::int8,
		       COALESCE(sum(dl.n), 0)::int8, min(f.created_at)
		FROM (SELECT id, name, namespace, task, created_at FROM queen.queues q WHERE `+a.where()+`
		      ORDER BY created_at DESC, name `+page+`) q
		LEFT JOIN (queen.partitions p `+partitionCounts+`
		           CROSS JOIN LATERAL (SELECT `+queueModeDeadLetters+` AS n) dl
		           LEFT JOIN LATERAL `+firstUnconsumed("p", "COALESCE(qm.cursor_seq, 0)")+` f ON true) ON p.queue_id = q.id
		GROUP BY q.id, q.name, q.namespace, q.task, q.created_at
		ORDER BY q.created_at DESC, q.name`, a.args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list queues: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueSummary, error) {
		var q QueueSummary
		err := row.Scan(&q.ID, &q.Queue, &q.Namespace, &q.Task, &q.CreatedAt, &q.Partitions,
			&q.Messages.Total, &q.Messages.Pending, &q.Messages.Processing, &q.Completed, &q.DeadLetter, &q.OldestPending)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list queues: %w", err)
	}
	return out, nil
}

// PartitionStats are the live queue-mode counts of a partition or a queue. Completed counts the
// consumed messages that were not dead-lettered by __QUEUE_MODE__, DeadLetter those that were;
// Failed is always 0 (no per-message failure history is kept).
type PartitionStats struct {
	Total      int64
	Pending    int64
	Processing int64
	Completed  int64
	Failed     int64
	DeadLetter int64
}

func (a *PartitionStats) add(b PartitionStats) {
	a.Total += b.Total
	a.Pending += b.Pending
	a.Processing += b.Processing
	a.Completed += b.Completed
	a.Failed += b.Failed
	a.DeadLetter += b.DeadLetter
}

// PartitionDetail is one partition of a queue's detail.
type PartitionDetail struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
	Oldest    *time.Time // created_at of the oldest stored message; nil when there is none
	Newest    *time.Time
	Stats     PartitionStats
	// The queue-mode cursor: messages and batches consumed through it, and when it last moved
	// (nil when never).
	Consumed     int64
	Batches      int64
	LastConsumed *time.Time
}

// QueueDetail is a queue with its settings and partitions.
type QueueDetail struct {
	ID         uuid.UUID
	Queue      QueueName
	Namespace  string
	Task       string
	CreatedAt  time.Time
	Options    QueueOptions
	Partitions []PartitionDetail
	Totals     PartitionStats
}

// Queue returns a queue with live per-partition counts; nil when it does not exist.
func (s *Store) Queue(ctx context.Context, queue QueueName) (*QueueDetail, error) {
	name := queue.Stored()
	b := &pgx.Batch{}
	b.Queue(`SELECT id, name, namespace, task, created_at, lease_time, retry_limit, retry_delay, max_size, ttl, priority,
			delayed_processing, window_buffer, dead_letter_queue, dlq_after_max_retries, retention_seconds,
			completed_retention_seconds, retention_enabled, encryption_enabled, max_wait_time_seconds
		FROM queen.queues WHERE name = $1`, name)
	b.Queue(`
		SELECT p.id, p.name, p.created_at,
		       (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = p.id ORDER BY s.last_seq LIMIT 1),
		       (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = p.id ORDER BY s.last_seq DESC LIMIT 1),
		       c.total, c.unconsumed, c.processing, `+queueModeDeadLetters+`,
		       COALESCE(qm.total_messages_consumed, 0), COALESCE(qm.total_batches_consumed, 0), qm.last_consumed_at
		FROM queen.queues q
		JOIN queen.partitions p ON p.queue_id = q.id `+partitionCounts+`
		WHERE q.name = $1
		ORDER BY p.name COLLATE "C"`, name)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var q QueueDetail
	o := &q.Options
	err := br.QueryRow().Scan(&q.ID, &q.Queue, &q.Namespace, &q.Task, &q.CreatedAt, &o.LeaseTime, &o.RetryLimit,
		&o.RetryDelay, &o.MaxSize, &o.TTL, &o.Priority, &o.DelayedProcessing, &o.WindowBuffer, &o.DeadLetterQueue,
		&o.DLQAfterMaxRetries, &o.RetentionSeconds, &o.CompletedRetentionSeconds, &o.RetentionEnabled,
		&o.EncryptionEnabled, &o.MaxWaitTimeSeconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read queue %q: %w", queue, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("cannot read the partitions of queue %q: %w", queue, err)
	}
	q.Partitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (PartitionDetail, error) {
		var p PartitionDetail
		var unconsumed int64
		err := row.Scan(&p.ID, &p.Name, &p.CreatedAt, &p.Oldest, &p.Newest, &p.Stats.Total, &unconsumed,
			&p.Stats.Processing, &p.Stats.DeadLetter, &p.Consumed, &p.Batches, &p.LastConsumed)
		p.Stats.Pending = unconsumed - p.Stats.Processing
		p.Stats.Completed = p.Stats.Total - unconsumed - p.Stats.DeadLetter
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the partitions of queue %q: %w", queue, err)
	}
	for _, p := range q.Partitions {
		q.Totals.add(p.Stats)
	}
	return &q, nil
}

// DeleteQueue deletes a queue with its messages and cursors (neither has a foreign key to
// partitions), partitions and subscription metadata, in one transaction. It reports whether the
// queue existed.
func (s *Store) DeleteQueue(ctx context.Context, queue QueueName) (bool, error) {
	var existed bool
	name := queue.Stored()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var id uuid.UUID
		err := tx.QueryRow(ctx, `SELECT id FROM queen.queues WHERE name = $1 FOR UPDATE`, name).Scan(&id)
		existed = err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		b := &pgx.Batch{}
		if existed {
			// Lock the partitions in id order, as push does, so a push that already holds one
			// commits its messages before they are deleted instead of leaving orphans.
			b.Queue(`SELECT id FROM queen.partitions WHERE queue_id = $1 ORDER BY id FOR UPDATE`, id)
			for _, table := range []string{"segments", "message_transactions", "dead_letter_queue", "message_traces", "partition_consumers"} {
				b.Queue(`DELETE FROM queen.`+table+` WHERE partition_id IN (SELECT id FROM queen.partitions WHERE queue_id = $1)`, id)
			}
			b.Queue(`DELETE FROM queen.queues WHERE id = $1`, id)
		}
		b.Queue(`DELETE FROM queen.consumer_groups_metadata WHERE queue_name = $1`, name)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return false, fmt.Errorf("cannot delete queue %q: %w", queue, err)
	}
	return existed, nil
}

// QueueExists reports whether the queue exists.
func (s *Store) QueueExists(ctx context.Context, queue QueueName) (bool, error) {
	var exists bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.queues WHERE name = $1)`, queue.Stored()).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("cannot look up queue %q: %w", queue, err)
	}
	return exists, nil
}
