// Package server wires one broker: configuration, PostgreSQL (its own local one when PG_HOST is
// unset), migrations, the fused batchers, the actor system and the HTTP listener. cmd/queen runs
// one; the integration tests and the benchmark run several in one process.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/actors"
	"queen/config"
	queenhttp "queen/http"
	"queen/persistence"
	"queen/persistence/localpg"
)

// Version is the broker version reported by /health.
const Version = "0.1.0"

// Broker is one running broker.
type Broker struct {
	cfg     config.Config
	log     *slog.Logger
	localPG *localpg.Cluster
	pool    *pgxpool.Pool
	store   *persistence.Store
	push    *persistence.Batcher[persistence.PushJob]
	ack     *persistence.Batcher[persistence.AckJob]
	actors  *actors.System
	http    *queenhttp.Server
	ln      net.Listener
	served  chan error
	jobs    *jobs
	pprof   *http.Server // nil unless QUEEN_PPROF_ADDR is set

	shutdownOnce sync.Once
	shutdownErr  error
}

// Options are what a caller can set beyond the environment configuration.
type Options struct {
	// ConnString overrides how PostgreSQL is reached (tests); empty derives it from the config.
	ConnString string
	// Listener overrides the HTTP listener (tests listen on 127.0.0.1:0).
	Listener net.Listener
}

// Start boots a broker and starts serving HTTP. On error everything already started is stopped.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (_ *Broker, err error) {
	b := &Broker{cfg: cfg, log: log, served: make(chan error, 1)}
	defer func() {
		if err != nil {
			b.stopDatabase()
		}
	}()

	connString := opts.ConnString
	if connString == "" {
		if connString, err = b.database(ctx); err != nil {
			return nil, err
		}
	}
	b.pool, err = persistence.OpenPool(ctx, connString, persistence.PoolOptions{
		MaxConns: cfg.DBPoolSize, ConnectTimeout: cfg.DBConnTimeout, StatementTimeout: cfg.DBStmtTimeout,
	})
	if err != nil {
		return nil, err
	}
	if err = persistence.Migrate(ctx, b.pool, log); err != nil {
		return nil, err
	}
	b.store = persistence.NewStore(b.pool)
	log.Info("database ready", "pool_size", cfg.DBPoolSize)

	fusion := persistence.FusionOptions{MaxItems: cfg.PushMaxBatch, InFlight: cfg.MaxConcurrent}
	b.push = b.store.NewPushBatcher(fusion)
	b.ack = b.store.NewAckBatcher(persistence.FusionOptions{MaxItems: cfg.AckMaxBatch, InFlight: cfg.MaxConcurrent})
	set := metrics.NewSet()
	b.actors = actors.Start(&actors.Deps{
		Metrics: set,
		Store:   b.store,
		Push:    b.push,
		Wait: actors.WaitOptions{
			Initial: cfg.PopWaitInitialInterval, Threshold: cfg.PopWaitBackoffThreshold,
			Multiplier: cfg.PopWaitBackoffMultiplier, Max: cfg.PopWaitMaxInterval,
		},
		QueryTimeout: cfg.RequestDeadline,
		IdleTimeout:  2 * time.Minute,
		Log:          log,
	})
	log.Info("fusion ready", "max_items", cfg.PushMaxBatch, "in_flight", cfg.MaxConcurrent)

	if cfg.JWTEnabled {
		return nil, errors.New("JWT_ENABLED=true is not supported by this build yet")
	}
	log.Info("authentication is OFF: every route is open to anyone who can reach the port (set JWT_ENABLED=true to require tokens)")

	b.http = queenhttp.New(queenhttp.Deps{Config: cfg, Store: b.store, Actors: b.actors, Ack: b.ack, Log: log, Version: Version, Metrics: set})
	b.ln = opts.Listener
	if b.ln == nil {
		addr := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port))
		if b.ln, err = net.Listen("tcp", addr); err != nil {
			b.actors.Stop()
			b.push.Close()
			b.ack.Close()
			b.pool.Close()
			return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
		}
	}
	b.jobs = startJobs(b.store, cfg, log)
	if cfg.PprofAddr != "" {
		b.pprof = startPprof(cfg.PprofAddr, log)
	}
	go func() { b.served <- b.http.Serve(b.ln) }()
	log.Info("http listening", "addr", b.ln.Addr().String(), "max_body_bytes", cfg.MaxBodyBytes)
	return b, nil
}

// database starts the local PostgreSQL when PG_HOST is unset and returns how to reach the server.
func (b *Broker) database(ctx context.Context) (string, error) {
	c := b.cfg
	if c.PGHost != "" {
		b.log.Info("using PostgreSQL", "host", c.PGHost, "port", c.PGPort, "database", c.PGDB, "user", c.PGUser)
		return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
			quote(c.PGHost), c.PGPort, quote(c.PGUser), quote(c.PGPassword), quote(c.PGDB)), nil
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return "", fmt.Errorf("cannot resolve QUEEN_DATA_DIR %s: %w", c.DataDir, err)
	}
	cl, err := localpg.Start(ctx, localpg.Options{DataDir: dir, Logger: b.log})
	if err != nil {
		return "", fmt.Errorf("cannot start the local PostgreSQL (PG_HOST is unset): %w", err)
	}
	b.localPG = cl
	return cl.ConnString("postgres"), nil
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

// Addr is the HTTP listener's address.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// Store exposes the broker's persistence (tests).
func (b *Broker) Store() *persistence.Store { return b.store }

// Done delivers the HTTP server's exit.
func (b *Broker) Done() <-chan error { return b.served }

// Shutdown stops in the order that loses nothing: answer parked long-polls, stop accepting and
// let open requests finish, flush the batchers, stop the actors, close the pool, stop the local
// PostgreSQL. Calling it again returns the first call's result.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.shutdownOnce.Do(func() { b.shutdownErr = b.shutdown(ctx) })
	return b.shutdownErr
}

func (b *Broker) shutdown(ctx context.Context) error {
	b.actors.Drain()
	if b.pprof != nil {
		_ = b.pprof.Close()
	}
	err := b.http.Shutdown(ctx)
	b.push.Close()
	b.ack.Close()
	b.actors.Stop()
	b.jobs.stop()
	b.pool.Close()
	b.stopDatabase()
	b.log.Info("broker stopped")
	return err
}

func (b *Broker) stopDatabase() {
	if b.pool != nil && b.store == nil {
		b.pool.Close()
	}
	if b.localPG != nil {
		if err := b.localPG.Stop(); err != nil {
			b.log.Error("cannot stop the local PostgreSQL", "err", err)
		}
		b.localPG = nil
	}
}
