package telemetry

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"queen/persistence"
)

// Rates are what the broker did over one window: the rates log line and the rates of GET
// /metrics.
type Rates struct {
	Window time.Duration
	// PerSecond are the broker-wide counters per second over the window, by their names
	// (Counters).
	PerSecond map[string]float64
	// P50 and P99 are answer times in milliseconds by op, over the requests of the window (0
	// without any); approximate (the buckets are about 12% wide).
	P50, P99 [ops]float64
	// PoolWaiting is the mean number of callers that waited for a database connection.
	PoolWaiting float64
	// Busiest are the queues with the most pushed and popped messages in the window, at most
	// five, busiest first.
	Busiest []QueueRate
}

// QueueRate is one queue's messages per second over a window.
type QueueRate struct {
	Queue          persistence.QueueName
	Push, Pop, Ack float64
}

// Requests are the requests per second of the window: pushes, pops, acks and transactions.
func (r Rates) Requests() float64 {
	return r.PerSecond["push_requests"] + r.PerSecond["pop_requests"] + r.PerSecond["ack_requests"] + r.PerSecond["transactions"]
}

// Messages are the messages per second of the window: pushed, popped and acknowledged.
func (r Rates) Messages() float64 {
	return r.PerSecond["push_messages"] + r.PerSecond["pop_messages"] + r.PerSecond["ack_messages"]
}

// RequestsTotal and MessagesTotal are the counts since the start that Requests and Messages
// are the rates of.
func (b *Broker) RequestsTotal() int64 {
	t := b.Totals()
	return t["push_requests"] + t["pop_requests"] + t["ack_requests"] + t["transactions"]
}

// MessagesTotal: see RequestsTotal.
func (b *Broker) MessagesTotal() int64 {
	t := b.Totals()
	return t["push_messages"] + t["pop_messages"] + t["ack_messages"]
}

// Rates are the last window's (zero before the first window ends).
func (b *Broker) Rates() Rates {
	if r := b.rates.Load(); r != nil {
		return *r
	}
	return Rates{}
}

// busiest is how many queues Rates.Busiest names.
const busiest = 5

// Sampler measures windows: each Sample covers the time since the previous one. One
// goroutine samples.
type Sampler struct {
	b        *Broker
	at       time.Time
	totals   map[string]int64
	queues   map[*QueueCounts][3]int64 // by pointer: a forgotten and re-created queue starts over
	poolWait time.Duration
}

// NewSampler starts the first window now; poolWait is the pool's summed acquisition wait so far.
func (b *Broker) NewSampler(poolWait time.Duration) *Sampler {
	s := &Sampler{b: b, poolWait: poolWait}
	s.at, s.totals, s.queues = time.Now(), b.Totals(), s.queueTotals(b.QueueCounts())
	for op := range ops {
		b.window[op].Swap(&metrics.Histogram{})
	}
	return s
}

func (s *Sampler) queueTotals(counts map[persistence.QueueName]*QueueCounts) map[*QueueCounts][3]int64 {
	out := make(map[*QueueCounts][3]int64, len(counts))
	for _, c := range counts {
		out[c] = [3]int64{c.Pushed.Load(), c.Popped.Load(), c.Acked.Load()}
	}
	return out
}

// Sample ends the window, starts the next, and returns the rates of the one that ended (also
// what Broker.Rates answers from then on). poolWait is the pool's summed acquisition wait.
func (s *Sampler) Sample(poolWait time.Duration) Rates {
	now, totals, counts := time.Now(), s.b.Totals(), s.b.QueueCounts()
	secs := now.Sub(s.at).Seconds()
	r := Rates{Window: now.Sub(s.at), PerSecond: map[string]float64{}}
	for name, v := range totals {
		r.PerSecond[name] = float64(v-s.totals[name]) / secs
	}
	for op := range ops {
		h := s.b.window[op].Swap(&metrics.Histogram{})
		r.P50[op], r.P99[op] = quantileMillis(h, 0.5), quantileMillis(h, 0.99)
	}
	r.PoolWaiting = (poolWait - s.poolWait).Seconds() / secs
	queues := s.queueTotals(counts)
	for name, c := range counts {
		cur, prev := queues[c], s.queues[c]
		q := QueueRate{Queue: name, Push: float64(cur[0]-prev[0]) / secs,
			Pop: float64(cur[1]-prev[1]) / secs, Ack: float64(cur[2]-prev[2]) / secs}
		if q.Push+q.Pop > 0 {
			r.Busiest = append(r.Busiest, q)
		}
	}
	slices.SortFunc(r.Busiest, func(x, y QueueRate) int {
		return cmp.Or(cmp.Compare(y.Push+y.Pop, x.Push+x.Pop), compareQueues(x.Queue, y.Queue))
	})
	r.Busiest = r.Busiest[:min(len(r.Busiest), busiest)]
	s.at, s.totals, s.queues, s.poolWait = now, totals, queues, poolWait
	s.b.rates.Store(&r)
	return r
}

// quantileMillis is the q-quantile of h (seconds) in milliseconds: the upper bound of the
// bucket that holds it; 0 for an empty histogram.
func quantileMillis(h *metrics.Histogram, q float64) float64 {
	type bucket struct {
		upper float64
		n     uint64
	}
	var buckets []bucket
	var total uint64
	h.VisitNonZeroBuckets(func(vmrange string, n uint64) {
		_, upper, _ := strings.Cut(vmrange, "...")
		v, err := strconv.ParseFloat(upper, 64)
		if err != nil {
			v = math.Inf(1)
		}
		buckets = append(buckets, bucket{v, n})
		total += n
	})
	if total == 0 {
		return 0
	}
	slices.SortFunc(buckets, func(x, y bucket) int { return cmp.Compare(x.upper, y.upper) })
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for _, b := range buckets {
		if seen += b.n; seen >= rank {
			return b.upper * 1000
		}
	}
	return buckets[len(buckets)-1].upper * 1000
}
