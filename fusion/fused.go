// Package fusion fuses requests from many goroutines into few calls of a function that runs a
// slice of items at once: the broker's pushes and acks, each call one PostgreSQL transaction.
// It knows nothing of what the items are or where they go; persistence has the functions it
// calls, and the server wires the two.
package fusion

import "context"

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
}

// New starts a batcher that fuses jobs into calls of exec. unavailable tells the errors that
// mean exec cannot be reached at all (the database is down): see Run.
func New[I, R any](o Options, exec Exec[I, R], unavailable func(error) bool) *Batcher[Job[I, R]] {
	return NewBatcher(o.MaxItems, o.InFlight, jobSize[I, R], func(ctx context.Context, jobs []Job[I, R]) {
		Run(ctx, jobs, exec, unavailable)
	})
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
	var all []I
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
