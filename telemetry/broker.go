package telemetry

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"queen/persistence"
)

// Op is a kind of request whose answer time is measured.
type Op int

// Request kinds, the op label of queen_request_duration_seconds.
const (
	Push Op = iota
	Pop
	PopWait // a long-poll: its time includes the wait for messages
	Ack
	Transaction
	StreamCycle // POST /streams/v1/cycle
	ops
)

var opNames = [ops]string{"push", "pop", "pop_wait", "ack", "transaction", "stream_cycle"}

func (o Op) String() string { return opNames[o] }

// counter is one of the broker-wide counters.
type counter int

const (
	pushRequests counter = iota
	pushMessages
	popRequests
	popMessages
	popEmpty
	ackRequests
	ackMessages
	transactions
	deadLettered
	dbErrors
	streamCycles
	nCounters
)

// Counters are the names of the broker-wide counters: queen_process_<name>_total on this
// broker, and their sums over the brokers, queen_cluster_<name>_total.
var Counters = [nCounters]string{
	"push_requests", "push_messages", "pop_requests", "pop_messages", "pop_empty",
	"ack_requests", "ack_messages", "transactions", "dlq", "db_errors", "stream_cycles",
}

// latencyBuckets are the bounds of queen_request_duration_seconds, in seconds: Prometheus-style
// cumulative buckets, so histogram_quantile works over any set of brokers.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Broker is one broker's telemetry. Its Set holds the families measured live; the packages
// that own other counters register them there too.
type Broker struct {
	Set     *metrics.Set
	started time.Time

	counters [nCounters]*metrics.Counter
	requests [ops]counter
	latency  [ops]*metrics.PrometheusHistogram
	// window holds the answer times since the last Rates, for their quantiles.
	window [ops]atomic.Pointer[metrics.Histogram]

	// queues counts per queue (*QueueCounts by QueueName), for the per-queue families and
	// the per-minute statistics, which forget the queues that no longer exist.
	queues *sync.Map
	// periodic is the text of the families the periodic read rendered last.
	periodic atomic.Pointer[[]byte]
	rates    atomic.Pointer[Rates]
}

// QueueCounts are one queue's counts on this broker since it started.
type QueueCounts struct {
	Pushed, Popped, Acked atomic.Int64 // messages stored, delivered, acknowledgements applied
	// What the per-minute statistics also show (server/stats.go).
	PushRequests atomic.Int64 // push requests naming the queue
	Transactions atomic.Int64 // committed transactions that pushed to or acknowledged on it
	PopRequests  atomic.Int64
	PopEmpty     atomic.Int64 // pops that delivered nothing
	AckRequests  atomic.Int64 // ack requests with an acknowledgement applied on it
	AckFailed    atomic.Int64 // applied acknowledgements with a failure status (failed, retry, dlq)
	DeadLettered atomic.Int64 // messages the acknowledgements dead-lettered
	LagSumMs     atomic.Int64 // ages of the delivered messages when popped, summed
	lagMaxMs     atomic.Int64 // the largest since the last TakeLagMax
}

// TakeLagMax returns the largest age of a delivered message since the previous call, in
// milliseconds, and starts over (one reader: the statistics flush).
func (c *QueueCounts) TakeLagMax() int64 { return c.lagMaxMs.Swap(0) }

// popped counts the lag of delivered messages.
func (c *QueueCounts) popped(msgs []persistence.Message, now time.Time) {
	var sum, top int64
	for _, m := range msgs {
		lag := max(now.Sub(m.CreatedAt).Milliseconds(), 0)
		sum += lag
		top = max(top, lag)
	}
	c.Popped.Add(int64(len(msgs)))
	c.LagSumMs.Add(sum)
	for {
		cur := c.lagMaxMs.Load()
		if top <= cur || c.lagMaxMs.CompareAndSwap(cur, top) {
			return
		}
	}
}

// New creates a broker's telemetry.
func New() *Broker {
	// The metrics library writes # HELP and # TYPE only when told to, process-wide; every
	// broker of the process wants them.
	metrics.ExposeMetadata(true)
	set := metrics.NewSet()
	b := &Broker{Set: set, started: time.Now(), requests: [ops]counter{
		Push: pushRequests, Pop: popRequests, PopWait: popRequests, Ack: ackRequests, Transaction: transactions,
		StreamCycle: streamCycles,
	}}
	for c, name := range Counters {
		b.counters[c] = set.NewCounter("queen_process_" + name + "_total")
	}
	for op := range ops {
		b.latency[op] = set.NewPrometheusHistogramExt(`queen_request_duration_seconds{op="`+op.String()+`"}`, latencyBuckets)
		b.window[op].Store(&metrics.Histogram{})
	}
	set.NewGauge("queen_uptime_seconds", func() float64 { return b.Uptime().Seconds() })
	set.NewGauge("queen_process_resident_memory_bytes", func() float64 { return float64(residentBytes()) })
	b.queues = &sync.Map{}
	return b
}

// Uptime is the time since the broker started.
func (b *Broker) Uptime() time.Duration { return time.Since(b.started) }

// Request counts one answered request of op and the time it took.
func (b *Broker) Request(op Op, took time.Duration) {
	b.counters[b.requests[op]].Inc()
	b.latency[op].Update(took.Seconds())
	b.window[op].Load().Update(took.Seconds())
}

// Pushed counts one push request's n messages stored for queue (a request naming several
// queues is counted for each).
func (b *Broker) Pushed(queue persistence.QueueName, n int) {
	b.counters[pushMessages].Add(n)
	c := b.queue(queue)
	c.Pushed.Add(int64(n))
	c.PushRequests.Add(1)
}

// Transacted counts one committed transaction that stored n messages in queue or applied
// acknowledgements on it (those are counted by Acked).
func (b *Broker) Transacted(queue persistence.QueueName, n int) {
	b.counters[pushMessages].Add(n)
	c := b.queue(queue)
	c.Pushed.Add(int64(n))
	c.Transactions.Add(1)
}

// Popped counts a pop of queue and the messages it delivered; a pop of nothing counts as
// empty. A namespace pop that found no queue names the zero queue: it counts only for the
// broker.
func (b *Broker) Popped(queue persistence.QueueName, msgs []persistence.Message) {
	if len(msgs) == 0 {
		b.counters[popEmpty].Inc()
	} else {
		b.counters[popMessages].Add(len(msgs))
	}
	if queue == (persistence.QueueName{}) {
		return
	}
	c := b.queue(queue)
	c.PopRequests.Add(1)
	if len(msgs) == 0 {
		c.PopEmpty.Add(1)
		return
	}
	c.popped(msgs, time.Now())
}

// Acked counts one acknowledgement PostgreSQL applied on queue: failed when its status
// reported a failure, dlq when it dead-lettered the message.
func (b *Broker) Acked(queue persistence.QueueName, failed, dlq bool) {
	b.counters[ackMessages].Inc()
	c := b.queue(queue)
	c.Acked.Add(1)
	if failed {
		c.AckFailed.Add(1)
	}
	if dlq {
		b.counters[deadLettered].Inc()
		c.DeadLettered.Add(1)
	}
}

// AckRequest counts an ack request with acknowledgements applied on queue (once per queue
// of the request).
func (b *Broker) AckRequest(queue persistence.QueueName) { b.queue(queue).AckRequests.Add(1) }

// DBError counts a failed database transaction attempt.
func (b *Broker) DBError() { b.counters[dbErrors].Inc() }

// queue returns the counts of a queue, creating them.
func (b *Broker) queue(name persistence.QueueName) *QueueCounts {
	if c, ok := b.queues.Load(name); ok {
		return c.(*QueueCounts)
	}
	c, _ := b.queues.LoadOrStore(name, &QueueCounts{})
	return c.(*QueueCounts)
}

// QueueCounts returns the counts of every queue counted so far.
func (b *Broker) QueueCounts() map[persistence.QueueName]*QueueCounts {
	out := map[persistence.QueueName]*QueueCounts{}
	b.queues.Range(func(k, v any) bool {
		out[k.(persistence.QueueName)] = v.(*QueueCounts)
		return true
	})
	return out
}

// ForgetQueue drops the counts c of a queue that no longer exists, unless they were replaced.
// A queue of that name created later counts from zero under new counts, which the readers of
// QueueCounts tell apart by pointer.
func (b *Broker) ForgetQueue(name persistence.QueueName, c *QueueCounts) {
	b.queues.CompareAndDelete(name, c)
}

// Totals are the broker-wide counters, by the names of Counters.
func (b *Broker) Totals() map[string]int64 {
	out := make(map[string]int64, nCounters)
	for c, name := range Counters {
		out[name] = int64(b.counters[c].Get())
	}
	return out
}
