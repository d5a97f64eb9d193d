package http

// The analytics routes (/api/v1/analytics/*) and what the status routes share with them: the
// time window, the reference's bucket widths, and the cluster-wide broker figures. The series
// come from the per-minute statistics every broker flushes (persistence/stats_read.go), summed
// over the brokers; the figures of queues are the caller's tenant's, those of brokers and of
// the database describe the whole cluster.

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"queen/persistence"
	"queen/stats"
)

// bucketTimeFormat renders the points of a series as the reference does: UTC, seconds, Z.
const bucketTimeFormat = "2006-01-02T15:04:05Z"

func bucketTime(t time.Time) string { return t.UTC().Format(bucketTimeFormat) }

// windowParams reads from and to (RFC 3339): to defaults to now, from to span before to.
func windowParams(args *fasthttp.Args, span time.Duration) (stats.Window, error) {
	var w stats.Window
	from, err := timeParam(args, "from")
	if err != nil {
		return w, err
	}
	to, err := timeParam(args, "to")
	if err != nil {
		return w, err
	}
	end := time.Now()
	if to != nil {
		end = *to
	}
	start := end.Add(-span)
	if from != nil {
		start = *from
	}
	if start.After(end) {
		return w, badf("from must not be after to")
	}
	return stats.NewWindow(start, end), nil
}

type timeRangeJSON struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func timeRange(w stats.Window) timeRangeJSON {
	return timeRangeJSON{From: msTime(w.From), To: msTime(w.To)}
}

// statsFilter is the selection of queues of a statistics route: the caller's tenant, and the
// queue, namespace and task parameters (empty matches any).
func (s *Server) statsFilter(ctx *fasthttp.RequestCtx, w stats.Window) (persistence.StatsFilter, error) {
	args := ctx.QueryArgs()
	scope := s.scope(ctx)
	f := persistence.StatsFilter{Scope: scope, Namespace: string(args.Peek("namespace")), Task: string(args.Peek("task")),
		From: w.From, To: w.To, Bucket: w.Width}
	if name := string(args.Peek("queue")); name != "" {
		q, err := queueName(scope, name, "queue")
		if err != nil {
			return f, err
		}
		f.Queue = q
	}
	return f, nil
}

// broker is one broker as the dashboard names it: hostname is its QUEEN_SERVER_ID, and it has
// one worker, 0.
type brokerJSON struct {
	Hostname string `json:"hostname"`
	WorkerID int    `json:"workerId"`
}

// workerParams reads the hostname (a QUEEN_SERVER_ID) and workerId filters; ok is false when
// workerId names a worker no broker has.
func workerParams(args *fasthttp.Args) (serverID string, ok bool, err error) {
	serverID = string(args.Peek("hostname"))
	if v := string(args.Peek("workerId")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", false, badf("workerId must be an integer")
		}
		return serverID, n == 0, nil
	}
	return serverID, true, nil
}

// recentWorkers reads the brokers' figures of the last span, by broker.
func (s *Server) recentWorkers(ctx *fasthttp.RequestCtx, span time.Duration, serverID string) ([]string, map[string]*stats.BrokerFigures, map[string]time.Time, error) {
	c, cancel := s.dbContext()
	defer cancel()
	now := time.Now()
	points, err := s.Store.BrokerSeries(c, now.Add(-span), now, time.Minute, serverID)
	if err != nil {
		return nil, nil, nil, err
	}
	ids, figures, seen := stats.ByBroker(points)
	return ids, figures, seen, nil
}

func floatPtr(v float64) *float64 { return &v }

type queueOpsPointJSON struct {
	AckFailed         int64   `json:"ackFailed"`
	AckPerSecond      float64 `json:"ackPerSecond"`
	AckRequests       int64   `json:"ackRequests"`
	AckSuccess        int64   `json:"ackSuccess"`
	AvgLagMs          *int64  `json:"avgLagMs"`
	Bucket            string  `json:"bucket"`
	EmptyPerSecond    float64 `json:"emptyPerSecond"`
	MaxLagMs          *int64  `json:"maxLagMs"`
	ParkedCount       float64 `json:"parkedCount"`
	PartitionCount    *int64  `json:"partitionCount"`
	PartitionsCreated int64   `json:"partitionsCreated"`
	PartitionsDeleted int64   `json:"partitionsDeleted"`
	PopEmpty          int64   `json:"popEmpty"`
	PopMessages       int64   `json:"popMessages"`
	PopPerSecond      float64 `json:"popPerSecond"`
	PushMessages      int64   `json:"pushMessages"`
	PushPerSecond     float64 `json:"pushPerSecond"`
	PushRequests      int64   `json:"pushRequests"`
	QueueName         string  `json:"queueName"`
	Transactions      int64   `json:"transactions"`
}

type queueOpsJSON struct {
	BucketMinutes int                 `json:"bucketMinutes"`
	Queues        []string            `json:"queues"`
	Series        []queueOpsPointJSON `json:"series"`
	TimeRange     timeRangeJSON       `json:"timeRange"`
}

// statsQuery reads the window (span by default) and the queue filter of a statistics route.
func (s *Server) statsQuery(ctx *fasthttp.RequestCtx, span time.Duration) (stats.Window, persistence.StatsFilter, error) {
	w, err := windowParams(ctx.QueryArgs(), span)
	if err != nil {
		return w, persistence.StatsFilter{}, err
	}
	f, err := s.statsFilter(ctx, w)
	return w, f, err
}

// queueSeries reads the points of the route's queues by queue (byQueue) or summed, with the
// window and filter it read them for.
func (s *Server) queueSeries(ctx *fasthttp.RequestCtx, span time.Duration, byQueue bool) (stats.Window, persistence.StatsFilter, []persistence.QueuePoint, error) {
	w, f, err := s.statsQuery(ctx, span)
	if err != nil {
		return w, f, nil, err
	}
	c, cancel := s.dbContext()
	defer cancel()
	points, err := s.Store.QueueSeries(c, f, byQueue)
	return w, f, points, err
}

// queueOps serves GET /api/v1/analytics/queue-ops: per queue and point, what its clients did.
func (s *Server) queueOps(ctx *fasthttp.RequestCtx) error {
	w, _, points, err := s.queueSeries(ctx, time.Hour, true)
	if err != nil {
		return err
	}
	out := queueOpsJSON{BucketMinutes: w.BucketMinutes(), Queues: []string{}, Series: make([]queueOpsPointJSON, len(points)),
		TimeRange: timeRange(w)}
	for i, p := range points {
		out.Series[i] = queueOpsPointJSON{
			AckFailed: p.AckFailed, AckPerSecond: w.PerSecond(p.AckSuccess + p.AckFailed), AckRequests: p.AckRequests,
			AckSuccess: p.AckSuccess, AvgLagMs: stats.AvgLag(p.QueueCounters), Bucket: bucketTime(p.Bucket),
			EmptyPerSecond: w.PerSecond(p.PopEmpty), MaxLagMs: stats.MaxLag(p.QueueCounters), ParkedCount: stats.Round2(p.Parked),
			PartitionCount: p.Partitions, PartitionsCreated: p.PartitionsCreated, PartitionsDeleted: p.PartitionsDeleted,
			PopEmpty: p.PopEmpty, PopMessages: p.PopMessages, PopPerSecond: w.PerSecond(p.PopMessages),
			PushMessages: p.PushMessages, PushPerSecond: w.PerSecond(p.PushMessages), PushRequests: p.PushRequests,
			QueueName: p.Queue.Name, Transactions: p.Transactions,
		}
		if !slices.Contains(out.Queues, p.Queue.Name) {
			out.Queues = append(out.Queues, p.Queue.Name)
		}
	}
	slices.Sort(out.Queues)
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type queueLagJSON struct {
	AvgLagMs   *int64 `json:"avgLagMs"`
	BucketTime string `json:"bucketTime"`
	MaxLagMs   *int64 `json:"maxLagMs"`
	PopCount   int64  `json:"popCount"`
	QueueName  string `json:"queueName"`
}

// queueLag serves GET /api/v1/analytics/queue-lag: the age of the messages the pops of each
// queue delivered, per point with pops, newest first.
func (s *Server) queueLag(ctx *fasthttp.RequestCtx) error {
	_, _, points, err := s.queueSeries(ctx, time.Hour, true)
	if err != nil {
		return err
	}
	out := []queueLagJSON{}
	for _, p := range slices.Backward(points) {
		if p.PopMessages > 0 {
			out = append(out, queueLagJSON{AvgLagMs: stats.AvgLag(p.QueueCounters), BucketTime: bucketTime(p.Bucket),
				MaxLagMs: stats.MaxLag(p.QueueCounters), PopCount: p.PopMessages, QueueName: p.Queue.Name})
		}
	}
	// Newest first, queues of one point by name.
	slices.SortStableFunc(out, func(x, y queueLagJSON) int {
		return cmp.Or(cmp.Compare(y.BucketTime, x.BucketTime), cmp.Compare(x.QueueName, y.QueueName))
	})
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type parkedPointJSON struct {
	Bucket      string  `json:"bucket"`
	Hostname    string  `json:"hostname"`
	ParkedCount float64 `json:"parkedCount"`
	QueueName   string  `json:"queueName"`
	WorkerID    int     `json:"workerId"`
}

type parkedJSON struct {
	BucketMinutes int               `json:"bucketMinutes"`
	Replicas      []brokerJSON      `json:"replicas"`
	Series        []parkedPointJSON `json:"series"`
	TimeRange     timeRangeJSON     `json:"timeRange"`
}

// queueParkedReplicas serves GET /api/v1/analytics/queue-parked-replicas: the long-polls
// parked on each queue, by broker.
func (s *Server) queueParkedReplicas(ctx *fasthttp.RequestCtx) error {
	w, f, err := s.statsQuery(ctx, time.Hour)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	points, err := s.Store.ParkedSeries(c, f)
	if err != nil {
		return err
	}
	out := parkedJSON{BucketMinutes: w.BucketMinutes(), Replicas: []brokerJSON{}, Series: make([]parkedPointJSON, len(points)),
		TimeRange: timeRange(w)}
	for i, p := range points {
		out.Series[i] = parkedPointJSON{Bucket: bucketTime(p.Bucket), Hostname: p.ServerID, ParkedCount: stats.Round2(p.Parked),
			QueueName: p.Queue.Name}
		if r := (brokerJSON{Hostname: p.ServerID}); !slices.Contains(out.Replicas, r) {
			out.Replicas = append(out.Replicas, r)
		}
	}
	slices.SortFunc(out.Replicas, func(x, y brokerJSON) int { return cmp.Compare(x.Hostname, y.Hostname) })
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type retentionPointJSON struct {
	Bucket                 string `json:"bucket,omitempty"`
	CompletedRetentionMsgs int64  `json:"completedRetentionMsgs"`
	EventCount             int64  `json:"eventCount"`
	EvictionMsgs           int64  `json:"evictionMsgs"`
	RetentionMsgs          int64  `json:"retentionMsgs"`
	TotalMsgs              int64  `json:"totalMsgs"`
}

func (r *retentionPointJSON) add(p persistence.QueuePoint) {
	r.CompletedRetentionMsgs += p.Completed
	r.EventCount += p.CleanupEvents
	r.EvictionMsgs += p.Evicted
	r.RetentionMsgs += p.Retention
	r.TotalMsgs += p.Completed + p.Evicted + p.Retention
}

type retentionJSON struct {
	BucketMinutes int                  `json:"bucketMinutes"`
	Series        []retentionPointJSON `json:"series"`
	TimeRange     timeRangeJSON        `json:"timeRange"`
	Totals        retentionPointJSON   `json:"totals"`
}

// retention serves GET /api/v1/analytics/retention: the messages retention and eviction
// deleted, per point with deletions.
func (s *Server) retention(ctx *fasthttp.RequestCtx) error {
	w, _, points, err := s.queueSeries(ctx, time.Hour, false)
	if err != nil {
		return err
	}
	out := retentionJSON{BucketMinutes: w.BucketMinutes(), Series: []retentionPointJSON{}, TimeRange: timeRange(w)}
	for _, p := range points {
		if p.Completed+p.Evicted+p.Retention == 0 {
			continue
		}
		r := retentionPointJSON{Bucket: bucketTime(p.Bucket)}
		r.add(p)
		out.Series = append(out.Series, r)
		out.Totals.add(p)
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

// statJSON is a gauge over a point, as the reference's system metrics give it.
type statJSON struct {
	Avg  *float64 `json:"avg"`
	Last *float64 `json:"last"`
	Max  *float64 `json:"max"`
	Min  *float64 `json:"min"`
}

func stat(g persistence.Gauge) statJSON {
	if g.Samples == 0 {
		return statJSON{}
	}
	return statJSON{Avg: floatPtr(g.Sum / float64(g.Samples)), Last: floatPtr(g.Last), Max: floatPtr(g.Max), Min: floatPtr(g.Min)}
}

// systemMetricsJSON are a broker's figures over a point. The Go broker has no worker thread
// pools and no response registries; its mesh figures are on /internal/api/shared-state/stats.
type systemMetricsJSON struct {
	CPU struct {
		SystemUs statJSON `json:"system_us"`
		UserUs   statJSON `json:"user_us"`
	} `json:"cpu"`
	Database struct {
		PoolActive statJSON `json:"pool_active"`
		PoolIdle   statJSON `json:"pool_idle"`
		PoolSize   statJSON `json:"pool_size"`
	} `json:"database"`
	Memory struct {
		RSSBytes     statJSON `json:"rss_bytes"`
		VirtualBytes statJSON `json:"virtual_bytes"`
	} `json:"memory"`
	Registries  struct{} `json:"registries"`
	SharedState struct{} `json:"shared_state"`
	Threadpool  struct{} `json:"threadpool"`
}

type systemPointJSON struct {
	Metrics     systemMetricsJSON `json:"metrics"`
	SampleCount int               `json:"sampleCount"`
	Timestamp   string            `json:"timestamp"`
}

type replicaJSON struct {
	Hostname   string            `json:"hostname"`
	Port       int               `json:"port"`
	TimeSeries []systemPointJSON `json:"timeSeries"`
	WorkerID   int               `json:"workerId"`
}

type systemJSON struct {
	BucketMinutes int           `json:"bucketMinutes"`
	PointCount    int           `json:"pointCount"`
	ReplicaCount  int           `json:"replicaCount"`
	Replicas      []replicaJSON `json:"replicas"`
	TimeRange     timeRangeJSON `json:"timeRange"`
}

// systemMetrics serves GET /api/v1/analytics/system-metrics: each broker's process figures
// (CPU, memory, database pool) per point.
func (s *Server) systemMetrics(ctx *fasthttp.RequestCtx) error {
	args := ctx.QueryArgs()
	w, err := windowParams(args, time.Hour)
	if err != nil {
		return err
	}
	serverID, known, err := workerParams(args)
	if err != nil {
		return err
	}
	out := systemJSON{BucketMinutes: w.BucketMinutes(), Replicas: []replicaJSON{}, TimeRange: timeRange(w)}
	if !known {
		writeJSON(ctx, fasthttp.StatusOK, out)
		return nil
	}
	c, cancel := s.dbContext()
	defer cancel()
	points, err := s.Store.BrokerSeries(c, w.From, w.To, w.Width, serverID)
	if err != nil {
		return err
	}
	replicas := map[string]*replicaJSON{}
	var ids []string
	for _, p := range points {
		r := replicas[p.ServerID]
		if r == nil {
			r = &replicaJSON{Hostname: p.ServerID, Port: p.Port, TimeSeries: []systemPointJSON{}}
			replicas[p.ServerID] = r
			ids = append(ids, p.ServerID)
		}
		var m systemMetricsJSON
		g := p.Gauges
		m.CPU.UserUs, m.CPU.SystemUs = stat(g[persistence.GaugeCPUUser]), stat(g[persistence.GaugeCPUSystem])
		m.Memory.RSSBytes, m.Memory.VirtualBytes = stat(g[persistence.GaugeRSS]), stat(g[persistence.GaugeVSZ])
		m.Database.PoolSize, m.Database.PoolIdle = stat(g[persistence.GaugePoolSize]), stat(g[persistence.GaugePoolIdle])
		m.Database.PoolActive = stat(g[persistence.GaugePoolActive])
		r.TimeSeries = append(r.TimeSeries, systemPointJSON{Metrics: m, SampleCount: p.Samples, Timestamp: msTime(p.Bucket)})
		out.PointCount++
	}
	slices.Sort(ids)
	for _, id := range ids {
		out.Replicas = append(out.Replicas, *replicas[id])
	}
	out.ReplicaCount = len(out.Replicas)
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type workerPointJSON struct {
	AckFailed         int64    `json:"ackFailed"`
	AckMessages       int64    `json:"ackMessages"`
	AckPerSecond      float64  `json:"ackPerSecond"`
	AckRequests       int64    `json:"ackRequests"`
	AckSuccess        int64    `json:"ackSuccess"`
	AvgEventLoopLagMs *float64 `json:"avgEventLoopLagMs"`
	AvgFreeSlots      *float64 `json:"avgFreeSlots"`
	AvgJobQueueSize   *float64 `json:"avgJobQueueSize"`
	AvgLagMs          int64    `json:"avgLagMs"`
	BackoffSize       *float64 `json:"backoffSize"`
	DBConnections     *float64 `json:"dbConnections"`
	DBErrors          int64    `json:"dbErrors"`
	DLQCount          int64    `json:"dlqCount"`
	JobsDone          int64    `json:"jobsDone"`
	LagCount          int64    `json:"lagCount"`
	MaxEventLoopLagMs *float64 `json:"maxEventLoopLagMs"`
	MaxJobQueueSize   *float64 `json:"maxJobQueueSize"`
	MaxLagMs          int64    `json:"maxLagMs"`
	MinFreeSlots      *float64 `json:"minFreeSlots"`
	PopMessages       int64    `json:"popMessages"`
	PopPerSecond      float64  `json:"popPerSecond"`
	PopRequests       int64    `json:"popRequests"`
	PushMessages      int64    `json:"pushMessages"`
	PushPerSecond     float64  `json:"pushPerSecond"`
	PushRequests      int64    `json:"pushRequests"`
	Timestamp         string   `json:"timestamp"`
}

// workerJSON is one broker over the last minutes. Event-loop lag and job queue have no
// counterpart in the Go broker: null, never a made-up 0.
type workerJSON struct {
	AvgEventLoopLagMs *float64 `json:"avgEventLoopLagMs"`
	DBConnections     *float64 `json:"dbConnections"`
	FreeSlots         *float64 `json:"freeSlots"`
	Hostname          string   `json:"hostname"`
	JobQueueSize      *float64 `json:"jobQueueSize"`
	MaxEventLoopLagMs *float64 `json:"maxEventLoopLagMs"`
	MessagesProcessed int64    `json:"messagesProcessed"`
	WorkerID          int      `json:"workerId"`
}

func worker(id string, f *stats.BrokerFigures) workerJSON {
	return workerJSON{DBConnections: f.Max(persistence.GaugePoolSize), FreeSlots: f.Min(persistence.GaugePoolFree),
		Hostname: id, MessagesProcessed: f.PushMessages + f.AckMessages}
}

// workerDetailJSON is a broker as the worker metrics show it (no backoff ring either).
type workerDetailJSON struct {
	workerJSON
	BackoffSize *float64 `json:"backoffSize"`
	LastSeen    string   `json:"lastSeen"`
}

type workerQueueJSON struct {
	AvgLagMs  int64  `json:"avgLagMs"`
	MaxLagMs  int64  `json:"maxLagMs"`
	PopCount  int64  `json:"popCount"`
	QueueName string `json:"queueName"`
}

type workerSummaryJSON struct {
	PendingMessages   int64 `json:"pendingMessages"`
	TotalAckFailed    int64 `json:"totalAckFailed"`
	TotalAckMessages  int64 `json:"totalAckMessages"`
	TotalAckRequests  int64 `json:"totalAckRequests"`
	TotalDbErrors     int64 `json:"totalDbErrors"`
	TotalDlq          int64 `json:"totalDlq"`
	TotalPopMessages  int64 `json:"totalPopMessages"`
	TotalPopRequests  int64 `json:"totalPopRequests"`
	TotalPushMessages int64 `json:"totalPushMessages"`
	TotalPushRequests int64 `json:"totalPushRequests"`
}

type workerMetricsJSON struct {
	BucketMinutes int                `json:"bucketMinutes"`
	PointCount    int                `json:"pointCount"`
	Queues        []workerQueueJSON  `json:"queues"`
	Summary       workerSummaryJSON  `json:"summary"`
	TimeRange     timeRangeJSON      `json:"timeRange"`
	TimeSeries    []workerPointJSON  `json:"timeSeries"`
	Workers       []workerDetailJSON `json:"workers"`
}

// workerMetrics serves GET /api/v1/analytics/worker-metrics: the brokers' requests, messages,
// lags and pools per point (newest first), each broker over the last 5 minutes, the lag of
// each of the caller's queues over the window, and the window's totals.
func (s *Server) workerMetrics(ctx *fasthttp.RequestCtx) error {
	w, f, err := s.statsQuery(ctx, time.Hour)
	if err != nil {
		return err
	}
	serverID, known, err := workerParams(ctx.QueryArgs())
	if err != nil {
		return err
	}
	out := workerMetricsJSON{BucketMinutes: w.BucketMinutes(), Queues: []workerQueueJSON{}, TimeRange: timeRange(w),
		TimeSeries: []workerPointJSON{}, Workers: []workerDetailJSON{}}
	c, cancel := s.dbContext()
	defer cancel()
	var points []persistence.BrokerPoint
	if known {
		if points, err = s.Store.BrokerSeries(c, w.From, w.To, w.Width, serverID); err != nil {
			return err
		}
	}
	queues, err := s.Store.QueueSeries(c, f, true)
	if err != nil {
		return err
	}
	buckets := stats.ByBucket(points)
	times := make([]int64, 0, len(buckets))
	for t := range buckets {
		times = append(times, t)
	}
	slices.SortFunc(times, func(x, y int64) int { return cmp.Compare(y, x) })
	var sum stats.BrokerFigures
	for _, p := range points {
		sum.Add(p)
	}
	for _, t := range times {
		b := buckets[t]
		out.TimeSeries = append(out.TimeSeries, workerPointJSON{
			AckFailed: b.AckFailed, AckMessages: b.AckMessages, AckPerSecond: w.PerSecond(b.AckMessages),
			AckRequests: b.AckRequests, AckSuccess: b.AckMessages - b.AckFailed,
			AvgFreeSlots: b.Mean(persistence.GaugePoolFree, 1, 0), AvgLagMs: divide(b.LagSumMs, b.PopMessages),
			DBConnections: b.Max(persistence.GaugePoolSize), DBErrors: b.DBErrors, DLQCount: b.DLQ,
			JobsDone: b.PushRequests + b.PopRequests + b.AckRequests + b.Transactions, LagCount: b.PopMessages,
			MaxLagMs: b.LagMaxMs, MinFreeSlots: b.Min(persistence.GaugePoolFree), PopMessages: b.PopMessages,
			PopPerSecond: w.PerSecond(b.PopMessages), PopRequests: b.PopRequests, PushMessages: b.PushMessages,
			PushPerSecond: w.PerSecond(b.PushMessages), PushRequests: b.PushRequests, Timestamp: bucketTime(time.Unix(t, 0)),
		})
	}
	out.PointCount = len(out.TimeSeries)
	out.Summary = workerSummaryJSON{
		PendingMessages: sum.PushMessages - sum.PopMessages, TotalAckFailed: sum.AckFailed, TotalAckMessages: sum.AckMessages,
		TotalAckRequests: sum.AckRequests, TotalDbErrors: sum.DBErrors, TotalDlq: sum.DLQ, TotalPopMessages: sum.PopMessages,
		TotalPopRequests: sum.PopRequests, TotalPushMessages: sum.PushMessages, TotalPushRequests: sum.PushRequests,
	}
	byQueue := map[persistence.QueueName]*workerQueueJSON{}
	var names []persistence.QueueName
	for _, p := range queues {
		q := byQueue[p.Queue]
		if q == nil {
			q = &workerQueueJSON{QueueName: p.Queue.Name}
			byQueue[p.Queue] = q
			names = append(names, p.Queue)
		}
		q.AvgLagMs += p.LagSumMs // summed here, divided below
		q.MaxLagMs = max(q.MaxLagMs, p.LagMaxMs)
		q.PopCount += p.PopMessages
	}
	for _, n := range names {
		q := byQueue[n]
		q.AvgLagMs = divide(q.AvgLagMs, q.PopCount)
		out.Queues = append(out.Queues, *q)
	}
	slices.SortStableFunc(out.Queues, func(x, y workerQueueJSON) int {
		return cmp.Or(cmp.Compare(y.PopCount, x.PopCount), cmp.Compare(x.QueueName, y.QueueName))
	})
	if known {
		ids, figures, seen, err := s.recentWorkers(ctx, 5*time.Minute, serverID)
		if err != nil {
			return err
		}
		for _, id := range ids {
			out.Workers = append(out.Workers, workerDetailJSON{workerJSON: worker(id, figures[id]), LastSeen: bucketTime(seen[id])})
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

// divide is n / d rounded to the nearest integer, 0 when d is 0.
func divide(n, d int64) int64 {
	if d == 0 {
		return 0
	}
	return int64(math.Round(float64(n) / float64(d)))
}

type postgresStatsJSON struct {
	ActiveQueries    json.RawMessage `json:"activeQueries"`
	AutovacuumStatus json.RawMessage `json:"autovacuumStatus"`
	BufferConfig     json.RawMessage `json:"bufferConfig"`
	BufferUsage      json.RawMessage `json:"bufferUsage"`
	CacheSummary     json.RawMessage `json:"cacheSummary"`
	Database         string          `json:"database"`
	DatabaseCache    json.RawMessage `json:"databaseCache"`
	DeadTuples       json.RawMessage `json:"deadTuples"`
	HotUpdates       json.RawMessage `json:"hotUpdates"`
	IndexCache       json.RawMessage `json:"indexCache"`
	TableCache       json.RawMessage `json:"tableCache"`
	TableSizes       json.RawMessage `json:"tableSizes"`
	Timestamp        string          `json:"timestamp"`
}

// postgresStats serves GET /api/v1/analytics/postgres-stats: PostgreSQL's statistics of the
// broker's tables and database.
func (s *Server) postgresStats(ctx *fasthttp.RequestCtx) error {
	c, cancel := s.dbContext()
	defer cancel()
	p, err := s.Store.PostgresStats(c)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, postgresStatsJSON{
		ActiveQueries: p.ActiveQueries, AutovacuumStatus: p.AutovacuumStatus,
		BufferConfig: p.BufferConfig, BufferUsage: p.BufferUsage, CacheSummary: p.CacheSummary,
		Database: p.Database, DatabaseCache: p.DatabaseCache, DeadTuples: p.DeadTuples,
		HotUpdates: p.HotUpdates, IndexCache: p.IndexCache, TableCache: p.TableCache,
		TableSizes: p.TableSizes, Timestamp: msTime(time.Now()),
	})
	return nil
}
