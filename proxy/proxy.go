// Package proxy is queen-proxy's serving side, the front door of a Queen deployment
// (docs/proxy.md): it terminates TLS, authenticates API keys and human sessions against the
// control-plane database (proxy/pxdb), classifies every path against a fail-closed route table
// (route.go), forwards what a credential may reach to its cell with the cell's own credentials
// and tenant, and records every mutating control-plane call in the append-only audit table.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/background"
	"queen/config"
	"queen/httpkit"
	"queen/proxy/pxdb"
)

// Proxy serves the front door.
type Proxy struct {
	cfg   config.Proxy
	store *pxdb.Store
	log   *slog.Logger

	cells    atomic.Pointer[cellSet]
	feed     *changeFeed
	keys     *feedCache[[32]byte, pxdb.Key]       // by the SHA-256 of the secret
	sessions *feedCache[uuid.UUID, sessionLookup] // by session id
	limits   *limiter
	metrics  *proxyMetrics
	tls      *certificate // nil without TLS
	srv      *fasthttp.Server
	loops    *background.Group
	// served is closed when the listener stops serving; serveErr says why, nil for Shutdown.
	served   chan struct{}
	serveErr error
}

// Start builds the proxy, starts its loops and serves ln (TLS when configured) until Shutdown.
// The cells are loaded and the certificate read first, so that a bad file stops the start
// before anything is served. The loops keep the cells and the key cache current: cells are
// re-read every QUEEN_PROXY_CELLS_REFRESH_MS, and a revocation anywhere (another proxy, the
// CLI) empties the key cache at once through PostgreSQL's LISTEN (keycache.go).
func Start(ctx context.Context, cfg config.Proxy, store *pxdb.Store, log *slog.Logger, ln net.Listener) (*Proxy, error) {
	p := &Proxy{cfg: cfg, store: store, log: log, feed: &changeFeed{store: store},
		loops: background.NewGroup(), served: make(chan struct{})}
	p.metrics = newProxyMetrics(p.feed.listening.Load)
	p.keys = newFeedCache[[32]byte, pxdb.Key](p.feed, maxCachedCredentials,
		p.metrics.lookup("api_key", "hit"), p.metrics.lookup("api_key", "miss"), p.metrics.lookup("api_key", "stale"))
	p.sessions = newFeedCache[uuid.UUID, sessionLookup](p.feed, maxCachedCredentials,
		p.metrics.lookup("session", "hit"), p.metrics.lookup("session", "miss"), p.metrics.lookup("session", "stale"))
	p.limits = newLimiter(cfg, store, p.metrics, log)
	if cfg.TLS() {
		c, err := loadCertificate(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, err
		}
		p.tls = c
	}
	if err := p.refreshCells(ctx); err != nil {
		return nil, err
	}
	p.srv = &fasthttp.Server{
		Handler:            p.handle,
		Name:               "queen-proxy",
		MaxRequestBodySize: cfg.MaxBodyBytes,
		ReadTimeout:        10 * time.Second,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: 2 * time.Minute}
		},
		IdleTimeout:     time.Minute,
		ErrorHandler:    requestError,
		CloseOnShutdown: true,
		Logger:          httpkit.Logger{Log: log},
	}
	refresh := func(ctx context.Context) {
		if err := p.refreshCells(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("cannot re-read the cells", "err", err)
		}
	}
	p.feed.subscribe(func() { refresh(context.Background()) })
	p.loops.Go(func(ctx context.Context) { p.feed.listen(ctx, p.log) })
	p.loops.Every(cfg.CellsRefresh, nil, refresh)
	p.loops.Every(usageSyncInterval, nil, p.limits.sync)
	p.loops.Every(time.Hour, nil, p.deleteExpired)
	go func() {
		p.serveErr = p.serve(ln)
		close(p.served)
	}()
	return p, nil
}

// serve accepts connections on ln until Shutdown.
func (p *Proxy) serve(ln net.Listener) error {
	if p.tls != nil {
		ln = p.tls.listener(ln)
		p.log.Info("TLS listener enabled", "addr", ln.Addr().String(), "min_version", "1.2")
	} else {
		p.log.Warn("TLS is OFF: serving plaintext HTTP (set QUEEN_PROXY_TLS_CERT and QUEEN_PROXY_TLS_KEY)", "addr", ln.Addr().String())
	}
	err := p.srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ReloadCertificate reads the certificate files again (SIGHUP). Connections already open keep
// theirs; new handshakes get the new one. On error the old one stays.
func (p *Proxy) ReloadCertificate() error {
	if p.tls == nil {
		return nil
	}
	return p.tls.reload()
}

// Done is closed once the listener stops serving, after Shutdown or on a failure of its own
// (which Shutdown then reports).
func (p *Proxy) Done() <-chan struct{} { return p.served }

// ChangeFeedUp reports whether the key cache is following the control plane's changes.
func (p *Proxy) ChangeFeedUp() bool { return p.feed.listening.Load() }

// maxCachedCredentials bounds each credential cache: past it, the cache starts over.
const maxCachedCredentials = 100000

// deleteExpired deletes the control plane's dead rows: sessions expired a day ago, sign-in
// failure windows that have passed.
func (p *Proxy) deleteExpired(ctx context.Context) {
	if _, err := p.store.DeleteExpiredSessions(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("cannot delete expired sessions", "err", err)
	}
	if err := p.store.DeleteOldSignInFailures(ctx, signInLimits.Window); err != nil && ctx.Err() == nil {
		p.log.Warn("cannot delete old sign-in failures", "err", err)
	}
}

// Shutdown stops accepting connections and waits for open requests, then stops the loops and
// waits for them, so the control-plane store can close under nothing.
func (p *Proxy) Shutdown(ctx context.Context) error {
	err := p.srv.ShutdownWithContext(ctx)
	p.loops.Stop()
	<-p.served
	return errors.Join(err, p.serveErr)
}

// handle is the whole request pipeline.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
	id := httpkit.NewRequestID()
	ctx.Response.Header.Set("X-Request-Id", id)
	// The request target as it arrived: route.go normalises it once, and that one form is
	// both classified and forwarded (fasthttp's own normalised ctx.Path() is not used).
	path, _, _ := strings.Cut(string(ctx.Request.Header.RequestURI()), "?")
	method := string(ctx.Method())
	class := "own"
	defer func() { p.metrics.request(class, ctx.Response.StatusCode()) }()
	if p.ownRoute(ctx, method, path, id) {
		return
	}
	rt := classify(method, path)
	class = string(rt.class)
	if rt.class == Blocked {
		writeJSON(ctx, fasthttp.StatusNotFound, answer{Code: "route_blocked", Error: "this path is not served by the proxy"})
		return
	}
	c := p.cellFor(ctx)
	if c == nil {
		writeJSON(ctx, fasthttp.StatusNotFound, answer{Code: "unknown_cell", Error: "no cell answers to this host name"})
		return
	}
	who, ok := p.authenticate(ctx, c, rt)
	if !ok {
		return
	}
	if who.key != nil && !p.limits.admit(ctx, who.key.ID) {
		return
	}
	status := p.forward(ctx, c, rt, id)
	if rt.mutating(method) {
		p.audit(pxdb.Operation{Who: who.name, Credential: who.credential, Cell: c.Name, Method: method,
			Path: rt.path, Class: string(rt.class), Status: status, RequestID: id})
	}
}

// mutating reports whether a request of this route changes the control plane: the queue
// admin and operator classes, anything but a read.
func (r route) mutating(method string) bool {
	return (r.class == QueueAdmin || r.class == Operator) && method != "GET" && method != "HEAD"
}

// audit appends an operation; a failure is logged with everything the row would have held.
func (p *Proxy) audit(op pxdb.Operation) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.store.Record(ctx, op); err != nil {
		p.log.Error("cannot record an operation in the audit table", "who", op.Who, "credential", op.Credential,
			"cell", op.Cell, "method", op.Method, "path", op.Path, "class", op.Class, "status", op.Status,
			"request_id", op.RequestID, "err", err)
	}
}

// grants reports whether classes (as stored) include c.
func grants(classes []string, c Class) bool { return slices.Contains(classes, string(c)) }
