package telemetry

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"queen/persistence"
)

// parse reads a page as Prometheus does, failing on anything it would refuse (a family twice,
// a bad escape, a sample of a family under another family's TYPE).
func parse(t *testing.T, b *Broker) map[string]*dto.MetricFamily {
	t.Helper()
	var page bytes.Buffer
	b.WritePrometheus(&page)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(page.Bytes()))
	if err != nil {
		t.Fatalf("the page does not parse: %v\n%s", err, page.String())
	}
	return fams
}

// labels flattens a series' labels.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

var tenantQueue = persistence.QueueName{Tenant: "acme", Name: `we"ird\q`}

// q is a default tenant's queue.
func q(name string) persistence.QueueName { return persistence.QueueName{Name: name} }

func sampleRead() Read {
	return Read{MetricsSnapshot: persistence.MetricsSnapshot{
		Queues: []persistence.QueueMetrics{
			{Name: q("small"), Pending: 1, OldestPendingSeconds: 2.5},
			{Name: tenantQueue, Pending: 7, DeadLetters: 2},
			{Name: q("empty")},
		},
		Groups: []persistence.GroupMetrics{
			{Group: "g", Queue: tenantQueue, Lag: 3, LagSeconds: 60},
			{Group: "h", Queue: q("small"), Lag: 9, LagSeconds: 1},
		},
		Counters: map[string]int64{"push_messages": 12, "dlq": 2, "unknown_to_this_broker": 5},
	}, MaxSeries: 10, Took: 3 * time.Millisecond}
}

// Every family of the page has a help text and a type, the page parses, and every queen_
// family on it is in the catalogue.
func TestPageParsesWithHelpOnEveryFamily(t *testing.T) {
	b := New()
	b.Request(Push, time.Millisecond)
	b.Pushed(tenantQueue, 3)
	b.Publish(sampleRead())
	fams := parse(t, b)
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
		if strings.HasPrefix(name, "queen_") {
			c, ok := byName[name]
			if !ok {
				t.Errorf("%s is not in the catalogue", name)
				continue
			}
			if want := strings.ToUpper(c.Type); f.GetType().String() != want {
				t.Errorf("%s is a %s, the catalogue says %s", name, f.GetType(), c.Type)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "queen_uptime_seconds",
		"queen_process_push_requests_total", "queen_request_duration_seconds", "queen_queue_pending_messages",
		"queen_cluster_push_messages_total", "queen_metrics_series_dropped"} {
		if fams[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}
}

// A tenant's queue is labelled with the name its tenant knows, escaped, and a tenant label;
// a queue of the default tenant has no tenant label.
func TestQueueLabels(t *testing.T) {
	b := New()
	b.Pushed(tenantQueue, 3)
	b.Pushed(q("small"), 1)
	b.Publish(sampleRead())
	fams := parse(t, b)
	pushed := map[string]float64{}
	for _, m := range fams["queen_queue_push_messages_total"].Metric {
		l := labels(m)
		pushed[l["queue"]+"|"+l["tenant"]] = m.GetCounter().GetValue()
	}
	if len(pushed) != 2 || pushed[`we"ird\q|acme`] != 3 || pushed["small|"] != 1 {
		t.Fatalf("push counters by queue|tenant: %v", pushed)
	}
	for _, m := range fams["queen_consumer_group_lag_messages"].Metric {
		if l := labels(m); l["consumer_group"] == "g" && (l["queue"] != `we"ird\q` || l["tenant"] != "acme" || m.GetGauge().GetValue() != 3) {
			t.Errorf("g's lag series: %v %v", l, m.GetGauge().GetValue())
		}
	}
}

// Over the cap, the queues with the largest backlog and the groups furthest behind keep their
// series; what was left out is counted; the cluster-wide families still count everything.
func TestSeriesCap(t *testing.T) {
	b := New()
	r := sampleRead()
	r.MaxSeries = 1
	if d := b.Publish(r); d.Queues != 2 || d.Groups != 1 {
		t.Fatalf("dropped %+v, want 2 queues and 1 group", d)
	}
	fams := parse(t, b)
	gauge := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, m := range fams[name].Metric {
			l := labels(m)
			out[l["queue"]+l["kind"]+l["consumer_group"]] = m.GetGauge().GetValue()
		}
		return out
	}
	if got := gauge("queen_queue_pending_messages"); len(got) != 1 || got[`we"ird\q`] != 7 {
		t.Errorf("pending series %v, want only the largest backlog", got)
	}
	if got := gauge("queen_consumer_group_lag_messages"); len(got) != 1 || got["smallh"] != 9 {
		t.Errorf("lag series %v, want only the group furthest behind", got)
	}
	if got := gauge("queen_metrics_series_dropped"); got["queue"] != 2 || got["consumer_group"] != 1 {
		t.Errorf("dropped %v", got)
	}
	if got := gauge("queen_cluster_pending_messages"); got[""] != 8 {
		t.Errorf("cluster pending %v, want 8", got)
	}
	if got := gauge("queen_cluster_queues"); got[""] != 3 {
		t.Errorf("cluster queues %v, want 3", got)
	}
	if v := fams["queen_cluster_push_messages_total"].Metric[0].GetCounter().GetValue(); v != 12 {
		t.Errorf("cluster push messages %v, want 12", v)
	}
}

// The counts of a queue that the read no longer finds are forgotten, unless the queue was
// counted for the first time while the read ran.
func TestPublishForgetsDeletedQueues(t *testing.T) {
	b := New()
	b.Pushed(q("gone"), 1)
	counted := b.QueueCounts()
	b.Pushed(q("new"), 1) // created after the read's snapshot
	r := sampleRead()
	r.Counted = counted
	b.Publish(r)
	if c := b.QueueCounts(); c[q("gone")] != nil || c[q("new")] == nil {
		t.Fatalf("counts after the read: %v", c)
	}
}

func TestQuantiles(t *testing.T) {
	var h metrics.Histogram
	if q := quantileMillis(&h, 0.5); q != 0 {
		t.Fatalf("empty histogram: %v", q)
	}
	for range 98 {
		h.Update(0.001)
	}
	h.Update(0.1)
	h.Update(0.5)
	p50, p99 := quantileMillis(&h, 0.5), quantileMillis(&h, 0.99)
	if p50 < 1 || p50 > 1.2 || p99 < 100 || p99 > 120 {
		t.Fatalf("p50 %v ms p99 %v ms, want about 1 and 100", p50, p99)
	}
}

// A window's rates: per second over the window, the busiest queues by push+pop, the answer
// times of the window only.
func TestSampler(t *testing.T) {
	b := New()
	b.Pushed(q("before"), 100) // before the first window: not in it
	s := b.NewSampler(0)
	for range 4 {
		b.Request(Push, 2*time.Millisecond)
	}
	b.Pushed(q("a"), 10)
	b.Popped(q("b"), make([]persistence.Message, 30))
	b.Popped(q(""), nil)
	b.Acked(q("a"), true, true)
	r := s.Sample(2 * time.Second)
	secs := r.Window.Seconds()
	for name, want := range map[string]float64{"push_requests": 4, "push_messages": 10, "pop_messages": 30, "pop_empty": 1, "ack_messages": 1, "dlq": 1} {
		if got := r.PerSecond[name] * secs; got < want-1e-6 || got > want+1e-6 {
			t.Errorf("%s: %v per second over %v, want %v in the window", name, r.PerSecond[name], r.Window, want)
		}
	}
	if got := r.PoolWaiting * secs; got < 2-1e-6 || got > 2+1e-6 {
		t.Errorf("pool waiting %v over %v, want 2 s of waiting", r.PoolWaiting, r.Window)
	}
	if len(r.Busiest) != 2 || r.Busiest[0].Queue != q("b") || r.Busiest[1].Queue != q("a") {
		t.Errorf("busiest %+v, want b then a", r.Busiest)
	}
	if r.P50[Push] < 2 || r.P50[Push] > 2.3 || r.P50[Ack] != 0 {
		t.Errorf("p50 push %v ms, ack %v ms", r.P50[Push], r.P50[Ack])
	}
	if r2 := s.Sample(2 * time.Second); len(r2.Busiest) != 0 || r2.P50[Push] != 0 || r2.PerSecond["push_messages"] != 0 {
		t.Errorf("an idle window: %+v", r2)
	}
	if b.Rates().Window == 0 {
		t.Error("Rates does not answer the last window")
	}
}

// The operator documentation lists every family.
func TestEveryFamilyIsDocumented(t *testing.T) {
	text, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Families {
		if !bytes.Contains(text, []byte("`"+f.Name+"`")) {
			t.Errorf("docs/operations.md does not document %s", f.Name)
		}
	}
}

// What the per-minute statistics read of a queue: requests and outcomes by queue, the lag of
// delivered messages (the largest taken once), empty pops; a namespace pop that found no queue
// counts for the broker only.
func TestQueueCountsForStatistics(t *testing.T) {
	b := New()
	now := time.Now()
	b.Pushed(q("a"), 2)
	b.Transacted(q("a"), 1)
	b.Popped(q("a"), []persistence.Message{{CreatedAt: now.Add(-time.Hour)}, {CreatedAt: now.Add(-time.Minute)}})
	b.Popped(q("a"), nil)
	b.Popped(persistence.QueueName{}, nil)
	b.Acked(q("a"), false, false)
	b.Acked(q("a"), true, true)
	b.AckRequest(q("a"))
	c := b.QueueCounts()[q("a")]
	if len(b.QueueCounts()) != 1 || c.Pushed.Load() != 3 || c.PushRequests.Load() != 1 || c.Transactions.Load() != 1 ||
		c.PopRequests.Load() != 2 || c.Popped.Load() != 2 || c.PopEmpty.Load() != 1 || c.Acked.Load() != 2 ||
		c.AckFailed.Load() != 1 || c.DeadLettered.Load() != 1 || c.AckRequests.Load() != 1 {
		t.Fatalf("counts: %+v", c)
	}
	if lag := c.LagSumMs.Load(); lag < 3660000 || lag > 3670000 {
		t.Errorf("lag sum %d ms, want an hour and a minute", lag)
	}
	if top := c.TakeLagMax(); top < 3600000 || top > 3610000 {
		t.Errorf("largest lag %d ms, want an hour", top)
	}
	if top := c.TakeLagMax(); top != 0 {
		t.Errorf("largest lag taken twice: %d", top)
	}
	if tot := b.Totals(); tot["pop_empty"] != 2 || tot["push_messages"] != 3 || tot["dlq"] != 1 {
		t.Errorf("totals %v", tot)
	}
}

// Every broker-wide counter has its column in the statistics, which the flush adds to and the
// queen_cluster_* families sum: a counter without one would be dropped silently.
func TestEveryCounterReachesTheStatistics(t *testing.T) {
	for _, name := range Counters {
		var b persistence.BrokerStats
		b.SetCounters(map[string]int64{name: 7})
		if got := b.Counters()[name]; got != 7 {
			t.Errorf("counter %s: the statistics keep %d of 7; add its column to persistence.brokerCounters and a migration", name, got)
		}
	}
}
