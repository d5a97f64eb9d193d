package pxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Actor is who made a change and with which credential: Who is a user name, "cli:<os user>" or
// "key:<id>"; Credential e.g. "session", "api_key:<id>" or "cli".
type Actor struct {
	Who, Credential string
}

// Operation is one row of the audit trail.
type Operation struct {
	ID         int64
	At         time.Time
	Who        string
	Credential string
	Cell       string
	Method     string
	Path       string
	Class      string
	Status     int
	RequestID  string
}

// The rows that the store's own changes append: Class controlClass, Method the action, Path
// the object changed, Status 0 (no HTTP exchange; the row commits with the change, so it exists
// only if the change happened).
const controlClass = "control"

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Record appends op to the audit trail; the database sets its ID and At.
func (s *Store) Record(ctx context.Context, op Operation) error {
	return record(ctx, s.pool, op)
}

func record(ctx context.Context, db execer, op Operation) error {
	_, err := db.Exec(ctx, `
		INSERT INTO queen_proxy.operations (who, credential, cell, method, path, class, status, request_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		op.Who, op.Credential, op.Cell, op.Method, op.Path, op.Class, op.Status, op.RequestID)
	if err != nil {
		return fmt.Errorf("cannot record the operation %s %s: %w", op.Method, op.Path, err)
	}
	return nil
}

// audit records, in the change's transaction, that by did action on object (of cell).
func audit(ctx context.Context, tx pgx.Tx, by Actor, action, object, cell string) error {
	return record(ctx, tx, Operation{Who: by.Who, Credential: by.Credential, Cell: cell,
		Method: action, Path: object, Class: controlClass})
}

// checkActor refuses an unattributed change: the audit trail must say who made it.
func checkActor(by Actor) error {
	if by.Who == "" || by.Credential == "" {
		return invalid("a change needs an actor: who and credential must be set")
	}
	return nil
}

// Operations returns the limit newest rows of the audit trail, newest first.
func (s *Store) Operations(ctx context.Context, limit int) ([]Operation, error) {
	if limit <= 0 {
		return nil, invalid("limit must be positive, got %d", limit)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, who, credential, cell, method, path, class, status, request_id
		FROM queen_proxy.operations ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot read the operations: %w", err)
	}
	ops, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Operation, error) {
		var op Operation
		err := row.Scan(&op.ID, &op.At, &op.Who, &op.Credential, &op.Cell, &op.Method, &op.Path,
			&op.Class, &op.Status, &op.RequestID)
		op.At = op.At.UTC()
		return op, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the operations: %w", err)
	}
	return ops, nil
}
