package persistence_test

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen/migrations"
	"queen/pg/pgtest"
)

// The migrations grant nothing to PUBLIC: not the queen schema, not a table or sequence in it,
// not a function, not through default privileges, and no other schema either (the reference's
// streams migration granted its schema to PUBLIC). A role with no grants can log in and still
// read nothing.
func TestMigrationsGrantNothingToPublic(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The SQL itself.
	grantToPublic := regexp.MustCompile(`(?is)\bGRANT\b[^;]*\bTO\s+PUBLIC\b`)
	err := fs.WalkDir(migrations.Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Files, path)
		if err != nil {
			return err
		}
		if m := grantToPublic.Find(b); m != nil {
			t.Errorf("migration %s grants to PUBLIC: %s", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pool, cs := pgtest.NewPool(t)
	check := func(what, query string) {
		t.Helper()
		rows, err := pool.Query(ctx, query)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(found) > 0 {
			t.Errorf("PUBLIC holds privileges on %s: %v", what, found)
		}
	}
	// acldefault gives what a NULL acl means: owner-only for schemas, tables and sequences,
	// EXECUTE to PUBLIC for functions (so a function needs an explicit REVOKE).
	check("schemas", `
		SELECT n.nspname || ': ' || a.privilege_type
		FROM pg_namespace n, aclexplode(COALESCE(n.nspacl, acldefault('n', n.nspowner))) a
		WHERE a.grantee = 0 AND n.nspname NOT IN ('public', 'pg_catalog', 'information_schema')
		  AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'`)
	check("tables, views and sequences of queen and queen_streams", `
		SELECT c.relname || ': ' || a.privilege_type
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
		     aclexplode(COALESCE(c.relacl, acldefault((CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) a
		WHERE n.nspname IN ('queen', 'queen_streams') AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND a.grantee = 0`)
	check("functions of queen (REVOKE EXECUTE ... FROM PUBLIC)", `
		SELECT p.proname || ': ' || a.privilege_type
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
		     aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
		WHERE n.nspname = 'queen' AND a.grantee = 0`)
	check("default privileges", `
		SELECT COALESCE(n.nspname, '(all schemas)') || ': ' || a.privilege_type
		FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace,
		     aclexplode(d.defaclacl) a
		WHERE a.grantee = 0`)
	for _, schema := range []string{"queen", "queen_streams"} {
		var usage, create bool
		if err := pool.QueryRow(ctx, `SELECT has_schema_privilege('public', $1, 'USAGE'), has_schema_privilege('public', $1, 'CREATE')`, schema).Scan(&usage, &create); err != nil {
			t.Fatal(err)
		}
		if usage || create {
			t.Fatalf("PUBLIC on schema %s: USAGE %v CREATE %v", schema, usage, create)
		}
	}

	// A role with LOGIN and nothing else reaches none of it.
	role := "queen_nogrant_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Skipf("cannot create a role on this server (%v); the catalog checks above still ran", err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	conn, err := pgx.Connect(ctx, cs+" user="+role)
	if err != nil {
		t.Skipf("cannot log in as %s (%v); the catalog checks above still ran", role, err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{"queen.queues", "queen.partitions", "queen.messages", "queen.partition_consumers",
		"queen.dead_letter_queue", "queen.system_state", "queen.schema_migrations", "queen_streams.queries", "queen_streams.state"} {
		_, err := conn.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s LIMIT 1", table))
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("a role without grants read %s: %v", table, err)
		}
	}
}
