package server

import (
	"context"
	"log/slog"
	"sync"

	"queen/config"
	"queen/persistence"
	"queen/pg"
)

// database is the broker's PostgreSQL: its own local cluster when PG_HOST is unset, the pool
// (TLS when PG_USE_SSL says so), and the schema, migrated before anything else uses it.
type database struct {
	store  *persistence.Store
	target pg.Target // the local cluster, when the broker started one
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
	pool := []any{"pool_size", cfg.PG.PoolSize, "connection_timeout", cfg.DBConnTimeout, "statement_timeout", cfg.DBStmtTimeout}
	if connString != "" { // the caller's database (tests, the benchmark)
		log.Info("config: postgres", append([]any{"mode", "given"}, pool...)...)
		d.target.ConnString = connString
	} else if d.target, err = pg.Reach(ctx, cfg.PG, log, false, pool...); err != nil {
		return nil, err
	}
	d.store, err = persistence.Open(ctx, d.target.ConnString, pg.PoolOptions{
		MaxConns: cfg.PG.PoolSize, ConnectTimeout: cfg.DBConnTimeout, StatementTimeout: cfg.DBStmtTimeout,
		TLS: d.target.TLS, OnConnect: d.server.connected,
	})
	if err != nil {
		return nil, err
	}
	if d.target.TLS != nil {
		if err = pg.CheckTLS(ctx, d.store.Pool(), cfg.PG, d.target.TLS, log); err != nil {
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
	d.target.Stop(d.log)
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
