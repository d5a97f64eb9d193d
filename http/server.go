// Package http is the broker's HTTP front end: fasthttp with fasthttp/router. Handlers decode and
// validate at the edge, copy what they need out of the fasthttp.RequestCtx (its buffers are
// reused once the handler returns), hand the work to a queue actor or a persistence batcher,
// wait for the answer with a deadline, and encode the reply in the reference broker's shapes.
package http

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"queen/actors"
	"queen/auth"
	"queen/config"
	"queen/dashboard"
	"queen/fusion"
	"queen/httpkit"
	"queen/persistence"
	"queen/seal"
	"queen/telemetry"
	"queen/writer"
)

// Deps is what the handlers use.
type Deps struct {
	Config  config.Config
	Store   *persistence.Store
	Actors  *actors.System
	Ack     *fusion.Batcher[fusion.Job[persistence.AckItem, persistence.AckResult]]
	Log     *slog.Logger
	Version string
	// Telemetry counts the requests and writes the metrics pages (several brokers can share
	// a process in tests: each has its own).
	Telemetry *telemetry.Broker

	Maintenance *actors.Maintenance
	Control     Control
	// Auth verifies bearer tokens; nil when JWT_ENABLED=false (every route is open).
	Auth *auth.Verifier

	// Writer stores messages and rewinds cursors: every write route calls it.
	Writer *writer.Writer
	// PayloadKey opens sealed payloads on reads; nil without QUEEN_ENCRYPTION_KEY.
	PayloadKey *seal.Key
	// EncryptedQueues says which queues are configured with encryptionEnabled; configure
	// and delete keep it current.
	EncryptedQueues *writer.EncryptedQueues
}

// Server serves the Queen HTTP API.
type Server struct {
	Deps
	srv *fasthttp.Server
	// metrics serves /metrics and /metrics/prometheus on QUEEN_METRICS_BIND_ADDR (security.go).
	metrics     *fasthttp.Server
	metricsOnce sync.Once
}

// Access levels of the routes, enforced by guard when JWT is on (see docs/security.md).
const (
	public    = auth.Public
	readOnly  = auth.ReadOnly
	writeOnly = auth.WriteOnly
	readWrite = auth.ReadWrite
	admin     = auth.Admin
)

// route is one entry of the route table: every route the broker serves, with its access level.
type route struct {
	method, path string
	level        auth.Level
	handle       handler
}

// handler serves a route: it decodes, calls, and writes the answer; an error it returns is
// answered by writeError, the one place that maps errors to statuses.
type handler func(*fasthttp.RequestCtx) error

// answer is the fasthttp handler of h.
func answer(h handler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if err := h(ctx); err != nil {
			writeError(ctx, err)
		}
	}
}

// plain is a handler that answers everything itself (the dashboard's files).
func plain(h fasthttp.RequestHandler) handler {
	return func(ctx *fasthttp.RequestCtx) error {
		h(ctx)
		return nil
	}
}

// RouteInfo is a route of the table without its handler.
type RouteInfo struct {
	Method, Path string
	Level        auth.Level
}

// Routes lists the route table (the tests walk it, so a new route is covered by the access
// tests without editing them). Anything that matches no route is read-write.
func Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range (&Server{}).routes() {
		out = append(out, RouteInfo{Method: rt.method, Path: rt.path, Level: rt.level})
	}
	return out
}

// UnknownRouteLevel is the level of a request that matches no route.
const UnknownRouteLevel = readWrite

// Deadlines of the HTTP connections (docs/operations.md).
const (
	// headerTimeout bounds how long a client takes to send its request headers, counted from
	// the accept on a new connection.
	headerTimeout = 10 * time.Second
	// bodyTimeout bounds the reading of a request body, counted from the end of its headers
	// (a QUEEN_MAX_BODY_BYTES body of 64 MiB needs about 0.5 MB/s).
	bodyTimeout = 2 * time.Minute
	// keepAliveTimeout closes a keep-alive connection that has been idle between requests
	// this long.
	keepAliveTimeout = time.Minute
)

// New builds the server and its route table.
func New(d Deps) *Server {
	s := &Server{Deps: d}
	r := router.New()
	r.HandleMethodNotAllowed = false // a known path with another method is an unknown route
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	for _, rt := range s.mainRoutes() {
		// Every route passes the validation boundary (boundary.go); routeParams panics on a
		// path parameter the boundary has no rule for.
		r.Handle(rt.method, rt.path, s.guard(rt.level, s.checkInput(routeParams(rt.path), s.tenanted(answer(rt.handle)))))
	}
	r.NotFound = s.guard(UnknownRouteLevel, s.notFound)
	r.GlobalOPTIONS = preflight
	s.srv = &fasthttp.Server{
		Handler: s.withRequest(func(ctx *fasthttp.RequestCtx) {
			if s.originAllowed(ctx) {
				r.Handler(ctx)
			}
		}),
		Name:               "queen",
		MaxRequestBodySize: d.Config.MaxBodyBytes,
		// Over the cap fasthttp answers a new connection 503 and closes it at once, so idle
		// connections cannot take the descriptors PostgreSQL, the spool and the mesh need
		// (server/listener.go fits the cap under RLIMIT_NOFILE). The cap is here rather than
		// in the listener: fasthttp counts the connections it serves exactly, and the client
		// is told why.
		Concurrency: d.Config.MaxConnections,
		// ReadTimeout runs from a new connection's accept, or from the first byte of a
		// keep-alive connection's next request, to the end of the request headers; then
		// HeaderReceived gives the body a budget of its own, so a large body on a slow link
		// is not cut while a client that sends nothing is dropped soon.
		ReadTimeout: headerTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: bodyTimeout}
		},
		IdleTimeout:                   keepAliveTimeout,
		DisableHeaderNamesNormalizing: false,
		ErrorHandler:                  requestError,
		Logger:                        httpkit.Logger{Log: d.Log},
		CloseOnShutdown:               true,
	}
	return s
}

// routes is the route table.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/health", public, s.health},
		{"GET", "/status", public, s.status},
		{"GET", "/metrics", public, s.metricsJSON},
		{"GET", "/metrics/prometheus", public, s.metricsPrometheus},

		// The dashboard shell and the identity routes it boots with.
		{"GET", "/", public, plain(dashboard.Index)},
		{"GET", "/assets/{file:*}", public, plain(dashboard.Asset)},
		{"GET", "/favicon.ico", public, plain(s.notFound)},
		{"GET", "/auth/me", public, s.authMe},
		{"GET", "/auth/login", public, s.authLogin},
		{"POST", "/auth/logout", public, s.authLogout},

		{"POST", "/api/v1/configure", readWrite, s.configure},
		{"POST", "/api/v1/push", writeOnly, s.push},
		{"GET", "/api/v1/pop", readWrite, s.popByNamespace},
		{"GET", "/api/v1/pop/queue/{queue}", readWrite, s.pop},
		{"GET", "/api/v1/pop/queue/{queue}/partition/{partition}", readWrite, s.pop},
		{"POST", "/api/v1/ack", readWrite, s.ack},
		{"POST", "/api/v1/ack/batch", readWrite, s.ackBatch},
		{"POST", "/api/v1/transaction", readWrite, s.transaction},
		{"POST", "/api/v1/lease/{leaseId}/extend", readWrite, s.extendLease},

		{"POST", "/api/v1/traces", readWrite, s.recordTrace},
		{"GET", "/api/v1/traces/names", readOnly, s.traceNames},
		{"GET", "/api/v1/traces/by-name/{traceName}", readOnly, s.tracesByName},
		{"GET", "/api/v1/traces/{partitionId}/{transactionId}", readOnly, s.messageTraces},

		{"GET", "/api/v1/resources/queues", readOnly, s.listQueues},
		{"GET", "/api/v1/resources/queues/{queue}", readOnly, s.getQueue},
		{"DELETE", "/api/v1/resources/queues/{queue}", admin, s.deleteQueue},
		{"GET", "/api/v1/messages", readOnly, s.listMessages},
		{"GET", "/api/v1/messages/{partitionId}/{transactionId}", readOnly, s.getMessage},
		{"DELETE", "/api/v1/messages/{partitionId}/{transactionId}", readWrite, s.deleteMessage},
		{"GET", "/api/v1/dlq", readOnly, s.listDLQ},
		{"POST", "/api/v1/dlq/{partitionId}/{transactionId}/replay", admin, s.replayDLQ},

		{"GET", "/api/v1/consumer-groups", readOnly, s.listConsumerGroups},
		{"GET", "/api/v1/consumer-groups/lagging", readOnly, s.laggingGroups},
		{"GET", "/api/v1/consumer-groups/{group}", readOnly, s.getConsumerGroup},
		{"DELETE", "/api/v1/consumer-groups/{group}", admin, s.deleteConsumerGroup},
		{"POST", "/api/v1/consumer-groups/{group}/subscription", readWrite, s.updateSubscription},
		{"DELETE", "/api/v1/consumer-groups/{group}/queues/{queue}", admin, s.deleteConsumerGroupQueue},
		{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", readWrite, s.seekQueue},
		{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", readWrite, s.seekPartition},

		// The dashboard's status and analytics, from the per-minute statistics (status.go,
		// analytics.go).
		{"GET", "/api/v1/status", readOnly, s.dashboardStatus},
		{"GET", "/api/v1/status/queues", readOnly, s.statusQueues},
		{"GET", "/api/v1/status/queues/{queue}", readOnly, s.statusQueue},
		{"GET", "/api/v1/status/queues/{queue}/messages", readOnly, s.statusQueueMessages},
		{"GET", "/api/v1/status/analytics", readOnly, s.statusAnalytics},
		{"GET", "/api/v1/resources/overview", readOnly, s.overview},
		{"GET", "/api/v1/resources/namespaces", readOnly, s.namespaces},
		{"GET", "/api/v1/resources/tasks", readOnly, s.tasks},
		{"GET", "/api/v1/analytics/queue-lag", readOnly, s.queueLag},
		{"GET", "/api/v1/analytics/queue-ops", readOnly, s.queueOps},
		{"GET", "/api/v1/analytics/queue-parked-replicas", readOnly, s.queueParkedReplicas},
		{"GET", "/api/v1/analytics/retention", readOnly, s.retention},
		{"GET", "/api/v1/analytics/system-metrics", readOnly, s.systemMetrics},
		{"GET", "/api/v1/analytics/worker-metrics", readOnly, s.workerMetrics},
		{"GET", "/api/v1/analytics/postgres-stats", readOnly, s.postgresStats},
		{"POST", "/api/v1/stats/refresh", admin, s.refreshStats},

		// The streaming SDKs' routes (streams.go).
		{"POST", "/streams/v1/queries", readWrite, streamAnswer(s.registerStreamQuery)},
		{"DELETE", "/streams/v1/queries/{query}", admin, streamAnswer(s.deleteStreamQuery)},
		{"POST", "/streams/v1/cycle", readWrite, streamAnswer(s.streamCycle)},
		{"POST", "/streams/v1/state/get", readOnly, streamAnswer(s.streamState)},

		{"GET", "/api/v1/status/buffers", readOnly, s.bufferStatus},
		{"GET", "/api/v1/system/maintenance", admin, s.getMaintenance},
		{"POST", "/api/v1/system/maintenance", admin, s.setMaintenance},
		{"GET", "/api/v1/system/maintenance/pop", admin, s.getPopMaintenance},
		{"POST", "/api/v1/system/maintenance/pop", admin, s.setPopMaintenance},
		{"GET", "/api/v1/system/shared-state", admin, s.sharedState},
		{"GET", "/internal/api/shared-state/stats", admin, s.sharedState},
		{"GET", "/internal/api/inter-instance/stats", admin, s.sharedState},
		{"POST", "/internal/api/notify", admin, s.notify},
	}
}

// Handler is the whole request pipeline (request id, origin check, routes, boundary), for
// serving requests in process (the router fuzz test).
func (s *Server) Handler() fasthttp.RequestHandler { return s.srv.Handler }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for open requests to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	if m := s.metricsServer(); m != nil {
		_ = m.ShutdownWithContext(ctx)
	}
	return s.srv.ShutdownWithContext(ctx)
}

// notFound answers unknown routes: JSON 404 for API paths and for any method but GET/HEAD,
// the dashboard shell for other GETs (client-side routes).
func (s *Server) notFound(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/auth/") || (!ctx.IsGet() && !ctx.IsHead()) {
		writeJSON(ctx, fasthttp.StatusNotFound, errorBody{Error: "Not Found", Code: "no_such_route"})
		return
	}
	dashboard.Index(ctx)
}

// requestError answers requests fasthttp could not parse: 413 for an oversized body, 408 for a
// request not received in time, a fixed 400 otherwise. fasthttp's error text quotes the raw
// request, headers included; echoing it would let a client pad its headers and read back what
// a gateway added (an Authorization).
func requestError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeJSON(ctx, fasthttp.StatusRequestEntityTooLarge, errorBody{Error: "request body exceeds QUEEN_MAX_BODY_BYTES"})
		return
	}
	if isTimeout(err) {
		writeJSON(ctx, fasthttp.StatusRequestTimeout, errorBody{Error: "request not received in time"})
		return
	}
	writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Error: "malformed HTTP request"})
}
