package persistence

import (
	"hash/fnv"
	"sync"
)

// PushLanes spreads pushes over independent batchers by partition. A push locks its partitions
// until it commits, so two fused pushes touching the same partition run one after the other;
// with lanes, the transactions in flight at once lock disjoint partitions and commit in
// parallel, while each lane still fuses everything queued for its partitions.
type PushLanes struct {
	lanes []*Batcher[PushJob]
}

// NewPushLanes starts o.InFlight lanes, each one transaction at a time.
func (s *Store) NewPushLanes(o FusionOptions) *PushLanes {
	l := &PushLanes{lanes: make([]*Batcher[PushJob], max(o.InFlight, 1))}
	for i := range l.lanes {
		l.lanes[i] = s.NewPushBatcher(FusionOptions{MaxItems: o.MaxItems, InFlight: 1})
	}
	return l
}

func (l *PushLanes) lane(it PushItem) int {
	h := fnv.New32a()
	h.Write([]byte(it.Queue))
	h.Write([]byte{0})
	h.Write([]byte(it.Partition))
	return int(h.Sum32() % uint32(len(l.lanes)))
}

// TrySubmit queues a push, or reports false when its lanes are full (PostgreSQL is not keeping
// up): the caller spools it rather than wait. A push whose items fall in several lanes is
// split, and its Done is called once with every result in item order (or the first error).
func (l *PushLanes) TrySubmit(j PushJob) bool {
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
	if len(byLane) == 1 {
		for k := range byLane {
			return l.lanes[k].TrySubmit(j)
		}
	}
	var (
		mu       sync.Mutex
		results  = make([]PushResult, len(j.Items))
		firstErr error
		left     = len(byLane)
	)
	for k, idx := range byLane {
		items := make([]PushItem, len(idx))
		for n, i := range idx {
			items[n] = j.Items[i]
		}
		l.lanes[k].Submit(PushJob{Items: items, Done: func(res []PushResult, err error) {
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

// Close drains every lane.
func (l *PushLanes) Close() {
	for _, b := range l.lanes {
		b.Close()
	}
}
