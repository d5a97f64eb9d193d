// Package server wires one broker: configuration, PostgreSQL (its own local one when PG_HOST is
// unset), migrations, the fused batchers, the actor system and the HTTP listener. cmd/queen runs
// one; the integration tests and the benchmark run several in one process.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"queen/spool"
	"queen/writer"
)

// Version is the broker version reported by /health.
const Version = "0.1.0"

// Broker is one running broker: its services, each started with what it depends on, in
// dependency order (Start), and stopped in the reverse order (Shutdown).
type Broker struct {
	cfg    config.Config
	log    *slog.Logger
	db     *database
	obs    *observability // metrics.go
	actors *actors.System
	jobs   *jobs
	front  *front
	// stops undoes what Start did, last started first: the shutdown order is the start order
	// read backwards, and a failed Start undoes what it had started the same way.
	stops []stop

	shutdownOnce sync.Once
	shutdownErr  error
}

// stop ends one service; name says which, in a failed shutdown's error.
type stop struct {
	name string
	fn   func(ctx context.Context) error
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

// onStop registers how to stop what was just started.
func (b *Broker) onStop(name string, fn func(ctx context.Context) error) {
	b.stops = append(b.stops, stop{name, fn})
}

// quietly adapts a stop that cannot fail.
func quietly(fn func()) func(context.Context) error {
	return func(context.Context) error { fn(); return nil }
}

// Start boots a broker and starts serving HTTP. On error everything already started is stopped.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger, opts Options) (_ *Broker, err error) {
	b := &Broker{log: log}
	defer func() {
		if err != nil {
			b.stopAll(context.Background())
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
	obs := newObservability(cfg, log)
	b.obs = obs

	// JWT first: a bad key or an unreachable JWKS stops the boot before PostgreSQL is touched.
	var verifier *auth.Verifier
	if cfg.JWT.Enabled {
		if verifier, err = auth.New(ctx, cfg.JWT, log.With("subsystem", "auth")); err != nil {
			return nil, err
		}
		b.onStop("auth", quietly(verifier.Close))
	}
	if b.db, err = openDatabase(ctx, cfg, log, opts.ConnString); err != nil {
		return nil, err
	}
	b.onStop("database", quietly(b.db.close))
	// Counted from the first transaction on: the loops started below use the store at once.
	b.db.store.OnError(obs.tel.DBError)
	store := b.db.store
	enc, err := startEncryption(ctx, cfg, store, log)
	if err != nil {
		return nil, err
	}
	b.onStop("encryption", quietly(enc.close))

	// A push spooled during a drain waits for it at most as long as a push waits for
	// PostgreSQL before it is spooled.
	sp, err := spool.Open(spool.Options{Dir: cfg.SpoolDir, MaxBytes: cfg.SpoolMaxBytes, PaceWait: cfg.SpoolAfter,
		Log: log.With("subsystem", "spool")})
	if err != nil {
		return nil, fmt.Errorf("cannot open the spool in FILE_BUFFER_DIR %s: %w", cfg.SpoolDir, err)
	}
	b.onStop("spool", func(context.Context) error { return sp.Close() })
	st := sp.Stats()
	log.Info("spool ready", "dir", cfg.SpoolDir, "pending_records", st.Records, "failed_records", st.Failed,
		"max_bytes", cfg.SpoolMaxBytes)

	b.jobs = startJobs(store, cfg, log, opts.jobRuns)
	b.onStop("jobs", quietly(b.jobs.stop))

	set := obs.tel.Set
	push := fusion.NewLanes(fusion.Options{MaxItems: cfg.PushMaxBatch, InFlight: cfg.PushLanes, Metrics: set, Op: "push"},
		store.Push, persistence.IsUnavailable, persistence.PushLaneKey)
	ack := fusion.New(fusion.Options{MaxItems: cfg.AckMaxBatch, InFlight: cfg.AckInFlight, Metrics: set, Op: "ack"},
		store.Ack, persistence.IsUnavailable)
	b.onStop("fusion", quietly(func() { push.Close(); ack.Close() }))

	flags := &actors.Maintenance{}
	if err = loadFlags(ctx, store, flags); err != nil {
		return nil, err
	}
	log.Info("maintenance flags loaded", "push", flags.Push(), "pop", flags.Pop())
	healthy := &atomic.Bool{}
	healthy.Store(true)
	orphans := newOrphanLeases(log, store, cfg.SpoolFlush)
	orphans.start()
	b.onStop("orphan leases", quietly(orphans.stop))

	m, err := b.newMesh(set, opts.MeshListener)
	if err != nil {
		return nil, err
	}
	var link peers = noPeers{}
	if m != nil {
		link = m
		b.onStop("mesh", quietly(m.Close))
	}

	b.actors = actors.Start(&actors.Deps{
		Metrics:     set,
		Store:       store,
		Push:        push,
		Spool:       sp,
		SpoolAfter:  cfg.SpoolAfter,
		Maintenance: flags,
		DBHealthy:   healthy,
		OrphanLease: orphans.add,
		OnPushed: func(queue persistence.QueueName, partitions []string) {
			link.MessageAvailable(queue.Stored(), partitions)
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
	b.onStop("actors", quietly(b.actors.Stop))

	notify := func(queue persistence.QueueName, partitions []string) {
		b.actors.Wake(queue, partitions)
		link.MessageAvailable(queue.Stored(), partitions)
	}
	dr := newDrain(cfg, log, store, sp, flags, healthy, notify)
	dr.start()
	b.onStop("spool drain", quietly(dr.stop))
	maint := newMaintenance(log, store, flags, b.actors, link, dr.resume, cfg.FlagsRefresh)
	maint.start()
	b.onStop("maintenance", quietly(maint.stop))
	if m != nil {
		m.Accept(&meshInbox{actors: b.actors, maint: maint, encrypted: enc.queues})
	}

	obs.start(store, sp, flags, healthy, b.actors)
	b.onStop("metrics", quietly(obs.stop))
	logSecurity(cfg, verifier, log)
	w := writer.New(writer.Deps{
		Store: store, Actors: b.actors, Maintenance: flags, Telemetry: obs.tel, Wake: notify,
		PayloadKey: enc.key, EncryptedQueues: enc.queues, PushDeadline: cfg.RequestDeadline + cfg.SpoolAfter, Log: log,
	})
	handler := queenhttp.New(queenhttp.Deps{
		Config: cfg, Store: store, Actors: b.actors, Ack: ack, Log: log, Version: Version, Telemetry: obs.tel,
		Maintenance: flags, Auth: verifier, Writer: w, PayloadKey: enc.key, EncryptedQueues: enc.queues,
		Control: &operations{cfg: cfg, maint: maint, drain: dr, actors: b.actors, peers: link, mesh: m, obs: obs},
	})
	if b.front, err = startFront(cfg, log, handler, opts.Listener); err != nil {
		return nil, err
	}
	// Parked long-polls are answered first, so that the open requests the HTTP server waits
	// for end at once.
	b.onStop("http", func(ctx context.Context) error { b.actors.Drain(); return b.front.stop(ctx) })
	if cfg.PprofAddr != "" {
		pprof := startPprof(cfg.PprofAddr, log)
		b.onStop("pprof", func(context.Context) error { return pprof.Close() })
	}
	return b, nil
}

// newMesh binds the mesh when QUEEN_SYNC_ENABLED and QUEEN_MESH_PEERS say this broker has
// peers; nil when it has none.
func (b *Broker) newMesh(set *metrics.Set, ln net.Listener) (*mesh.Mesh, error) {
	cfg := b.cfg
	peers := otherPeers(cfg)
	if !cfg.MeshEnabled || len(peers) == 0 {
		b.log.Info("mesh off: single broker, wake-ups stay in process", "sync_enabled", cfg.MeshEnabled, "peers", len(peers))
		return nil, nil
	}
	m, err := mesh.New(mesh.Config{
		ServerID:   cfg.ServerID,
		ListenAddr: net.JoinHostPort(cfg.MeshBindAddr, strconv.Itoa(cfg.MeshPort)),
		Listener:   ln,
		Peers:      peers,
		Secret:     []byte(cfg.MeshSecret),
		Heartbeat:  cfg.MeshHeartbeat,
		DeadAfter:  cfg.MeshDeadAfter,
		Log:        b.log.With("subsystem", "mesh"),
		Metrics:    set,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot start the mesh on port %d (QUEEN_MESH_PORT): %w", cfg.MeshPort, err)
	}
	return m, nil
}

// logSecurity says at boot who may call the API.
func logSecurity(cfg config.Config, v *auth.Verifier, log *slog.Logger) {
	if v != nil {
		log.Info("JWT auth ENABLED: every route but the public ones needs a bearer token",
			"algorithms", strings.Join(v.Algorithms(), "|"), "key_source", v.KeySource(),
			"issuer", cfg.JWT.Issuer, "audience", cfg.JWT.Audience, "skip_paths", strings.Join(cfg.JWT.SkipPaths, ","))
	} else {
		log.Info("authentication is OFF: every route is open to anyone who can reach the port (set JWT_ENABLED=true to require tokens)")
	}
	if cfg.TenancyHeader {
		log.Warn("QUEEN_TENANCY_HEADER on, native tenant scoping ENABLED: the x-queen-tenant header is honoured and must only be set by a trusted gateway (it is not a credential)")
	}
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

// Addr is the HTTP listener's address.
func (b *Broker) Addr() string { return b.front.ln.Addr().String() }

// MetricsAddr is the metrics listener's address, "" when metrics share the HTTP listener.
func (b *Broker) MetricsAddr() string {
	if b.front.metricsLn == nil {
		return ""
	}
	return b.front.metricsLn.Addr().String()
}

// Handler serves one HTTP request in process, as the listener would (the router fuzz test).
func (b *Broker) Handler() fasthttp.RequestHandler { return b.front.http.Handler() }

// Store exposes the broker's persistence (tests).
func (b *Broker) Store() *persistence.Store { return b.db.store }

// Done delivers the failure of a listener (HTTP or metrics): the broker no longer serves it.
func (b *Broker) Done() <-chan error { return b.front.failed }

// Shutdown stops the services in the reverse of their start order, which loses nothing: the
// parked long-polls are answered and the HTTP server lets open requests finish, the maintenance
// and drain loops end, the actors stop, the mesh closes, the batchers commit what they hold,
// the jobs end, the spool closes, and last the pool and the local PostgreSQL. Calling it again
// returns the first call's result.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.shutdownOnce.Do(func() {
		b.shutdownErr = b.stopAll(ctx)
		b.log.Info("broker stopped")
	})
	return b.shutdownErr
}

// stopAll runs the registered stops, last registered first, and returns the first failure.
func (b *Broker) stopAll(ctx context.Context) error {
	var first error
	for i := len(b.stops) - 1; i >= 0; i-- {
		s := b.stops[i]
		if err := s.fn(ctx); err != nil {
			b.log.Error("cannot stop "+s.name, "err", err)
			if first == nil {
				first = fmt.Errorf("cannot stop %s: %w", s.name, err)
			}
		}
	}
	b.stops = nil
	return first
}
