package actors

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"queen/fusion"
	"queen/persistence"
	"queen/spool"
	"queen/telemetry"
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

// Database is the PostgreSQL work queue actors start themselves; *persistence.Store does it.
// An interface so that a test decides when PostgreSQL answers.
type Database interface {
	Pop(ctx context.Context, r persistence.PopRequest) (persistence.PopResult, error)
	QueueExists(ctx context.Context, queue persistence.QueueName) (bool, error)
}

// PushSubmitter queues pushes for PostgreSQL without blocking; the push lanes
// (fusion.Lanes) do it.
type PushSubmitter interface {
	TrySubmit(j fusion.Job[persistence.PushItem, persistence.PushResult]) bool
}

// Deps is what queue actors need from the rest of the broker.
type Deps struct {
	Store       Database
	Push        PushSubmitter
	Spool       *spool.Spool
	SpoolAfter  time.Duration // a push that waits this long on PostgreSQL is spooled instead
	Maintenance *Maintenance
	DBHealthy   *atomic.Bool                                           // false while PostgreSQL refuses pushes; the spool drain restores it
	OnPushed    func(queue persistence.QueueName, partitions []string) // tells the mesh; may be nil
	// OrphanLease takes the lease of a pop that failed (its client got an error): if the
	// database committed the claim after all, the lease must be released, not left to expire.
	OrphanLease  func(leaseID uuid.UUID)
	Wait         WaitOptions
	QueryTimeout time.Duration // bound on one pop's database work
	// A long-poll that would park past either cap is answered empty at once, as at its timeout:
	// parked pops cost memory and a socket each, and the caps bound what clients can hold.
	MaxParkedPerQueue int
	MaxParked         int           // over every queue of the broker
	IdleTimeout       time.Duration // an actor with nothing to do stops after this long
	Log               *slog.Logger
	Metrics           *metrics.Set // this broker's metrics
}

// waiter is a pop being run or parked.
type waiter struct {
	req     *PopRequest
	key     *recheck // the re-check it shares with equivalent pops; nil for a pop that does not wait
	running bool
	parked  bool // has waited at least once: counted in the parked gauges
	blocked bool // its namespace pop is running on another queue, which pokes this actor when done
	// dispatch numbers a wildcard pop's database run, so that the ring position of a pop
	// that was overtaken does not replace a newer one (see ring).
	dispatch uint64
}

// ring is where a consumer group's wildcard pops of the queue stand in the round of its
// partitions on this broker: each pop starts from the position the last one started reported,
// as soon as its search has locked what it claims, so that pops running side by side do not
// read again what the ones before them hold.
type ring struct {
	pos     persistence.RingPosition
	applied uint64 // the dispatch number of the pop that reported pos
	// searching is the pop whose first step has not reported yet; the group's pops that
	// come meanwhile are held, in order, and start one by one from what each reports.
	searching *waiter
	held      []*waiter
}

type queueActor struct {
	name     persistence.QueueName
	deps     *Deps
	wide     *brokerWide
	waiters  []*waiter // FIFO: older waiters are served first
	rechecks map[recheckKey]*recheck
	rings    map[string]*ring // by consumer group
	runs     uint64           // wildcard pops run, for waiter.dispatch
	inflight int              // pushes and pops whose database work has not come back
	received int              // requests the router forwarded, for the passivation handshake
	timer    *time.Timer
	draining bool
	// pushes waiting on PostgreSQL, with the timer that spools them if it does not answer
	pushes map[*PushRequest]*time.Timer
	parked int // waiters counted as parked
	// The parked gauge exists only for a queue PostgreSQL has: a pop names any queue it likes,
	// and a series per made-up name would let clients grow the scrape without bound.
	gauge     *metrics.Gauge
	gaugeName string
	exists    queueExistence
}

// queueExistence is what the actor knows of its queue in PostgreSQL.
type queueExistence int

const (
	existenceUnknown queueExistence = iota
	existenceProbing
	existenceNo
	existenceYes
)

func (a *queueActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.SetReceiveTimeout(a.deps.IdleTimeout)
		a.pushes = map[*PushRequest]*time.Timer{}
		a.rechecks = map[recheckKey]*recheck{}
		a.rings = map[string]*ring{}
	case *PushRequest:
		a.received++
		a.push(ctx, m)
	case *pushDone:
		a.pushDone(ctx, m)
	case *pushTooSlow:
		if t, ok := a.pushes[m.req]; ok {
			t.Stop()
			delete(a.pushes, m.req)
			a.deps.Log.Warn("PostgreSQL did not take a push in time; spooling it", "queue", a.name.String(), "wait", a.deps.SpoolAfter)
			a.spoolPush(ctx, m.req)
		}
	case *spoolDone:
		a.inflight--
		if errors.Is(m.err, spool.ErrDrained) {
			// Held while the drain emptied the spool: nothing spooled is left for it to
			// overtake, so it goes to PostgreSQL like any push now.
			a.push(ctx, m.req)
			return
		}
		m.req.Reply <- PushReply{Buffered: m.err == nil, Err: m.err}
	case pausePops, poke:
		a.check(ctx)
	case *PopRequest:
		a.received++
		a.pop(ctx, m)
	case *popDone:
		a.inflight--
		a.popped(ctx, m)
	case *ringSearched:
		a.advance(m.w, m.pos)
		a.searched(ctx, m.w)
	case *Wake:
		a.received++
		if a.exists == existenceNo {
			a.exists = existenceUnknown // pushed through another broker: it may exist now
		}
		a.wake(ctx, m.Partitions)
	case tick:
		a.timer = nil
		a.check(ctx)
	case drain:
		a.draining = true
		a.check(ctx)
	case *actor.ReceiveTimeout:
		// protoactor disarms the timeout when it fires: without this, an actor that was busy
		// then, or that the router kept for a request on its way, would never stop.
		ctx.SetReceiveTimeout(a.deps.IdleTimeout)
		if len(a.waiters) == 0 && a.inflight == 0 {
			ctx.Send(ctx.Parent(), &passivate{queue: a.name, received: a.received})
		}
	case *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
		for _, w := range slices.Clone(a.waiters) {
			a.answer(w, PopReply{TimedOut: true})
		}
		if a.gauge != nil {
			a.deps.Metrics.UnregisterMetric(a.gaugeName)
		}
	case queueProbed:
		a.queueKnown(bool(m))
	}
}

// queueKnown records whether the queue exists; the parked gauge is registered once it does.
func (a *queueActor) queueKnown(exists bool) {
	if !exists {
		if a.exists != existenceYes { // a probe that raced a push must not undo what it showed
			a.exists = existenceNo
		}
		return
	}
	a.exists = existenceYes
	if a.gauge == nil {
		// A tenant's queue (tenancy) is labelled with the name its tenant knows and a tenant
		// label: the stored name never reaches the metrics.
		a.gaugeName = `queen_queue_parked_consumers{` + telemetry.QueueLabels(a.name) + `}`
		a.gauge = a.deps.Metrics.GetOrCreateGauge(a.gaugeName, nil)
	}
	a.gauge.Set(float64(a.parked))
}

// probeQueue asks PostgreSQL, off the actor, whether the queue exists, once pops park on it.
func (a *queueActor) probeQueue(ctx actor.Context) {
	if a.parked == 0 || a.exists != existenceUnknown {
		return
	}
	a.exists = existenceProbing
	self, root := ctx.Self(), ctx.ActorSystem().Root
	store, timeout, name := a.deps.Store, a.deps.QueryTimeout, a.name
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		exists, err := store.QueueExists(c, name)
		if err != nil {
			exists = false // asked again at the next park after a wake-up
		}
		root.Send(self, queueProbed(exists))
	}()
}

// setParked moves the parked count by d and the gauge with it.
func (a *queueActor) setParked(d int) {
	a.parked += d
	a.wide.setQueueParked(a.name, a.parked)
	if a.gauge != nil {
		a.gauge.Set(float64(a.parked))
	}
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
	submitted := a.deps.Push.TrySubmit(fusion.Job[persistence.PushItem, persistence.PushResult]{
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
		if len(parts) > 0 {
			a.queueKnown(true)
		}
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

// pop takes a new pop: one that waits joins the re-check of its key, and runs its first
// database pop at once unless the caller has just made it.
func (a *queueActor) pop(ctx actor.Context, m *PopRequest) {
	w := &waiter{req: m}
	a.waiters = append(a.waiters, w)
	switch {
	case m.Checked && !m.Wait: // shutting down: there is nothing left to try
		a.answer(w, PopReply{TimedOut: true})
	case m.Checked:
		w.key = a.join(m.Pop)
		a.empty(w, time.Now())
		a.probeQueue(ctx)
		a.check(ctx)
	default:
		if m.Wait {
			w.key = a.join(m.Pop)
		}
		a.run(ctx, w)
	}
}

// join adds a waiting pop to the re-check of its key.
func (a *queueActor) join(p persistence.PopRequest) *recheck {
	k := keyOf(p)
	r := a.rechecks[k]
	if r == nil {
		r = &recheck{key: k}
		a.rechecks[k] = r
	}
	r.members++
	return r
}

// tryRun runs w's database pop, unless w belongs to a namespace pop whose pop on another
// queue is running: that queue's actor pokes this one when it is done.
func (a *queueActor) tryRun(ctx actor.Context, w *waiter) bool {
	if o := w.req.OneOf; o != nil {
		self, root := ctx.Self(), ctx.ActorSystem().Root
		if !o.begin(func() { root.Send(self, poke{}) }) {
			w.blocked = true
			return false
		}
	}
	a.run(ctx, w)
	return true
}

func (a *queueActor) run(ctx actor.Context, w *waiter) {
	w.running = true
	a.inflight++
	if w.key != nil {
		w.key.running++
	}
	a.wide.queries.Inc()
	if w.req.Pop.Partition != "" {
		a.start(ctx, w)
		return
	}
	r := a.ringOf(w.req.Pop.Group)
	if r.searching != nil {
		r.held = append(r.held, w)
		return
	}
	r.searching = w
	a.start(ctx, w)
}

// start runs w's database pop on a goroutine of its own; a wildcard pop starts from its
// group's ring position and reports how far it searches.
func (a *queueActor) start(ctx actor.Context, w *waiter) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	store, timeout, pop := a.deps.Store, a.deps.QueryTimeout, w.req.Pop
	if pop.Partition == "" {
		a.runs++
		w.dispatch = a.runs
		pop.Resume = a.ringOf(pop.Group).pos
		pop.Searched = func(pos persistence.RingPosition) { root.Send(self, &ringSearched{w: w, pos: pos}) }
	}
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res, err := store.Pop(c, pop)
		root.Send(self, &popDone{w: w, result: res, err: err})
	}()
}

func (a *queueActor) ringOf(group string) *ring {
	r := a.rings[group]
	if r == nil {
		r = &ring{}
		a.rings[group] = r
	}
	return r
}

// searched ends w's first ring step, once it has reported how far it went or has come back:
// the group's next pop held meanwhile starts from there.
func (a *queueActor) searched(ctx actor.Context, w *waiter) {
	r := a.ringOf(w.req.Pop.Group)
	if r.searching != w {
		return
	}
	r.searching = nil
	if len(r.held) > 0 {
		next := r.held[0]
		r.held = r.held[1:]
		r.searching = next
		a.start(ctx, next)
	}
}

func (a *queueActor) popped(ctx actor.Context, m *popDone) {
	w := m.w
	w.running = false
	delivered := len(m.result.Messages) > 0
	if w.key != nil {
		w.key.running--
	}
	if o := w.req.OneOf; o != nil {
		o.end(delivered || m.err != nil)
	}
	if w.req.Pop.Partition == "" {
		if m.err == nil {
			a.advance(w, m.result.Resume)
		}
		a.searched(ctx, w)
	}
	now := time.Now()
	switch {
	case m.err != nil:
		if !w.req.Pop.AutoAck && a.deps.OrphanLease != nil {
			a.deps.OrphanLease(w.req.Pop.LeaseID)
		}
		a.answer(w, PopReply{Err: m.err})
	case delivered || !w.req.Wait:
		if k := w.key; delivered && k != nil {
			// There was something to take: the others of the key may find more (another
			// partition, the rest of a batch), so the next of them re-checks at once, even
			// while other pops of the key run: the schedule waits for those, and on a busy key
			// a parked pop would wait out its deadline while fresh pops beside it are served.
			// Owed only to a pop that is parked now (not w, not one running).
			k.checks, k.next = 0, time.Time{}
			k.wakes = min(k.wakes+1, k.members-k.running-1)
		}
		a.answer(w, PopReply{Result: m.result})
	case a.deps.Maintenance.Pop():
		a.answer(w, PopReply{Paused: true})
	case a.draining || !now.Before(w.req.Deadline) || gone(w):
		a.answer(w, PopReply{Result: m.result, TimedOut: true})
	default:
		a.empty(w, now)
		a.probeQueue(ctx)
	}
	// A full check costs a pass over every waiter: run it only when this answer made a
	// re-check of the key due (a delivery, or a wake-up that came meanwhile).
	if k := w.key; k != nil && (k.wakes > 0 || k.running == 0 && !now.Before(k.next)) {
		a.check(ctx)
		return
	}
	a.schedule(ctx)
}

// advance records the ring position a wildcard pop reached (while it runs) or returned,
// unless a pop that started after it has reported one already: that pop went round from
// further on, past what w claims.
func (a *queueActor) advance(w *waiter, pos persistence.RingPosition) {
	r := a.ringOf(w.req.Pop.Group)
	if w.dispatch >= r.applied {
		r.pos, r.applied = pos, w.dispatch
	}
}

// empty records that w's key found nothing: all its waiters share the next re-check, on the
// backoff schedule. Then w parks, unless a cap is reached: it is answered as at its timeout.
func (a *queueActor) empty(w *waiter, now time.Time) {
	k := w.key
	k.checks++
	k.next = now.Add(a.deps.Wait.backoff(k.checks))
	if w.parked {
		return
	}
	if a.parked >= a.deps.MaxParkedPerQueue || !a.wide.reservePark(a.deps.MaxParked) {
		a.wide.refused.Inc()
		a.answer(w, PopReply{TimedOut: true})
		return
	}
	w.parked = true
	a.setParked(1)
}

// answer replies to w and forgets it.
func (a *queueActor) answer(w *waiter, r PopReply) {
	r.Queue = a.name
	w.req.Reply <- r
	if w.parked {
		a.setParked(-1)
		a.wide.parked.Add(-1)
	}
	if k := w.key; k != nil {
		k.members--
		k.wakes = min(k.wakes, k.members)
		if k.members == 0 {
			delete(a.rechecks, k.key)
		}
	}
	if i := slices.Index(a.waiters, w); i >= 0 {
		a.waiters = slices.Delete(a.waiters, i, i+1)
	}
}

// wake re-checks parked pops now that partitions have data (all partitions when the list is
// empty). Each partition serves one consumer of a group at a time, so per group it owes at
// most as many re-checks as partitions received data, and at most one to a key filtered on
// one partition. A re-check that finds messages wakes the next pop of its key itself, so one
// per key is enough for a wake-up that names no partition. The other pops keep their
// schedule: a lost wake-up costs latency, never a message.
func (a *queueActor) wake(ctx actor.Context, partitions []string) {
	owed := map[string]int{} // per group
	for _, r := range a.rechecks {
		k := r.key
		want := 1
		if len(partitions) > 0 {
			if k.partition != "" && !slices.Contains(partitions, k.partition) {
				continue
			}
			if k.partition == "" {
				want = len(partitions)
			}
			want = min(want, len(partitions)-owed[k.group])
		}
		// A key whose only pops are running owes a re-check too: their answer may predate
		// the push, so the first to come back empty runs again.
		n := min(want, r.members-r.wakes)
		if n <= 0 {
			continue
		}
		r.wakes += n
		r.checks = 0
		owed[k.group] += n
	}
	a.check(ctx)
}

// check answers expired and abandoned waiters and runs the re-checks that are due: those owed
// to wake-ups, and the scheduled one of each key that has no database pop in flight.
func (a *queueActor) check(ctx actor.Context) {
	now := time.Now()
	for _, w := range slices.Clone(a.waiters) {
		if w.running {
			continue
		}
		w.blocked = false
		k := w.key
		switch {
		case gone(w) || w.req.OneOf.done():
			a.answer(w, PopReply{TimedOut: true})
		case a.deps.Maintenance.Pop():
			a.answer(w, PopReply{Paused: true})
		case a.draining || !now.Before(w.req.Deadline):
			a.answer(w, PopReply{TimedOut: true})
		case k.wakes > 0:
			if a.tryRun(ctx, w) {
				k.wakes--
			}
		case k.running == 0 && !now.Before(k.next):
			a.tryRun(ctx, w)
		}
	}
	a.schedule(ctx)
}

// schedule arms the timer for the earliest re-check or deadline of a parked waiter. A key
// with a database pop in flight re-checks when it comes back, a blocked waiter when poked.
func (a *queueActor) schedule(ctx actor.Context) {
	var at time.Time
	for _, w := range a.waiters {
		if w.running {
			continue
		}
		t := w.req.Deadline
		if k := w.key; k.running == 0 && !w.blocked && k.next.Before(t) {
			t = k.next
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
