package pg

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolOptions tune a connection pool.
type PoolOptions struct {
	MaxConns         int
	ConnectTimeout   time.Duration
	StatementTimeout time.Duration
	// TLS, when set, is the TLS configuration of every connection (Settings.TLS): it replaces
	// the connection string's sslmode, and there is no fallback to plaintext. Each host of the
	// connection string is verified under its own name.
	TLS *tls.Config
	// AppName is the session's application_name; Params more run-time parameters.
	AppName string
	Params  map[string]string
	// OnConnect, when set, is told the address of the server of every new connection (host:port,
	// or the unix socket's path): after a failover it is another host of the list.
	OnConnect func(server string)
	// AfterConnect, when set, prepares every new connection (a SET ROLE, say).
	AfterConnect func(context.Context, *pgx.Conn) error
}

// NewPool opens a pool on connString. Every session runs in UTC, so timestamps render as the
// clients expect, and with the statement timeout, so a stuck query cannot hold a request
// forever.
func NewPool(ctx context.Context, connString string, o PoolOptions) (*pgxpool.Pool, error) {
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
		return !strings.EqualFold(e.Severity, "FATAL") && e.Code != ReadOnlyTransaction
	}
	if o.OnConnect != nil || o.AfterConnect != nil {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if o.OnConnect != nil {
				o.OnConnect(c.PgConn().Conn().RemoteAddr().String())
			}
			if o.AfterConnect != nil {
				return o.AfterConnect(ctx, c)
			}
			return nil
		}
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	if o.AppName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.AppName
	}
	for k, v := range o.Params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if o.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(o.StatementTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create the PostgreSQL pool: %w", err)
	}
	return pool, nil
}

// ReadOnlyTransaction is SQLSTATE 25006: a write on a server that only reads. Neither program
// opens a read-only transaction, so it means the server is a standby (or a fenced primary).
const ReadOnlyTransaction = "25006"

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

// CheckTLS confirms that the connections of pool, opened with the TLS configuration t of s,
// really are encrypted, and says so.
func CheckTLS(ctx context.Context, pool *pgxpool.Pool, s Settings, t *tls.Config, log *slog.Logger) error {
	var on bool
	var version string
	err := pool.QueryRow(ctx, `SELECT ssl, COALESCE(version, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&on, &version)
	if err != nil {
		hint := ""
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			hint = "; the server's certificate is not trusted: set " + s.Prefix + "SSL_ROOT_CERT to the CA that signed it"
		}
		return fmt.Errorf("cannot connect to PostgreSQL at %s over TLS (%sUSE_SSL=true): %w%s", s.Hosts(), s.Prefix, err, hint)
	}
	if !on {
		return fmt.Errorf("the PostgreSQL connection to %s is not encrypted although %sUSE_SSL=true", s.Hosts(), s.Prefix)
	}
	log.Info("PostgreSQL connection encrypted", "tls_version", version, "verified", !t.InsecureSkipVerify)
	return nil
}
