package actors

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"queen/persistence"
	"queen/spool"
)

// WaitOptions is the re-check schedule of parked pops: the floor under which a lost wake-up
// still gets the message delivered. Reference defaults: 100 ms, 3, 2.0, 1 s.
type WaitOptions struct {
	Initial    time.Duration
	Threshold  int
	Multiplier float64
	Max        time.Duration
}

// backoff returns the delay before the checks-th re-check: Initial for the first Threshold
// checks, then growing linearly up to Max, as the reference broker does.
func (o WaitOptions) backoff(checks int) time.Duration {
	if checks <= o.Threshold {
		return o.Initial
	}
	d := time.Duration(float64(o.Initial) * float64(checks) * o.Multiplier)
	return min(d, o.Max)
}

// Deps is what queue actors need from the rest of the broker.
type Deps struct {
	Store       *persistence.Store
	Push        *persistence.PushLanes
	Spool       *spool.Spool
	SpoolAfter  time.Duration // a push that waits this long on PostgreSQL is spooled instead
	Maintenance *Maintenance
	DBHealthy   *atomic.Bool                            // false while PostgreSQL refuses pushes; the spool drain restores it
	OnPushed    func(queue string, partitions []string) // tells the mesh; may be nil
	// OrphanLease takes the lease of a pop that failed (its client got an error): if the
	// database committed the claim after all, the lease must be released, not left to expire.
	OrphanLease  func(leaseID uuid.UUID)
	Wait         WaitOptions
	QueryTimeout time.Duration // bound on one pop's database work
	IdleTimeout  time.Duration // an actor with nothing to do stops after this long
	Log          *slog.Logger
	Metrics      *metrics.Set // this broker's metrics
}

// waiter is a pop being run or parked.
type waiter struct {
	req     *PopRequest
	checks  int
	next    time.Time
	running bool
	parked  bool // has waited at least once: counted in the parked gauge
}

type queueActor struct {
	name     string
	deps     *Deps
	waiters  []*waiter // FIFO: older waiters are served first
	inflight int       // pushes and pops whose database work has not come back
	received int       // requests the router forwarded, for the passivation handshake
	timer    *time.Timer
	draining bool
	// pushes waiting on PostgreSQL, with the timer that spools them if it does not answer
	pushes map[*PushRequest]*time.Timer
	parked *metrics.Gauge
	gauge  string // the parked gauge's full name, to unregister it on passivation
}

func (a *queueActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.SetReceiveTimeout(a.deps.IdleTimeout)
		a.pushes = map[*PushRequest]*time.Timer{}
		// A tenant's queue (tenancy) is labelled with the name its tenant knows and a tenant
		// label: the stored name never reaches the metrics.
		tenant, name := persistence.SplitName(a.name)
		labels := `queue="` + labelValue(name) + `"`
		if tenant != "" {
			labels += `,tenant="` + labelValue(tenant) + `"`
		}
		a.gauge = `queen_queue_parked_consumers{` + labels + `}`
		a.parked = a.deps.Metrics.GetOrCreateGauge(a.gauge, nil)
	case *PushRequest:
		a.received++
		a.push(ctx, m)
	case *pushDone:
		a.pushDone(ctx, m)
	case *pushTooSlow:
		if t, ok := a.pushes[m.req]; ok {
			t.Stop()
			delete(a.pushes, m.req)
			a.deps.Log.Warn("PostgreSQL did not take a push in time; spooling it", "queue", a.name, "wait", a.deps.SpoolAfter)
			a.spoolPush(ctx, m.req)
		}
	case *spoolDone:
		a.inflight--
		m.req.Reply <- PushReply{Buffered: m.err == nil, Err: m.err}
	case pausePops:
		a.check(ctx)
	case *PopRequest:
		a.received++
		w := &waiter{req: m}
		a.waiters = append(a.waiters, w)
		a.run(ctx, w)
	case *popDone:
		a.inflight--
		a.popped(ctx, m)
	case *Wake:
		a.received++
		a.wake(ctx, m.Partitions)
	case tick:
		a.timer = nil
		a.check(ctx)
	case drain:
		a.draining = true
		a.check(ctx)
	case *actor.ReceiveTimeout:
		if len(a.waiters) == 0 && a.inflight == 0 {
			ctx.Send(ctx.Parent(), &passivate{queue: a.name, received: a.received})
		}
	case *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
		for _, w := range a.waiters {
			w.req.Reply <- PopReply{TimedOut: true}
		}
		a.waiters = nil
		a.deps.Metrics.UnregisterMetric(a.gauge)
	}
}

// labelValue escapes a queue name for a Prometheus label value.
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// push stores a push in PostgreSQL, or in the disk spool when push maintenance is on, when
// PostgreSQL is known to be down, or when the spool still holds records (a push must not
// overtake one spooled before it). A push PostgreSQL does not take within SpoolAfter, or
// refuses for being unreachable, is spooled too: it never hangs on the database.
func (a *queueActor) push(ctx actor.Context, m *PushRequest) {
	if a.deps.Maintenance.Push() || !a.deps.DBHealthy.Load() || !a.deps.Spool.Empty() {
		a.spoolPush(ctx, m)
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	submitted := a.deps.Push.TrySubmit(persistence.PushJob{
		Items: m.Items,
		Done: func(res []persistence.PushResult, err error) {
			root.Send(self, &pushDone{req: m, results: res, err: err})
		},
	})
	if !submitted {
		// PostgreSQL is thousands of pushes behind: waiting in line would only end in the
		// spool after SpoolAfter, and would block this actor meanwhile.
		a.spoolPush(ctx, m)
		return
	}
	a.inflight++
	a.pushes[m] = time.AfterFunc(a.deps.SpoolAfter, func() { root.Send(self, &pushTooSlow{req: m}) })
}

func (a *queueActor) pushDone(ctx actor.Context, m *pushDone) {
	a.inflight--
	t, waiting := a.pushes[m.req]
	if waiting {
		t.Stop()
		delete(a.pushes, m.req)
	}
	if m.err == nil {
		a.deps.DBHealthy.Store(true)
		if waiting {
			m.req.Reply <- PushReply{Results: m.results}
		}
		// Even when the push was spooled meanwhile, what committed can be consumed now; its
		// replay will find the transactionIds and store nothing twice.
		parts := pushedPartitions(m.req, m.results)
		a.wake(ctx, parts)
		if a.deps.OnPushed != nil && len(parts) > 0 {
			a.deps.OnPushed(a.name, parts)
		}
		return
	}
	if !waiting {
		return // already answered from the spool
	}
	if persistence.IsUnavailable(m.err) {
		if a.deps.DBHealthy.Swap(false) {
			a.deps.Log.Warn("PostgreSQL unreachable: pushes go to the disk spool until it is back", "err", m.err)
		}
		a.spoolPush(ctx, m.req)
		return
	}
	m.req.Reply <- PushReply{Err: m.err}
}

// spoolPush appends the push to the disk spool off the actor (the append waits for fsync).
func (a *queueActor) spoolPush(ctx actor.Context, m *PushRequest) {
	a.inflight++
	self, root, sp := ctx.Self(), ctx.ActorSystem().Root, a.deps.Spool
	go func() {
		records := make([][]byte, len(m.Items))
		var err error
		for i, it := range m.Items {
			if records[i], err = persistence.EncodeSpoolRecord(it); err != nil {
				break
			}
		}
		if err == nil {
			err = sp.Append(records)
		}
		root.Send(self, &spoolDone{req: m, err: err})
	}()
}

// pushedPartitions lists the partitions that received new messages.
func pushedPartitions(req *PushRequest, res []persistence.PushResult) []string {
	var out []string
	for i, r := range res {
		if r.Status == persistence.StatusQueued && !slices.Contains(out, req.Items[i].Partition) {
			out = append(out, req.Items[i].Partition)
		}
	}
	return out
}

func (a *queueActor) run(ctx actor.Context, w *waiter) {
	w.running = true
	a.inflight++
	self, root := ctx.Self(), ctx.ActorSystem().Root
	store, timeout, pop := a.deps.Store, a.deps.QueryTimeout, w.req.Pop
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res, err := store.Pop(c, pop)
		root.Send(self, &popDone{w: w, result: res, err: err})
	}()
}

func (a *queueActor) popped(ctx actor.Context, m *popDone) {
	w := m.w
	w.running = false
	now := time.Now()
	switch {
	case m.err != nil:
		if !w.req.Pop.AutoAck && a.deps.OrphanLease != nil {
			a.deps.OrphanLease(w.req.Pop.LeaseID)
		}
		a.answer(w, PopReply{Err: m.err})
	case len(m.result.Messages) > 0 || !w.req.Wait:
		a.answer(w, PopReply{Result: m.result})
	case a.deps.Maintenance.Pop():
		a.answer(w, PopReply{Paused: true})
	case a.draining || !now.Before(w.req.Deadline) || gone(w):
		a.answer(w, PopReply{Result: m.result, TimedOut: true})
	default:
		w.checks++
		w.next = now.Add(a.deps.Wait.backoff(w.checks))
		if !w.parked {
			w.parked = true
			a.parked.Inc()
		}
	}
	a.schedule(ctx)
}

// answer replies to w and forgets it.
func (a *queueActor) answer(w *waiter, r PopReply) {
	w.req.Reply <- r
	if w.parked {
		a.parked.Dec()
	}
	if i := slices.Index(a.waiters, w); i >= 0 {
		a.waiters = slices.Delete(a.waiters, i, i+1)
	}
}

// wake re-runs parked pops now that partitions have data. Each partition can serve one consumer
// of a group at a time, so per group it wakes at most as many waiters as partitions received
// data; the others keep their schedule (a lost wake-up costs latency, never a message).
func (a *queueActor) wake(ctx actor.Context, partitions []string) {
	woken := map[string]int{}
	for _, w := range a.waiters {
		if w.running {
			continue
		}
		p := w.req.Pop.Partition
		if p != "" && len(partitions) > 0 && !slices.Contains(partitions, p) {
			continue
		}
		g := w.req.Pop.Group
		if len(partitions) > 0 && woken[g] >= len(partitions) {
			continue
		}
		woken[g]++
		w.next = time.Time{}
		w.checks = 0
	}
	a.check(ctx)
}

// check answers expired and abandoned waiters and runs the ones that are due.
func (a *queueActor) check(ctx actor.Context) {
	now := time.Now()
	for _, w := range slices.Clone(a.waiters) {
		if w.running {
			continue
		}
		switch {
		case gone(w):
			a.answer(w, PopReply{TimedOut: true})
		case a.deps.Maintenance.Pop():
			a.answer(w, PopReply{Paused: true})
		case a.draining || !now.Before(w.req.Deadline):
			a.answer(w, PopReply{TimedOut: true})
		case !now.Before(w.next):
			a.run(ctx, w)
		}
	}
	a.schedule(ctx)
}

// schedule arms the timer for the earliest re-check or deadline of a parked waiter.
func (a *queueActor) schedule(ctx actor.Context) {
	var at time.Time
	for _, w := range a.waiters {
		if w.running {
			continue
		}
		t := w.next
		if w.req.Deadline.Before(t) {
			t = w.req.Deadline
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if at.IsZero() {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.timer = time.AfterFunc(time.Until(at), func() { root.Send(self, tick{}) })
}

func gone(w *waiter) bool {
	select {
	case <-w.req.Gone:
		return true
	default:
		return false
	}
}
