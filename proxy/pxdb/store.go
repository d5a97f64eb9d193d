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
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/pg"
	"queen/pg/localpg"
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
	pool  *pgxpool.Pool
	local *localpg.Cluster // the private PostgreSQL this store started, if any
	log   *slog.Logger
}

// Open reaches the database that cfg names (starting the private PostgreSQL in cfg.DataDir
// when cfg.Host is empty, or using the one another process of ours runs there), migrates it
// and returns the store. On error nothing is left running.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if cfg.Host != "" {
		switch {
		case !cfg.UseSSL && cfg.RootCert != "":
			log.Warn("PXDB_SSL_ROOT_CERT is set but PXDB_USE_SSL is not: the control-plane database connection is PLAINTEXT")
		case cfg.UseSSL && cfg.sslMode() == "require":
			log.Warn("control-plane database TLS is encrypted but UNVERIFIED (PXDB_SSL_REJECT_UNAUTHORIZED=false): set PXDB_SSL_ROOT_CERT to the server's CA instead")
		}
		log.Info("using PostgreSQL for the control plane", "host", cfg.Host, "port", cfg.Port, "database", cfg.DB,
			"user", cfg.User, "sslmode", cfg.sslMode())
		return OpenConn(ctx, cfg.connString(), log)
	}
	if cfg.UseSSL {
		log.Warn("PXDB_USE_SSL is ignored: PXDB_HOST is unset, and the local PostgreSQL is reached over a unix socket")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve QUEEN_PROXY_DATA_DIR %s: %w", cfg.DataDir, err)
	}
	cluster, err := localpg.Start(ctx, localpg.Options{DataDir: dir, Logger: log})
	var connString string
	switch {
	case err == nil:
		connString = cluster.ConnString("postgres")
	case errors.Is(err, localpg.ErrInUse):
		// A serving proxy runs it: an administration command uses that server (a key must be
		// revocable while the proxy serves).
		log.Info("using the local PostgreSQL that another process runs", "data_dir", dir)
		connString = localpg.DataDirConnString(dir, "postgres")
	default:
		return nil, fmt.Errorf("cannot start the local PostgreSQL (PXDB_HOST is unset): %w", err)
	}
	s, err := OpenConn(ctx, connString+" pool_max_conns="+strconv.Itoa(cfg.PoolSize), log)
	if err != nil {
		if cluster != nil {
			if serr := cluster.Stop(); serr != nil {
				log.Error("cannot stop the local PostgreSQL", "err", serr)
			}
		}
		return nil, err
	}
	s.local = cluster
	return s, nil
}

// OpenConn migrates the database of connString as the connecting user, then opens the pool whose
// sessions run as queen_proxy_app when that user may take the role.
func OpenConn(ctx context.Context, connString string, log *slog.Logger) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the control-plane database settings: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	cfg.ConnConfig.RuntimeParams["application_name"] = "queen-proxy"
	useRole, err := migrate(ctx, cfg.ConnConfig.Copy(), log)
	if err != nil {
		return nil, err
	}
	if useRole {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "SET ROLE "+appRole); err != nil {
				return fmt.Errorf("cannot set role %s: %w", appRole, err)
			}
			return nil
		}
	} else {
		log.Warn("the control plane runs as the connecting user, not as role "+appRole+
			" (missing, or not granted to that user): its privileges on queen_proxy.operations are not restricted to SELECT and INSERT; the append-only trigger still holds",
			"user", cfg.ConnConfig.User)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create the control-plane database pool: %w", err)
	}
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot query the control-plane database: %w", err)
	}
	return &Store{pool: pool, log: log}, nil
}

// migrate applies the migrations on a connection of its own (the pool's sessions have taken the
// application role, which may not change the schema) and reports whether the session user may
// take the application role.
func migrate(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) (useRole bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("cannot connect to the control-plane database: %w", err)
	}
	defer conn.Close(context.Background())
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return false, fmt.Errorf("cannot read the control-plane migrations: %w", err)
	}
	set := pg.MigrationSet{Files: files, Schema: "queen_proxy", LockKey: migrationLockKey}
	if err := set.Apply(ctx, conn, log); err != nil {
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
	if s.local != nil {
		if err := s.local.Stop(); err != nil {
			s.log.Error("cannot stop the local PostgreSQL", "err", err)
		}
		s.local = nil
	}
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
