package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// cleanupLockKey is the transaction-level advisory lock that retention and eviction share, so
// that only one broker of the cluster deletes at a time (the reference uses the same key).
const cleanupLockKey = 737001

// ErrCleanupBusy reports that another session holds the cleanup lock: the run was skipped and
// deleted nothing. It is the normal outcome on all but one broker of a cluster.
var ErrCleanupBusy = errors.New("cleanup skipped: another broker holds the cleanup lock")

// RetentionOptions tune one retention run.
type RetentionOptions struct {
	BatchSize            int // rows per DELETE statement; < 1 means 1000
	PartitionCleanupDays int // idle empty partitions older than this are deleted; 0 keeps them
	StatsRetentionDays   int // per-minute statistics older than this are deleted; 0 keeps them
}

// RetentionReport counts what one retention run deleted.
type RetentionReport struct {
	Expired    int64 // messages older than retention_seconds
	Completed  int64 // consumed messages older than completed_retention_seconds
	Partitions int64 // idle empty partitions
	Stats      int64 // rows of per-minute statistics
	// StreamState counts state rows of streams whose source partition no longer exists.
	StreamState int64
	// Cursors counts cursor rows whose partition no longer exists: rows a pop wrote while
	// their partition was being deleted, or of a partition deleted by hand.
	Cursors int64
}

// RunRetention applies the retention options of every queue with retention_enabled, removes
// idle empty partitions, old statistics and the stream state and cursors of partitions gone,
// and records what it deleted in the statistics. It returns ErrCleanupBusy at once when another
// session is cleaning up.
func (s *Store) RunRetention(ctx context.Context, o RetentionOptions) (RetentionReport, error) {
	batch := o.BatchSize
	if batch < 1 {
		batch = 1000
	}
	var rep RetentionReport
	err := s.withCleanupLock(ctx, func() error {
		var err error
		if rep.Expired, err = s.deleteExpired(ctx, batch); err != nil {
			return err
		}
		if rep.Completed, err = s.deleteCompleted(ctx, batch); err != nil {
			return err
		}
		if o.PartitionCleanupDays > 0 {
			if rep.Partitions, err = s.deleteIdlePartitions(ctx, o.PartitionCleanupDays, batch); err != nil {
				return err
			}
		}
		if o.StatsRetentionDays > 0 {
			if rep.Stats, err = s.pruneStats(ctx, o.StatsRetentionDays, batch); err != nil {
				return err
			}
		}
		if rep.StreamState, err = s.deleteOfGonePartitions(ctx, "queen_streams.state", "query_id, partition_id, key", batch); err != nil {
			return err
		}
		rep.Cursors, err = s.deleteOfGonePartitions(ctx, "queen.partition_consumers", "partition_id, consumer_group", batch)
		return err
	})
	return rep, err
}

// RunEviction deletes the messages of queues with max_wait_time_seconds > 0 that waited longer
// than that without being consumed. They are deleted, not dead-lettered, as in the reference.
// It returns ErrCleanupBusy at once when another session is cleaning up.
func (s *Store) RunEviction(ctx context.Context, batchSize int) (int64, error) {
	if batchSize < 1 {
		batchSize = 1000
	}
	var n int64
	err := s.withCleanupLock(ctx, func() error {
		// "Unconsumed" means after the cursor of some consumer group, i.e. after the smallest
		// cursor of the partition (the reference: m.id > pc.last_consumed_id for some row); a
		// partition nobody has read is unconsumed from its start. Partitions whose every
		// message is behind all cursors are not listed at all.
		targets, err := s.listTargets(ctx, "list partitions to evict", `
			SELECT id, queue_id, cutoff, after, last_seq FROM (
				SELECT p.id, p.queue_id, p.last_seq, now() - make_interval(secs => q.max_wait_time_seconds) AS cutoff,
				       COALESCE((SELECT min(pc.cursor_seq) FROM queen.partition_consumers pc
				                 WHERE pc.partition_id = p.id), 0) AS after
				FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
				WHERE q.max_wait_time_seconds > 0) t
			WHERE last_seq > after`)
		if err != nil {
			return err
		}
		n, err = s.deleteTargets(ctx, targets, batchSize, cleanupEviction)
		return err
	})
	return n, err
}

// withCleanupLock runs fn while a transaction on one pooled connection holds the cleanup lock.
// fn's statements run on other connections and commit one batch at a time, so no deletion
// becomes one huge transaction; the lock transaction itself only ran a SELECT, so it pins no
// snapshot while it waits. Ending it (or losing its connection) releases the lock.
func (s *Store) withCleanupLock(ctx context.Context, fn func() error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin the cleanup lock transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int8)`, cleanupLockKey).Scan(&locked); err != nil {
		return fmt.Errorf("cannot take the cleanup lock: %w", err)
	}
	if !locked {
		return ErrCleanupBusy
	}
	return fn()
}

// deleteTarget is one partition to clean: its messages with after < seq <= upTo created before
// cutoff go. upTo is the partition's head when listed at the latest, so a run never chases
// messages pushed while it works.
type deleteTarget struct {
	partition uuid.UUID
	queue     uuid.UUID
	cutoff    time.Time
	after     int64
	upTo      int64
}

// listTargets reads (partition id, queue id, cutoff, after, upTo) rows in full before any
// deletion starts: an open result set would hold a second connection besides the lock's, and a
// pool of two would then have none left for the deletes.
func (s *Store) listTargets(ctx context.Context, what, query string) ([]deleteTarget, error) {
	rows, err := s.pool.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("cannot %s: %w", what, err)
	}
	targets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deleteTarget, error) {
		var t deleteTarget
		err := row.Scan(&t.partition, &t.queue, &t.cutoff, &t.after, &t.upTo)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot %s: %w", what, err)
	}
	return targets, nil
}

// deleteTargets deletes the messages of every target and records in the statistics, as kind,
// what it deleted by queue (what it deleted before failing too).
func (s *Store) deleteTargets(ctx context.Context, targets []deleteTarget, batch int, kind cleanupKind) (int64, error) {
	var n int64
	byQueue := map[uuid.UUID]int64{}
	var err error
	for _, t := range targets {
		var d int64
		d, err = s.deleteMessages(ctx, t, batch)
		n += d
		byQueue[t.queue] += d
		if err != nil {
			break
		}
	}
	if rerr := s.recordCleanup(ctx, kind, byQueue); err == nil {
		err = rerr
	}
	return n, err
}

// deleteExpired deletes every message, consumed or not, older than its queue's
// retention_seconds.
func (s *Store) deleteExpired(ctx context.Context, batch int) (int64, error) {
	targets, err := s.listTargets(ctx, "list partitions for retention", `
		SELECT p.id, q.id, now() - make_interval(secs => q.retention_seconds), 0::int8, p.last_seq
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
		WHERE q.retention_enabled AND q.retention_seconds > 0 AND p.last_seq > 0`)
	if err != nil {
		return 0, err
	}
	return s.deleteTargets(ctx, targets, batch, cleanupRetention)
}

// deleteCompleted deletes the messages older than their queue's completed_retention_seconds
// that every consumer group of the partition has consumed (seq <= the smallest cursor). A
// partition without consumer rows has consumed nothing and is left alone.
func (s *Store) deleteCompleted(ctx context.Context, batch int) (int64, error) {
	targets, err := s.listTargets(ctx, "list partitions for completed retention", `
		SELECT p.id, q.id, now() - make_interval(secs => q.completed_retention_seconds), 0::int8, min(pc.cursor_seq)
		FROM queen.queues q
		JOIN queen.partitions p ON p.queue_id = q.id
		JOIN queen.partition_consumers pc ON pc.partition_id = p.id
		WHERE q.retention_enabled AND q.completed_retention_seconds > 0
		GROUP BY p.id, q.id
		HAVING min(pc.cursor_seq) > 0`)
	if err != nil {
		return 0, err
	}
	return s.deleteTargets(ctx, targets, batch, cleanupCompleted)
}

// deleteMessages deletes the messages of t a segment at a time: the segments wholly inside
// (after, upTo] and older than the cutoff, batch segments per statement in sequence order, until
// a short batch, with their transactionIds, dead letters and traces. Each statement commits on
// its own. A segment that straddles upTo waits until it is wholly consumed. Resuming after the
// last deleted segment keeps a batch from rescanning what the previous ones went through.
func (s *Store) deleteMessages(ctx context.Context, t deleteTarget, batch int) (int64, error) {
	var total int64
	after := t.after
	for {
		var segments, n, last int64
		err := s.pool.QueryRow(ctx, `
			WITH doomed AS (
				SELECT last_seq FROM queen.segments
				WHERE partition_id = $1 AND last_seq > $2 AND last_seq <= $3 AND first_seq > $2 AND created_at < $4
				ORDER BY last_seq LIMIT $5),
			gone AS (
				DELETE FROM queen.segments s USING doomed d
				WHERE s.partition_id = $1 AND s.last_seq = d.last_seq
				RETURNING s.first_seq, s.last_seq, s.ids, s.transaction_ids),
			txs AS (
				DELETE FROM queen.message_transactions m
				USING (SELECT g.first_seq, g.last_seq, unnest(g.transaction_ids) AS tx FROM gone g) g
				WHERE m.partition_id = $1 AND m.transaction_id = g.tx AND m.seq BETWEEN g.first_seq AND g.last_seq),
			dead AS (
				DELETE FROM queen.dead_letter_queue x USING gone g
				WHERE x.partition_id = $1 AND x.message_seq BETWEEN g.first_seq AND g.last_seq),
			traces AS (
				DELETE FROM queen.message_traces x USING gone g
				WHERE x.partition_id = $1 AND x.message_seq BETWEEN g.first_seq AND g.last_seq)
			SELECT count(*), COALESCE(sum(cardinality(array_remove(ids, NULL))), 0), COALESCE(max(last_seq), 0) FROM gone`,
			t.partition, after, t.upTo, t.cutoff, batch).Scan(&segments, &n, &last)
		if err != nil {
			return total, fmt.Errorf("cannot delete messages of partition %s: %w", t.partition, err)
		}
		total += n
		if segments < int64(batch) {
			return total, nil
		}
		after = last
	}
}

// deleteIdlePartitions deletes partitions that hold no message, are not leased, and saw no
// message, no consumer and no consumption for the last days days. segments have no foreign key
// to partitions, so emptiness is checked here. The conditions on the partition row itself
// (last_message_at) are what protect a concurrent push: a push that locked the row first is
// skipped (SKIP LOCKED), and one that committed after this statement's snapshot changed
// last_message_at, which the lock re-check sees. A push that arrives after the row is gone
// creates the partition anew. Cursor rows have no foreign key to their partition either: the
// statement deletes those of the partitions it deletes, and RunRetention sweeps the rows a pop
// wrote while their partition was going (migrations/0008_cursor_partition_key.sql).
func (s *Store) deleteIdlePartitions(ctx context.Context, days, batch int) (int64, error) {
	var total int64
	byQueue := map[uuid.UUID]int64{}
	for {
		rows, err := s.pool.Query(ctx, `
			WITH gone AS (
				DELETE FROM queen.partitions WHERE id IN (
					SELECT p.id FROM queen.partitions p
					WHERE GREATEST(p.created_at, p.last_message_at) < now() - make_interval(days => $1)
					  AND NOT EXISTS (SELECT 1 FROM queen.segments s WHERE s.partition_id = p.id)
					  AND NOT EXISTS (
						SELECT 1 FROM queen.partition_consumers pc WHERE pc.partition_id = p.id
						  AND (pc.lease_expires_at > now()
						       OR GREATEST(pc.created_at, pc.last_consumed_at) >= now() - make_interval(days => $1)))
					LIMIT $2
					FOR UPDATE SKIP LOCKED)
				RETURNING id, queue_id),
			cursors AS (DELETE FROM queen.partition_consumers pc USING gone WHERE pc.partition_id = gone.id)
			SELECT queue_id, count(*) FROM gone GROUP BY queue_id`, days, batch)
		if err != nil {
			return total, fmt.Errorf("cannot delete idle partitions: %w", err)
		}
		var id uuid.UUID
		var n, deleted int64
		_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { byQueue[id] += n; deleted += n; return nil })
		if err != nil {
			return total, fmt.Errorf("cannot delete idle partitions: %w", err)
		}
		total += deleted
		if deleted < int64(batch) {
			return total, s.recordCleanup(ctx, cleanupPartitions, byQueue)
		}
	}
}

// deleteOfGonePartitions deletes, batch rows at a time, the rows of table (key: its primary
// key's columns) whose partition_id names no partition. Such rows have no foreign key to the
// partition: whoever deletes partitions deletes them too, and this catches what was written
// beside a deletion or left by a deletion made by hand.
func (s *Store) deleteOfGonePartitions(ctx context.Context, table, key string, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE (`+key+`) IN (
			SELECT `+key+` FROM `+table+` t
			WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = t.partition_id)
			LIMIT $1)`, batch)
		if err != nil {
			return total, fmt.Errorf("cannot delete the rows of %s of deleted partitions: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
