// Package pxdb is the proxy's control-plane database: cells, API keys, users and the
// append-only audit trail, in schema queen_proxy of a PostgreSQL of its own.
package pxdb

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/pg"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey serialises the processes (proxies, administration commands) that migrate
// the same database at once.
const migrationLockKey int64 = 0x717565656e505844 // "queenPXD"

// appRole is the role every runtime statement runs as when it exists (see the migrations).
const appRole = "queen_proxy_app"

var (
	ErrExists         = errors.New("already exists")
	ErrNotFound       = errors.New("not found")
	ErrNoCell         = errors.New("no such cell")
	ErrBadCredentials = errors.New("bad credentials")
	// ErrInvalid is wrapped by every refusal of a malformed argument (a name, a URL, a class),
	// whose message says what is wrong.
	ErrInvalid = errors.New("invalid argument")
)

// invalid makes an error that wraps ErrInvalid but reads as its message alone.
func invalid(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

// Store runs the control plane's SQL.
type Store struct {
	pool   *pgxpool.Pool
	target pg.Target // the private PostgreSQL this store started, if any
	log    *slog.Logger
}

// Open reaches the database that s names (starting the private PostgreSQL in s.DataDir when it
// names no server, or using the one another process of ours runs there: an administration
// command must be able to revoke a key while the proxy serves), migrates it and returns the
// store. On error nothing is left running.
func Open(ctx context.Context, s pg.Settings, log *slog.Logger) (*Store, error) {
	target, err := pg.Reach(ctx, s, log, true, "pool_size", s.PoolSize)
	if err != nil {
		return nil, err
	}
	st, err := open(ctx, target.ConnString, pg.PoolOptions{MaxConns: s.PoolSize, TLS: target.TLS}, log)
	if err == nil && target.TLS != nil {
		if err = pg.CheckTLS(ctx, st.pool, s, target.TLS, log); err != nil {
			st.pool.Close()
		}
	}
	if err != nil {
		target.Stop(log)
		return nil, err
	}
	st.target = target
	return st, nil
}

// OpenConn migrates the database of connString and opens the store on it (tests).
func OpenConn(ctx context.Context, connString string, log *slog.Logger) (*Store, error) {
	return open(ctx, connString, pg.PoolOptions{}, log)
}

// open migrates the database as the connecting user, on a connection of its own (the pool's
// sessions take the application role, which may not change the schema), then opens the pool
// whose sessions run as queen_proxy_app when that user may take the role.
func open(ctx context.Context, connString string, o pg.PoolOptions, log *slog.Logger) (*Store, error) {
	o.AppName = "queen-proxy"
	one := o
	one.MaxConns = 1
	mig, err := pg.NewPool(ctx, connString, one)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the control-plane database: %w", err)
	}
	useRole, err := migrate(ctx, mig, log)
	mig.Close()
	if err != nil {
		return nil, err
	}
	if useRole {
		o.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "SET ROLE "+appRole); err != nil {
				return fmt.Errorf("cannot set role %s: %w", appRole, err)
			}
			return nil
		}
	} else {
		log.Warn("the control plane runs as the connecting user, not as role " + appRole +
			" (missing, or not granted to that user): its privileges on queen_proxy.operations are not restricted to SELECT and INSERT; the append-only trigger still holds")
	}
	pool, err := pg.NewPool(ctx, connString, o)
	if err != nil {
		return nil, fmt.Errorf("cannot create the control-plane database pool: %w", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot query the control-plane database: %w", err)
	}
	return &Store{pool: pool, log: log}, nil
}

// migrate applies the migrations and reports whether the session user may take the
// application role.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (useRole bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("cannot connect to the control-plane database: %w", err)
	}
	defer conn.Release()
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return false, fmt.Errorf("cannot read the control-plane migrations: %w", err)
	}
	set := pg.MigrationSet{Files: files, Schema: "queen_proxy", LockKey: migrationLockKey}
	if err := set.Apply(ctx, conn.Conn(), log); err != nil {
		return false, fmt.Errorf("cannot migrate the control-plane database: %w", err)
	}
	// No row: the role does not exist. SET ROLE needs membership before PostgreSQL 16, the SET
	// option of it since.
	err = conn.QueryRow(ctx, `
		SELECT pg_has_role(session_user, oid,
			CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END)
		FROM pg_roles WHERE rolname = $1`, appRole).Scan(&useRole)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("cannot check role %s: %w", appRole, err)
	}
	return useRole, nil
}

// Close closes the pool and stops the private PostgreSQL if this store started it.
func (s *Store) Close() {
	s.pool.Close()
	s.target.Stop(s.log)
}

// Pool returns the store's pool (tests reach the database through it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// isCode reports whether err is a PostgreSQL error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// foreignKeyViolation is the SQLSTATE of a row naming a cell that does not exist.
const foreignKeyViolation = "23503"
