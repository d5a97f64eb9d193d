package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"queen/config"
	"queen/persistence"
	"queen/pg/localpg"
)

// database is the broker's PostgreSQL: its own local cluster when PG_HOST is unset, the pool
// (TLS when PG_USE_SSL says so), and the schema, migrated before anything else uses it.
type database struct {
	store  *persistence.Store
	local  *localpg.Cluster // nil when PG_HOST is set or the caller gave a connection string
	log    *slog.Logger
	server serverWatch
}

// openDatabase reaches PostgreSQL (connString, or what the configuration says) and migrates
// the schema. On error nothing is left running.
func openDatabase(ctx context.Context, cfg config.Config, log *slog.Logger, connString string) (_ *database, err error) {
	d := &database{log: log, server: serverWatch{log: log}}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	var tlsConf *tls.Config
	if connString == "" {
		if connString, tlsConf, err = d.connString(ctx, cfg); err != nil {
			return nil, err
		}
	}
	d.store, err = persistence.Open(ctx, connString, persistence.PoolOptions{
		MaxConns: cfg.DBPoolSize, ConnectTimeout: cfg.DBConnTimeout, StatementTimeout: cfg.DBStmtTimeout,
		TLS: tlsConf, OnConnect: d.server.connected,
	})
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		if err = d.checkTLS(ctx, cfg, tlsConf); err != nil {
			return nil, err
		}
	}
	if err = d.store.Migrate(ctx, log); err != nil {
		return nil, err
	}
	log.Info("database ready")
	return d, nil
}

// close closes the pool and stops the local PostgreSQL.
func (d *database) close() {
	if d.store != nil {
		d.store.Close()
	}
	if d.local != nil {
		if err := d.local.Stop(); err != nil {
			d.log.Error("cannot stop the local PostgreSQL", "err", err)
		}
		d.local = nil
	}
}

// connString starts the local PostgreSQL when PG_HOST is unset and returns how to reach the
// server, with the TLS configuration of PG_HOST's connections (nil: plaintext or unix socket).
//
// Every new connection tries the servers of PG_HOST in order and keeps the first that accepts
// writes (target_session_attrs=read-write): a standby is skipped, and after a failover the pool
// reaches the promoted server by itself, since the connections to the old primary die with it.
func (d *database) connString(ctx context.Context, c config.Config) (string, *tls.Config, error) {
	if len(c.PGServers) > 0 {
		d.log.Info("using PostgreSQL", "hosts", pgHosts(c), "database", c.PGDB, "user", c.PGUser)
		t, err := pgTLS(c, d.log)
		if err != nil {
			return "", nil, err
		}
		hosts := make([]string, len(c.PGServers))
		ports := make([]string, len(c.PGServers))
		for i, s := range c.PGServers {
			hosts[i], ports[i] = s.Host, strconv.Itoa(s.Port)
		}
		return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable target_session_attrs=read-write",
			quote(strings.Join(hosts, ",")), quote(strings.Join(ports, ",")), quote(c.PGUser), quote(c.PGPassword), quote(c.PGDB)), t, nil
	}
	if c.PGUseSSL {
		d.log.Warn("PG_USE_SSL is ignored: PG_HOST is unset, and the local PostgreSQL is reached over a unix socket")
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return "", nil, fmt.Errorf("cannot resolve QUEEN_DATA_DIR %s: %w", c.DataDir, err)
	}
	cl, err := localpg.Start(ctx, localpg.Options{DataDir: dir, Logger: d.log})
	if err != nil {
		return "", nil, fmt.Errorf("cannot start the local PostgreSQL (PG_HOST is unset): %w", err)
	}
	d.local = cl
	return cl.ConnString("postgres"), nil, nil
}

// pgHosts is PG_HOST as the logs show it, every entry with its port.
func pgHosts(c config.Config) string {
	out := make([]string, len(c.PGServers))
	for i, s := range c.PGServers {
		out[i] = s.String()
	}
	return strings.Join(out, ",")
}

// serverWatch follows which PostgreSQL server the pool's new connections reach. It says once
// which one that is, and warns when it changes: after a failover the broker writes to another
// server of PG_HOST, and the old primary must not come back as a primary.
type serverWatch struct {
	log  *slog.Logger
	mu   sync.Mutex
	addr string
}

func (w *serverWatch) connected(addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.addr {
	case addr:
		return
	case "":
		w.log.Info("connected to PostgreSQL", "server", addr)
	default:
		w.log.Warn("PostgreSQL server changed (a failover?): the broker now writes to another server of PG_HOST; keep the previous one from accepting writes again (rebuild it as a standby of the new primary)",
			"server", addr, "previous", w.addr)
	}
	w.addr = addr
}

// quote makes a value safe inside a libpq keyword/value connection string.
func quote(v string) string {
	out := []byte{'\''}
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, v[i])
	}
	return string(append(out, '\''))
}

// pgTLS builds the TLS configuration of the connections to PG_HOST from PG_USE_SSL,
// PG_SSL_REJECT_UNAUTHORIZED and PG_SSL_ROOT_CERT, and logs which of the modes is in force:
//
//   - plaintext: PG_USE_SSL=false (nil configuration);
//   - verify-full against the system roots, or against PG_SSL_ROOT_CERT alone when it is set
//     (the certificate chain and the host name are both checked);
//   - accept-any: PG_SSL_REJECT_UNAUTHORIZED=false without a CA, encrypted but unverified.
//
// There is no opportunistic mode: with PG_USE_SSL=true a server without TLS is an error.
func pgTLS(c config.Config, log *slog.Logger) (*tls.Config, error) {
	if !c.PGUseSSL {
		if len(c.PGSSLRootCert) > 0 {
			log.Warn("PG_SSL_ROOT_CERT is set but PG_USE_SSL is not: the PostgreSQL connection is PLAINTEXT")
		}
		log.Info("config: postgres", append(pgServer(c), "use_ssl", false, "ssl_trust", "plaintext")...)
		return nil, nil
	}
	// The name checked is each host's own: persistence.Open sets ServerName per host.
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	trust := "system-roots"
	if len(c.PGSSLRootCert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.PGSSLRootCert) {
			return nil, fmt.Errorf("invalid PG_SSL_ROOT_CERT: holds no PEM-encoded CA certificate")
		}
		t.RootCAs, trust = pool, "supplied-ca"
		if !c.PGSSLRejectUnauthorized {
			log.Warn("PG_SSL_REJECT_UNAUTHORIZED=false is ignored because PG_SSL_ROOT_CERT is set: the server certificate is verified against that CA")
		}
	} else if !c.PGSSLRejectUnauthorized {
		t.InsecureSkipVerify, trust = true, "accept-any"
		log.Warn("PostgreSQL TLS is encrypted but UNVERIFIED (PG_SSL_REJECT_UNAUTHORIZED=false): the server's certificate is not checked, so anyone on the path can impersonate the database; set PG_SSL_ROOT_CERT to the server's CA instead")
	}
	log.Info("config: postgres", append(pgServer(c), "use_ssl", true,
		"ssl_reject_unauthorized", c.PGSSLRejectUnauthorized, "ssl_trust", trust, "ssl_verified", !t.InsecureSkipVerify)...)
	return t, nil
}

// checkTLS confirms that the pool's connections really are encrypted, and says so.
func (d *database) checkTLS(ctx context.Context, c config.Config, t *tls.Config) error {
	addr := pgHosts(c)
	on, version, err := d.store.ConnectionTLS(ctx)
	if err != nil {
		hint := ""
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			hint = "; the server's certificate is not trusted: set PG_SSL_ROOT_CERT to the CA that signed it"
		}
		return fmt.Errorf("cannot connect to PostgreSQL at %s over TLS (PG_USE_SSL=true): %w%s", addr, err, hint)
	}
	if !on {
		return fmt.Errorf("the PostgreSQL connection to %s is not encrypted although PG_USE_SSL=true", addr)
	}
	d.log.Info("PostgreSQL connection encrypted", "tls_version", version, "verified", !t.InsecureSkipVerify)
	return nil
}
