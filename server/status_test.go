package server_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
)

// flushStats flushes a broker's per-minute statistics now (its test hook, not a sleep).
func flushStats(t *testing.T, c *servertest.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Broker.FlushStats(ctx); err != nil {
		t.Fatalf("statistics flush: %v", err)
	}
}

// window is the query of a window ending a minute from now: the flushed minute is in it.
func window(span time.Duration, kv ...string) string {
	to := time.Now().Add(time.Minute)
	q := url.Values{"from": {to.Add(-span).UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return "?" + q.Encode()
}

// getKeys GETs path, decodes it into out and checks that its top-level keys are exactly keys.
func getKeys(t *testing.T, c *servertest.Client, path string, out any, keys ...string) {
	t.Helper()
	status, body := c.Do("GET", path, nil)
	if status != 200 {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	if got := slices.Sorted(maps.Keys(top)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Errorf("GET %s: keys %v, want %v", path, got, slices.Sorted(slices.Values(keys)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

type opsPoint struct {
	Bucket            string   `json:"bucket"`
	QueueName         string   `json:"queueName"`
	PushRequests      int64    `json:"pushRequests"`
	PushMessages      int64    `json:"pushMessages"`
	PopMessages       int64    `json:"popMessages"`
	PopEmpty          int64    `json:"popEmpty"`
	AckRequests       int64    `json:"ackRequests"`
	AckSuccess        int64    `json:"ackSuccess"`
	AckFailed         int64    `json:"ackFailed"`
	Transactions      int64    `json:"transactions"`
	PartitionsCreated int64    `json:"partitionsCreated"`
	PartitionsDeleted int64    `json:"partitionsDeleted"`
	PartitionCount    *int64   `json:"partitionCount"`
	AvgLagMs          *int64   `json:"avgLagMs"`
	MaxLagMs          *int64   `json:"maxLagMs"`
	PushPerSecond     float64  `json:"pushPerSecond"`
	ParkedCount       *float64 `json:"parkedCount"`
}

type queueOps struct {
	BucketMinutes int        `json:"bucketMinutes"`
	Queues        []string   `json:"queues"`
	Series        []opsPoint `json:"series"`
}

// totals sums the points of each queue (a flush on the minute may split a workload in two).
func (o queueOps) totals() map[string]opsPoint {
	out := map[string]opsPoint{}
	for _, p := range o.Series {
		s := out[p.QueueName]
		s.QueueName = p.QueueName
		s.PushRequests += p.PushRequests
		s.PushMessages += p.PushMessages
		s.PopMessages += p.PopMessages
		s.PopEmpty += p.PopEmpty
		s.AckRequests += p.AckRequests
		s.AckSuccess += p.AckSuccess
		s.AckFailed += p.AckFailed
		s.Transactions += p.Transactions
		s.PartitionsCreated += p.PartitionsCreated
		s.PartitionsDeleted += p.PartitionsDeleted
		if p.PartitionCount != nil {
			s.PartitionCount = p.PartitionCount
		}
		if p.AvgLagMs != nil {
			s.AvgLagMs, s.MaxLagMs = p.AvgLagMs, p.MaxLagMs
		}
		out[p.QueueName] = s
	}
	return out
}

func readQueueOps(t *testing.T, c *servertest.Client, kv ...string) queueOps {
	t.Helper()
	var o queueOps
	getKeys(t, c, "/api/v1/analytics/queue-ops"+window(time.Hour, kv...), &o, "timeRange", "bucketMinutes", "series", "queues")
	if o.BucketMinutes != 1 {
		t.Errorf("an hour's window has %d-minute buckets, want 1", o.BucketMinutes)
	}
	return o
}

type counts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	DeadLetter int64 `json:"deadLetter"`
}

type statusQueue struct {
	Name       string `json:"name"`
	Partitions int64  `json:"partitions"`
	Messages   counts `json:"messages"`
}

// The status, resources and analytics routes show a known workload exactly: live counts of
// the queues, and after a flush of the statistics the counts of what the clients did.
func TestStatusRoutesCountAKnownWorkload(t *testing.T) {
	const serverID = "status-broker"
	c := startBroker(t, func(c *config.Config) { c.ServerID = serverID })
	observedWorkload(t, c)
	flushStats(t, c)

	t.Run("the queue list: live counts, newest first, paged", func(t *testing.T) {
		var list struct {
			Queues     []statusQueue  `json:"queues"`
			Pagination map[string]int `json:"pagination"`
		}
		getKeys(t, c, "/api/v1/status/queues", &list, "queues", "pagination")
		want := []statusQueue{
			{"obs-c", 1, counts{Total: 1, Pending: 1}}, {"obs-b", 1, counts{Total: 6, Pending: 6}},
			{"obs-a", 3, counts{Total: 6, Pending: 3}}, {"obs-dlq", 1, counts{Total: 2}},
		}
		if !slices.Equal(list.Queues, want) {
			t.Errorf("status/queues %s, want %s", fmtJSON(list.Queues), fmtJSON(want))
		}
		getKeys(t, c, "/api/v1/status/queues?limit=2&offset=1", &list, "queues", "pagination")
		if !slices.Equal(list.Queues, want[1:3]) || list.Pagination["limit"] != 2 || list.Pagination["offset"] != 1 {
			t.Errorf("page 2 of 2: %s", fmtJSON(list))
		}

	})
	t.Run("one queue: settings, partitions with their cursor, totals", func(t *testing.T) {
		var detail struct {
			Queue struct {
				Name   string         `json:"name"`
				Config map[string]any `json:"config"`
			} `json:"queue"`
			Partitions []struct {
				Name     string `json:"name"`
				Messages counts `json:"messages"`
				Stats    counts `json:"stats"`
				Cursor   struct {
					TotalConsumed int64 `json:"totalConsumed"`
				} `json:"cursor"`
				LastActivity *string `json:"lastActivity"`
			} `json:"partitions"`
			Totals struct {
				counts
				Messages counts `json:"messages"`
			} `json:"totals"`
		}
		getKeys(t, c, "/api/v1/status/queues/obs-a", &detail, "queue", "partitions", "totals")
		if len(detail.Partitions) != 3 || detail.Partitions[0].Name != "p0" || detail.Partitions[0].Cursor.TotalConsumed != 3 ||
			detail.Partitions[0].LastActivity == nil || detail.Partitions[0].Messages != (counts{Total: 3, Completed: 3}) ||
			detail.Partitions[1].Messages != (counts{Total: 2, Pending: 2}) || detail.Partitions[1].Stats != detail.Partitions[1].Messages ||
			detail.Partitions[1].LastActivity != nil {
			t.Errorf("obs-a's partitions: %s", fmtJSON(detail.Partitions))
		}
		if wantTotals := (counts{Total: 6, Pending: 3, Completed: 3}); detail.Totals.counts != wantTotals || detail.Totals.Messages != wantTotals {
			t.Errorf("obs-a's totals: %s", fmtJSON(detail.Totals))
		}
		getKeys(t, c, "/api/v1/status/queues/obs-dlq", &detail, "queue", "partitions", "totals")
		if detail.Queue.Config["retryLimit"] != 0.0 || len(detail.Queue.Config) != 6 || detail.Totals.DeadLetter != 2 {
			t.Errorf("obs-dlq: %s", fmtJSON(detail))
		}
		if status, body := c.Do("GET", "/api/v1/status/queues/nope", nil); status != 404 || string(body) != `{"error":"Queue not found"}` {
			t.Errorf("unknown queue: %d %s", status, body)
		}

	})
	t.Run("the messages of a queue, whatever their age", func(t *testing.T) {
		var msgs []map[string]string
		c.JSON("GET", "/api/v1/status/queues/obs-dlq/messages", nil, 200, &msgs)
		if len(msgs) != 2 || msgs[0]["status"] != "dead_letter" || msgs[0]["queuePath"] != "obs-dlq/Default" || len(msgs[0]) != 8 {
			t.Errorf("obs-dlq's messages: %s", fmtJSON(msgs))
		}
		c.JSON("GET", "/api/v1/status/queues/obs-b/messages?limit=4", nil, 200, &msgs)
		if len(msgs) != 4 || msgs[0]["status"] != "pending" {
			t.Errorf("obs-b's messages, an hour old: %s", fmtJSON(msgs))
		}

	})
	t.Run("the overview, the namespaces and the tasks", func(t *testing.T) {
		// The queues' names have no dot, so every queue is its own namespace, and none has a task.
		var ov struct {
			Queues, Namespaces, Tasks int
			Partitions                int64
			Messages                  counts
			Lag                       struct {
				Time, Offset struct{ Avg, Median, Min, Max int64 }
			}
			Throughput struct{ IngestedPerSecond, ProcessedPerSecond float64 }
			StatsAge   int64
		}
		getKeys(t, c, "/api/v1/resources/overview", &ov, "queues", "partitions", "namespaces", "tasks", "messages", "lag",
			"throughput", "timestamp", "statsAge")
		if ov.Queues != 4 || ov.Partitions != 6 || ov.Namespaces != 4 || ov.Tasks != 0 ||
			ov.Messages != (counts{Total: 15, Pending: 10, Completed: 3, DeadLetter: 2}) || ov.StatsAge < 0 {
			t.Errorf("overview: %s", fmtJSON(ov))
		}
		if o := ov.Lag.Offset; o.Min != 0 || o.Median != 3 || o.Max != 6 || o.Avg != 3 || ov.Lag.Time.Max < 3600 {
			t.Errorf("overview lag: %s", fmtJSON(ov.Lag))
		}
		if ov.Throughput.IngestedPerSecond != 0.05 || ov.Throughput.ProcessedPerSecond != 0.02 {
			t.Errorf("overview throughput (15 pushed, 5 acknowledged in 5 minutes): %s", fmtJSON(ov.Throughput))
		}
		type group struct {
			Namespace, Task string
			Queues          int
			Partitions      int64
			Messages        struct{ Total, Pending int64 }
		}
		var ns struct{ Namespaces []group }
		getKeys(t, c, "/api/v1/resources/namespaces", &ns, "namespaces")
		if len(ns.Namespaces) != 4 || ns.Namespaces[0].Namespace != "obs-a" || ns.Namespaces[0].Partitions != 3 ||
			ns.Namespaces[0].Messages.Total != 6 || ns.Namespaces[0].Messages.Pending != 3 {
			t.Errorf("namespaces: %s", fmtJSON(ns))
		}
		var tasks struct{ Tasks []group }
		getKeys(t, c, "/api/v1/resources/tasks", &tasks, "tasks")
		if len(tasks.Tasks) != 1 || tasks.Tasks[0].Task != "" || tasks.Tasks[0].Queues != 4 || tasks.Tasks[0].Partitions != 6 ||
			tasks.Tasks[0].Messages.Total != 15 || tasks.Tasks[0].Messages.Pending != 10 {
			t.Errorf("tasks: %s", fmtJSON(tasks))
		}

	})
	t.Run("per queue, what the clients did, from the flushed statistics", func(t *testing.T) {
		ops := readQueueOps(t, c)
		if !slices.Equal(ops.Queues, []string{"obs-a", "obs-b", "obs-c", "obs-dlq"}) {
			t.Errorf("queue-ops queues %v", ops.Queues)
		}
		three, one := int64(3), int64(1)
		for name, w := range map[string]opsPoint{
			"obs-a":   {PushRequests: 2, PushMessages: 6, PopMessages: 3, PopEmpty: 1, AckRequests: 1, AckSuccess: 3, PartitionsCreated: 3, PartitionCount: &three},
			"obs-b":   {PushRequests: 3, PushMessages: 6, PopMessages: 1, PartitionsCreated: 1, PartitionCount: &one},
			"obs-dlq": {PushRequests: 1, PushMessages: 2, PopMessages: 2, PopEmpty: 1, AckRequests: 2, AckFailed: 2, PartitionsCreated: 1, PartitionCount: &one},
			"obs-c":   {PushMessages: 1, Transactions: 1, PartitionsCreated: 1, PartitionCount: &one},
		} {
			got := ops.totals()[name]
			if got.PushRequests != w.PushRequests || got.PushMessages != w.PushMessages || got.PopMessages != w.PopMessages ||
				got.PopEmpty != w.PopEmpty || got.AckRequests != w.AckRequests || got.AckSuccess != w.AckSuccess ||
				got.AckFailed != w.AckFailed || got.Transactions != w.Transactions || got.PartitionsCreated != w.PartitionsCreated ||
				got.PartitionCount == nil || *got.PartitionCount != *w.PartitionCount {
				t.Errorf("queue-ops %s: %s, want %s", name, fmtJSON(got), fmtJSON(w))
			}
			if (got.AvgLagMs != nil) != (w.PopMessages > 0) || got.AvgLagMs != nil && (*got.AvgLagMs < 0 || *got.MaxLagMs < *got.AvgLagMs) {
				t.Errorf("queue-ops %s lag: %s", name, fmtJSON(got))
			}
		}
		if b := readQueueOps(t, c, "queue", "obs-b"); len(b.Queues) != 1 || b.totals()["obs-b"].PushMessages != 6 {
			t.Errorf("queue-ops of obs-b: %s", fmtJSON(b))
		}
		var lag []struct {
			QueueName  string `json:"queueName"`
			PopCount   int64  `json:"popCount"`
			BucketTime string `json:"bucketTime"`
		}
		c.JSON("GET", "/api/v1/analytics/queue-lag"+window(time.Hour), nil, 200, &lag)
		pops := map[string]int64{}
		for _, l := range lag {
			pops[l.QueueName] += l.PopCount
		}
		if !maps.Equal(pops, map[string]int64{"obs-a": 3, "obs-b": 1, "obs-dlq": 2}) {
			t.Errorf("queue-lag: %s", fmtJSON(lag))
		}

	})
	t.Run("the dashboard status: totals, live counts, dead letters, brokers", func(t *testing.T) {
		var st struct {
			BucketMinutes, PointCount int
			Throughput                []struct{ Ingested, Processed, PopMessages int64 }
			Queues                    []statusQueue
			Messages                  struct {
				Total, Pending, Processing, Completed, Failed, DeadLetter int64
				Requests                                                  struct{ Push, Pop, Ack int64 }
			}
			Leases          struct{ Active int64 }
			DeadLetterQueue struct {
				TotalMessages, AffectedPartitions int64
				TopErrors                         []struct {
					Error string
					Count int64
				}
			}
			Workers []struct{ Hostname string }
			Errors  struct{ AckFailed, DlqMessages int64 }
		}
		getKeys(t, c, "/api/v1/status"+window(time.Hour), &st, "timeRange", "bucketMinutes", "pointCount", "throughput",
			"queues", "messages", "leases", "deadLetterQueue", "workers", "errors", "statsAge")
		var ingested, processed, popped int64
		for _, p := range st.Throughput {
			ingested, processed, popped = ingested+p.Ingested, processed+p.Processed, popped+p.PopMessages
		}
		m := st.Messages
		if ingested != 15 || processed != 5 || popped != 6 || st.PointCount != len(st.Throughput) || len(st.Queues) != 4 ||
			m.Total != 15 || m.Pending != 10 || m.Completed != 3 || m.Failed != 2 || m.DeadLetter != 2 ||
			m.Requests.Push != 6 || m.Requests.Pop != 5 || m.Requests.Ack != 3 {
			t.Errorf("status: %s", fmtJSON(st))
		}
		d := st.DeadLetterQueue
		if d.TotalMessages != 2 || d.AffectedPartitions != 1 || len(d.TopErrors) != 1 || d.TopErrors[0].Error != "boom" ||
			d.TopErrors[0].Count != 2 || st.Leases.Active != 0 || st.Errors.AckFailed != 2 || st.Errors.DlqMessages != 2 ||
			len(st.Workers) != 1 || st.Workers[0].Hostname != serverID {
			t.Errorf("status: %s", fmtJSON(st))
		}
		var an struct {
			Interval   string
			DataPoints []struct{ Messages int64 }
		}
		getKeys(t, c, "/api/v1/status/analytics"+window(time.Hour, "interval", "minute"), &an, "dataPoints", "interval", "from", "to")
		var pushed int64
		for _, p := range an.DataPoints {
			pushed += p.Messages
		}
		if pushed != 15 || an.Interval != "minute" || len(an.DataPoints) != 61 {
			t.Errorf("status/analytics: %d points, %d messages", len(an.DataPoints), pushed)
		}

	})
	t.Run("the brokers' figures", func(t *testing.T) {
		var wm struct {
			TimeSeries []struct{ PushRequests, PushMessages, AckFailed int64 }
			Workers    []struct{ Hostname, LastSeen string }
			Queues     []struct {
				QueueName string
				PopCount  int64
			}
			Summary struct{ TotalPushMessages, TotalPushRequests, TotalAckFailed, TotalDlq int64 }
		}
		getKeys(t, c, "/api/v1/analytics/worker-metrics"+window(time.Hour), &wm, "timeRange", "bucketMinutes", "pointCount",
			"timeSeries", "workers", "queues", "summary")
		if wm.Summary.TotalPushMessages != 15 || wm.Summary.TotalPushRequests != 5 || wm.Summary.TotalAckFailed != 2 ||
			wm.Summary.TotalDlq != 2 || len(wm.Workers) != 1 || wm.Workers[0].Hostname != serverID || len(wm.Queues) != 4 ||
			wm.Queues[0].QueueName != "obs-a" || wm.Queues[0].PopCount != 3 {
			t.Errorf("worker-metrics: %s", fmtJSON(wm))
		}
		var sm struct {
			ReplicaCount int
			Replicas     []struct {
				Hostname   string
				TimeSeries []struct {
					SampleCount int
					Metrics     struct {
						CPU      map[string]struct{ Avg *float64 }
						Database map[string]struct{ Last *float64 }
						Memory   map[string]struct{ Max *float64 }
					}
				}
			}
		}
		getKeys(t, c, "/api/v1/analytics/system-metrics"+window(time.Hour), &sm, "timeRange", "replicas", "replicaCount",
			"bucketMinutes", "pointCount")
		if sm.ReplicaCount != 1 || sm.Replicas[0].Hostname != serverID || len(sm.Replicas[0].TimeSeries) == 0 {
			t.Fatalf("system-metrics: %s", fmtJSON(sm))
		}
		p := sm.Replicas[0].TimeSeries[0]
		if p.SampleCount < 1 || p.Metrics.CPU["user_us"].Avg == nil || p.Metrics.Database["pool_size"].Last == nil ||
			*p.Metrics.Database["pool_size"].Last != 20 || p.Metrics.Memory["rss_bytes"].Max == nil || *p.Metrics.Memory["rss_bytes"].Max <= 0 {
			t.Errorf("system-metrics point: %s", fmtJSON(p))
		}
		var parked struct {
			Replicas []struct {
				Hostname string
				WorkerID int
			}
		}
		getKeys(t, c, "/api/v1/analytics/queue-parked-replicas"+window(time.Hour), &parked, "timeRange", "bucketMinutes", "series", "replicas")
		if len(parked.Replicas) != 1 || parked.Replicas[0].Hostname != serverID {
			t.Errorf("queue-parked-replicas: %s", fmtJSON(parked))
		}
		var ret struct{ Series []any }
		getKeys(t, c, "/api/v1/analytics/retention"+window(time.Hour), &ret, "timeRange", "bucketMinutes", "series", "totals")
		if len(ret.Series) != 0 {
			t.Errorf("retention deleted nothing, yet: %s", fmtJSON(ret))
		}
		var pg struct {
			TableSizes []struct{ Table string }
		}
		getKeys(t, c, "/api/v1/analytics/postgres-stats", &pg, "timestamp", "database", "databaseCache", "tableCache",
			"indexCache", "cacheSummary", "deadTuples", "hotUpdates", "activeQueries", "autovacuumStatus", "bufferConfig",
			"bufferUsage", "tableSizes")
		if !slices.ContainsFunc(pg.TableSizes, func(s struct{ Table string }) bool { return s.Table == "segments" }) {
			t.Errorf("postgres-stats tables: %s", fmtJSON(pg.TableSizes))
		}

	})
	t.Run("a refresh flushes at once; with nothing counted since, it adds to no queue", func(t *testing.T) {
		var refresh struct {
			Queue  struct{ QueuesUpdated int }
			System struct{ SystemUpdated int }
		}
		c.JSON("POST", "/api/v1/stats/refresh", nil, 200, &refresh)
		if refresh.Queue.QueuesUpdated != 0 || refresh.System.SystemUpdated != 1 {
			t.Errorf("refresh: %s", fmtJSON(refresh))
		}
	})
}

// Two brokers on one database answer the same cluster-wide statistics: the sums of what each
// flushed.
func TestStatusAgreesAcrossBrokers(t *testing.T) {
	db := pgtest.NewDatabase(t)
	a := servertest.Start(t, db, func(c *config.Config) { c.ServerID = "broker-a" })
	b := servertest.Start(t, db, func(c *config.Config) { c.ServerID = "broker-b" })
	push(t, a, item{"queue": "shared", "payload": 1}, item{"queue": "shared", "payload": 2}, item{"queue": "shared", "payload": 3})
	push(t, b, item{"queue": "shared", "payload": 4})
	m := pop(t, b, "/api/v1/pop/queue/shared", "batch", "2").Messages
	if len(m) != 2 {
		t.Fatalf("pop: %d messages", len(m))
	}
	ackAll(t, a, "", m)
	flushStats(t, a)
	flushStats(t, b)

	oa, ob := readQueueOps(t, a), readQueueOps(t, b)
	if fmtJSON(oa.Series) != fmtJSON(ob.Series) {
		t.Errorf("queue-ops differ:\n%s\n%s", fmtJSON(oa.Series), fmtJSON(ob.Series))
	}
	got := oa.totals()["shared"]
	if got.PushRequests != 2 || got.PushMessages != 4 || got.PopMessages != 2 || got.AckRequests != 1 || got.AckSuccess != 2 {
		t.Errorf("shared: %s", fmtJSON(got))
	}
	type summary struct{ TotalPushMessages, TotalPopMessages, TotalAckMessages int64 }
	var wa, wb struct {
		Summary summary
		Workers []struct{ Hostname string }
	}
	a.JSON("GET", "/api/v1/analytics/worker-metrics"+window(time.Hour), nil, 200, &wa)
	b.JSON("GET", "/api/v1/analytics/worker-metrics"+window(time.Hour), nil, 200, &wb)
	if wa.Summary != (summary{4, 2, 2}) || wa.Summary != wb.Summary || len(wa.Workers) != 2 ||
		wa.Workers[0].Hostname != "broker-a" || wa.Workers[1].Hostname != "broker-b" {
		t.Errorf("worker-metrics: %s and %s", fmtJSON(wa), fmtJSON(wb))
	}
	var sa, sb struct {
		Messages struct{ Total, Completed int64 }
	}
	a.JSON("GET", "/api/v1/status"+window(time.Hour), nil, 200, &sa)
	b.JSON("GET", "/api/v1/status"+window(time.Hour), nil, 200, &sb)
	if sa.Messages.Total != 4 || sa.Messages.Completed != 2 || sa != sb {
		t.Errorf("status: %s and %s", fmtJSON(sa), fmtJSON(sb))
	}
}

// With tenancy, every listing and aggregate is the caller's tenant's, under the names it knows.
func TestStatusIsScopedToTheTenant(t *testing.T) {
	c := startBroker(t, tenancyOn)
	acme := c.WithHeader("x-queen-tenant", "acme")
	globex := c.WithHeader("x-queen-tenant", "globex")
	push(t, c, item{"queue": "orders", "payload": 1})
	push(t, acme, item{"queue": "orders", "payload": 1}, item{"queue": "orders", "payload": 2}, item{"queue": "acme-only", "payload": 3})
	push(t, globex, item{"queue": "orders", "payload": 1}, item{"queue": "orders", "payload": 2}, item{"queue": "orders", "payload": 3})
	if p := pop(t, acme, "/api/v1/pop/queue/orders", "autoAck", "true"); len(p.Messages) != 1 {
		t.Fatalf("acme pop: %s", fmtJSON(p))
	}
	flushStats(t, c)

	for _, check := range []struct {
		client  *servertest.Client
		queues  []string
		pushed  map[string]int64
		pending int64
	}{
		{c, []string{"orders"}, map[string]int64{"orders": 1}, 1},
		{acme, []string{"acme-only", "orders"}, map[string]int64{"orders": 2, "acme-only": 1}, 1},
		{globex, []string{"orders"}, map[string]int64{"orders": 3}, 3},
	} {
		cl := check.client
		for _, path := range []string{"/api/v1/status/queues", "/api/v1/analytics/queue-ops" + window(time.Hour),
			"/api/v1/status" + window(time.Hour), "/api/v1/resources/namespaces", "/api/v1/analytics/queue-lag" + window(time.Hour)} {
			_, body := cl.Do("GET", path, nil)
			noInternalNames(t, path, body)
		}
		var list struct{ Queues []statusQueue }
		cl.JSON("GET", "/api/v1/status/queues", nil, 200, &list)
		var names []string
		for _, q := range list.Queues {
			names = append(names, q.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, check.queues) {
			t.Errorf("%v: status/queues %v, want %v", check.queues, names, check.queues)
		}
		pushed := map[string]int64{}
		for name, p := range readQueueOps(t, cl).totals() {
			pushed[name] = p.PushMessages
		}
		if !maps.Equal(pushed, check.pushed) {
			t.Errorf("%v: queue-ops pushed %v, want %v", check.queues, pushed, check.pushed)
		}
		var ov struct {
			Queues   int
			Messages struct{ Total, Pending int64 }
		}
		cl.JSON("GET", "/api/v1/resources/overview", nil, 200, &ov)
		var total int64
		for _, n := range check.pushed {
			total += n
		}
		if ov.Queues != len(check.queues) || ov.Messages.Total != total {
			t.Errorf("%v: overview %s", check.queues, fmtJSON(ov))
		}
		var detail struct {
			Totals struct{ Total, Pending int64 }
		}
		cl.JSON("GET", "/api/v1/status/queues/orders", nil, 200, &detail)
		if detail.Totals.Total != check.pushed["orders"] || detail.Totals.Pending != check.pending {
			t.Errorf("%v: orders %s", check.queues, fmtJSON(detail))
		}
	}
	if status, body := globex.Do("GET", "/api/v1/status/queues/acme-only", nil); status != 404 {
		t.Errorf("globex reads acme's queue: %d %s", status, body)
	}
	var msgs []any
	globex.JSON("GET", "/api/v1/status/queues/acme-only/messages", nil, 200, &msgs)
	if len(msgs) != 0 {
		t.Errorf("globex lists acme's messages: %s", fmtJSON(msgs))
	}
}
