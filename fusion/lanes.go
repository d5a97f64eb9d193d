package fusion

import "sync"

// Lanes spread jobs over independent batchers by a key of their items, one call in flight per
// lane. The broker keys pushes by partition: a push locks its partitions until it commits, so
// two fused pushes touching the same partition run one after the other anyway; with lanes, the
// calls in flight at once lock disjoint partitions and commit in parallel, while each lane
// still fuses everything queued for its keys.
type Lanes[I, R any] struct {
	lanes []*Batcher[Job[I, R]]
	key   func(I) uint32
}

// NewLanes starts o.InFlight lanes, each one call at a time, that fuse jobs into calls of exec
// (unavailable as for New). An item goes to lane key(item) modulo the number of lanes.
func NewLanes[I, R any](o Options, exec Exec[I, R], unavailable func(error) bool, key func(I) uint32) *Lanes[I, R] {
	l := &Lanes[I, R]{lanes: make([]*Batcher[Job[I, R]], max(o.InFlight, 1)), key: key}
	for i := range l.lanes {
		l.lanes[i] = New(Options{MaxItems: o.MaxItems, InFlight: 1, Metrics: o.Metrics, Op: o.Op}, exec, unavailable)
	}
	return l
}

func (l *Lanes[I, R]) lane(it I) int {
	return int(l.key(it) % uint32(len(l.lanes)))
}

// TrySubmit queues a job, or reports false when its lanes are full (the database is not keeping
// up): the caller spools it rather than wait. A job whose items fall in several lanes is split,
// and its Done is called once with every result in item order (or the first error).
func (l *Lanes[I, R]) TrySubmit(j Job[I, R]) bool {
	if k, ok := l.oneLane(j.Items); ok {
		return l.lanes[k].TrySubmit(j) // most jobs: one request, to one partition
	}
	byLane := map[int][]int{}
	for i, it := range j.Items {
		k := l.lane(it)
		byLane[k] = append(byLane[k], i)
	}
	for k := range byLane {
		if l.lanes[k].full() {
			return false
		}
	}
	var (
		mu       sync.Mutex
		results  = make([]R, len(j.Items))
		firstErr error
		left     = len(byLane)
	)
	for k, idx := range byLane {
		items := make([]I, len(idx))
		for n, i := range idx {
			items[n] = j.Items[i]
		}
		l.lanes[k].Submit(Job[I, R]{Items: items, Done: func(res []R, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			for n, r := range res {
				results[idx[n]] = r
			}
			if left--; left == 0 {
				if firstErr != nil {
					j.Done(nil, firstErr)
				} else {
					j.Done(results, nil)
				}
			}
		}})
	}
	return true
}

// oneLane reports the lane of items when there are some and they all fall in one.
func (l *Lanes[I, R]) oneLane(items []I) (int, bool) {
	if len(items) == 0 {
		return 0, false
	}
	k := l.lane(items[0])
	for _, it := range items[1:] {
		if l.lane(it) != k {
			return 0, false
		}
	}
	return k, true
}

// Close drains every lane.
func (l *Lanes[I, R]) Close() {
	for _, b := range l.lanes {
		b.Close()
	}
}
