package http

import (
	"context"
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"queen/persistence"
	"queen/spool"
)

// Control is what the operations routes read and change; the server implements it.
type Control interface {
	// SetMaintenance and SetPopMaintenance flip a flag here, store it in queen.system_state
	// and tell the mesh.
	SetMaintenance(ctx context.Context, on bool) error
	SetPopMaintenance(ctx context.Context, on bool) error
	// RefreshFlags re-reads both flags from queen.system_state (keeping the in-memory ones
	// when the database cannot answer).
	RefreshFlags(ctx context.Context)
	SpoolStats() spool.Stats
	DBHealthy() bool
	// SharedState is the body of the shared-state routes: server id, peers, frame counters.
	SharedState() any
	// Notify wakes parked pops of queue here and on the peers.
	Notify(queue persistence.QueueName, partitions []string)
	// AnnounceQueueChange tells the peers that queue was configured or deleted here, so they
	// re-read what they cache of it (which queues are encrypted).
	AnnounceQueueChange(queue persistence.QueueName, deleted bool)
	// RefreshStats flushes this broker's per-minute statistics now and says what it wrote.
	RefreshStats(ctx context.Context) (StatsRefresh, error)
}

// StatsRefresh is what a flush of the per-minute statistics wrote.
type StatsRefresh struct {
	Queues     int   // queues with counts to add
	Partitions int64 // their partitions
	Namespaces int   // their distinct namespaces and tasks
	Tasks      int
	Forgotten  int // queues counted in memory that no longer exist, forgotten
}

type failedFilesJSON struct {
	Count         int     `json:"count"`
	FailoverCount int     `json:"failoverCount"`
	Qos0Count     int     `json:"qos0Count"`
	TotalBytes    int64   `json:"totalBytes"`
	TotalMB       float64 `json:"totalMB"`
}

type bufferStatsJSON struct {
	DBHealthy    bool            `json:"dbHealthy"`
	FailedCount  int64           `json:"failedCount"`
	FailedFiles  failedFilesJSON `json:"failedFiles"`
	PendingCount int64           `json:"pendingCount"`
}

type maintenanceJSON struct {
	BufferHealthy      bool             `json:"bufferHealthy"`
	BufferStats        *bufferStatsJSON `json:"bufferStats,omitempty"`
	BufferedMessages   int64            `json:"bufferedMessages"`
	MaintenanceMode    bool             `json:"maintenanceMode"`
	Message            string           `json:"message,omitempty"`
	PopMaintenanceMode *bool            `json:"popMaintenanceMode,omitempty"`
}

func (s *Server) maintenanceBody() maintenanceJSON {
	st := s.Control.SpoolStats()
	pop := s.Maintenance.Pop()
	healthy := s.Control.DBHealthy()
	return maintenanceJSON{
		BufferHealthy:    healthy,
		BufferedMessages: st.Records,
		MaintenanceMode:  s.Maintenance.Push(),
		BufferStats: &bufferStatsJSON{
			DBHealthy: healthy, FailedCount: st.Failed, PendingCount: st.Records,
			FailedFiles: failedFilesJSON{
				Count: st.Segments, FailoverCount: st.Segments, TotalBytes: st.Bytes,
				TotalMB: float64(st.Bytes) / (1 << 20),
			},
		},
		PopMaintenanceMode: &pop,
	}
}

// getMaintenance reads the flags fresh from the database, so it answers for the cluster.
func (s *Server) getMaintenance(ctx *fasthttp.RequestCtx) error {
	c, cancel := s.dbContext()
	defer cancel()
	s.Control.RefreshFlags(c)
	writeJSON(ctx, fasthttp.StatusOK, s.maintenanceBody())
	return nil
}

// enabledBody decodes {"enabled": bool}.
func enabledBody(body []byte) (bool, error) {
	var req struct {
		Enabled json.RawMessage `json:"enabled"`
	}
	if err := parseBody(body, &req); err != nil {
		return false, err
	}
	switch string(req.Enabled) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badf("enabled (boolean) is required")
}

// setFlag decodes {"enabled": bool} and applies it with set; on failure it has answered.
func (s *Server) setFlag(ctx *fasthttp.RequestCtx, set func(context.Context, bool) error) (bool, error) {
	on, err := enabledBody(ctx.PostBody())
	if err != nil {
		return false, err
	}
	c, cancel := s.dbContext()
	defer cancel()
	return on, set(c, on)
}

func (s *Server) setMaintenance(ctx *fasthttp.RequestCtx) error {
	on, err := s.setFlag(ctx, s.Control.SetMaintenance)
	if err != nil {
		return err
	}
	body := s.maintenanceBody()
	body.BufferStats, body.PopMaintenanceMode = nil, nil
	body.Message = "Maintenance mode DISABLED. Background processor will drain buffer to DB."
	if on {
		body.Message = "Maintenance mode ENABLED. All PUSHes routing to file buffer."
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
	return nil
}

type popMaintenanceJSON struct {
	Message            string `json:"message"`
	PopMaintenanceMode bool   `json:"popMaintenanceMode"`
}

func popMaintenanceMessage(on bool) string {
	if on {
		return "Pop maintenance mode ENABLED. All POP operations will return empty arrays."
	}
	return "Pop maintenance mode is OFF. Normal operation."
}

func (s *Server) getPopMaintenance(ctx *fasthttp.RequestCtx) error {
	on := s.Maintenance.Pop()
	writeJSON(ctx, fasthttp.StatusOK, popMaintenanceJSON{Message: popMaintenanceMessage(on), PopMaintenanceMode: on})
	return nil
}

func (s *Server) setPopMaintenance(ctx *fasthttp.RequestCtx) error {
	on, err := s.setFlag(ctx, s.Control.SetPopMaintenance)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, popMaintenanceJSON{Message: popMaintenanceMessage(on), PopMaintenanceMode: on})
	return nil
}

type bufferStatusJSON struct {
	Bytes            int64   `json:"bytes"`
	DBHealthy        bool    `json:"dbHealthy"`
	Failed           int64   `json:"failed"`
	Files            int     `json:"files"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	Pending          int64   `json:"pending"`
	Worker           int     `json:"worker"`
}

// bufferStatus reports the disk spool: pending files, records and bytes, the age of the oldest
// record, records refused for good, and whether PostgreSQL takes pushes.
func (s *Server) bufferStatus(ctx *fasthttp.RequestCtx) error {
	st := s.Control.SpoolStats()
	out := bufferStatusJSON{
		Bytes: st.Bytes, DBHealthy: s.Control.DBHealthy(), Failed: st.Failed, Files: st.Segments, Pending: st.Records,
	}
	if !st.Oldest.IsZero() {
		out.OldestAgeSeconds = time.Since(st.Oldest).Seconds()
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

func (s *Server) sharedState(ctx *fasthttp.RequestCtx) error {
	writeJSON(ctx, fasthttp.StatusOK, s.Control.SharedState())
	return nil
}

// notify serves POST /internal/api/notify {queue, partition?}: the wake-up a push sends.
func (s *Server) notify(ctx *fasthttp.RequestCtx) error {
	var req struct {
		Queue     json.RawMessage `json:"queue"`
		Partition json.RawMessage `json:"partition"`
	}
	if err := parseBody(ctx.PostBody(), &req); err != nil {
		return err
	}
	name, err := nameField(req.Queue, "queue")
	var queue persistence.QueueName
	if err == nil {
		queue, err = queueName(s.scope(ctx), name, "queue")
	}
	if err != nil {
		return err
	}
	partition, err := stringField(req.Partition, "partition", "")
	if err != nil {
		return err
	}
	var parts []string
	if partition != "" {
		parts = []string{partition}
	}
	s.Control.Notify(queue, parts)
	writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ok"})
	return nil
}
