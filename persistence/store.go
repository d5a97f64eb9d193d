// Package persistence holds every SQL statement of the broker: the connection pool, the
// migration runner, push and ack (which package fusion fuses), pop, transactions and the admin
// reads.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/migrations"
	"queen/pg"
)

// QueueMode is the consumer group name of competing consumers (no named group).
const QueueMode = "__QUEUE_MODE__"

// Store runs the broker's SQL on a pgx pool.
type Store struct {
	pool   *pgxpool.Pool
	sealer PayloadSealer // nil without QUEEN_ENCRYPTION_KEY; see encryption.go
	// onError is told of every failed transaction attempt (the database errors of the
	// metrics); nil: nobody listens.
	onError func()
	leased  *leasedMessages
}

// NewStore wraps an open pool (tests; the broker opens its store with Open).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, leased: newLeasedMessages()} }

// Pool returns the underlying pool (tests reach the database through it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool, waiting for the connections in use to come back.
func (s *Store) Close() { s.pool.Close() }

// PoolStats is a snapshot of the connection pool for the metrics routes.
type PoolStats struct {
	Idle          int32 // connections open and unused
	Acquired      int32 // connections in use
	Max           int32 // the pool's size
	EmptyAcquires int64 // acquisitions that had to wait for a connection, since the start
	// EmptyAcquireWait is the time those acquisitions waited, summed: its growth over a
	// window divided by the window is the mean number of callers waiting.
	EmptyAcquireWait time.Duration
}

// PoolStats reports the pool's state.
func (s *Store) PoolStats() PoolStats {
	st := s.pool.Stat()
	return PoolStats{Idle: st.IdleConns(), Acquired: st.AcquiredConns(), Max: st.MaxConns(),
		EmptyAcquires: st.EmptyAcquireCount(), EmptyAcquireWait: st.EmptyAcquireWaitTime()}
}

// OnError registers f to be called on every failed attempt of a transaction (push, pop, ack,
// the transaction route, admin writes), retried ones included; not for a caller that went
// away, nor for a transaction rolled back on purpose (an operation of the transaction route
// failed). Call it before the store is used.
func (s *Store) OnError(f func()) { s.onError = f }

// failed reports a failed attempt to the OnError listener. A transaction the broker rolls back
// on purpose (a refused transaction or replay) is not a database error.
func (s *Store) failed(err error) {
	var abort txAbort
	if err != nil && s.onError != nil && !errors.Is(err, context.Canceled) && !errors.As(err, &abort) &&
		!errors.Is(err, ErrSealedPayload) && !errors.Is(err, ErrReplayRefused) && !errors.Is(err, errStoredTransaction) &&
		!errors.Is(err, errNewPartition) {
		s.onError()
	}
}

// Migrate creates the queen schema if needed and applies the broker's migrations not yet
// recorded in queen.schema_migrations.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("cannot acquire a connection for migrations: %w", err)
	}
	defer conn.Release()
	return migrations.Set.Apply(ctx, conn.Conn(), log)
}

// keyedPlans is the planner's setting for the rest of a transaction whose statements read and
// write rows by key (a push, an ack, a wildcard pop, and what a transaction or a stream cycle
// runs after them): generic plans, made once per connection, instead of a plan per execution,
// which was a third of PostgreSQL's time under bench cost; and no sequential or bitmap scan,
// hash or merge join, so that a generic plan made while the tables were empty is still the
// index walk at millions of rows (see Open). Statements under it find rows by parameters,
// primary keys or LATERAL probes, and a join names every column of the key it probes from the
// same relation: a key split between a join clause and a parameter, or between two relations,
// was left partly out of the index condition by such plans, which then read a whole queue's
// partitions or a whole group's cursors (TestPushLockPlanMadeOnOnePartitionReadsByKey,
// TestCursorStatementsPlannedOnOneRowReadByKey, TestPopSearchReadsAChunk).
const keyedPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

// Open connects to PostgreSQL (pg.NewPool). By default every execution is planned with the
// table sizes of the moment: a cached generic plan is made once per connection, typically on a
// fresh, empty database, and kept; a duplicate probe planned so walked whole partitions and
// pushes ran 10-20x slower until the broker restarted. The hot paths, whose statements are
// written to read by key, opt into generic plans with keyedPlans.
//
// JIT compilation is off: it starts on a plan's estimated cost, and the broker's costly
// statements are its periodic reads over every partition (the metrics backlog, retention),
// which run in well under a second and spent a third of that compiling (see
// docs/performance.md, sixth round).
func Open(ctx context.Context, connString string, o pg.PoolOptions) (*Store, error) {
	o.AppName = "queen"
	o.Params = map[string]string{"plan_cache_mode": "force_custom_plan", "jit": "off"}
	pool, err := pg.NewPool(ctx, connString, o)
	if err != nil {
		return nil, err
	}
	return NewStore(pool), nil
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
		s.failed(err)
		if err == nil || attempt >= 4 || !isRetryable(err) {
			return err
		}
	}
}

// errRetry marks an error after which a transaction is safe and useful to run again.
var errRetry = errors.New("transient conflict")

// pipelinedTx runs fn on a connection whose transaction fn opens and commits itself, sending
// BEGIN and COMMIT in the same round trips as its first and last statements (the hot paths,
// push and pop, save two round trips that way). On error the transaction is rolled back, or the
// connection dropped if even that fails, and a deadlock or serialization failure is retried.
func (s *Store) pipelinedTx(ctx context.Context, what string, fn func(*pgx.Conn) error) error {
	for attempt := 0; ; attempt++ {
		err := s.pipelinedOnce(ctx, what, fn)
		s.failed(err)
		if err == nil || attempt >= 4 || !isRetryable(err) {
			return err
		}
	}
}

func (s *Store) pipelinedOnce(ctx context.Context, what string, fn func(*pgx.Conn) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("cannot acquire a connection for a %s: %w", what, err)
	}
	defer conn.Release()
	if err := fn(conn.Conn()); err != nil {
		if _, rerr := conn.Exec(context.Background(), "ROLLBACK"); rerr != nil {
			_ = conn.Conn().Close(context.Background())
		}
		return err
	}
	return nil
}

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

// IsUnavailable reports whether err means the database could not be reached or did not answer
// in time (as opposed to a statement it refused, or a bug): the HTTP layer answers those 503 and
// the push path spools instead.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exceptions; 53: insufficient resources (too many connections);
		// 57P01..03: the server is shutting down or starting; 25006: the server only reads
		// (a standby, or the old primary of a failover), as good as none until the broker
		// reconnects to the new primary.
		c := pgErr.Code
		return c[:2] == "08" || c[:2] == "53" || c == "57P01" || c == "57P02" || c == "57P03" || c == pg.ReadOnlyTransaction
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "closed pool")
}
