package persistence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/persistence"
	"queen/pg/pgtest"
)

func retentionCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// retentionPush pushes n messages (tx-1..tx-n, seq 1..n on a new partition) and returns the
// partition id.
func retentionPush(t *testing.T, s *persistence.Store, queue persistence.QueueName, partition string, n int) uuid.UUID {
	t.Helper()
	var pid uuid.UUID
	for i := range n { // one push each: a segment of its own, with its own age
		res, err := s.Push(retentionCtx(t), []persistence.PushItem{{Queue: queue, Partition: partition,
			TransactionID: fmt.Sprintf("tx-%d", i+1), Payload: json.RawMessage(`1`)}})
		if err != nil {
			t.Fatalf("push to %s/%s: %v", queue, partition, err)
		}
		pid = res[0].PartitionID
	}
	return pid
}

func retentionExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(retentionCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// retentionAge makes the given messages of a partition two hours old.
func retentionAge(t *testing.T, pool *pgxpool.Pool, partition uuid.UUID, seqs ...int64) {
	t.Helper()
	retentionExec(t, pool, `UPDATE queen.segments SET created_at = now() - interval '2 hours'
		WHERE partition_id = $1 AND last_seq = ANY($2)`, partition, seqs)
}

// retentionSeqs lists the sequence numbers still stored in a partition.
func retentionSeqs(t *testing.T, pool *pgxpool.Pool, partition uuid.UUID) []int64 {
	t.Helper()
	rows, err := pool.Query(retentionCtx(t), `SELECT seq FROM queen.messages WHERE partition_id = $1 ORDER BY seq`, partition)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

func retentionWant(t *testing.T, pool *pgxpool.Pool, what string, partition uuid.UUID, want ...int64) {
	t.Helper()
	if got := retentionSeqs(t, pool, partition); !slices.Equal(got, want) {
		t.Errorf("%s: seqs %v left, want %v", what, got, want)
	}
}

func TestRetentionDeletesExpiredMessagesOfEnabledQueuesOnly(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	on := retentionPush(t, s, persistence.QueueName{Name: "ret-on"}, "p", 6)
	off := retentionPush(t, s, persistence.QueueName{Name: "ret-off"}, "p", 3)
	retentionExec(t, pool, `UPDATE queen.queues SET retention_enabled = true, retention_seconds = 3600 WHERE name = 'ret-on'`)
	// Same window, but without the gate: retention must not touch it.
	retentionExec(t, pool, `UPDATE queen.queues SET retention_seconds = 3600 WHERE name = 'ret-off'`)
	retentionAge(t, pool, on, 1, 2, 3, 4, 5)
	retentionAge(t, pool, off, 1, 2, 3)
	// Younger than the window though not brand new.
	retentionExec(t, pool, `UPDATE queen.segments SET created_at = now() - interval '30 minutes' WHERE partition_id = $1 AND last_seq = 6`, on)

	// Batches of 2: five old messages take three statements, the last one short.
	rep, err := s.RunRetention(retentionCtx(t), persistence.RetentionOptions{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep != (persistence.RetentionReport{Expired: 5}) {
		t.Errorf("report %+v, want 5 expired", rep)
	}
	retentionWant(t, pool, "enabled queue", on, 6)
	retentionWant(t, pool, "queue without retention_enabled", off, 1, 2, 3)
}

func TestRetentionCompletedDeletesOnlyConsumedMessages(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	read := retentionPush(t, s, persistence.QueueName{Name: "done"}, "read", 5)
	unread := retentionPush(t, s, persistence.QueueName{Name: "done"}, "unread", 2)
	retentionExec(t, pool, `UPDATE queen.queues SET retention_enabled = true, completed_retention_seconds = 3600 WHERE name = 'done'`)

	// Queue mode consumes all five through pop and ack; group g has consumed up to seq 3.
	lease := uuid.New()
	res, err := s.Pop(ctx, persistence.PopRequest{Queue: persistence.QueueName{Name: "done"}, Partition: "read", Group: persistence.QueueMode,
		Batch: 5, Partitions: 1, LeaseID: lease})
	if err != nil || len(res.Messages) != 5 {
		t.Fatalf("pop: %d messages, %v", len(res.Messages), err)
	}
	acks := make([]persistence.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		acks[i] = persistence.AckItem{PartitionID: read, TransactionID: m.TransactionID,
			Group: persistence.QueueMode, LeaseID: lease.String(), Status: persistence.AckCompleted}
	}
	if _, err := s.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	retentionExec(t, pool, `INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq) VALUES ($1, 'g', 3)`, read)
	retentionAge(t, pool, read, 1, 2, 3, 4)
	retentionAge(t, pool, unread, 1, 2)

	rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep != (persistence.RetentionReport{Completed: 3}) {
		t.Errorf("report %+v, want 3 completed", rep)
	}
	// 1..3 are old and behind every cursor; 4 is old but g has not read it; 5 is young.
	retentionWant(t, pool, "consumed partition", read, 4, 5)
	// No consumer has read this partition: nothing in it is consumed.
	retentionWant(t, pool, "unread partition", unread, 1, 2)
}

func TestEvictionDeletesUnconsumedOldMessages(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	read := retentionPush(t, s, persistence.QueueName{Name: "ev"}, "read", 4)
	unread := retentionPush(t, s, persistence.QueueName{Name: "ev"}, "unread", 2)
	twoGroups := retentionPush(t, s, persistence.QueueName{Name: "ev"}, "two-groups", 3)
	plain := retentionPush(t, s, persistence.QueueName{Name: "plain"}, "p", 2)
	retentionExec(t, pool, `UPDATE queen.queues SET max_wait_time_seconds = 60 WHERE name = 'ev'`)
	// Queue mode has read all three, group g only the first: 2 and 3 still wait for g.
	retentionExec(t, pool, `INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq)
		VALUES ($1, $2, 3), ($1, 'g', 1)`, twoGroups, persistence.QueueMode)

	// Queue mode consumes seq 1.
	lease := uuid.New()
	res, err := s.Pop(ctx, persistence.PopRequest{Queue: persistence.QueueName{Name: "ev"}, Partition: "read", Group: persistence.QueueMode,
		Batch: 1, Partitions: 1, LeaseID: lease})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("pop: %d messages, %v", len(res.Messages), err)
	}
	if _, err := s.Ack(ctx, []persistence.AckItem{{PartitionID: read, TransactionID: res.Messages[0].TransactionID,
		Group: persistence.QueueMode, LeaseID: lease.String(), Status: persistence.AckCompleted}}); err != nil {
		t.Fatal(err)
	}
	retentionAge(t, pool, read, 1, 2, 3)
	retentionAge(t, pool, unread, 1)
	retentionAge(t, pool, twoGroups, 1, 2, 3)
	retentionAge(t, pool, plain, 1, 2)

	n, err := s.RunEviction(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("evicted %d, want 5", n)
	}
	retentionWant(t, pool, "consumed partition", read, 1, 4)
	retentionWant(t, pool, "partition without consumers", unread, 2)
	retentionWant(t, pool, "partition read by two groups", twoGroups, 1)
	retentionWant(t, pool, "queue without max wait", plain, 1, 2)
}

func TestRetentionDeletesIdlePartitions(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	for _, p := range []string{"idle", "idle-consumed", "recently-consumed", "leased", "full"} {
		retentionPush(t, s, persistence.QueueName{Name: "q"}, p, 1)
	}
	retentionExec(t, pool, `DELETE FROM queen.segments m USING queen.partitions p WHERE p.id = m.partition_id AND p.name <> 'full'`)
	retentionExec(t, pool, `UPDATE queen.partitions SET created_at = now() - interval '40 days', last_message_at = now() - interval '40 days'`)
	retentionExec(t, pool, `INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq, created_at, last_consumed_at, lease_expires_at)
		SELECT id, 'g', 1, now() - interval '40 days', now() - interval '40 days', NULL::timestamptz FROM queen.partitions WHERE name = 'idle-consumed'
		UNION ALL
		SELECT id, 'g', 1, now() - interval '40 days', now() - interval '1 day', NULL FROM queen.partitions WHERE name = 'recently-consumed'
		UNION ALL
		SELECT id, 'g', 0, now() - interval '40 days', now() - interval '40 days', now() + interval '1 minute' FROM queen.partitions WHERE name = 'leased'`)
	// A cursor row a pop wrote while its partition was being deleted: the run sweeps it.
	retentionExec(t, pool, `INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq) VALUES (gen_random_uuid(), 'g', 0)`)
	names := func() []string {
		rows, err := pool.Query(ctx, `SELECT name FROM queen.partitions ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		n, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// 0 days disables the partition cleanup; the cursor row of a partition gone goes anyway.
	if rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1}); err != nil || rep != (persistence.RetentionReport{Cursors: 1}) {
		t.Fatalf("cleanup disabled: report %+v, %v; want the one cursor row of a partition gone", rep, err)
	}
	rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 1, PartitionCleanupDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	if rep != (persistence.RetentionReport{Partitions: 2}) {
		t.Errorf("report %+v, want 2 partitions", rep)
	}
	if got, want := names(), []string{"full", "leased", "recently-consumed"}; !slices.Equal(got, want) {
		t.Errorf("partitions left %v, want %v", got, want)
	}
	var consumers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.partition_consumers`).Scan(&consumers); err != nil || consumers != 2 {
		t.Errorf("%d consumer rows left (%v), want the 2 of the kept partitions", consumers, err)
	}
}

// Two runs at once: the one that finds the lock taken skips, whatever the job, and deletes
// nothing; the holder finishes its work.
func TestRetentionConcurrentRunSkips(t *testing.T) {
	pool, cs := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	part := retentionPush(t, s, persistence.QueueName{Name: "busy"}, "p", 3)
	retentionExec(t, pool, `UPDATE queen.queues SET retention_enabled = true, retention_seconds = 60, max_wait_time_seconds = 60 WHERE name = 'busy'`)
	retentionAge(t, pool, part, 1, 2, 3)

	// Hold a row lock on one message so that the first run blocks inside its delete, holding
	// the cleanup lock.
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	blocker, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM queen.messages WHERE partition_id = $1 AND seq = 2 FOR UPDATE`, part); err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep persistence.RetentionReport
		err error
	}
	first := make(chan result, 1)
	go func() {
		rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 10})
		first <- result{rep, err}
	}()
	for waiting := 0; waiting == 0; {
		select {
		case r := <-first:
			t.Fatalf("first run returned before blocking: %+v, %v", r.rep, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
	}

	rep, err := s.RunRetention(ctx, persistence.RetentionOptions{BatchSize: 10})
	if !errors.Is(err, persistence.ErrCleanupBusy) || rep != (persistence.RetentionReport{}) {
		t.Errorf("second retention run: report %+v, err %v; want ErrCleanupBusy", rep, err)
	}
	if n, err := s.RunEviction(ctx, 10); !errors.Is(err, persistence.ErrCleanupBusy) || n != 0 {
		t.Errorf("eviction during retention: %d, %v; want ErrCleanupBusy", n, err)
	}
	retentionWant(t, pool, "while the first run is blocked", part, 1, 2, 3)

	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil || r.rep != (persistence.RetentionReport{Expired: 3}) {
		t.Errorf("first run: report %+v, err %v; want 3 expired", r.rep, r.err)
	}
	retentionWant(t, pool, "after the first run", part)
	// The lock went with the first run's transaction.
	if _, err := s.RunEviction(ctx, 10); err != nil {
		t.Errorf("eviction after retention: %v", err)
	}
}
