// Package persistence holds every SQL statement of the broker: the connection pool, the
// migration runner, push and ack (which package fusion fuses), pop, transactions and the admin
// reads.
package persistence

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/migrations"
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
}

// NewStore wraps an open pool (tests; the broker opens its store with Open).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

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
		!errors.Is(err, ErrSealedPayload) && !errors.Is(err, ErrReplayRefused) {
		s.onError()
	}
}

// PoolOptions tune the connection pool.
type PoolOptions struct {
	MaxConns         int
	ConnectTimeout   time.Duration
	StatementTimeout time.Duration
	// TLS, when set, is the TLS configuration of every connection (PG_USE_SSL): it replaces
	// the connection string's sslmode, and there is no fallback to plaintext. Each host of the
	// connection string is verified under its own name.
	TLS *tls.Config
	// OnConnect, when set, is told the address of the server of every new connection (host:port,
	// or the unix socket's path): after a failover it is another host of the list.
	OnConnect func(server string)
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

// Open connects to PostgreSQL. Every session runs in UTC so timestamps render as the clients
// expect, and with a statement timeout so a stuck query cannot hold a request forever.
func Open(ctx context.Context, connString string, o PoolOptions) (*Store, error) {
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
	if o.TLS != nil {
		withTLS(&cfg.ConnConfig.Config, o.TLS)
	}
	// A server that answers "read-only transaction" is a standby or a demoted primary: the
	// connection can never write again, so it is closed rather than handed out anew, and the
	// next one goes to whichever host accepts writes (target_session_attrs). FATAL errors
	// close the connection as pgx's default handler does.
	cfg.ConnConfig.OnPgError = func(_ *pgconn.PgConn, e *pgconn.PgError) bool {
		return !strings.EqualFold(e.Severity, "FATAL") && e.Code != readOnlyTransaction
	}
	if o.OnConnect != nil {
		cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
			o.OnConnect(c.PgConn().Conn().RemoteAddr().String())
			return nil
		}
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
	return NewStore(pool), nil
}

// readOnlyTransaction is SQLSTATE 25006: a write on a server that only reads. The broker opens
// no read-only transaction, so it means the server is a standby (or a fenced primary).
const readOnlyTransaction = "25006"

// withTLS gives every host of cc the TLS configuration t, checked against that host's name:
// pgx keeps the hosts after the first in Fallbacks, each with a TLS configuration of its own,
// so setting only the first would verify the others under the wrong name. A host listed twice
// (sslmode=prefer lists each host with and without TLS) is tried once.
func withTLS(cc *pgconn.Config, t *tls.Config) {
	var hosts []*pgconn.FallbackConfig
	for _, h := range append([]*pgconn.FallbackConfig{{Host: cc.Host, Port: cc.Port}}, cc.Fallbacks...) {
		if slices.ContainsFunc(hosts, func(o *pgconn.FallbackConfig) bool { return o.Host == h.Host && o.Port == h.Port }) {
			continue
		}
		ht := t.Clone()
		ht.ServerName = h.Host
		hosts = append(hosts, &pgconn.FallbackConfig{Host: h.Host, Port: h.Port, TLSConfig: ht})
	}
	cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = hosts[0].Host, hosts[0].Port, hosts[0].TLSConfig, hosts[1:]
}

// ConnectionTLS reports whether a connection of the pool is encrypted, and with which TLS
// version (PG_USE_SSL's check at boot).
func (s *Store) ConnectionTLS(ctx context.Context) (encrypted bool, version string, err error) {
	err = s.pool.QueryRow(ctx, `SELECT ssl, COALESCE(version, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).
		Scan(&encrypted, &version)
	if err != nil {
		return false, "", fmt.Errorf("cannot read the TLS state of a connection: %w", err)
	}
	return encrypted, version, nil
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
		return c[:2] == "08" || c[:2] == "53" || c == "57P01" || c == "57P02" || c == "57P03" || c == readOnlyTransaction
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "closed pool")
}
