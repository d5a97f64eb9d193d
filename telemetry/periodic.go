package telemetry

import (
	"cmp"
	"slices"
	"time"

	"queen/persistence"
)

// Read is one periodic database read, as Publish shows it.
type Read struct {
	persistence.MetricsSnapshot
	// MaxSeries caps the queues, and separately the (consumer group, queue) pairs, that get
	// series of their own (QUEEN_METRICS_MAX_SERIES).
	MaxSeries int
	Took      time.Duration // how long the read took
	// Counted are the per-queue counts as they were when the read started (QueueCounts): a
	// queue counted then and missing from the read no longer exists. A queue created since
	// may be missing from the read and is not to be forgotten.
	Counted map[persistence.QueueName]*QueueCounts
}

// Dropped counts what a read left without series of its own, over the cap.
type Dropped struct{ Queues, Groups int }

// compareQueues orders queue names by tenant, then name.
func compareQueues(x, y persistence.QueueName) int {
	return cmp.Or(cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.Name, y.Name))
}

// Publish renders the families of a read; the scrapes after it show them. The queues with the
// largest backlog keep their series when there are more than the cap (then by name, so that a
// steady state keeps the same series), as do the groups furthest behind. The cluster-wide
// families count every queue, shown or not. Per-queue counts of queues that no longer exist
// are forgotten.
func (b *Broker) Publish(r Read) Dropped {
	exists := make(map[persistence.QueueName]bool, len(r.Queues))
	for _, q := range r.Queues {
		exists[q.Name] = true
	}
	for name, c := range r.Counted {
		if !exists[name] {
			b.ForgetQueue(name, c)
		}
	}
	counts := b.QueueCounts()

	queues := slices.Clone(r.Queues)
	slices.SortFunc(queues, func(x, y persistence.QueueMetrics) int {
		return cmp.Or(cmp.Compare(y.Pending, x.Pending), compareQueues(x.Name, y.Name))
	})
	groups := slices.Clone(r.Groups)
	slices.SortFunc(groups, func(x, y persistence.GroupMetrics) int {
		return cmp.Or(cmp.Compare(y.Lag, x.Lag), cmp.Compare(x.Group, y.Group), compareQueues(x.Queue, y.Queue))
	})
	var d Dropped
	if len(queues) > r.MaxSeries {
		d.Queues = len(queues) - r.MaxSeries
	}
	if len(groups) > r.MaxSeries {
		d.Groups = len(groups) - r.MaxSeries
	}
	shown, shownGroups := queues[:len(queues)-d.Queues], groups[:len(groups)-d.Groups]

	var p page
	perQueue := func(name string, value func(persistence.QueueMetrics) (float64, bool)) {
		samples := make([]sample, 0, len(shown))
		for _, q := range shown {
			if v, ok := value(q); ok {
				samples = append(samples, sample{QueueLabels(q.Name), v})
			}
		}
		p.family(name, samples)
	}
	// A queue's counters appear once this broker has counted something for it.
	counter := func(pick func(*QueueCounts) int64) func(persistence.QueueMetrics) (float64, bool) {
		return func(q persistence.QueueMetrics) (float64, bool) {
			c := counts[q.Name]
			if c == nil {
				return 0, false
			}
			return float64(pick(c)), true
		}
	}
	perQueue("queen_queue_push_messages_total", counter(func(c *QueueCounts) int64 { return c.Pushed.Load() }))
	perQueue("queen_queue_pop_messages_total", counter(func(c *QueueCounts) int64 { return c.Popped.Load() }))
	perQueue("queen_queue_ack_messages_total", counter(func(c *QueueCounts) int64 { return c.Acked.Load() }))
	perQueue("queen_queue_pending_messages", func(q persistence.QueueMetrics) (float64, bool) { return float64(q.Pending), true })
	perQueue("queen_queue_oldest_pending_age_seconds", func(q persistence.QueueMetrics) (float64, bool) {
		return q.OldestPendingSeconds, true
	})
	perQueue("queen_dlq_depth_by_queue", func(q persistence.QueueMetrics) (float64, bool) { return float64(q.DeadLetters), true })

	perGroup := func(name string, value func(persistence.GroupMetrics) float64) {
		samples := make([]sample, len(shownGroups))
		for i, g := range shownGroups {
			samples[i] = sample{`consumer_group="` + LabelValue(g.Group) + `",` + QueueLabels(g.Queue), value(g)}
		}
		p.family(name, samples)
	}
	perGroup("queen_consumer_group_lag_messages", func(g persistence.GroupMetrics) float64 { return float64(g.Lag) })
	perGroup("queen_consumer_group_lag_seconds", func(g persistence.GroupMetrics) float64 { return g.LagSeconds })

	// Stream queries are few (each is a deployed pipeline), so every one has its series.
	rows := make([]sample, len(r.Streams))
	sizes := make([]sample, len(r.Streams))
	for i, q := range r.Streams {
		rows[i] = sample{nameLabels("query", q.Query), float64(q.Rows)}
		sizes[i] = sample{nameLabels("query", q.Query), float64(q.Bytes)}
	}
	p.family("queen_stream_state_rows", rows)
	p.family("queen_stream_state_bytes", sizes)

	for _, name := range Counters {
		p.family("queen_cluster_"+name+"_total", []sample{{"", float64(r.Counters[name])}})
	}
	var pending, dead int64
	for _, q := range r.Queues {
		pending += q.Pending
		dead += q.DeadLetters
	}
	p.family("queen_cluster_queues", []sample{{"", float64(len(r.Queues))}})
	p.family("queen_cluster_pending_messages", []sample{{"", float64(pending)}})
	p.family("queen_dlq_depth", []sample{{"", float64(dead)}})
	p.family("queen_metrics_series_dropped", []sample{
		{`kind="queue"`, float64(d.Queues)}, {`kind="consumer_group"`, float64(d.Groups)},
	})
	p.family("queen_metrics_refresh_seconds", []sample{{"", r.Took.Seconds()}})

	text := p.Bytes()
	b.periodic.Store(&text)
	return d
}
