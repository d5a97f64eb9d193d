package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"queen/persistence"
)

// recheckKey says which waiting pops of one queue ask the database the same question: when a
// pop of a key finds nothing, every pop of the key would have found nothing. Group, partition
// filter and where a new group starts decide what a pop can see; batch, partitions, autoAck
// and the lease id only decide how much it takes.
type recheckKey struct {
	group, partition string
	subscribeNow     bool
	subscribeFrom    int64 // Unix nanoseconds, when fromSet
	fromSet          bool
}

func keyOf(p persistence.PopRequest) recheckKey {
	k := recheckKey{group: p.Group, partition: p.Partition, subscribeNow: p.SubscribeNow}
	if p.SubscribeFrom != nil {
		k.subscribeFrom, k.fromSet = p.SubscribeFrom.UnixNano(), true
	}
	return k
}

// recheck is the re-check shared by the waiting pops of one key: on the backoff schedule only
// one of them at a time runs a database pop, and an empty answer for one is the answer for all.
type recheck struct {
	key     recheckKey
	members int       // waiting pops of the key, running or parked
	running int       // of which database pops in flight
	checks  int       // empty answers in a row, for the backoff
	next    time.Time // when the scheduled re-check is due
	wakes   int       // re-checks owed to wake-ups: they run at once, whatever the schedule
}

// brokerWide is what the queue actors of one broker share.
type brokerWide struct {
	parked  atomic.Int64     // parked pops of every queue, against Deps.MaxParked
	queries *metrics.Counter // database pops run by the actors
	refused *metrics.Counter // long-polls answered empty because a parking cap was reached
	// byQueue holds the parked pops of each queue that has some (persistence.QueueName ->
	// int), for the per-minute statistics.
	byQueue sync.Map
}

// setQueueParked records that n pops are parked on queue.
func (b *brokerWide) setQueueParked(queue persistence.QueueName, n int) {
	if n == 0 {
		b.byQueue.Delete(queue)
		return
	}
	b.byQueue.Store(queue, n)
}

func newBrokerWide(set *metrics.Set) *brokerWide {
	b := &brokerWide{
		queries: set.GetOrCreateCounter("queen_pop_queries_total"),
		refused: set.GetOrCreateCounter("queen_pop_parked_refused_total"),
	}
	// The broker's total, whatever queue the pops name: the per-queue gauges cover only
	// queues that exist.
	set.GetOrCreateGauge("queen_pop_parked", func() float64 { return float64(b.parked.Load()) })
	return b
}

// reservePark counts one more parked pop unless max are parked already.
func (b *brokerWide) reservePark(max int) bool {
	if b.parked.Add(1) > int64(max) {
		b.parked.Add(-1)
		return false
	}
	return true
}

// OneOf ties the pops that one namespace pop parks on each of its queues' actors. At most one
// of them runs a database pop at a time, so two queues never lease messages for one client,
// and once one has delivered (or failed) the others are dropped without another query.
// The zero value is ready to use.
type OneOf struct {
	mu      sync.Mutex
	busy    bool
	over    bool
	blocked []func() // retries of the actors that found it busy, called when it is free
}

// begin claims the right to run a database pop. When another queue's pop holds it, retry is
// called once that pop is done; when the namespace pop is over, at once (the retry drops it).
func (o *OneOf) begin(retry func()) bool {
	o.mu.Lock()
	over, ok := o.over, !o.busy && !o.over
	switch {
	case ok:
		o.busy = true
	case !over:
		o.blocked = append(o.blocked, retry)
	}
	o.mu.Unlock()
	if over {
		retry()
	}
	return ok
}

// end releases the claim; final ends the namespace pop.
func (o *OneOf) end(final bool) {
	o.mu.Lock()
	o.busy = false
	o.over = o.over || final
	retries := o.blocked
	o.blocked = nil
	o.mu.Unlock()
	for _, retry := range retries {
		retry()
	}
}

// done reports whether another queue's pop has answered the namespace pop (false for nil).
func (o *OneOf) done() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.over
}
