// Package pg is the PostgreSQL plumbing the broker and the front door share: the migration
// runner here, the private cluster (localpg) and the test databases (pgtest) beside it.
package pg

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Migration is one numbered SQL file of the migrations directory.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// MigrationSet is a directory of numbered SQL files applied in order to one database, recorded
// in the schema_migrations table of its own schema.
type MigrationSet struct {
	Files   fs.FS  // NNNN_description.sql at the root
	Schema  string // created if missing, closed to PUBLIC; holds schema_migrations
	LockKey int64  // the advisory lock serialising the processes that migrate at once
}

// Load reads the migration files in version order.
func (set MigrationSet) Load() ([]Migration, error) {
	entries, err := fs.ReadDir(set.Files, ".")
	if err != nil {
		return nil, fmt.Errorf("cannot list migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		v, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %s: bad version number: %w", name, err)
		}
		body, err := fs.ReadFile(set.Files, name)
		if err != nil {
			return nil, fmt.Errorf("cannot read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Apply applies on conn every migration of the set not yet recorded, each in its own
// transaction, while holding a session advisory lock.
func (set MigrationSet) Apply(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	all, err := set.Load()
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", set.LockKey); err != nil {
		return fmt.Errorf("cannot take the migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must happen even when ctx is already cancelled.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", set.LockKey)
	}()

	schema := pgx.Identifier{set.Schema}.Sanitize()
	table := pgx.Identifier{set.Schema, "schema_migrations"}.Sanitize()
	if _, err := conn.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS `+schema+`;
		REVOKE ALL ON SCHEMA `+schema+` FROM PUBLIC;
		CREATE TABLE IF NOT EXISTS `+table+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
		return fmt.Errorf("cannot create the migrations table: %w", err)
	}

	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM "+table)
	if err != nil {
		return fmt.Errorf("cannot read applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("cannot read applied migrations: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
	}

	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("cannot apply migration %s: %w", m.Name, err)
		}
		log.Info("migration applied", "schema", set.Schema, "migration", m.Name)
	}
	return nil
}
