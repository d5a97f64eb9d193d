// Package persistence holds every SQL statement of the broker: the connection pool, the
// migration runner, the fused push and ack batchers, pop, transactions and the admin reads.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// QueueMode is the consumer group name of competing consumers (no named group).
const QueueMode = "__QUEUE_MODE__"

// Store runs the broker's SQL on a pgx pool.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore wraps an open pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool returns the underlying pool (health checks, tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// PoolOptions tune the connection pool.
type PoolOptions struct {
	MaxConns         int
	ConnectTimeout   time.Duration
	StatementTimeout time.Duration
}

// OpenPool connects to PostgreSQL. Every session runs in UTC so timestamps render as the clients
// expect, and with a statement timeout so a stuck query cannot hold a request forever.
func OpenPool(ctx context.Context, connString string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the PostgreSQL connection settings: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = int32(o.MaxConns)
	}
	if o.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	cfg.ConnConfig.RuntimeParams["application_name"] = "queen"
	// Plan every execution with the table sizes of the moment. A cached generic plan is made
	// once per connection, typically on a fresh, empty database, and kept: its duplicate probe
	// then walked whole partitions and pushes ran 10-20x slower until the broker restarted.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	if o.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(o.StatementTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create the PostgreSQL pool: %w", err)
	}
	return pool, nil
}

// Ping reports whether PostgreSQL answers a trivial query.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// inTx runs fn in a transaction and retries it when PostgreSQL aborts it for a deadlock or a
// serialization failure: both are transient by definition, and every fn here is safe to repeat.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || attempt >= 4 || !isRetryable(err) {
			return err
		}
	}
}

// errRetry marks an error after which a transaction is safe and useful to run again.
var errRetry = errors.New("transient conflict")

func isRetryable(err error) bool {
	if errors.Is(err, errRetry) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40P01" || pgErr.Code == "40001"
	}
	return false
}

// IsUnavailable reports whether err means the database could not be reached (as opposed to a
// statement it refused), which the HTTP layer answers with 503.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exceptions; 57P01..03: the server is shutting down or starting.
		return pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return !errors.Is(err, context.Canceled)
}
