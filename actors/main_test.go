package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"

	"queen/fusion"
	"queen/persistence"
	"queen/pg/pgtest"
	"queen/spool"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pg is a test's PostgreSQL as seen from a synctest bubble. Its calls run on a goroutine
// started outside the bubble: network I/O inside a bubble is not durably blocked, and pgx
// would arm its deadlines on the fake clock. A bubble goroutine waiting on pg is not durably
// blocked either, so the fake clock stands still and synctest.Wait waits while PostgreSQL works.
type pg struct {
	store *persistence.Store
	mu    sync.Mutex // one call at a time: done is shared
	calls chan func()
	done  chan struct{}
}

// newPG opens a fresh database; call it outside the bubble.
func newPG(t *testing.T) *pg {
	pool, _ := pgtest.NewPool(t)
	p := &pg{store: persistence.NewStore(pool), calls: make(chan func()), done: make(chan struct{})}
	go func() {
		for f := range p.calls {
			f()
			p.done <- struct{}{}
		}
	}()
	t.Cleanup(func() { close(p.calls) })
	return p
}

// do runs f on the real database, outside the bubble, and returns its error once it has.
func (p *pg) do(f func(ctx context.Context, s *persistence.Store) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	p.calls <- func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = f(ctx, p.store)
	}
	<-p.done
	return err
}

// storeAsAnotherBroker stores req's items as another broker's push would: the test's actors
// hear nothing of it.
func (p *pg) storeAsAnotherBroker(t *testing.T, req *PushRequest) {
	t.Helper()
	err := p.do(func(ctx context.Context, s *persistence.Store) error {
		_, err := s.Push(ctx, req.Items)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gate is the actors' Database and PushSubmitter in a bubble: every call runs on the real
// database, and the test decides when: a held pop or push waits until the test releases it.
type gate struct {
	pg         *pg
	mu         sync.Mutex
	holdPops   bool
	holdPushes bool
	heldPops   []heldPop
	heldPushes []fusion.Job[persistence.PushItem, persistence.PushResult]
	popsAt     []time.Time // when each pop reached the gate, on the fake clock
	probes     int
	// reportLate makes a wildcard pop report how far its search went only once it is done,
	// so that the group's next pop waits for it to be released; otherwise it reports on
	// arrival, as a search that locked its partitions at once, and the next pop starts beside it.
	reportLate bool
}

type heldPop struct {
	req     persistence.PopRequest
	release chan struct{}
}

func (g *gate) Pop(ctx context.Context, r persistence.PopRequest) (persistence.PopResult, error) {
	g.mu.Lock()
	if r.Searched != nil && !g.reportLate {
		r.Searched(r.Resume)
	}
	g.popsAt = append(g.popsAt, time.Now())
	var release chan struct{}
	if g.holdPops {
		release = make(chan struct{})
		g.heldPops = append(g.heldPops, heldPop{req: r, release: release})
	}
	g.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return persistence.PopResult{}, ctx.Err()
		}
	}
	// The search's reports come from outside the bubble, where the actor must not be sent
	// to: they are passed on from here once the pop is done, in their order.
	searched, reports := r.Searched, []persistence.RingPosition(nil)
	if searched != nil {
		r.Searched = func(pos persistence.RingPosition) { reports = append(reports, pos) }
	}
	var res persistence.PopResult
	err := g.pg.do(func(ctx context.Context, s *persistence.Store) (err error) {
		res, err = s.Pop(ctx, r)
		return err
	})
	for _, pos := range reports {
		searched(pos)
	}
	return res, err
}

func (g *gate) QueueExists(_ context.Context, name persistence.QueueName) (bool, error) {
	g.mu.Lock()
	g.probes++
	g.mu.Unlock()
	var exists bool
	err := g.pg.do(func(ctx context.Context, s *persistence.Store) (err error) {
		exists, err = s.QueueExists(ctx, name)
		return err
	})
	return exists, err
}

func (g *gate) TrySubmit(j fusion.Job[persistence.PushItem, persistence.PushResult]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holdPushes {
		g.heldPushes = append(g.heldPushes, j)
	} else {
		go g.push(j)
	}
	return true
}

func (g *gate) push(j fusion.Job[persistence.PushItem, persistence.PushResult]) {
	var res []persistence.PushResult
	err := g.pg.do(func(ctx context.Context, s *persistence.Store) (err error) {
		res, err = s.Push(ctx, j.Items)
		return err
	})
	j.Done(res, err)
}

// hold sets whether pops and pushes wait for the test.
func (g *gate) hold(pops, pushes bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdPops, g.holdPushes = pops, pushes
}

// takePops returns the held pops; they wait until released.
func (g *gate) takePops() []heldPop {
	g.mu.Lock()
	defer g.mu.Unlock()
	held := g.heldPops
	g.heldPops = nil
	return held
}

// releasePushes commits the held pushes and hands their results to the actors.
func (g *gate) releasePushes() {
	g.mu.Lock()
	held := g.heldPushes
	g.heldPushes = nil
	g.mu.Unlock()
	for _, j := range held {
		g.push(j)
	}
}

// open stops holding and releases everything held.
func (g *gate) open() {
	g.mu.Lock()
	g.holdPops, g.holdPushes = false, false
	g.mu.Unlock()
	for _, h := range g.takePops() {
		close(h.release)
	}
	g.releasePushes()
}

func (g *gate) probeCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.probes
}

func (g *gate) popTimes() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Time(nil), g.popsAt...)
}

// testDeps are the Deps of a test broker over db, push and sp. The re-check schedule is an
// hour apart: within a test only a wake-up re-runs a parked pop, unless the test sets it.
func testDeps(db Database, push PushSubmitter, sp *spool.Spool) *Deps {
	healthy := &atomic.Bool{}
	healthy.Store(true)
	return &Deps{
		Store: db, Push: push, Spool: sp,
		SpoolAfter:        time.Second,
		Maintenance:       &Maintenance{},
		DBHealthy:         healthy,
		Wait:              WaitOptions{Initial: time.Hour, Threshold: 1, Multiplier: 1, Max: time.Hour},
		QueryTimeout:      time.Minute,
		MaxParkedPerQueue: 100,
		MaxParked:         100,
		IdleTimeout:       10 * time.Minute,
		Log:               slog.New(slog.DiscardHandler),
		Metrics:           metrics.NewSet(),
	}
}

// broker is the actor system of one test, with what the test observes of it.
type broker struct {
	*System
	deps  *Deps
	gate  *gate
	spool *spool.Spool
}

// startBroker starts the actors inside the calling bubble over p's database (through a gate),
// with testDeps adjusted by adjust. Its cleanup answers what is left and lets every actor stop.
func startBroker(t *testing.T, p *pg, adjust func(*Deps)) *broker {
	return startWith(t, p, adjust, Start)
}

// startWith is startBroker with the actor system made by start.
func startWith(t *testing.T, p *pg, adjust func(*Deps), start func(*Deps) *System) *broker {
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{pg: p}
	deps := testDeps(g, g, sp)
	if adjust != nil {
		adjust(deps)
	}
	b := &broker{System: start(deps), deps: deps, gate: g, spool: sp}
	t.Cleanup(func() {
		g.open()
		b.Drain()
		// Long enough for every idle actor to passivate and every timer to fire: the bubble
		// ends only when no goroutine is left.
		advance(24 * time.Hour)
		b.Stop()
		if err := sp.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// gauge reads a metric of the broker's set; ok is false when it is not exported.
func (b *broker) gauge(name string) (v float64, ok bool) {
	var out bytes.Buffer
	b.deps.Metrics.WritePrometheus(&out)
	for line := range strings.Lines(out.String()) {
		if rest, found := strings.CutPrefix(line, name+" "); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// park sends a long-poll that its caller has just found empty: the actor parks it without a
// database pop of its own, until deadline.
func park(s *System, r persistence.PopRequest, deadline time.Time) chan PopReply {
	reply := make(chan PopReply, 1)
	s.Pop(&PopRequest{Pop: r, Wait: true, Checked: true, Deadline: deadline, Reply: reply})
	return reply
}

// popOf is a pop of one message by group on queue.
func popOf(queue, group string) persistence.PopRequest {
	return persistence.PopRequest{Queue: persistence.QueueName{Name: queue}, Group: group, Batch: 1, Partitions: 1, LeaseID: uuid.New()}
}

// pushOf pushes one message per partition to queue, with transaction id queue/partition and
// the partition's name as a JSON string for payload.
func pushOf(queue string, partitions ...string) *PushRequest {
	req := &PushRequest{Queue: persistence.QueueName{Name: queue}, Reply: make(chan PushReply, 1)}
	for _, p := range partitions {
		req.Items = append(req.Items, persistence.PushItem{Queue: req.Queue, Partition: p,
			TransactionID: queue + "/" + p, Payload: json.RawMessage(strconv.Quote(p))})
	}
	return req
}

// received returns what ch holds, or false when nothing is there yet.
func received[T any](ch chan T) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// spooled returns the items in the spool, in order.
func spooled(t *testing.T, sp *spool.Spool) []persistence.PushItem {
	t.Helper()
	if err := sp.Seal(); err != nil {
		t.Fatal(err)
	}
	var items []persistence.PushItem
	_, err := sp.Drain(context.Background(), 100, func(batch [][]byte) (map[int]string, error) {
		for _, rec := range batch {
			it, err := persistence.DecodeSpoolRecord(rec)
			if err != nil {
				return nil, err
			}
			items = append(items, it)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// advance moves the bubble's fake clock by d and waits until every goroutine in it is durably
// blocked. Inside synctest, sleeping is how a test makes time pass: nothing real is waited for.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
