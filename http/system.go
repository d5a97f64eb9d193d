package http

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

type healthJSON struct {
	Database string `json:"database"`
	Server   string `json:"server"`
	ServerID string `json:"server_id"`
	Status   string `json:"status"`
	Version  string `json:"version"`
	WorkerID int    `json:"worker_id"`
}

// health answers 200 when PostgreSQL answers a query within a second, 503 otherwise.
func (s *Server) health(ctx *fasthttp.RequestCtx) {
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h := healthJSON{Database: "connected", Server: "Queen Go broker", ServerID: s.Config.ServerID, Status: "healthy", Version: s.Version}
	status := fasthttp.StatusOK
	if err := s.Store.Ping(c); err != nil {
		h.Database, h.Status, status = "disconnected", "unhealthy", fasthttp.StatusServiceUnavailable
	}
	writeJSON(ctx, status, h)
}

type metricsJSONBody struct {
	Database struct {
		IdleConnections int32 `json:"idleConnections"`
		PoolSize        int32 `json:"poolSize"`
		WaitingRequests int64 `json:"waitingRequests"`
	} `json:"database"`
	Uptime float64 `json:"uptime"`
}

var started = time.Now()

// metricsJSON is the small JSON summary the SDKs call; Prometheus gets the full set.
func (s *Server) metricsJSON(ctx *fasthttp.RequestCtx) {
	var m metricsJSONBody
	st := s.Store.PoolStats()
	m.Database.IdleConnections = st.Idle
	m.Database.PoolSize = st.Max
	m.Database.WaitingRequests = st.EmptyAcquires
	m.Uptime = time.Since(started).Seconds()
	writeJSON(ctx, fasthttp.StatusOK, m)
}

func (s *Server) metricsPrometheus(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	metrics.WriteProcessMetrics(ctx)
	s.Metrics.WritePrometheus(ctx)
}
