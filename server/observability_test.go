package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/telemetry"
	"queen/testkit"
)

// page is a parsed /metrics/prometheus.
type page map[string]*dto.MetricFamily

// scrape runs the periodic read now (its test signal, not a sleep), then reads the page as
// Prometheus does: it must parse, and every family must carry a help text and a type.
func scrape(t *testing.T, c *servertest.Client) page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Broker.RefreshMetrics(ctx); err != nil {
		t.Fatalf("metrics read: %v", err)
	}
	return read(t, c)
}

// read reads the page without a periodic read first.
func read(t *testing.T, c *servertest.Client) page {
	t.Helper()
	status, raw := c.Do("GET", "/metrics/prometheus", nil)
	if status != 200 {
		t.Fatalf("/metrics/prometheus: %d %s", status, raw)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the page does not parse: %v\n%s", err, raw)
	}
	for name, f := range fams {
		if f.GetHelp() == "" || f.GetType() == dto.MetricType_UNTYPED {
			t.Errorf("%s has help %q and type %s", name, f.GetHelp(), f.GetType())
		}
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// series returns the values of a family by its labels rendered "k=v,k=v" in name order ("" for
// none); a histogram's value is its sample count.
func (p page) series(name string) map[string]float64 {
	out := map[string]float64{}
	f := p[name]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		l := labelsOf(m)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(l)) {
			parts = append(parts, k+"="+l[k])
		}
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		}
		out[strings.Join(parts, ",")] = v
	}
	return out
}

// expect checks series values exactly: every series of want, and with all true no other.
func (p page) expect(t *testing.T, name string, all bool, want map[string]float64) {
	t.Helper()
	got := p.series(name)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s{%s} = %v (present %v), want %v", name, k, g, ok, v)
		}
	}
	if all && len(got) != len(want) {
		t.Errorf("%s has series %v, want only %v", name, got, want)
	}
}

func (p page) value(t *testing.T, name string) float64 {
	t.Helper()
	s := p.series(name)
	v, ok := s[""]
	if !ok || len(s) != 1 {
		t.Fatalf("%s: %v, want one unlabelled series", name, s)
	}
	return v
}

// sqlExec runs a statement on the broker's database.
func sqlExec(t *testing.T, c *servertest.Client, sql string, args ...any) {
	t.Helper()
	if _, err := c.Broker.Store().Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// observedWorkload is a known workload: pushes over several queues and partitions (one of
// them a duplicate), pops, acks, failed acks into the dead-letter queue (retryLimit 0), a
// consumer group left behind, empty pops and a transaction.
func observedWorkload(t *testing.T, c *servertest.Client) {
	t.Helper()
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "obs-dlq", "options": map[string]any{"retryLimit": 0}}, 200, nil)
	push(t, c, item{"queue": "obs-a", "partition": "p0", "payload": 1}, item{"queue": "obs-a", "partition": "p0", "payload": 2},
		item{"queue": "obs-a", "partition": "p0", "payload": 3})
	push(t, c, item{"queue": "obs-a", "partition": "p1", "payload": 4}, item{"queue": "obs-a", "partition": "p1", "payload": 5},
		item{"queue": "obs-a", "partition": "p2", "payload": 6},
		item{"queue": "obs-b", "payload": 1, "transactionId": "b1"}, item{"queue": "obs-b", "payload": 2},
		item{"queue": "obs-b", "payload": 3}, item{"queue": "obs-b", "payload": 4})
	push(t, c, item{"queue": "obs-dlq", "payload": 1}, item{"queue": "obs-dlq", "payload": 2})
	if r := push(t, c, item{"queue": "obs-b", "payload": 1, "transactionId": "b1"}); r[0].Status != "duplicate" {
		t.Fatalf("repeated transactionId: %+v", r[0])
	}

	// Queue mode consumes obs-a/p0 (one batch ack); obs-dlq's two messages fail into the DLQ.
	p := pop(t, c, "/api/v1/pop/queue/obs-a/partition/p0", "batch", "10")
	if len(p.Messages) != 3 {
		t.Fatalf("pop obs-a/p0: %s", fmtJSON(p))
	}
	for _, a := range ackAll(t, c, "", p.Messages) {
		if !a.Success {
			t.Fatalf("ack: %s", fmtJSON(a))
		}
	}
	p = pop(t, c, "/api/v1/pop/queue/obs-dlq", "batch", "10")
	if len(p.Messages) != 2 {
		t.Fatalf("pop obs-dlq: %s", fmtJSON(p))
	}
	for _, m := range p.Messages {
		if a := ack(t, c, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID,
			"status": "failed", "error": "boom"}); !a.Success || !a.DLQ {
			t.Fatalf("failed ack with retryLimit 0: %s", fmtJSON(a))
		}
	}
	// Group laggard reads one message of obs-b, then two more arrive.
	if p := pop(t, c, "/api/v1/pop/queue/obs-b", "consumerGroup", "laggard", "autoAck", "true"); len(p.Messages) != 1 {
		t.Fatalf("laggard pop: %s", fmtJSON(p))
	}
	push(t, c, item{"queue": "obs-b", "payload": 5}, item{"queue": "obs-b", "payload": 6})
	// Two pops find nothing, the second a long-poll.
	if p := pop(t, c, "/api/v1/pop/queue/obs-dlq"); len(p.Messages) != 0 {
		t.Fatalf("empty pop: %s", fmtJSON(p))
	}
	if p := pop(t, c, "/api/v1/pop/queue/obs-a/partition/p0", "wait", "true", "timeout", "10"); len(p.Messages) != 0 {
		t.Fatalf("empty long-poll: %s", fmtJSON(p))
	}
	var tx struct{ Success bool }
	c.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "items": []item{{"queue": "obs-c", "payload": 1}}},
	}}, 200, &tx)
	if !tx.Success {
		t.Fatal("the transaction failed")
	}
	// obs-b's messages, all unconsumed in queue mode and after laggard's first, are an hour old.
	sqlExec(t, c, `UPDATE queen.segments m SET created_at = now() - interval '1 hour'
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE m.partition_id = p.id AND q.name = 'obs-b'`)
}

// The counters, depths, dead letters and group lag of a known workload, exactly.
func TestMetricsCountAKnownWorkload(t *testing.T) {
	c := startBroker(t)
	observedWorkload(t, c)
	p := scrape(t, c)

	for name, want := range map[string]float64{
		"push_requests": 5, "push_messages": 15, "pop_requests": 5, "pop_messages": 6, "pop_empty": 2,
		"ack_requests": 3, "ack_messages": 5, "transactions": 1, "dlq": 2, "db_errors": 0, "stream_cycles": 0,
	} {
		if got := p.value(t, "queen_process_"+name+"_total"); got != want {
			t.Errorf("queen_process_%s_total = %v, want %v", name, got, want)
		}
		// One broker: the cluster's totals are its own.
		if got := p.value(t, "queen_cluster_"+name+"_total"); got != want {
			t.Errorf("queen_cluster_%s_total = %v, want %v", name, got, want)
		}
	}
	p.expect(t, "queen_request_duration_seconds", true, map[string]float64{
		"op=push": 5, "op=pop": 4, "op=pop_wait": 1, "op=ack": 3, "op=transaction": 1, "op=stream_cycle": 0})
	// The fused calls: every pushed item (the duplicate too, but not the transaction's), and
	// every acknowledgement of the ack routes.
	p.expect(t, "queen_batch_items_fired_total", true, map[string]float64{"op=push": 15, "op=ack": 5})

	p.expect(t, "queen_queue_push_messages_total", true, map[string]float64{
		"queue=obs-a": 6, "queue=obs-b": 6, "queue=obs-dlq": 2, "queue=obs-c": 1})
	p.expect(t, "queen_queue_pop_messages_total", true, map[string]float64{
		"queue=obs-a": 3, "queue=obs-b": 1, "queue=obs-dlq": 2, "queue=obs-c": 0})
	p.expect(t, "queen_queue_ack_messages_total", true, map[string]float64{
		"queue=obs-a": 3, "queue=obs-b": 0, "queue=obs-dlq": 2, "queue=obs-c": 0})
	p.expect(t, "queen_queue_pending_messages", true, map[string]float64{
		"queue=obs-a": 3, "queue=obs-b": 6, "queue=obs-dlq": 0, "queue=obs-c": 1})
	p.expect(t, "queen_dlq_depth_by_queue", true, map[string]float64{
		"queue=obs-a": 0, "queue=obs-b": 0, "queue=obs-dlq": 2, "queue=obs-c": 0})
	p.expect(t, "queen_consumer_group_lag_messages", true, map[string]float64{"consumer_group=laggard,queue=obs-b": 5})
	if age := p.series("queen_queue_oldest_pending_age_seconds")["queue=obs-b"]; age < 3600 || age > 3600+600 {
		t.Errorf("obs-b's oldest pending message is %v s old, want about an hour", age)
	}
	if age := p.series("queen_queue_oldest_pending_age_seconds")["queue=obs-dlq"]; age != 0 {
		t.Errorf("obs-dlq has nothing pending but an oldest age of %v s", age)
	}
	if lag := p.series("queen_consumer_group_lag_seconds")["consumer_group=laggard,queue=obs-b"]; lag < 3600 || lag > 3600+600 {
		t.Errorf("laggard is %v s behind, want about an hour", lag)
	}
	for name, want := range map[string]float64{
		"queen_cluster_queues": 4, "queen_cluster_pending_messages": 10, "queen_dlq_depth": 2,
		"queen_db_pool_size": 20, "queen_file_buffer_pending": 0, "queen_file_buffer_db_healthy": 1,
		"queen_maintenance_mode_enabled": 0, "queen_pop_maintenance_mode_enabled": 0, "queen_pop_parked": 0,
	} {
		if got := p.value(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	p.expect(t, "queen_metrics_series_dropped", true, map[string]float64{"kind=queue": 0, "kind=consumer_group": 0})
	if p.value(t, "queen_uptime_seconds") <= 0 || p.value(t, "queen_process_resident_memory_bytes") <= 0 ||
		p.value(t, "queen_metrics_refresh_age_seconds") < 0 || p["go_goroutines"] == nil || p["process_resident_memory_bytes"] == nil {
		t.Error("uptime, memory, the read's age, the Go runtime or the process figures are missing")
	}
	// Every queen_ family on the page is documented in the catalogue.
	for name := range p {
		if strings.HasPrefix(name, "queen_") && !slices.ContainsFunc(telemetry.Families, func(f telemetry.Family) bool { return f.Name == name }) {
			t.Errorf("%s is not in telemetry.Families", name)
		}
	}
}

// With tenancy, a tenant's queue is labelled with the name its tenant knows and a tenant
// label; the default tenant's queue of the same name has none, and no other series has one.
func TestMetricsTenantLabels(t *testing.T) {
	c := startBroker(t, tenancyOn)
	acme := c.WithHeader("x-queen-tenant", "acme")
	globex := c.WithHeader("x-queen-tenant", "globex")
	push(t, c, item{"queue": "orders", "payload": 1})
	push(t, acme, item{"queue": "orders", "payload": 1}, item{"queue": "orders", "payload": 2})
	push(t, globex, item{"queue": "orders", "payload": 1}, item{"queue": "orders", "payload": 2}, item{"queue": "orders", "payload": 3})
	if p := pop(t, acme, "/api/v1/pop/queue/orders", "consumerGroup", "audit", "autoAck", "true"); len(p.Messages) != 1 {
		t.Fatalf("acme group pop: %s", fmtJSON(p))
	}
	p := scrape(t, c)

	want := map[string]float64{"queue=orders": 1, "queue=orders,tenant=acme": 2, "queue=orders,tenant=globex": 3}
	p.expect(t, "queen_queue_push_messages_total", true, want)
	p.expect(t, "queen_queue_pending_messages", true, want)
	p.expect(t, "queen_consumer_group_lag_messages", true, map[string]float64{"consumer_group=audit,queue=orders,tenant=acme": 1})
	perQueue := map[string]bool{}
	for _, f := range telemetry.Families {
		if strings.Contains(f.Labels, "tenant") {
			perQueue[f.Name] = true
		}
	}
	for name, f := range p {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if strings.Contains(l.GetValue(), "\x1f") {
					t.Errorf("%s shows a stored name: %v", name, labelsOf(m))
				}
				if l.GetName() == "tenant" && !perQueue[name] {
					t.Errorf("%s has a tenant label: %v", name, labelsOf(m))
				}
			}
		}
	}
}

// More queues and groups than QUEEN_METRICS_MAX_SERIES: the largest backlogs keep their
// series, the rest are counted as left out, and the cluster-wide families still count them.
func TestMetricsSeriesCap(t *testing.T) {
	c := startBroker(t, func(c *config.Config) { c.MetricsMaxSeries = 2 })
	for n := 1; n <= 5; n++ {
		items := make([]item, n)
		for i := range items {
			items[i] = item{"queue": fmt.Sprintf("cap-%d", n), "payload": i}
		}
		push(t, c, items...)
	}
	for _, g := range []string{"g1", "g2", "g3"} {
		if p := pop(t, c, "/api/v1/pop/queue/cap-5", "consumerGroup", g, "autoAck", "true", "batch", "1"); len(p.Messages) != 1 {
			t.Fatalf("%s pop: %s", g, fmtJSON(p))
		}
	}
	if p := pop(t, c, "/api/v1/pop/queue/cap-5", "consumerGroup", "g3", "autoAck", "true", "batch", "1"); len(p.Messages) != 1 {
		t.Fatalf("g3 pop: %s", fmtJSON(p))
	}
	p := scrape(t, c)
	p.expect(t, "queen_queue_pending_messages", true, map[string]float64{"queue=cap-5": 5, "queue=cap-4": 4})
	p.expect(t, "queen_queue_push_messages_total", true, map[string]float64{"queue=cap-5": 5, "queue=cap-4": 4})
	p.expect(t, "queen_consumer_group_lag_messages", true, map[string]float64{
		"consumer_group=g1,queue=cap-5": 4, "consumer_group=g2,queue=cap-5": 4})
	p.expect(t, "queen_metrics_series_dropped", true, map[string]float64{"kind=queue": 3, "kind=consumer_group": 1})
	if q, pending := p.value(t, "queen_cluster_queues"), p.value(t, "queen_cluster_pending_messages"); q != 5 || pending != 15 {
		t.Errorf("cluster: %v queues, %v pending; want 5 and 15", q, pending)
	}
}

// Two brokers on one database report the same cluster totals: the sums of what each counted.
func TestClusterTotalsAgreeAcrossBrokers(t *testing.T) {
	db := pgtest.NewDatabase(t)
	a := servertest.Start(t, db, func(c *config.Config) { c.ServerID = "broker-a" })
	b := servertest.Start(t, db, func(c *config.Config) { c.ServerID = "broker-b" })
	push(t, a, item{"queue": "shared", "payload": 1}, item{"queue": "shared", "payload": 2}, item{"queue": "shared", "payload": 3})
	push(t, b, item{"queue": "shared", "payload": 4}, item{"queue": "other", "payload": 5})
	m := pop(t, b, "/api/v1/pop/queue/shared", "batch", "2").Messages
	if len(m) != 2 {
		t.Fatalf("pop: %d messages", len(m))
	}
	ackAll(t, a, "", m)

	// Each read adds the broker's own counts; the second round reads everyone's.
	for range 2 {
		scrape(t, a)
		scrape(t, b)
	}
	pa, pb := scrape(t, a), scrape(t, b)
	want := map[string]float64{"push_requests": 2, "push_messages": 5, "pop_requests": 1, "pop_messages": 2,
		"ack_requests": 1, "ack_messages": 2}
	for name := range pa {
		if !strings.HasPrefix(name, "queen_cluster_") {
			continue
		}
		va, vb := pa.value(t, name), pb.value(t, name)
		if va != vb {
			t.Errorf("%s: broker a says %v, broker b %v", name, va, vb)
		}
		if w, ok := want[strings.TrimSuffix(strings.TrimPrefix(name, "queen_cluster_"), "_total")]; ok && va != w {
			t.Errorf("%s = %v, want %v", name, va, w)
		}
	}
	if pa.value(t, "queen_cluster_queues") != 2 || pa.value(t, "queen_cluster_pending_messages") != 3 {
		t.Errorf("cluster queues %v, pending %v; want 2 and 3", pa.value(t, "queen_cluster_queues"), pa.value(t, "queen_cluster_pending_messages"))
	}
	if pa.value(t, "queen_process_push_messages_total") != 3 || pb.value(t, "queen_process_push_messages_total") != 2 {
		t.Error("each broker's own counters must stay its own")
	}
	// The per-minute statistics come from the same flushes: their sums are the cluster's.
	var w struct {
		Summary struct{ TotalPushMessages, TotalPopMessages, TotalAckMessages float64 }
	}
	a.JSON("GET", "/api/v1/analytics/worker-metrics"+window(time.Hour), nil, 200, &w)
	for name, got := range map[string]float64{"push_messages": w.Summary.TotalPushMessages,
		"pop_messages": w.Summary.TotalPopMessages, "ack_messages": w.Summary.TotalAckMessages} {
		if cluster := pa.value(t, "queen_cluster_"+name+"_total"); got != cluster {
			t.Errorf("worker-metrics sums %s to %v, the cluster counter says %v", name, got, cluster)
		}
	}
}

type metricsJSON struct {
	Uptime   float64
	Requests struct{ Total, Rate float64 }
	Messages struct{ Total, Rate float64 }
	Database struct{ PoolSize, IdleConnections, WaitingRequests float64 }
	Memory   struct{ RSS, HeapTotal, HeapUsed, External, ArrayBuffers float64 }
	CPU      struct{ User, System float64 }
}

// GET /metrics has the reference's shape with this broker's figures, and rates once a window
// holding the requests has closed.
func TestMetricsJSON(t *testing.T) {
	c := startBroker(t, func(c *config.Config) { c.LogRates = time.Second })
	push(t, c, item{"queue": "j", "payload": 1}, item{"queue": "j", "payload": 2})
	push(t, c, item{"queue": "j", "payload": 3})
	pop(t, c, "/api/v1/pop/queue/j", "batch", "2", "autoAck", "true")

	status, raw := c.Do("GET", "/metrics", nil)
	var keys map[string]json.RawMessage
	if status != 200 || json.Unmarshal(raw, &keys) != nil {
		t.Fatalf("/metrics: %d %s", status, raw)
	}
	if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, []string{"cpu", "database", "memory", "messages", "messagesByOperation", "requests", "uptime"}) {
		t.Fatalf("/metrics keys %v", got)
	}
	var m metricsJSON
	c.JSON("GET", "/metrics", nil, 200, &m)
	if m.Requests.Total != 3 || m.Messages.Total != 5 || m.Database.PoolSize != 20 || m.Uptime <= 0 ||
		m.Memory.RSS <= 0 || m.Memory.HeapUsed <= 0 || m.Memory.HeapTotal < m.Memory.HeapUsed || m.CPU.User <= 0 {
		t.Fatalf("/metrics %s", fmtJSON(m))
	}
	// The rates cover the last closed window: wait for one that holds the requests above.
	waitFor(t, "a rates window with the requests", func() bool {
		c.JSON("GET", "/metrics", nil, 200, &m)
		return m.Requests.Rate > 0
	})
	if m.Messages.Rate <= 0 {
		t.Fatalf("requests at %v/s but messages at %v/s", m.Requests.Rate, m.Messages.Rate)
	}
}

// /status answers from the process alone: with PostgreSQL out of reach it still says ok, while
// /health says the broker is not ready and the metrics read fails, counted, keeping the
// families of the last read.
func TestStatusWithoutDatabase(t *testing.T) {
	db := pgtest.NewDatabase(t)
	c := servertest.Start(t, db)
	push(t, c, item{"queue": "s", "payload": 1})
	before := scrape(t, c)

	// From another database: connections to this one are about to be refused.
	var name string
	if err := c.Broker.Store().Pool().QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(context.Background(), pgtest.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Registered after the broker's shutdown, so it runs before it.
	t.Cleanup(func() {
		exec(`ALTER DATABASE ` + pgx.Identifier{name}.Sanitize() + ` ALLOW_CONNECTIONS true`)
		admin.Close(context.Background())
	})
	exec(`ALTER DATABASE ` + pgx.Identifier{name}.Sanitize() + ` ALLOW_CONNECTIONS false`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + name + `'`)

	if status, body := c.Do("GET", "/health", nil); status != 503 {
		t.Fatalf("/health without the database: %d %s", status, body)
	}
	var st struct{ Status string }
	c.JSON("GET", "/status", nil, 200, &st)
	if st.Status != "ok" {
		t.Fatalf("/status: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Broker.RefreshMetrics(ctx); err == nil {
		t.Fatal("the metrics read succeeded without the database")
	}
	after := read(t, c)
	if after.value(t, "queen_process_db_errors_total") < 1 {
		t.Error("the failed read was not counted as a database error")
	}
	if got, was := after.series("queen_queue_pending_messages"), before.series("queen_queue_pending_messages"); !maps.Equal(got, was) {
		t.Errorf("pending after a failed read %v, want the last read's %v", got, was)
	}
}

// The boot log has one line per subsystem with the resolved settings, secrets as set or unset;
// the rates line comes every QUEEN_LOG_RATES_MS, followed by the busiest queues.
func TestRatesLogAndBootSettings(t *testing.T) {
	const syncSecret = "mesh-secret-value-4c1e"
	key := bytes.Repeat([]byte{0xab}, 32)
	var buf testkit.LogBuffer
	c := servertest.StartLogged(t, pgtest.NewDatabase(t), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		func(c *config.Config) { c.LogRates, c.MeshSecret, c.EncryptionKey = time.Second, syncSecret, key })

	boot := buf.String()
	for _, sub := range []string{"server", "postgres", "auth", "sync", "engine", "flow", "jobs", "file_buffer", "security", "metrics", "logging"} {
		if n := strings.Count(boot, `msg="config: `+sub+`"`); n != 1 {
			t.Errorf("config: %s logged %d times, want once", sub, n)
		}
	}
	if strings.Contains(boot, syncSecret) || strings.Contains(boot, hex.EncodeToString(key)) {
		t.Fatal("the boot log shows a secret")
	}
	for _, want := range []string{`secret=set heartbeat=`, `encryption_key=set`, `msg="config: metrics" refresh=10s max_series=10000 log_rates=1s`} {
		if !strings.Contains(boot, want) {
			t.Errorf("the boot log lacks %q", want)
		}
	}

	// One request, so both queues fall in the same window.
	items := []item{{"queue": "calm", "payload": 0}}
	for i := range 5 {
		items = append(items, item{"queue": "busy", "payload": i})
	}
	push(t, c, items...)
	var window string
	waitFor(t, "the rates line of the window with the push", func() bool {
		for _, l := range strings.Split(buf.String(), "\n") {
			switch {
			case strings.Contains(l, `msg=rates `):
				window = l + "\n"
			case strings.Contains(l, `msg="queue rates"`) && window != "":
				window += l + "\n"
			}
		}
		return strings.Contains(window, `queue=calm`)
	})
	lines := strings.Split(strings.TrimSpace(window), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `msg="queue rates"`) || !strings.Contains(lines[1], `queue=busy push_s=`) || !strings.Contains(lines[2], "queue=calm") {
		t.Fatalf("want the rates line, then busy, then calm:\n%s", window)
	}
	for _, field := range []string{"push_s=", "pop_s=", "ack_s=", "txn_s=", "p50_push_ms=", "p99_push_ms=", "p50_pop_ms=",
		"p99_ack_ms=", "p99_transaction_ms=", "pop_empty_pct=", "parked=0", "pool=", "pool_waiting=", "spool_pending=0"} {
		if !strings.Contains(lines[0], field) {
			t.Errorf("the rates line lacks %s: %s", field, lines[0])
		}
	}
	if strings.Contains(lines[0], "push_s=0 ") || strings.Contains(lines[0], "p50_push_ms=0 ") {
		t.Errorf("the window with the push shows no push: %s", lines[0])
	}
}
