package pgtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestDatabasesAreMigratedAndIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, csA := NewPool(t)
	b, csB := NewPool(t)
	if csA == csB {
		t.Fatalf("two databases share the conn string %s", csA)
	}

	if _, err := a.Exec(ctx, "INSERT INTO queen.queues (name) VALUES ('only-in-a')"); err != nil {
		t.Fatalf("insert into queen.queues of the first database: %v", err)
	}
	var inA, inB int
	if err := a.QueryRow(ctx, "SELECT count(*) FROM queen.queues WHERE name = 'only-in-a'").Scan(&inA); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "SELECT count(*) FROM queen.queues").Scan(&inB); err != nil {
		t.Fatalf("queen.queues missing from the second database: %v", err)
	}
	if inA != 1 || inB != 0 {
		t.Fatalf("queues: %d in the first database, %d in the second; want 1 and 0", inA, inB)
	}

	var migrated int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM queen.schema_migrations").Scan(&migrated); err != nil || migrated == 0 {
		t.Fatalf("schema_migrations of a new database: %d rows, %v", migrated, err)
	}
}

// A database is dropped at the end of its test on a shared PG_HOST server; on the throwaway
// cluster it stays until the cluster is removed.
func TestDatabaseCleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var name string
	t.Run("inner", func(t *testing.T) {
		pool, _ := NewPool(t)
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	conn, err := pgx.Connect(ctx, ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if name == "" || exists == external {
		t.Fatalf("database %q exists=%v after its test ended on a server with external=%v", name, exists, external)
	}
}

// Parallel tests create databases at once; the copies of the template must not collide.
func TestParallelNewDatabase(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := range 8 {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool, _ := NewPool(t)
			var db string
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "INSERT INTO queen.queues (name) VALUES ($1)", db); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM queen.queues").Scan(&n); err != nil || n != 1 {
				t.Fatalf("database %d sees %d queues, %v; want only its own", i, n, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[db] {
				t.Fatalf("database %s handed out twice", db)
			}
			seen[db] = true
		})
	}
}

func TestTemplateRefusesConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ConnString(template))
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connected to the template database; a stray session there breaks every CREATE DATABASE")
	}
	// And the refusal does not stop the copies.
	pool, _ := NewPool(t)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkNewDatabase(b *testing.B) {
	for b.Loop() {
		NewDatabase(b)
	}
}
