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
	"queen/routes"
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
	handlers := s.mainHandlers()
	for _, rt := range routes.Table {
		key := rt.Method + " " + rt.Path
		h, ok := handlers[key]
		if !ok {
			panic("http: route " + key + " of the route table has no handler")
		}
		delete(handlers, key)
		// Every route passes the validation boundary (boundary.go); routeParams panics on a
		// path parameter the boundary has no rule for.
		r.Handle(rt.Method, rt.Path, s.guard(rt.Level, s.checkInput(routeParams(rt.Path), s.tenanted(answer(h)))))
	}
	for key := range handlers {
		panic("http: handler " + key + " is not in the route table (routes.Table)")
	}
	r.NotFound = s.guard(routes.UnknownLevel, s.notFound)
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

// handlers serve the routes of the route table (routes.Table, where each route's access level
// and class are declared), keyed by "METHOD path"; New refuses a route without a handler and a
// handler without a route.
func (s *Server) handlers() map[string]handler {
	return map[string]handler{
		"GET /health":                   s.health,
		"GET /status":                   s.status,
		"GET /metrics":                  s.metricsJSON,
		"GET /metrics/prometheus":       s.metricsPrometheus,
		"GET /":                         plain(dashboard.Index),
		"GET /assets/{file:*}":          plain(dashboard.Asset),
		"GET /favicon.ico":              plain(s.notFound),
		"GET /auth/me":                  s.authMe,
		"GET /auth/login":               s.authLogin,
		"POST /auth/logout":             s.authLogout,
		"POST /api/v1/configure":        s.configure,
		"POST /api/v1/push":             s.push,
		"GET /api/v1/pop":               s.popByNamespace,
		"GET /api/v1/pop/queue/{queue}": s.pop,
		"GET /api/v1/pop/queue/{queue}/partition/{partition}": s.pop,
		"POST /api/v1/ack":                                                                s.ack,
		"POST /api/v1/ack/batch":                                                          s.ackBatch,
		"POST /api/v1/transaction":                                                        s.transaction,
		"POST /api/v1/lease/{leaseId}/extend":                                             s.extendLease,
		"POST /api/v1/traces":                                                             s.recordTrace,
		"GET /api/v1/traces/names":                                                        s.traceNames,
		"GET /api/v1/traces/by-name/{traceName}":                                          s.tracesByName,
		"GET /api/v1/traces/{partitionId}/{transactionId}":                                s.messageTraces,
		"GET /api/v1/resources/queues":                                                    s.listQueues,
		"GET /api/v1/resources/queues/{queue}":                                            s.getQueue,
		"DELETE /api/v1/resources/queues/{queue}":                                         s.deleteQueue,
		"GET /api/v1/messages":                                                            s.listMessages,
		"GET /api/v1/messages/{partitionId}/{transactionId}":                              s.getMessage,
		"DELETE /api/v1/messages/{partitionId}/{transactionId}":                           s.deleteMessage,
		"GET /api/v1/dlq":                                                                 s.listDLQ,
		"POST /api/v1/dlq/{partitionId}/{transactionId}/replay":                           s.replayDLQ,
		"GET /api/v1/consumer-groups":                                                     s.listConsumerGroups,
		"GET /api/v1/consumer-groups/lagging":                                             s.laggingGroups,
		"GET /api/v1/consumer-groups/{group}":                                             s.getConsumerGroup,
		"DELETE /api/v1/consumer-groups/{group}":                                          s.deleteConsumerGroup,
		"POST /api/v1/consumer-groups/{group}/subscription":                               s.updateSubscription,
		"DELETE /api/v1/consumer-groups/{group}/queues/{queue}":                           s.deleteConsumerGroupQueue,
		"POST /api/v1/consumer-groups/{group}/queues/{queue}/seek":                        s.seekQueue,
		"POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek": s.seekPartition,
		"GET /api/v1/status":                                                              s.dashboardStatus,
		"GET /api/v1/status/queues":                                                       s.statusQueues,
		"GET /api/v1/status/queues/{queue}":                                               s.statusQueue,
		"GET /api/v1/status/queues/{queue}/messages":                                      s.statusQueueMessages,
		"GET /api/v1/status/analytics":                                                    s.statusAnalytics,
		"GET /api/v1/resources/overview":                                                  s.overview,
		"GET /api/v1/resources/namespaces":                                                s.namespaces,
		"GET /api/v1/resources/tasks":                                                     s.tasks,
		"GET /api/v1/analytics/queue-lag":                                                 s.queueLag,
		"GET /api/v1/analytics/queue-ops":                                                 s.queueOps,
		"GET /api/v1/analytics/queue-parked-replicas":                                     s.queueParkedReplicas,
		"GET /api/v1/analytics/retention":                                                 s.retention,
		"GET /api/v1/analytics/system-metrics":                                            s.systemMetrics,
		"GET /api/v1/analytics/worker-metrics":                                            s.workerMetrics,
		"GET /api/v1/analytics/postgres-stats":                                            s.postgresStats,
		"POST /api/v1/stats/refresh":                                                      s.refreshStats,
		"POST /streams/v1/queries":                                                        streamAnswer(s.registerStreamQuery),
		"DELETE /streams/v1/queries/{query}":                                              streamAnswer(s.deleteStreamQuery),
		"POST /streams/v1/cycle":                                                          streamAnswer(s.streamCycle),
		"POST /streams/v1/state/get":                                                      streamAnswer(s.streamState),
		"GET /api/v1/status/buffers":                                                      s.bufferStatus,
		"GET /api/v1/system/maintenance":                                                  s.getMaintenance,
		"POST /api/v1/system/maintenance":                                                 s.setMaintenance,
		"GET /api/v1/system/maintenance/pop":                                              s.getPopMaintenance,
		"POST /api/v1/system/maintenance/pop":                                             s.setPopMaintenance,
		"GET /api/v1/system/shared-state":                                                 s.sharedState,
		"GET /internal/api/shared-state/stats":                                            s.sharedState,
		"GET /internal/api/inter-instance/stats":                                          s.sharedState,
		"POST /internal/api/notify":                                                       s.notify,
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
