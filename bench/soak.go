package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// SoakConfig is the soak scenario: for Duration, Conns producers push Batch × Size messages at
// Rate msg/s in all over Partitions of one queue; Consumers queue-mode consumers pop 100 and ack
// and keep up; one consumer of a named group pops 100 with autoAck at LagRate msg/s, slower
// than the pushes, so its lag grows. Every FaultEvery a fault from Faults (cycled) strikes:
// "pg" restarts the PostgreSQL, "broker" restarts the broker. Figures are reported per Every.
type SoakConfig struct {
	Duration   time.Duration `json:"durationNs"`
	Every      time.Duration `json:"everyNs"`
	FaultEvery time.Duration `json:"faultEveryNs"`
	Faults     []string      `json:"faults"`
	Rate       int           `json:"rate"`
	LagRate    int           `json:"lagRate"`
	Batch      int           `json:"batch"`
	Size       int           `json:"size"`
	Partitions int           `json:"partitions"`
	Conns      int           `json:"conns"`
	Consumers  int           `json:"consumers"`
}

func (c SoakConfig) label() string {
	return fmt.Sprintf("soak push %d×%dB @%s/s p%d + pop100+ack c%d + group @%s/s, %s", c.Batch, c.Size,
		count(int64(c.Rate)), c.Partitions, c.Consumers, count(int64(c.LagRate)), strings.Join(c.Faults, "/"))
}

var soakScenario = scenario{
	name: "soak",
	help: "push at --rate + queue-mode consumers keeping up + a consumer group kept behind at\n--lag-rate (default half), for --duration, with a restart every --fault-every cycling\n--faults (pg, broker); reported per --every, then every message checked and the table\nsizes read",
	own:  []string{"rate", "lag-rate", "fault-every", "faults", "every"},
	// Two keeping-up consumers and pushes of 10: requests enough for a p99 per minute at
	// 2000 msg/s.
	defaults:  map[string]string{"duration": "30m", "rate": "2000", "batch": "10", "conns": "4", "consumers": "2"},
	ownBroker: "soak restarts the broker and its PostgreSQL",
	check: func(o *options) error {
		if o.rate < 1 || o.lagRate < 0 || o.faultEvery < 0 {
			return fmt.Errorf("--rate must be at least 1, --lag-rate and --fault-every cannot be negative")
		}
		if o.lagRate == 0 {
			o.lagRate = max(1, o.rate/2)
		}
		for _, f := range strings.Split(o.faultList, ",") {
			if f != "pg" && f != "broker" {
				return fmt.Errorf("--faults: %q is neither pg nor broker", f)
			}
			o.faults = append(o.faults, f)
		}
		return nil
	},
	jobs: func(o *options) []job {
		cfg := SoakConfig{Duration: o.duration, Every: o.every, FaultEvery: o.faultEvery, Faults: o.faults, Rate: o.rate,
			LagRate: o.lagRate, Batch: o.batch, Size: o.size, Partitions: o.partitions, Conns: o.conns, Consumers: o.consumers}
		return []job{newJob("soak", cfg, RunSoakHere)}
	},
}

// soakRig is what the soak strikes: the broker and the PostgreSQL behind it.
type soakRig interface {
	restartBroker(ctx context.Context) error
	restartPG(ctx context.Context) error
	brokerPID() int // 0: not a process of its own (no RSS figure)
}

// processRig is the broker and PostgreSQL the bench started.
type processRig struct{ t *Target }

func (r processRig) restartBroker(ctx context.Context) error { return r.t.Process.restart(ctx) }
func (r processRig) brokerPID() int                          { return int(r.t.Process.pid.Load()) }
func (r processRig) restartPG(ctx context.Context) error {
	if err := r.t.PG.stop(); err != nil {
		return err
	}
	return r.t.PG.start(ctx)
}

// RunSoakHere is the soak on the broker and PostgreSQL the bench started.
func RunSoakHere(ctx context.Context, t *Target, cfg SoakConfig) (*Result, error) {
	if t.Process == nil || t.PG == nil {
		return nil, fmt.Errorf("%s restarts the broker and its PostgreSQL: it runs only on the broker the bench starts (no --url)", cfg.label())
	}
	return RunSoak(ctx, t, processRig{t}, cfg)
}

// SoakInterval is one reporting interval of the soak.
type SoakInterval struct {
	From       float64     `json:"fromSeconds"`
	To         float64     `json:"toSeconds"`
	Fault      string      `json:"fault,omitempty"` // struck during the interval
	PushPerSec float64     `json:"pushPerSec"`      // answered queued or buffered
	Push       Percentiles `json:"pushMs"`          // per push request
	Pop        Percentiles `json:"popMs"`           // per pop of the keeping-up consumers that brought messages
	RSSMB      float64     `json:"brokerRssMB"`     // at the end of the interval
	GroupLag   int64       `json:"groupLag"`        // messages pushed that the lagging group has not received
	KeepLag    int64       `json:"keepingUpLag"`    // the same for the queue-mode consumers
	Spooled    int64       `json:"spoolPending"`    // records in the broker's disk spool at the end of the interval
	Errors     int64       `json:"errors"`
}

// SoakFault is one fault and how long the broker took to serve again.
type SoakFault struct {
	Kind string  `json:"kind"`
	At   float64 `json:"atSeconds"`
	// From the fault until a push was answered (queued, or buffered in the disk spool), and
	// until one was answered queued: PostgreSQL takes pushes again, the spool drained. -1: not
	// within the limit.
	Answered float64 `json:"answeredSeconds"`
	Stored   float64 `json:"storedSeconds"`
	Errors   int64   `json:"errors"` // failed requests from the fault to 10 s after Stored
}

// TableSize is one of the broker's tables at the end of a run.
type TableSize struct {
	Name      string `json:"name"`
	Total     int64  `json:"totalBytes"` // pg_total_relation_size: heap, indexes, TOAST
	Heap      int64  `json:"heapBytes"`  // pg_relation_size
	Indexes   int64  `json:"indexBytes"` // pg_indexes_size
	LiveTuple int64  `json:"liveTuples"`
	DeadTuple int64  `json:"deadTuples"`
}

// SoakFigures are what a soak result adds to the common ones.
type SoakFigures struct {
	Intervals        []SoakInterval `json:"intervals"`
	Faults           []SoakFault    `json:"faults"`
	Tables           []TableSize    `json:"tables,omitempty"`
	Pushed           int64          `json:"pushed"`
	GroupReceived    int64          `json:"groupReceived"`
	UnexpectedErrors int64          `json:"unexpectedErrors"` // outside the faults' windows
}

// timedLats collects latencies from many goroutines for the reporter, which takes them per
// interval.
type timedLats struct {
	mu sync.Mutex
	l  latencies
	n  int64 // messages
}

func (t *timedLats) add(lat time.Duration, msgs int) {
	t.mu.Lock()
	t.l = append(t.l, lat)
	t.n += int64(msgs)
	t.mu.Unlock()
}

func (t *timedLats) take() (latencies, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, n := t.l, t.n
	t.l, t.n = nil, 0
	return l, n
}

// faultGrace is how long after a fault's recovery failed requests still count as the fault's.
const faultGrace = 10 * time.Second

// RunSoak runs the mixed load with the faults, then drains what the keeping-up consumers left
// and checks they received every message answered queued or buffered exactly once, in order
// per partition and producer. Failed requests are expected during a fault; outside the faults'
// windows they fail the run.
func RunSoak(ctx context.Context, t *Target, rig soakRig, cfg SoakConfig) (*Result, error) {
	r := newResult("soak", cfg.label(), t, cfg)
	fig := &SoakFigures{}
	r.Soak = fig
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	// The queue-mode consumers keep up (keep) and every message they get is checked; the
	// lagging group is only counted.
	queue, parts := freshQueue("soak"), partitionNames(cfg.Partitions)
	keep, led := newGroupLog("", parts, cfg.Size), newLedger(cfg.Conns)
	const lagGroup = "behind"
	var lagGot atomic.Int64
	var errs errorCounts
	var pushLats, popLats timedLats

	start := now()
	deadline := start + cfg.Duration
	running := func() bool { return ctx.Err() == nil && now() < deadline }
	var wg sync.WaitGroup
	for i := range cfg.Conns {
		wg.Go(func() {
			p := newProducer(i, c, queue, parts, cfg.Size, led, &errs)
			p.spooled = true
			pace := newPacer(cfg.Rate, cfg.Batch*cfg.Conns)
			for n := 0; running(); n++ {
				pace.wait(n)
				sent := now()
				ok := p.push((i+n)%len(parts), cfg.Batch)
				pushLats.add(now()-sent, ok)
			}
		})
	}
	var consumers sync.WaitGroup
	for range cfg.Consumers {
		consumers.Go(func() { soakKeepUp(ctx, c, queue, keep, &popLats, &errs, running) })
	}
	consumers.Go(func() {
		cn := c.conn()
		path := popParams{queue: queue, group: lagGroup, batch: 100, wait: true, timeout: time.Second, autoAck: true}.path()
		pace := newPacer(cfg.LagRate, 100)
		for n := 0; running(); n++ {
			pace.wait(n)
			msgs, err := cn.pop(path)
			if err != nil {
				errs.note(err)
				time.Sleep(50 * time.Millisecond)
			}
			lagGot.Add(int64(len(msgs)))
		}
	})

	// The faults, at fixed points.
	var fmu sync.Mutex
	faultIn := map[int]string{} // interval index → fault kinds struck in it
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for k := 1; ; k++ {
			at := start + time.Duration(k)*cfg.FaultEvery
			if len(cfg.Faults) == 0 || cfg.FaultEvery <= 0 || at >= deadline || !sleepCtx(ctx, at-now()) {
				return
			}
			kind := cfg.Faults[(k-1)%len(cfg.Faults)]
			fmu.Lock()
			faultIn[int((now()-start)/cfg.Every)] += kind + " "
			fmu.Unlock()
			f := soakFault(ctx, c, rig, kind, &errs, now()-start, deadline)
			fmu.Lock()
			fig.Faults = append(fig.Faults, f)
			fmu.Unlock()
		}
	}()

	// The report, every interval.
	stopProgress := startProgress(cfg.label(), nil, func() string {
		return fmt.Sprintf("%s  pushed %s  group lag %s  errors %d", clock((now() - start).Seconds()), count(led.expected()),
			count(led.expected()-lagGot.Load()), errs.total())
	})
	prevErrs := int64(0)
	var allPush []latencies
	for i := 0; ; i++ {
		from, to := time.Duration(i)*cfg.Every, min(time.Duration(i+1)*cfg.Every, cfg.Duration)
		if from >= cfg.Duration || !sleepCtx(ctx, start+to-now()) {
			break
		}
		pl, pushed := pushLats.take()
		allPush = append(allPush, pl)
		ol, _ := popLats.take()
		iv := SoakInterval{From: from.Seconds(), To: to.Seconds(), PushPerSec: float64(pushed) / (to - from).Seconds(),
			Push: percentiles(pl), Pop: percentiles(ol), GroupLag: led.expected() - lagGot.Load(), KeepLag: led.expected() - keep.count.Load()}
		if pid := rig.brokerPID(); pid > 0 {
			if kb, ok := statusKB(pid, "VmRSS"); ok {
				iv.RSSMB = float64(kb) / 1024
			}
		}
		if sp, err := spoolStatus(c.conn()); err == nil {
			iv.Spooled = sp.pending
		}
		total := errs.total()
		iv.Errors, prevErrs = total-prevErrs, total
		fmu.Lock()
		iv.Fault = strings.TrimSpace(faultIn[i])
		fmu.Unlock()
		fig.Intervals = append(fig.Intervals, iv)
		stopProgress()
		fmt.Printf("%s–%s  RSS %5.1f MB  push %6s msg/s p99 %7.1f ms  pop p99 %7.1f ms  group lag %7s  keeping-up lag %6s  spool %s  errors %d %s\n",
			clock(iv.From), clock(iv.To), iv.RSSMB, fmtRate(iv.PushPerSec), iv.Push.P99, iv.Pop.P99, count(iv.GroupLag), count(iv.KeepLag),
			count(iv.Spooled), iv.Errors, iv.Fault)
		stopProgress = startProgress(cfg.label(), nil, func() string {
			return fmt.Sprintf("%s  pushed %s  group lag %s  errors %d", clock((now() - start).Seconds()), count(led.expected()),
				count(led.expected()-lagGot.Load()), errs.total())
		})
	}
	wg.Wait()
	consumers.Wait()
	<-faultsDone
	stopProgress()
	r.Seconds = (now() - start).Seconds()

	fig.Pushed, fig.GroupReceived = led.expected(), lagGot.Load()
	var faultErrs int64
	for _, f := range fig.Faults {
		faultErrs += f.Errors
		if f.Answered < 0 {
			r.fail(fmt.Sprintf("the broker did not answer pushes within %v of the %s restart at %s", faultAnswerLimit, f.Kind, clock(f.At)))
		}
	}
	// What the keeping-up consumers had not received when the pushes stopped.
	before := keep.count.Load()
	drain(ctx, cfg.label(), c, queue, keep, led.expected(), &errs)
	r.fail(keep.check(led)...)
	r.Errors = errs.snapshot()
	fig.UnexpectedErrors = errs.total() - faultErrs
	if fig.UnexpectedErrors > 0 {
		r.fail(fmt.Sprintf("%d requests failed outside the faults' windows; first error of the run: %s", fig.UnexpectedErrors, r.Errors.First))
	}
	if led.expected() == 0 {
		r.fail("no message was pushed")
	}
	r.Messages = led.expected()
	r.MsgPerSec = float64(r.Messages) / r.Seconds
	r.Latency = percentiles(allPush...)
	if t.PGConn != "" {
		if fig.Tables, err = tableSizes(ctx, t.PGConn); err != nil {
			r.note("cannot read the table sizes: %v", err)
		}
	}
	r.note("pushed %s (%s queued or buffered), keeping-up consumers received every one: %s during the run, %s drained after it",
		count(led.expected()), count(led.expected()), count(before), count(keep.count.Load()-before))
	r.note("group %q received %s, lag at the end %s; %d faults, %d failed requests inside their windows",
		lagGroup, count(fig.GroupReceived), count(fig.Pushed-fig.GroupReceived), len(fig.Faults), faultErrs)
	for _, f := range fig.Faults {
		r.note("%s restart at %s: pushes answered again after %.1f s, queued (not spooled) again after %.1f s; %d failed requests",
			f.Kind, clock(f.At), f.Answered, f.Stored, f.Errors)
	}
	for _, ts := range fig.Tables {
		r.note("table %-28s total %9s  heap %9s  indexes %9s  live %s  dead %s", ts.Name, fmtBytes(ts.Total), fmtBytes(ts.Heap),
			fmtBytes(ts.Indexes), count(ts.LiveTuple), count(ts.DeadTuple))
	}
	return r.done(), nil
}

// soakKeepUp pops 100 and acks, retrying an ack that fails (a restart in between) until it is
// answered, as a client that wants each message once must: an unanswered ack leaves the
// message leased, to be delivered again when the lease expires.
func soakKeepUp(ctx context.Context, c *client, queue string, g *groupLog, lats *timedLats, errs *errorCounts, running func() bool) {
	cn := c.conn()
	path := popParams{queue: queue, batch: 100, wait: true, timeout: time.Second}.path()
	var body []byte
	for running() {
		sent := now()
		msgs, err := cn.pop(path)
		if err != nil {
			errs.note(err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		recv := now()
		lats.add(recv-sent, len(msgs))
		g.record(msgs, sent, recv)
		body = ackBody(body[:0], msgs, "")
		for try := 0; ctx.Err() == nil; try++ {
			failed, err := cn.ack(body, len(msgs))
			if err == nil {
				if failed > 0 {
					errs.items.Add(int64(failed))
					errs.firstIs(fmt.Sprintf("%d of %d acks answered success:false", failed, len(msgs)))
				}
				break
			}
			errs.note(err)
			if try > 600 { // two minutes: the broker is not coming back
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// faultAnswerLimit is how long a restarted broker may take to answer pushes again; pushes
// answered buffered then may go on until the run's end.
const faultAnswerLimit = 2 * time.Minute

// soakFault strikes one fault and waits until a push is answered (queued or buffered), for
// faultAnswerLimit at most, and then until one is answered queued (a probe to a queue of its
// own), until end at the latest, then faultGrace more; it counts the failed requests of that
// window.
func soakFault(ctx context.Context, c *client, rig soakRig, kind string, errs *errorCounts, at, end time.Duration) SoakFault {
	f := SoakFault{Kind: kind, At: at.Seconds(), Answered: -1, Stored: -1}
	before := errs.total()
	struck := now()
	var err error
	switch kind {
	case "pg":
		err = rig.restartPG(ctx)
	case "broker":
		err = rig.restartBroker(ctx)
	}
	if err != nil {
		errs.note(fmt.Errorf("cannot restart the %s: %w", kind, err))
		return f
	}
	probe := freshQueue("soak-probe")
	cn := c.conn()
	body := []byte(`{"items":[{"queue":"` + probe + `","payload":{}}]}`)
	// Until the first answer the limit bounds the wait, even past the run's end (a restart
	// late in a short run on a busy machine); after it, the run's end does.
	for limit := now() + faultAnswerLimit; ctx.Err() == nil && now() < limit && (f.Answered < 0 || now() < end); time.Sleep(100 * time.Millisecond) {
		res, err := cn.push(body, 1)
		if err != nil {
			continue
		}
		if f.Answered < 0 {
			f.Answered = (now() - struck).Seconds()
		}
		if res[0].Status == "queued" {
			f.Stored = (now() - struck).Seconds()
			break
		}
	}
	sleepCtx(ctx, faultGrace)
	f.Errors = errs.total() - before
	return f
}

// tableSizes reads the sizes of the broker's tables, largest first.
func tableSizes(ctx context.Context, pgConn string) ([]TableSize, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgConn)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT n.nspname || '.' || c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname LIKE 'queen%' AND c.relkind IN ('r', 'p')
ORDER BY pg_total_relation_size(c.oid) DESC
LIMIT 12`)
	if err != nil {
		return nil, fmt.Errorf("cannot read the table sizes: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (TableSize, error) {
		var ts TableSize
		err := row.Scan(&ts.Name, &ts.Total, &ts.Heap, &ts.Indexes, &ts.LiveTuple, &ts.DeadTuple)
		return ts, err
	})
}
