// Package server wires one broker: configuration, PostgreSQL (its own local one when PG_HOST is
// unset), migrations, the fused batchers, the actor system and the HTTP listener. cmd/queen runs
// one; the integration tests and the benchmark run several in one process.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"queen/actors"
	"queen/auth"
	"queen/config"
	"queen/fusion"
	queenhttp "queen/http"
	"queen/mesh"
	"queen/persistence"
	"queen/persistence/localpg"
	"queen/seal"
	"queen/spool"
)

// Version is the broker version reported by /health.
const Version = "0.1.0"

// Broker is one running broker.
type Broker struct {
	cfg     config.Config
	log     *slog.Logger
	localPG *localpg.Cluster
	store   *persistence.Store
	push    *fusion.Lanes[persistence.PushItem, persistence.PushResult]
	ack     *fusion.Batcher[fusion.Job[persistence.AckItem, persistence.AckResult]]
	actors  *actors.System
	http    *queenhttp.Server
	ln      net.Listener
	served  chan error // listener failures (serve)
	jobs    *jobs
	pprof   *http.Server // nil unless QUEEN_PPROF_ADDR is set
	spool   *spool.Spool
	control *control
	auth    *auth.Verifier // nil when JWT_ENABLED=false
	obs     *observability // metrics.go

	// Payload encryption, PostgreSQL TLS and the metrics listener (security.go).
	sealKey   *seal.Key // nil without QUEEN_ENCRYPTION_KEY
	encQueues *seal.Queues
	stopEnc   context.CancelFunc
	pgTLSConf *tls.Config // nil: plaintext (or the local cluster's unix socket)
	metricsLn net.Listener

	shutdownOnce sync.Once
	shutdownErr  error
}

// Options are what a caller can set beyond the environment configuration.
type Options struct {
	// ConnString overrides how PostgreSQL is reached (tests); empty derives it from the config.
	ConnString string
	// Listener overrides the HTTP listener (tests listen on 127.0.0.1:0).
	Listener net.Listener
	// MeshListener overrides the mesh listener (tests bind every broker's first, so each
	// knows its peers' addresses).
	MeshListener net.Listener
	// jobRuns receives every retention and eviction run (tests in this package).
	jobRuns chan<- jobRun
}

// Start boots a broker and starts serving HTTP. On error everything already started is stopped.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (_ *Broker, err error) {
	b := &Broker{cfg: cfg, log: log, served: make(chan error, 2)} // one per listener: neither blocks
	defer func() {
		if err != nil {
			b.auth.Close()
			b.stopEncryption()
			b.stopDatabase()
		}
	}()

	if err = cfg.CheckTenancy(); err != nil {
		return nil, err
	}
	// The HTTP server is built with the cap the descriptor limit allows, not the configured one.
	if cfg.MaxConnections, err = connectionCap(cfg, log); err != nil {
		return nil, err
	}
	b.cfg = cfg
	logSettings(cfg, log)
	b.obs = newObservability(cfg, log)
	// JWT first: a bad key or an unreachable JWKS stops the boot before PostgreSQL is touched.
	if cfg.JWT.Enabled {
		if b.auth, err = auth.New(ctx, cfg.JWT, log.With("subsystem", "auth")); err != nil {
			return nil, err
		}
	}

	connString := opts.ConnString
	if connString == "" {
		if connString, err = b.database(ctx); err != nil {
			return nil, err
		}
	}
	b.store, err = persistence.Open(ctx, connString, persistence.PoolOptions{
		MaxConns: cfg.DBPoolSize, ConnectTimeout: cfg.DBConnTimeout, StatementTimeout: cfg.DBStmtTimeout,
		TLS: b.pgTLSConf,
	})
	if err != nil {
		return nil, err
	}
	if b.pgTLSConf != nil {
		if err = b.checkPGTLS(ctx); err != nil {
			b.store.Close()
			return nil, err
		}
	}
	if err = b.store.Migrate(ctx, log); err != nil {
		b.store.Close()
		return nil, err
	}
	if err = b.startEncryption(ctx); err != nil {
		b.store.Close()
		return nil, err
	}
	log.Info("database ready")

	if b.spool, err = spool.Open(spool.Options{Dir: cfg.SpoolDir, Log: log.With("subsystem", "spool")}); err != nil {
		return nil, fmt.Errorf("cannot open the spool in FILE_BUFFER_DIR %s: %w", cfg.SpoolDir, err)
	}
	st := b.spool.Stats()
	log.Info("spool ready", "dir", cfg.SpoolDir, "pending_records", st.Records, "failed_records", st.Failed)
	b.control = newControl(cfg, log, b.store, b.spool)
	b.control.encrypted = b.encQueues
	if err = b.control.loadFlags(ctx); err != nil {
		return nil, err
	}
	log.Info("maintenance flags loaded", "push", b.control.maint.Push(), "pop", b.control.maint.Pop())

	set := b.obs.tel.Set
	b.push = fusion.NewLanes(fusion.Options{MaxItems: cfg.PushMaxBatch, InFlight: cfg.PushLanes, Metrics: set, Op: "push"},
		b.store.Push, persistence.IsUnavailable, persistence.PushLaneKey)
	b.ack = fusion.New(fusion.Options{MaxItems: cfg.AckMaxBatch, InFlight: cfg.AckInFlight, Metrics: set, Op: "ack"},
		b.store.Ack, persistence.IsUnavailable)
	ctl := b.control
	b.actors = actors.Start(&actors.Deps{
		Metrics:     set,
		Store:       b.store,
		Push:        b.push,
		Spool:       b.spool,
		SpoolAfter:  cfg.SpoolAfter,
		Maintenance: ctl.maint,
		DBHealthy:   &ctl.dbHealthy,
		OrphanLease: ctl.orphanLease,
		OnPushed: func(queue string, partitions []string) {
			if ctl.mesh != nil {
				ctl.mesh.MessageAvailable(queue, partitions)
			}
		},
		Wait: actors.WaitOptions{
			Initial: cfg.PopWaitInitialInterval, Threshold: cfg.PopWaitBackoffThreshold,
			Multiplier: cfg.PopWaitBackoffMultiplier, Max: cfg.PopWaitMaxInterval,
		},
		QueryTimeout:      cfg.RequestDeadline,
		MaxParkedPerQueue: cfg.MaxParkedPerQueue,
		MaxParked:         cfg.MaxParked,
		IdleTimeout:       2 * time.Minute,
		Log:               log,
	})
	ctl.actors = b.actors
	if err = b.startMesh(set, opts.MeshListener); err != nil {
		b.actors.Stop()
		return nil, err
	}

	if b.auth != nil {
		log.Info("JWT auth ENABLED: every route but the public ones needs a bearer token",
			"algorithms", strings.Join(b.auth.Algorithms(), "|"), "key_source", b.auth.KeySource(),
			"issuer", cfg.JWT.Issuer, "audience", cfg.JWT.Audience, "skip_paths", strings.Join(cfg.JWT.SkipPaths, ","))
	} else {
		log.Info("authentication is OFF: every route is open to anyone who can reach the port (set JWT_ENABLED=true to require tokens)")
	}
	if cfg.TenancyHeader {
		log.Warn("QUEEN_TENANCY_HEADER on, native tenant scoping ENABLED: the x-queen-tenant header is honoured and must only be set by a trusted gateway (it is not a credential)")
	}

	b.http = queenhttp.New(queenhttp.Deps{
		Config: cfg, Store: b.store, Actors: b.actors, Ack: b.ack, Log: log, Version: Version, Telemetry: b.obs.tel,
		Maintenance: ctl.maint, Control: ctl, Auth: b.auth,
		PayloadKey: b.sealKey, EncryptedQueues: b.encQueues,
	})
	b.ln = opts.Listener
	err = b.listenMetrics()
	if err == nil && b.ln == nil {
		addr := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port))
		if b.ln, err = net.Listen("tcp", addr); err != nil {
			err = fmt.Errorf("cannot listen on %s: %w", addr, err)
			if b.metricsLn != nil {
				b.metricsLn.Close()
			}
		}
	}
	if err != nil {
		b.actors.Stop()
		b.push.Close()
		b.ack.Close()
		b.store.Close()
		return nil, err
	}
	b.obs.start(b.store, b.spool, ctl, b.actors)
	b.jobs = startJobs(b.store, cfg, log, opts.jobRuns)
	ctl.start()
	if cfg.PprofAddr != "" {
		b.pprof = startPprof(cfg.PprofAddr, log)
	}
	go b.serve("HTTP", b.ln, b.http.Serve)
	log.Info("http listening", "addr", b.ln.Addr().String(), "max_body_bytes", cfg.MaxBodyBytes)
	if b.metricsLn != nil {
		go b.serve("metrics", b.metricsLn, b.http.ServeMetrics)
		log.Info("metrics listening on their own address; /metrics and /metrics/prometheus are not served on the HTTP port",
			"addr", b.metricsLn.Addr().String())
	}
	return b, nil
}

// serve runs one listener until Shutdown, retrying the accept errors that pass. Serve returns
// an error only when the listener really failed: that is reported on Done, naming the listener.
func (b *Broker) serve(name string, ln net.Listener, serve func(net.Listener) error) {
	if err := serve(newRetryListener(ln, name, b.log)); err != nil {
		b.served <- fmt.Errorf("the %s listener on %s failed: %w", name, ln.Addr(), err)
	}
}

// startMesh links this broker to its peers when QUEEN_SYNC_ENABLED and QUEEN_MESH_PEERS say so.
func (b *Broker) startMesh(set *metrics.Set, ln net.Listener) error {
	cfg := b.cfg
	peers := otherPeers(cfg)
	if !cfg.MeshEnabled || len(peers) == 0 {
		b.log.Info("mesh off: single broker, wake-ups stay in process", "sync_enabled", cfg.MeshEnabled, "peers", len(peers))
		return nil
	}
	m, err := mesh.Start(mesh.Config{
		ServerID:   cfg.ServerID,
		ListenAddr: net.JoinHostPort(cfg.MeshBindAddr, strconv.Itoa(cfg.MeshPort)),
		Listener:   ln,
		Peers:      peers,
		Secret:     []byte(cfg.MeshSecret),
		Heartbeat:  cfg.MeshHeartbeat,
		DeadAfter:  cfg.MeshDeadAfter,
		Log:        b.log.With("subsystem", "mesh"),
		Metrics:    set,
	}, b.control)
	if err != nil {
		return fmt.Errorf("cannot start the mesh on port %d (QUEEN_MESH_PORT): %w", cfg.MeshPort, err)
	}
	b.control.mesh = m
	b.log.Info("mesh started", "addr", m.Addr(), "peers", peers, "authenticated", cfg.MeshSecret != "")
	return nil
}

// otherPeers drops this broker from the peer list, so every broker can share one list.
func otherPeers(cfg config.Config) []string {
	self := map[string]bool{}
	for _, h := range []string{cfg.AdvertiseHost, cfg.MeshBindAddr, "localhost", "127.0.0.1", "::1"} {
		self[net.JoinHostPort(h, strconv.Itoa(cfg.MeshPort))] = true
	}
	var out []string
	for _, p := range cfg.MeshPeers {
		if !self[p] {
			out = append(out, p)
		}
	}
	return out
}

// database starts the local PostgreSQL when PG_HOST is unset and returns how to reach the server.
func (b *Broker) database(ctx context.Context) (string, error) {
	c := b.cfg
	if c.PGHost != "" {
		b.log.Info("using PostgreSQL", "host", c.PGHost, "port", c.PGPort, "database", c.PGDB, "user", c.PGUser)
		var err error
		if b.pgTLSConf, err = b.pgTLS(); err != nil {
			return "", err
		}
		return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
			quote(c.PGHost), c.PGPort, quote(c.PGUser), quote(c.PGPassword), quote(c.PGDB)), nil
	}
	if c.PGUseSSL {
		b.log.Warn("PG_USE_SSL is ignored: PG_HOST is unset, and the local PostgreSQL is reached over a unix socket")
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

// Handler serves one HTTP request in process, as the listener would (the router fuzz test).
func (b *Broker) Handler() fasthttp.RequestHandler { return b.http.Handler() }

// Store exposes the broker's persistence (tests).
func (b *Broker) Store() *persistence.Store { return b.store }

// Done delivers the failure of a listener (HTTP or metrics): the broker no longer serves it.
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
	b.control.stop()
	if b.control.mesh != nil {
		b.control.mesh.Close()
	}
	b.actors.Stop()
	b.jobs.stop()
	b.obs.stop()
	b.stopEncryption()
	if cerr := b.spool.Close(); cerr != nil {
		b.log.Error("cannot close the spool", "err", cerr)
	}
	b.store.Close()
	b.stopDatabase()
	b.auth.Close()
	b.log.Info("broker stopped")
	return err
}

func (b *Broker) stopDatabase() {
	if b.localPG != nil {
		if err := b.localPG.Stop(); err != nil {
			b.log.Error("cannot stop the local PostgreSQL", "err", err)
		}
		b.localPG = nil
	}
}
