package http

import (
	"bytes"
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"queen/telemetry"
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
func (s *Server) health(ctx *fasthttp.RequestCtx) error {
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h := healthJSON{Database: "connected", Server: "Queen Go broker", ServerID: s.Config.ServerID, Status: "healthy", Version: s.Version}
	status := fasthttp.StatusOK
	if err := s.Store.Ping(c); err != nil {
		h.Database, h.Status, status = "disconnected", "unhealthy", fasthttp.StatusServiceUnavailable
	}
	writeJSON(ctx, status, h)
	return nil
}

// statusJSON is the answer of GET /status.
type statusJSON struct {
	Server   string  `json:"server"`
	ServerID string  `json:"server_id"`
	Status   string  `json:"status"`
	Uptime   float64 `json:"uptime"`
	Version  string  `json:"version"`
}

// status is the liveness probe: it answers from the process alone, never asking PostgreSQL,
// so an outage of the database (which the spool rides out) does not get the broker
// restarted. /health is the readiness probe.
func (s *Server) status(ctx *fasthttp.RequestCtx) error {
	writeJSON(ctx, fasthttp.StatusOK, statusJSON{
		Server: "Queen Go broker", ServerID: s.Config.ServerID, Status: "ok",
		Uptime: s.Telemetry.Uptime().Seconds(), Version: s.Version,
	})
	return nil
}

// countJSON is a count since the start and its rate per second over the last rates window.
type countJSON struct {
	Total int64   `json:"total"`
	Rate  float64 `json:"rate"`
}

// metricsJSONBody is GET /metrics, in the reference broker's shape (Node's process figures:
// external and arrayBuffers have no Go counterpart and stay 0).
type metricsJSONBody struct {
	Uptime   float64   `json:"uptime"`
	Requests countJSON `json:"requests"`
	Messages countJSON `json:"messages"`
	// MessagesByOperation splits Messages into pushed, popped and acknowledged (an addition
	// to the reference, docs/compat.md: the dashboard charts them).
	MessagesByOperation struct {
		Push countJSON `json:"push"`
		Pop  countJSON `json:"pop"`
		Ack  countJSON `json:"ack"`
	} `json:"messagesByOperation"`
	Database struct {
		PoolSize        int32 `json:"poolSize"`
		IdleConnections int32 `json:"idleConnections"`
		// WaitingRequests is the mean number of callers that waited for a connection over
		// the last rates window.
		WaitingRequests float64 `json:"waitingRequests"`
	} `json:"database"`
	Memory struct {
		RSS          int64  `json:"rss"`
		HeapTotal    uint64 `json:"heapTotal"`
		HeapUsed     uint64 `json:"heapUsed"`
		External     int    `json:"external"`
		ArrayBuffers int    `json:"arrayBuffers"`
	} `json:"memory"`
	CPU struct {
		User   int64 `json:"user"`   // microseconds
		System int64 `json:"system"` // microseconds
	} `json:"cpu"`
}

// metricsJSON is the JSON summary the SDKs call; Prometheus gets the full set.
func (s *Server) metricsJSON(ctx *fasthttp.RequestCtx) error {
	t := s.Telemetry
	rates := t.Rates()
	var m metricsJSONBody
	m.Uptime = t.Uptime().Seconds()
	m.Requests = countJSON{Total: t.RequestsTotal(), Rate: rates.Requests()}
	m.Messages = countJSON{Total: t.MessagesTotal(), Rate: rates.Messages()}
	totals, ops := t.Totals(), &m.MessagesByOperation
	ops.Push = countJSON{Total: totals["push_messages"], Rate: rates.PerSecond["push_messages"]}
	ops.Pop = countJSON{Total: totals["pop_messages"], Rate: rates.PerSecond["pop_messages"]}
	ops.Ack = countJSON{Total: totals["ack_messages"], Rate: rates.PerSecond["ack_messages"]}
	st := s.Store.PoolStats()
	m.Database.PoolSize, m.Database.IdleConnections, m.Database.WaitingRequests = st.Max, st.Idle, rates.PoolWaiting
	p := telemetry.ReadProcess()
	m.Memory.RSS, m.Memory.HeapTotal, m.Memory.HeapUsed = p.RSS, p.HeapTotal, p.HeapUsed
	m.CPU.User, m.CPU.System = p.CPUUser.Microseconds(), p.CPUSystem.Microseconds()
	writeJSON(ctx, fasthttp.StatusOK, m)
	return nil
}

// metricsPrometheus writes the page into a buffer of its own, handed to fasthttp without a
// copy: written into the response, it would stay in the connection's response buffer (MB with
// thousands of queues) for as long as the scraper keeps the connection.
func (s *Server) metricsPrometheus(ctx *fasthttp.RequestCtx) error {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	var page bytes.Buffer
	s.Telemetry.WritePrometheus(&page)
	ctx.Response.SetBodyRaw(page.Bytes())
	return nil
}
