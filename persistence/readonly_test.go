package persistence_test

import (
	"testing"

	"github.com/google/uuid"

	"queen/persistence"
	"queen/pg"
	"queen/pg/pgtest"
)

// A connection whose server only reads (a standby, or the old primary of a failover) fails a
// write with SQLSTATE 25006. That counts as PostgreSQL unavailable, so a push is spooled and a
// pop answered 503, and the connection is closed rather than handed out again: the next call
// gets a new connection, which target_session_attrs points at a server that writes. The pool
// has one connection, so a connection kept after the error would fail the next call too.
func TestReadOnlyServerIsUnavailable(t *testing.T) {
	ctx := retentionCtx(t)
	s, err := persistence.Open(ctx, pgtest.NewDatabase(t), pg.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	readOnly := func() {
		t.Helper()
		// What every session of a server in recovery sees, on the pool's only connection.
		if _, err := s.Pool().Exec(ctx, "SET default_transaction_read_only = on"); err != nil {
			t.Fatal(err)
		}
	}

	readOnly()
	_, err = s.Push(ctx, items("q", "p", "1", "a"))
	if err == nil || !persistence.IsUnavailable(err) {
		t.Fatalf("push on a read-only connection: %v, want an error that counts as unavailable", err)
	}
	res, err := s.Push(ctx, items("q", "p", "2", "a"))
	if err != nil || len(res) != 1 || res[0].Status != persistence.StatusQueued {
		t.Fatalf("the push after it: %+v %v, want queued on a new connection", res, err)
	}

	readOnly()
	_, err = s.Pop(ctx, persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: persistence.QueueMode,
		Partitions: 1, Batch: 1, LeaseID: uuid.New()})
	if err == nil || !persistence.IsUnavailable(err) {
		t.Fatalf("pop on a read-only connection: %v, want an error that counts as unavailable", err)
	}

	var stored []string
	rows, err := s.Pool().Query(ctx, `SELECT payload->>'call' FROM queen.messages ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var call string
		if err := rows.Scan(&call); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, call)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0] != "2" {
		t.Fatalf("stored pushes %v, want only the second", stored)
	}
}
