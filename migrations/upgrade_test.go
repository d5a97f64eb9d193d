package migrations_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"queen/migrations"
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
// it; the connection closes when t ends.
func olderSchema(t *testing.T, last int) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := upTo(t, last).Apply(ctx, conn, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return ctx, conn
}

// The brokers' lifetime counters kept in queen.broker_counters until migration 0005 carry over
// to queen.stats_totals, by broker and by counter.
func TestLifetimeCountersCarryOverToTheStatistics(t *testing.T) {
	ctx, conn := olderSchema(t, 4)
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
