// Package fusion fuses requests from many goroutines into few calls of a function that runs a
// slice of items at once: the broker's pushes and acks, each call one PostgreSQL transaction.
// It knows nothing of what the items are or where they go; persistence has the functions it
// calls, and the server wires the two.
package fusion

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Job is one request's share of a fused batch: its items, and where its results go.
type Job[I, R any] struct {
	Items []I
	Done  func([]R, error)
}

// Exec runs items in one call (one transaction) and returns one result per item, in order.
type Exec[I, R any] func(context.Context, []I) ([]R, error)

// Options size a fused batcher.
type Options struct {
	MaxItems int // items per call
	InFlight int // calls running at once
	// Metrics, when set, receives the counters of the calls under the label op="Op" (push,
	// ack): calls, items, items per call, and how long each call took.
	Metrics *metrics.Set
	Op      string
}

// New starts a batcher that fuses jobs into calls of exec. unavailable tells the errors that
// mean exec cannot be reached at all (the database is down): see Run.
func New[I, R any](o Options, exec Exec[I, R], unavailable func(error) bool) *Batcher[Job[I, R]] {
	exec = counted(newStats(o), exec)
	return NewBatcher(o.MaxItems, o.InFlight, jobSize[I, R], func(ctx context.Context, jobs []Job[I, R]) {
		Run(ctx, jobs, exec, unavailable)
	})
}

// Bucket bounds of the call histograms: a call is a database transaction (a millisecond when
// idle, up to seconds under a backlog) of one to a few thousand items.
var (
	rttBuckets  = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	sizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
)

// stats counts the calls of one operation; nil counts nothing.
type stats struct {
	calls, items *metrics.Counter
	size, rtt    *metrics.PrometheusHistogram
}

func newStats(o Options) *stats {
	if o.Metrics == nil {
		return nil
	}
	// GetOrCreate: the lanes of one operation share its series.
	l := `{op="` + o.Op + `"}`
	return &stats{
		calls: o.Metrics.GetOrCreateCounter("queen_batches_fired_total" + l),
		items: o.Metrics.GetOrCreateCounter("queen_batch_items_fired_total" + l),
		size:  o.Metrics.GetOrCreatePrometheusHistogramExt("queen_fusion_items_per_batch"+l, sizeBuckets),
		rtt:   o.Metrics.GetOrCreatePrometheusHistogramExt("queen_batch_rtt_seconds"+l, rttBuckets),
	}
}

// counted returns exec counting each of its calls in s (a job retried alone is a call of its
// own); exec itself when s is nil.
func counted[I, R any](s *stats, exec Exec[I, R]) Exec[I, R] {
	if s == nil {
		return exec
	}
	return func(ctx context.Context, items []I) ([]R, error) {
		start := time.Now()
		res, err := exec(ctx, items)
		s.calls.Inc()
		s.items.Add(len(items))
		s.size.Update(float64(len(items)))
		s.rtt.UpdateDuration(start)
		return res, err
	}
}

func jobSize[I, R any](j Job[I, R]) int { return len(j.Items) }

// Run executes the items of all jobs in one call and hands each job its slice of the results.
// If the fused call fails for a reason other than exec being unavailable, each job is retried
// alone, so one request the database refuses cannot fail the others.
func Run[I, R any](ctx context.Context, jobs []Job[I, R], exec Exec[I, R], unavailable func(error) bool) {
	if len(jobs) == 1 {
		res, err := exec(ctx, jobs[0].Items)
		jobs[0].Done(res, err)
		return
	}
	n := 0
	for _, j := range jobs {
		n += len(j.Items)
	}
	all := make([]I, 0, n) // sized once: grown by appends, it was 4 % of what the broker allocated
	for _, j := range jobs {
		all = append(all, j.Items...)
	}
	res, err := exec(ctx, all)
	if err != nil {
		for _, j := range jobs {
			if unavailable(err) {
				j.Done(nil, err)
				continue
			}
			r, e := exec(ctx, j.Items)
			j.Done(r, e)
		}
		return
	}
	off := 0
	for _, j := range jobs {
		n := len(j.Items)
		j.Done(res[off:off+n:off+n], nil)
		off += n
	}
}
