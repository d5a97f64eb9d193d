package http

// The dashboard's status routes (/api/v1/status*, /api/v1/resources/overview, namespaces and
// tasks) and the statistics refresh. Live counts come from the admin reads of the queues
// (persistence/admin.go); series and totals over time from the per-minute statistics, summed
// over the brokers (analytics.go). Everything about queues is the caller's tenant's.

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"queen/persistence"
	"queen/stats"
)

type statusPointJSON struct {
	AckFailed          int64    `json:"ackFailed"`
	AvgEventLoopLagMs  *float64 `json:"avgEventLoopLagMs"`
	AvgLagMs           int64    `json:"avgLagMs"`
	DBErrors           *int64   `json:"dbErrors"`
	DBPoolActive       *float64 `json:"dbPoolActive"`
	DBPoolIdle         *float64 `json:"dbPoolIdle"`
	DBPoolSize         *float64 `json:"dbPoolSize"`
	DLQCount           int64    `json:"dlqCount"`
	Ingested           int64    `json:"ingested"`
	IngestedPerSecond  float64  `json:"ingestedPerSecond"`
	MaxEventLoopLagMs  *float64 `json:"maxEventLoopLagMs"`
	MaxLagMs           int64    `json:"maxLagMs"`
	MinFreeSlots       *float64 `json:"minFreeSlots"`
	PopMessages        int64    `json:"popMessages"`
	PopPerSecond       float64  `json:"popPerSecond"`
	Processed          int64    `json:"processed"`
	ProcessedPerSecond float64  `json:"processedPerSecond"`
	QueenCPUSysPct     *float64 `json:"queenCpuSysPct"`
	QueenCPUUserPct    *float64 `json:"queenCpuUserPct"`
	QueenRssMb         *float64 `json:"queenRssMb"`
	Timestamp          string   `json:"timestamp"`
}

type statusQueueJSON struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Namespace     string `json:"namespace"`
	Partitions    int64  `json:"partitions"`
	Task          string `json:"task"`
	TotalConsumed int64  `json:"totalConsumed"`
}

type opCountsJSON struct {
	Ack  int64 `json:"ack"`
	Pop  int64 `json:"pop"`
	Push int64 `json:"push"`
}

type efficiencyJSON struct {
	Ack  float64 `json:"ack"`
	Pop  float64 `json:"pop"`
	Push float64 `json:"push"`
}

type statusMessagesJSON struct {
	BatchEfficiency efficiencyJSON `json:"batchEfficiency"`
	Completed       int64          `json:"completed"`
	DeadLetter      int64          `json:"deadLetter"`
	Failed          int64          `json:"failed"`
	Pending         int64          `json:"pending"`
	Processing      int64          `json:"processing"`
	Requests        opCountsJSON   `json:"requests"`
	Total           int64          `json:"total"`
}

type leasesJSON struct {
	Active               int64 `json:"active"`
	PartitionsWithLeases int64 `json:"partitionsWithLeases"`
	TotalAcked           int64 `json:"totalAcked"`
	TotalBatchSize       int64 `json:"totalBatchSize"`
}

type errorCountJSON struct {
	Count int64  `json:"count"`
	Error string `json:"error"`
}

type deadLetterJSON struct {
	AffectedPartitions int64            `json:"affectedPartitions"`
	TopErrors          []errorCountJSON `json:"topErrors"`
	TotalMessages      int64            `json:"totalMessages"`
}

type statusErrorsJSON struct {
	AckFailed   int64 `json:"ackFailed"`
	DBErrors    int64 `json:"dbErrors"`
	DLQMessages int64 `json:"dlqMessages"`
}

type dashboardStatusJSON struct {
	BucketMinutes   int                `json:"bucketMinutes"`
	DeadLetterQueue deadLetterJSON     `json:"deadLetterQueue"`
	Errors          statusErrorsJSON   `json:"errors"`
	Leases          leasesJSON         `json:"leases"`
	Messages        statusMessagesJSON `json:"messages"`
	PointCount      int                `json:"pointCount"`
	Queues          []statusQueueJSON  `json:"queues"`
	StatsAge        int64              `json:"statsAge"`
	Throughput      []statusPointJSON  `json:"throughput"`
	TimeRange       timeRangeJSON      `json:"timeRange"`
	Workers         []workerJSON       `json:"workers"`
}

// ratio is n / d rounded to hundredths, 0 when d is 0.
func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return stats.Round2(float64(n) / float64(d))
}

// statsAge is the number of seconds since a broker last flushed its statistics, -1 when none
// has.
func (s *Server) statsAge(ctx *fasthttp.RequestCtx) (int64, error) {
	c, cancel := s.dbContext()
	defer cancel()
	age, err := s.Store.StatsAge(c)
	if err != nil || age < 0 {
		return -1, err
	}
	return int64(age / time.Second), nil
}

// dashboardStatus serves GET /api/v1/status: the throughput of the caller's queues per point (newest
// first) beside the cluster's process figures, its queues with messages, their live counts,
// and the window's totals.
func (s *Server) dashboardStatus(ctx *fasthttp.RequestCtx) error {
	w, f, points, err := s.queueSeries(ctx, time.Hour, false)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	brokers, err := s.Store.BrokerSeries(c, w.From, w.To, w.Width, "")
	if err != nil {
		return err
	}
	queues, err := s.Store.ListQueues(c, persistence.QueueFilter{Scope: f.Scope, Namespace: f.Namespace, Task: f.Task})
	if err != nil {
		return err
	}
	leases, dead, err := s.Store.LiveStatus(c, f.Scope)
	if err != nil {
		return err
	}
	out := dashboardStatusJSON{BucketMinutes: w.BucketMinutes(), Queues: []statusQueueJSON{}, Throughput: []statusPointJSON{},
		TimeRange: timeRange(w), Workers: []workerJSON{},
		Leases: leasesJSON{Active: leases.Active, PartitionsWithLeases: leases.Partitions, TotalAcked: leases.Acked,
			TotalBatchSize: leases.BatchSize},
		DeadLetterQueue: deadLetterJSON{AffectedPartitions: dead.Partitions, TopErrors: []errorCountJSON{},
			TotalMessages: dead.Messages},
	}
	for _, e := range dead.TopErrors {
		out.DeadLetterQueue.TopErrors = append(out.DeadLetterQueue.TopErrors, errorCountJSON{Count: e.Count, Error: e.Error})
	}

	// The points: every bucket the caller's queues or the brokers have, newest first.
	byBucket := stats.ByBucket(brokers)
	queuePoints := map[int64]persistence.QueueCounters{}
	var sum persistence.QueueCounters
	for _, p := range points {
		queuePoints[p.Bucket.Unix()] = p.QueueCounters
		sum.Add(p.QueueCounters)
	}
	times := make([]int64, 0, len(byBucket)+len(queuePoints))
	for t := range byBucket {
		times = append(times, t)
	}
	for t := range queuePoints {
		if byBucket[t] == nil {
			times = append(times, t)
		}
	}
	slices.SortFunc(times, func(x, y int64) int { return cmp.Compare(y, x) })
	var dbErrors int64
	for _, t := range times {
		q := queuePoints[t]
		p := statusPointJSON{
			AckFailed: q.AckFailed, AvgLagMs: divide(q.LagSumMs, q.PopMessages), DLQCount: q.DLQ,
			Ingested: q.PushMessages, IngestedPerSecond: w.PerSecond(q.PushMessages), MaxLagMs: q.LagMaxMs,
			PopMessages: q.PopMessages, PopPerSecond: w.PerSecond(q.PopMessages), Processed: q.AckSuccess + q.AckFailed,
			ProcessedPerSecond: w.PerSecond(q.AckSuccess + q.AckFailed), Timestamp: bucketTime(time.Unix(t, 0)),
		}
		if b := byBucket[t]; b != nil {
			p.DBErrors = &b.DBErrors
			dbErrors += b.DBErrors
			p.QueenCPUUserPct = b.Mean(persistence.GaugeCPUUser, 0.01, 2)
			p.QueenCPUSysPct = b.Mean(persistence.GaugeCPUSystem, 0.01, 2)
			p.QueenRssMb = b.Mean(persistence.GaugeRSS, 1.0/(1<<20), 1)
			p.DBPoolActive = b.Mean(persistence.GaugePoolActive, 1, 1)
			p.DBPoolIdle = b.Mean(persistence.GaugePoolIdle, 1, 1)
			p.DBPoolSize = b.Mean(persistence.GaugePoolSize, 1, 1)
			p.MinFreeSlots = b.Min(persistence.GaugePoolFree)
		}
		out.Throughput = append(out.Throughput, p)
	}
	out.PointCount = len(out.Throughput)

	for _, q := range queues {
		if f.Queue != (persistence.QueueName{}) && q.Queue != f.Queue {
			continue
		}
		out.Messages.Pending += q.Messages.Pending
		out.Messages.Processing += q.Messages.Processing
		if q.Messages.Total > 0 {
			out.Queues = append(out.Queues, statusQueueJSON{ID: q.ID.String(), Name: q.Queue.Name, Namespace: q.Namespace,
				Partitions: q.Partitions, Task: q.Task, TotalConsumed: q.Completed})
		}
	}
	m := &out.Messages
	m.Total, m.Completed, m.Failed, m.DeadLetter = sum.PushMessages, sum.AckSuccess, sum.AckFailed, sum.DLQ
	m.Requests = opCountsJSON{Ack: sum.AckRequests, Pop: sum.PopRequests, Push: sum.PushRequests}
	m.BatchEfficiency = efficiencyJSON{Ack: ratio(sum.AckSuccess+sum.AckFailed, sum.AckRequests),
		Pop: ratio(sum.PopMessages, sum.PopRequests), Push: ratio(sum.PushMessages, sum.PushRequests)}
	out.Errors = statusErrorsJSON{AckFailed: sum.AckFailed, DBErrors: dbErrors, DLQMessages: sum.DLQ}

	ids, figures, _, err := s.recentWorkers(ctx, 2*time.Minute, "")
	if err != nil {
		return err
	}
	for _, id := range ids {
		out.Workers = append(out.Workers, worker(id, figures[id]))
	}
	if out.StatsAge, err = s.statsAge(ctx); err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type statusQueuesJSON struct {
	Pagination paginationJSON     `json:"pagination"`
	Queues     []queueSummaryJSON `json:"queues"`
}

// statusQueues serves GET /api/v1/status/queues: a page of the caller's queues (of a
// namespace and/or task) with live counts, newest first.
func (s *Server) statusQueues(ctx *fasthttp.RequestCtx) error {
	args := ctx.QueryArgs()
	limit, offset, err := pageParams(args, 100)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	queues, err := s.Store.ListQueues(c, persistence.QueueFilter{Scope: s.scope(ctx), Namespace: string(args.Peek("namespace")),
		Task: string(args.Peek("task")), Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	out := statusQueuesJSON{Pagination: paginationJSON{Limit: limit, Offset: offset}, Queues: make([]queueSummaryJSON, len(queues))}
	for i, q := range queues {
		out.Queues[i] = queueSummary(q)
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type statusQueueConfigJSON struct {
	DeadLetterQueue bool `json:"deadLetterQueue"`
	LeaseTime       int  `json:"leaseTime"`
	MaxQueueSize    int  `json:"maxQueueSize"`
	RetryDelay      int  `json:"retryDelay"`
	RetryLimit      int  `json:"retryLimit"`
	TTL             int  `json:"ttl"`
}

type statusQueueInfoJSON struct {
	Config    statusQueueConfigJSON `json:"config"`
	CreatedAt string                `json:"createdAt"`
	ID        string                `json:"id"`
	Name      string                `json:"name"`
	Namespace string                `json:"namespace"`
	Priority  int                   `json:"priority"`
	Task      string                `json:"task"`
}

type cursorJSON struct {
	BatchesConsumed int64 `json:"batchesConsumed"`
	TotalConsumed   int64 `json:"totalConsumed"`
}

type statusPartitionJSON struct {
	CreatedAt     string             `json:"createdAt"`
	Cursor        cursorJSON         `json:"cursor"`
	ID            string             `json:"id"`
	LastActivity  *string            `json:"lastActivity"`
	Messages      partitionStatsJSON `json:"messages"`
	Name          string             `json:"name"`
	NewestMessage *string            `json:"newestMessage"`
	OldestMessage *string            `json:"oldestMessage"`
	Stats         partitionStatsJSON `json:"stats"`
}

type statusTotalsJSON struct {
	Completed  int64              `json:"completed"`
	DeadLetter int64              `json:"deadLetter"`
	Failed     int64              `json:"failed"`
	Messages   partitionStatsJSON `json:"messages"`
	Pending    int64              `json:"pending"`
	Processing int64              `json:"processing"`
	Total      int64              `json:"total"`
}

type statusQueueDetailJSON struct {
	Partitions []statusPartitionJSON `json:"partitions"`
	Queue      statusQueueInfoJSON   `json:"queue"`
	Totals     statusTotalsJSON      `json:"totals"`
}

// statusQueue serves GET /api/v1/status/queues/{queue}: a queue's settings and its partitions
// with live counts and their queue-mode cursor; 404 when the caller has no such queue.
func (s *Server) statusQueue(ctx *fasthttp.RequestCtx) error {
	q, err := s.queueDetail(ctx)
	if err != nil {
		return err
	}
	t := statsJSON(q.Totals)
	out := statusQueueDetailJSON{
		Partitions: make([]statusPartitionJSON, len(q.Partitions)),
		Queue: statusQueueInfoJSON{
			Config: statusQueueConfigJSON{DeadLetterQueue: q.Options.DeadLetterQueue, LeaseTime: q.Options.LeaseTime, MaxQueueSize: q.Options.MaxSize,
				RetryDelay: q.Options.RetryDelay, RetryLimit: q.Options.RetryLimit, TTL: q.Options.TTL},
			CreatedAt: msTime(q.CreatedAt), ID: q.ID.String(), Name: q.Queue.Name, Namespace: q.Namespace, Priority: q.Options.Priority,
			Task: q.Task,
		},
		Totals: statusTotalsJSON{Completed: t.Completed, DeadLetter: t.DeadLetter, Failed: t.Failed, Messages: t,
			Pending: t.Pending, Processing: t.Processing, Total: t.Total},
	}
	for i, p := range q.Partitions {
		st := statsJSON(p.Stats)
		out.Partitions[i] = statusPartitionJSON{
			CreatedAt: msTime(p.CreatedAt), Cursor: cursorJSON{BatchesConsumed: p.Batches, TotalConsumed: p.Consumed},
			ID: p.ID.String(), LastActivity: msTimePtr(p.LastConsumed), Messages: st, Name: p.Name,
			NewestMessage: msTimePtr(p.Newest), OldestMessage: msTimePtr(p.Oldest), Stats: st,
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type statusMessageJSON struct {
	CreatedAt     string `json:"createdAt"`
	ID            string `json:"id"`
	Partition     string `json:"partition"`
	PartitionID   string `json:"partitionId"`
	Queue         string `json:"queue"`
	QueuePath     string `json:"queuePath"`
	Status        string `json:"status"`
	TransactionID string `json:"transactionId"`
}

// statusQueueMessages serves GET /api/v1/status/queues/{queue}/messages: a page of the
// queue's messages, newest first, whatever their age.
func (s *Server) statusQueueMessages(ctx *fasthttp.RequestCtx) error {
	scope := s.scope(ctx)
	queue, err := queueName(scope, pathParam(ctx, "queue"), "queue")
	if err != nil {
		return err
	}
	limit, offset, err := pageParams(ctx.QueryArgs(), 50)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	// From the beginning of time: the message browser otherwise starts an hour ago.
	msgs, _, err := s.Store.ListMessages(c, persistence.MessageFilter{Scope: scope, Queue: queue, From: &time.Time{},
		Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	out := make([]statusMessageJSON, len(msgs))
	for i, m := range msgs {
		out[i] = statusMessageJSON{CreatedAt: msTime(m.CreatedAt), ID: m.ID.String(), Partition: m.Partition,
			PartitionID: m.PartitionID.String(), Queue: m.Queue.Name, QueuePath: m.Queue.Name + "/" + m.Partition,
			Status: string(m.Status), TransactionID: m.TransactionID}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type analyticsPointJSON struct {
	Messages  int64  `json:"messages"`
	Timestamp string `json:"timestamp"`
}

type analyticsJSON struct {
	DataPoints []analyticsPointJSON `json:"dataPoints"`
	From       string               `json:"from"`
	Interval   string               `json:"interval"`
	To         string               `json:"to"`
}

// maxAnalyticsPoints bounds the points of one status/analytics answer.
const maxAnalyticsPoints = 10000

// statusAnalytics serves GET /api/v1/status/analytics: the messages pushed to the caller's
// queues per minute, hour or day (any other interval is hourly, as in the reference), every
// point of the window present.
func (s *Server) statusAnalytics(ctx *fasthttp.RequestCtx) error {
	args := ctx.QueryArgs()
	w, err := windowParams(args, 24*time.Hour)
	if err != nil {
		return err
	}
	interval := string(args.Peek("interval"))
	if interval == "" {
		interval = "hour"
	}
	switch interval {
	case "minute":
		w.Width = time.Minute
	case "day":
		w.Width = 24 * time.Hour
	default:
		w.Width = time.Hour
	}
	first, last := w.From.Truncate(w.Width), w.To.Truncate(w.Width)
	if n := last.Sub(first)/w.Width + 1; n > maxAnalyticsPoints {
		return badf("the window holds more than " + strconv.Itoa(maxAnalyticsPoints) + " points at interval " + interval)
	}
	f, err := s.statsFilter(ctx, w)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	points, err := s.Store.QueueSeries(c, f, false)
	if err != nil {
		return err
	}
	pushed := map[int64]int64{}
	for _, p := range points {
		pushed[p.Bucket.Unix()] = p.PushMessages
	}
	out := analyticsJSON{DataPoints: []analyticsPointJSON{}, From: msTime(w.From), Interval: interval, To: msTime(w.To)}
	for t := first; !t.After(last); t = t.Add(w.Width) {
		out.DataPoints = append(out.DataPoints, analyticsPointJSON{Messages: pushed[t.Unix()], Timestamp: msTime(t)})
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type spreadJSON struct {
	Avg    int64 `json:"avg"`
	Max    int64 `json:"max"`
	Median int64 `json:"median"`
	Min    int64 `json:"min"`
}

// spread summarises values (0s when there are none).
func spread(values []int64) spreadJSON {
	if len(values) == 0 {
		return spreadJSON{}
	}
	slices.Sort(values)
	var sum int64
	for _, v := range values {
		sum += v
	}
	return spreadJSON{Avg: divide(sum, int64(len(values))), Max: values[len(values)-1], Median: values[len(values)/2], Min: values[0]}
}

type overviewJSON struct {
	Lag struct {
		Offset spreadJSON `json:"offset"`
		Time   spreadJSON `json:"time"`
	} `json:"lag"`
	Messages   partitionStatsJSON `json:"messages"`
	Namespaces int                `json:"namespaces"`
	Partitions int64              `json:"partitions"`
	Queues     int                `json:"queues"`
	StatsAge   int64              `json:"statsAge"`
	Tasks      int                `json:"tasks"`
	Throughput struct {
		IngestedPerSecond  float64 `json:"ingestedPerSecond"`
		ProcessedPerSecond float64 `json:"processedPerSecond"`
	} `json:"throughput"`
	Timestamp string `json:"timestamp"`
}

// throughputWindow is how far back the overview's throughput looks, in whole minutes.
const throughputWindow = 5 * time.Minute

// overview serves GET /api/v1/resources/overview: the caller's queues, partitions, namespaces
// and tasks, their live message counts and lags (over queues: seconds since the oldest
// unconsumed message, unconsumed messages), and the throughput of the last 5 minutes.
func (s *Server) overview(ctx *fasthttp.RequestCtx) error {
	scope := s.scope(ctx)
	c, cancel := s.dbContext()
	defer cancel()
	queues, err := s.Store.ListQueues(c, persistence.QueueFilter{Scope: scope})
	if err != nil {
		return err
	}
	// The last whole minutes: the current one is flushed when it ends.
	now := time.Now()
	recent, err := s.Store.QueueSeries(c, persistence.StatsFilter{Scope: scope,
		From: now.Truncate(time.Minute).Add(-throughputWindow), To: now, Bucket: time.Minute}, false)
	if err != nil {
		return err
	}
	var out overviewJSON
	namespaces, tasks := map[string]bool{}, map[string]bool{}
	var ages, backlogs []int64
	for _, q := range queues {
		out.Partitions += q.Partitions
		if q.Namespace != "" {
			namespaces[q.Namespace] = true
		}
		if q.Task != "" {
			tasks[q.Task] = true
		}
		m := &out.Messages
		m.Total += q.Messages.Total
		m.Pending += q.Messages.Pending
		m.Processing += q.Messages.Processing
		m.Completed += q.Completed
		m.DeadLetter += q.DeadLetter
		var age int64
		if q.OldestPending != nil {
			age = max(int64(now.Sub(*q.OldestPending)/time.Second), 0)
		}
		ages = append(ages, age)
		backlogs = append(backlogs, q.Messages.Pending+q.Messages.Processing)
	}
	out.Queues, out.Namespaces, out.Tasks = len(queues), len(namespaces), len(tasks)
	out.Lag.Time, out.Lag.Offset = spread(ages), spread(backlogs)
	var sum persistence.QueueCounters
	for _, p := range recent {
		sum.Add(p.QueueCounters)
	}
	secs := throughputWindow.Seconds()
	out.Throughput.IngestedPerSecond = stats.Round2(float64(sum.PushMessages) / secs)
	out.Throughput.ProcessedPerSecond = stats.Round2(float64(sum.AckSuccess+sum.AckFailed) / secs)
	out.Timestamp = msTime(now)
	if out.StatsAge, err = s.statsAge(ctx); err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type groupCountsJSON struct {
	Pending int64 `json:"pending"`
	Total   int64 `json:"total"`
}

// groupJSON is a namespace or a task: its name under key.
type groupJSON struct {
	name       string
	Messages   groupCountsJSON `json:"messages"`
	Partitions int64           `json:"partitions"`
	Queues     int             `json:"queues"`
}

type namespaceJSON struct {
	groupJSON
	Namespace string `json:"namespace"`
}

type taskJSON struct {
	groupJSON
	Task string `json:"task"`
}

// groupQueues lists the caller's queues grouped by key (their namespace or task; "" is a
// group too), by name, with live counts.
func (s *Server) groupQueues(ctx *fasthttp.RequestCtx, key func(persistence.QueueSummary) string) ([]groupJSON, error) {
	c, cancel := s.dbContext()
	defer cancel()
	queues, err := s.Store.ListQueues(c, persistence.QueueFilter{Scope: s.scope(ctx)})
	if err != nil {
		return nil, err
	}
	byName := map[string]*groupJSON{}
	for _, q := range queues {
		g := byName[key(q)]
		if g == nil {
			g = &groupJSON{name: key(q)}
			byName[g.name] = g
		}
		g.Queues++
		g.Partitions += q.Partitions
		g.Messages.Total += q.Messages.Total
		g.Messages.Pending += q.Messages.Pending
	}
	out := make([]groupJSON, 0, len(byName))
	for _, g := range byName {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(x, y groupJSON) int { return cmp.Compare(x.name, y.name) })
	return out, nil
}

// namespaces serves GET /api/v1/resources/namespaces.
func (s *Server) namespaces(ctx *fasthttp.RequestCtx) error {
	groups, err := s.groupQueues(ctx, func(q persistence.QueueSummary) string { return q.Namespace })
	if err != nil {
		return err
	}
	out := struct {
		Namespaces []namespaceJSON `json:"namespaces"`
	}{Namespaces: make([]namespaceJSON, len(groups))}
	for i, g := range groups {
		out.Namespaces[i] = namespaceJSON{groupJSON: g, Namespace: g.name}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

// tasks serves GET /api/v1/resources/tasks.
func (s *Server) tasks(ctx *fasthttp.RequestCtx) error {
	groups, err := s.groupQueues(ctx, func(q persistence.QueueSummary) string { return q.Task })
	if err != nil {
		return err
	}
	out := struct {
		Tasks []taskJSON `json:"tasks"`
	}{Tasks: make([]taskJSON, len(groups))}
	for i, g := range groups {
		out.Tasks[i] = taskJSON{groupJSON: g, Task: g.name}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type refreshJSON struct {
	Cleanup struct {
		ForgottenQueues int `json:"forgottenQueues"`
	} `json:"cleanup"`
	Namespace struct {
		NamespacesUpdated int `json:"namespacesUpdated"`
	} `json:"namespace"`
	Partition struct {
		PartitionsCounted int64 `json:"partitionsCounted"`
	} `json:"partition"`
	Queue struct {
		QueuesUpdated int `json:"queuesUpdated"`
	} `json:"queue"`
	System struct {
		SystemUpdated int `json:"systemUpdated"`
	} `json:"system"`
	Task struct {
		TasksUpdated int `json:"tasksUpdated"`
	} `json:"task"`
}

// refreshStats serves POST /api/v1/stats/refresh: this broker flushes its per-minute
// statistics now instead of at the end of the minute, and says what it wrote.
func (s *Server) refreshStats(ctx *fasthttp.RequestCtx) error {
	c, cancel := s.dbContext()
	defer cancel()
	r, err := s.Control.RefreshStats(c)
	if err != nil {
		return err
	}
	var out refreshJSON
	out.Cleanup.ForgottenQueues = r.Forgotten
	out.Namespace.NamespacesUpdated = r.Namespaces
	out.Partition.PartitionsCounted = r.Partitions
	out.Queue.QueuesUpdated = r.Queues
	out.System.SystemUpdated = 1
	out.Task.TasksUpdated = r.Tasks
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}
