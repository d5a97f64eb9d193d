package persistence

import "context"

// Job is one request's share of a fused batch: its items, and where its results go.
type Job[I, R any] struct {
	Items []I
	Done  func([]R, error)
}

// PushJob and AckJob are the jobs of the push and ack batchers.
type (
	PushJob = Job[PushItem, PushResult]
	AckJob  = Job[AckItem, AckResult]
)

// Fusion options of NewPushBatcher and NewAckBatcher.
type FusionOptions struct {
	MaxItems int // items per transaction
	InFlight int // transactions running at once
}

// NewPushBatcher fuses push requests into shared transactions.
func (s *Store) NewPushBatcher(o FusionOptions) *Batcher[PushJob] {
	return NewBatcher(o.MaxItems, o.InFlight, jobSize[PushItem, PushResult], func(ctx context.Context, jobs []PushJob) {
		runFused(ctx, jobs, s.Push)
	})
}

// NewAckBatcher fuses ack requests into shared transactions.
func (s *Store) NewAckBatcher(o FusionOptions) *Batcher[AckJob] {
	return NewBatcher(o.MaxItems, o.InFlight, jobSize[AckItem, AckResult], func(ctx context.Context, jobs []AckJob) {
		runFused(ctx, jobs, s.Ack)
	})
}

func jobSize[I, R any](j Job[I, R]) int { return len(j.Items) }

// runFused executes the items of all jobs in one call and hands each job its slice of the
// results. If the fused call fails for a reason other than the database being unreachable,
// each job is retried alone, so one request the database refuses cannot fail the others.
func runFused[I, R any](ctx context.Context, jobs []Job[I, R], exec func(context.Context, []I) ([]R, error)) {
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
			if IsUnavailable(err) {
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
