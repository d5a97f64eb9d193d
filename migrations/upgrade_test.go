package migrations_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/migrations"
	"queen/persistence"
	"queen/pg"
	"queen/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// upTo is the broker's migration set as a release that ended at version last shipped it.
func upTo(t *testing.T, last int) pg.MigrationSet {
	t.Helper()
	all, err := migrations.Set.Load()
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{}
	for _, m := range all {
		if m.Version <= last {
			files[m.Name] = &fstest.MapFile{Data: []byte(m.SQL)}
		}
	}
	set := migrations.Set
	set.Files = files
	return set
}

// olderSchema connects to a new database migrated as the release ending at version last left
// it and returns the connection (closed when t ends) and the database's connection string.
func olderSchema(t *testing.T, last int) (context.Context, *pgx.Conn, string) {
	t.Helper()
	ctx := t.Context()
	dsn := pgtest.NewEmptyDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := upTo(t, last).Apply(ctx, conn, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return ctx, conn, dsn
}

// The brokers' lifetime counters kept in queen.broker_counters until migration 0005 carry over
// to queen.stats_totals, by broker and by counter.
func TestLifetimeCountersCarryOverToTheStatistics(t *testing.T) {
	ctx, conn, _ := olderSchema(t, 4)
	if _, err := conn.Exec(ctx, `INSERT INTO queen.broker_counters (server_id, name, value) VALUES
		('a', 'push_messages', 10), ('a', 'dlq', 2), ('b', 'push_messages', 5), ('b', 'stream_cycles', 3)`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Set.Apply(ctx, conn, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	type totals struct {
		Server                               string
		Pushed, DeadLettered, Cycles, Popped int64
	}
	rows, err := conn.Query(ctx, `SELECT server_id, push_messages, dlq, stream_cycles, pop_messages FROM queen.stats_totals ORDER BY server_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[totals])
	if err != nil {
		t.Fatal(err)
	}
	if want := []totals{{"a", 10, 2, 0, 0}, {"b", 5, 0, 3, 0}}; !slices.Equal(got, want) {
		t.Errorf("stats_totals %+v, want %+v", got, want)
	}
	var left bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('queen.broker_counters') IS NOT NULL`).Scan(&left); err != nil || left {
		t.Errorf("queen.broker_counters still there (%v)", err)
	}
}

// A database whose messages are rows of queen.messages (the schema up to 0005), caught in the
// middle of consumption, upgrades to segments with nothing lost: the lease in force holds and its
// acks apply, every group goes on from its cursor in order with the payloads intact, the stored
// transactionIds still refuse duplicates, and the dead letters and traces stay with their
// messages.
func TestMessagesCarryOverToSegmentsMidConsumption(t *testing.T) {
	ctx, conn, dsn := olderSchema(t, 5)
	lease := uuid.New()
	// What the release before segments stored: a partition of five messages; queue mode has
	// consumed the first and holds a lease on the next two; group g has read four; the first
	// message was dead-lettered by group d and the second traced.
	if _, err := conn.Exec(ctx, `
		WITH q AS (INSERT INTO queen.queues (name) VALUES ('orders') RETURNING id),
		p AS (INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_at) SELECT id, 'p', 5, now() FROM q RETURNING id)
		INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload, created_at)
		SELECT p.id, n, gen_random_uuid(), 't' || n, jsonb_build_object('n', n), now() - (6 - n) * interval '1 second'
		FROM p, generate_series(1, 5) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq, lease_id, lease_acquired_at,
		                                       lease_expires_at, lease_end_seq, batch_size)
		SELECT id, '__QUEUE_MODE__', 1, $1::uuid, now(), now() + interval '5 minutes', 3, 2 FROM queen.partitions
		UNION ALL SELECT id, 'g', 4, NULL, NULL, NULL, 0, 0 FROM queen.partitions`, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		WITH p AS (SELECT id FROM queen.partitions),
		d AS (INSERT INTO queen.dead_letter_queue (partition_id, message_seq, consumer_group, error_message, retry_count)
		      SELECT id, 1, 'd', 'boom', 3 FROM p)
		INSERT INTO queen.message_traces (partition_id, message_seq, transaction_id, consumer_group, event_type, data)
		SELECT id, 2, 't2', '__QUEUE_MODE__', 'info', '{"step": 1}' FROM p`); err != nil {
		t.Fatal(err)
	}

	if err := migrations.Set.Apply(ctx, conn, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := persistence.NewStore(pool)
	orders := persistence.QueueName{Name: "orders"}
	pop := func(group string) persistence.PopResult {
		t.Helper()
		// Group g consumes with autoAck; queue mode takes leases.
		res, err := s.Pop(ctx, persistence.PopRequest{Queue: orders, Partition: "p", Group: group, Batch: 10, Partitions: 1,
			LeaseID: uuid.New(), AutoAck: group != persistence.QueueMode})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	delivered := func(res persistence.PopResult) (out []string) {
		for _, m := range res.Messages {
			out = append(out, m.TransactionID+"="+string(m.Payload))
		}
		return out
	}

	if res := pop(persistence.QueueMode); res.Outcome != persistence.PopLeaseHeld {
		t.Fatalf("queue mode popped %v (%q) under the lease taken before the upgrade", delivered(res), res.Outcome)
	}
	pid := func() uuid.UUID {
		var id uuid.UUID
		if err := pool.QueryRow(ctx, `SELECT id FROM queen.partitions`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}()
	acks := []persistence.AckItem{
		{PartitionID: pid, TransactionID: "t2", Group: persistence.QueueMode, LeaseID: lease.String(), Status: persistence.AckCompleted},
		{PartitionID: pid, TransactionID: "t3", Group: persistence.QueueMode, LeaseID: lease.String(), Status: persistence.AckCompleted},
	}
	res, err := s.Ack(ctx, acks)
	if err != nil || len(res) != 2 || !res[0].Success || !res[1].Success || !res[1].LeaseReleased {
		t.Fatalf("acks of the lease taken before the upgrade: %+v %v", res, err)
	}
	if got, want := delivered(pop(persistence.QueueMode)), []string{`t4={"n": 4}`, `t5={"n": 5}`}; !slices.Equal(got, want) {
		t.Errorf("queue mode after the acks delivered %v, want %v", got, want)
	}
	if got, want := delivered(pop("g")), []string{`t5={"n": 5}`}; !slices.Equal(got, want) {
		t.Errorf("group g delivered %v, want %v", got, want)
	}

	pushed, err := s.Push(ctx, []persistence.PushItem{
		{Queue: orders, Partition: "p", TransactionID: "t1", Payload: []byte(`{"n": 1}`)},
		{Queue: orders, Partition: "p", TransactionID: "t6", Payload: []byte(`{"n":6}`)},
	})
	if err != nil || pushed[0].Status != persistence.StatusDuplicate || pushed[1].Status != persistence.StatusQueued {
		t.Fatalf("push of a stored and a new transactionId: %+v %v", pushed, err)
	}
	if got, want := delivered(pop("g")), []string{`t6={"n":6}`}; !slices.Equal(got, want) {
		t.Errorf("group g after a push delivered %v, want %v", got, want)
	}
	var seq int64
	if err := pool.QueryRow(ctx, `SELECT seq FROM queen.messages WHERE transaction_id = 't6'`).Scan(&seq); err != nil || seq != 6 {
		t.Errorf("the new message's seq %d (%v), want 6", seq, err)
	}

	dead, total, err := s.ListDLQ(ctx, persistence.DLQFilter{Queue: orders, Limit: 10})
	if err != nil || total != 1 || dead[0].TransactionID != "t1" || string(dead[0].Payload) != `{"n": 1}` || dead[0].Group != "d" {
		t.Errorf("dead letters after the upgrade: %+v (%d) %v", dead, total, err)
	}
	traces, err := s.MessageTraces(ctx, persistence.Scope{}, pid, "t2")
	if err != nil || len(traces) != 1 || string(traces[0].Data) != `{"step": 1}` {
		t.Errorf("traces of t2 after the upgrade: %+v %v", traces, err)
	}
}
