package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The scale scenario measures what push, pop+ack and autoAck pop cost as one dimension of the
// work grows while the others stay at their smallest: partitions of a queue, queues, consumer
// groups reading one queue, messages waiting before the run, brokers on one PostgreSQL. Each
// point runs on brokers and a PostgreSQL of its own, so no point inherits another's rows.

// scaleLayout is the shape of the work at one point.
type scaleLayout struct {
	Partitions int `json:"partitions"` // per queue
	Queues     int `json:"queues"`
	Groups     int `json:"groups"`  // consumer groups reading every message; 0: queue mode
	Backlog    int `json:"backlog"` // messages waiting before the run, beyond what the pops use
	Brokers    int `json:"brokers"` // on one PostgreSQL, the load spread over them
}

// scaleDim is one dimension: its values and where a value goes in the layout.
type scaleDim struct {
	name   string
	values []int
	set    func(*scaleLayout, int)
}

// scaleDims are the dimensions in the order a full run measures them. The smallest layout has
// the consumers in queue mode; the groups dimension starts at one named group.
var scaleDims = []scaleDim{
	{"partitions", []int{10, 1000, 10_000, 100_000}, func(l *scaleLayout, v int) { l.Partitions = v }},
	{"queues", []int{1, 100, 1000}, func(l *scaleLayout, v int) { l.Queues = v }},
	{"groups", []int{1, 10, 50}, func(l *scaleLayout, v int) { l.Groups = v }},
	{"backlog", []int{0, 1_000_000, 5_000_000}, func(l *scaleLayout, v int) { l.Backlog = v }},
	{"brokers", []int{1, 2, 3}, func(l *scaleLayout, v int) { l.Brokers = v }},
}

func smallestLayout() scaleLayout { return scaleLayout{Partitions: 10, Queues: 1, Brokers: 1} }

func findDim(name string) (scaleDim, bool) {
	for _, d := range scaleDims {
		if d.name == name {
			return d, true
		}
	}
	return scaleDim{}, false
}

var scaleScenario = scenario{
	name:      "scale",
	help:      "push, pop+ack and autoAck pop as one dimension grows, the others at their smallest:\n--dim partitions,queues,groups,backlog,brokers (default all), --values 10,1k,...\n(one dimension), --duration per operation; fresh brokers and PostgreSQL per point;\n--charts DIR writes one SVG per dimension",
	own:       []string{"dim", "values", "charts"},
	defaults:  map[string]string{"duration": "10s"},
	ownBroker: "scale starts brokers and a PostgreSQL of its own for every point",
	check:     (*options).checkScale,
	run: func(ctx context.Context, o *options, rep *Report) {
		cfg := ScaleConfig{Dims: o.dims, Values: o.values, Batch: o.batch, Size: o.size, Conns: o.conns, Consumers: o.consumers,
			Duration: o.duration, Warmup: o.warmup, AckRate: scaleAckRate, AutoRate: scaleAutoRate, Env: o.env}
		rep.Results = runScale(ctx, cfg)
		rep.Ratios = scaleRatios(rep.Results)
	},
}

// checkScale resolves --dim and --values.
func (o *options) checkScale() error {
	if o.dimList == "" {
		for _, d := range scaleDims {
			o.dims = append(o.dims, d.name)
		}
	} else {
		o.dims = strings.Split(o.dimList, ",")
	}
	for _, d := range o.dims {
		if _, ok := findDim(d); !ok {
			return fmt.Errorf("--dim: unknown dimension %q", d)
		}
	}
	if o.valueList == "" {
		return nil
	}
	if len(o.dims) != 1 {
		return errors.New("--values needs exactly one --dim")
	}
	v, err := parseValues(o.valueList)
	if err != nil {
		return fmt.Errorf("--values: %w", err)
	}
	for _, n := range v {
		if n < 1 && o.dims[0] != "backlog" {
			return fmt.Errorf("--values: %s must be at least 1", o.dims[0])
		}
	}
	o.values = v
	return nil
}

// ScaleConfig is one run of the scale scenario: Dims to measure (all when empty), Values
// overriding the dimension's own (with one dimension only), each operation of each point
// measured for Duration after Warmup. Producers push Batch × Size over every partition of the
// point from Conns connections; Consumers pop Batch (spread over the groups, at least one each).
type ScaleConfig struct {
	Dims      []string      `json:"dimensions"`
	Values    []int         `json:"values,omitempty"`
	Batch     int           `json:"batch"`
	Size      int           `json:"size"`
	Conns     int           `json:"conns"`
	Consumers int           `json:"consumers"`
	Duration  time.Duration `json:"durationNs"`
	Warmup    time.Duration `json:"warmupNs"`
	// AckRate and AutoRate size the pre-fill of the pops (all groups together): enough for
	// consumers at about these msg/s to be measured for the whole window rather than drain the
	// queue early; a faster broker ends the window early, which is noted.
	AckRate  int `json:"ackRate"`
	AutoRate int `json:"autoAckRate"`
	// Start starts the n brokers of one point on a fresh PostgreSQL and returns their targets
	// and how to stop them; nil: startBrokers with Env.
	Start func(ctx context.Context, n int) ([]*Target, func() error, error) `json:"-"`
	Env   []string                                                          `json:"-"`
}

// start starts the brokers of one point.
func (c ScaleConfig) start(ctx context.Context, n int) ([]*Target, func() error, error) {
	if c.Start != nil {
		return c.Start(ctx, n)
	}
	set, err := startBrokers(ctx, "", c.Env, true, n)
	if err != nil {
		return nil, nil, err
	}
	var ts []*Target
	for _, b := range set.brokers {
		ts = append(ts, b.t)
	}
	return ts, set.stop, nil
}

// ScaleFigures are what a scale result adds to the common ones.
type ScaleFigures struct {
	Dimension string      `json:"dimension"`
	Value     int         `json:"value"`
	Operation string      `json:"operation"` // push, pop+ack, autoAck
	Layout    scaleLayout `json:"layout"`
	// PopPartitions is the pop's partitions parameter: enough partitions for a full batch at
	// the pre-filled depth, so that every point serves full batches.
	PopPartitions  int     `json:"popPartitions,omitempty"`
	MsgPerPop      float64 `json:"msgPerPop,omitempty"`    // pops that brought messages
	EmptyPops      int64   `json:"emptyPops,omitempty"`    // in the window, that brought nothing or failed
	Prefilled      int64   `json:"prefilled"`              // messages pushed before the pops
	PrefillSeconds float64 `json:"prefillSeconds"`         // of the point's setup
	SetupSeconds   float64 `json:"setupSeconds"`           // brokers started and pre-fill
	DepthAtStart   int64   `json:"depthAtStart"`           // messages waiting when the operation began
	Seconds        float64 `json:"pointSeconds,omitempty"` // the whole point, on its first result
}

// scale operations, in the order each point runs them.
const (
	opPopAck  = "pop+ack"
	opAutoAck = "autoAck"
	opPush    = "push"
)

var scaleOps = []string{opPush, opPopAck, opAutoAck}

// The pre-fill rates of a run: a little above what this machine reaches at 10 partitions
// (pop+ack 52–64k, autoAck 81–102k msg/s in the eighth round). A pre-fill sized for slower
// consumers is drained before the window ends; at 10k partitions the autoAck phase then spent
// its last seconds on the few messages the pop+ack phase left in every other partition, two
// partitions a pop, and measured that drain (58–71 messages a pop) instead of pops of
// partitions with data (100 a pop).
const scaleAckRate, scaleAutoRate = 60_000, 120_000

// scalePoint runs the three operations at one layout on brokers of its own.
func scalePoint(ctx context.Context, cfg ScaleConfig, dim string, value int, l scaleLayout) (out []*Result, err error) {
	started := time.Now()
	targets, stop, err := cfg.start(ctx, l.Brokers)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	t := targets[0] // counts the others' CPU with its own
	var clients []*client
	for _, b := range targets {
		c, err := b.client()
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	prefix := freshQueue("scale")
	queues := make([]string, l.Queues)
	for i := range queues {
		queues[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	parts := partitionNames(l.Queues * l.Partitions)
	groups := groupNames(l.Groups)
	perGroup := func(rate int) int64 {
		return max(1000, int64(float64(rate)*(cfg.Warmup+cfg.Duration).Seconds())/int64(len(groups)))
	}
	wAck, wAuto := perGroup(cfg.AckRate), perGroup(cfg.AutoRate)
	total := wAck + wAuto + int64(l.Backlog)
	depth := max(1, total/int64(len(parts)))
	popParts := popPartitions(cfg.Batch, depth)
	led := newLedger(fillProducers + cfg.Conns)
	var errs errorCounts
	label := func(op string) string { return fmt.Sprintf("%s=%s %s", dim, short(value), op) }

	fillSecs, err := fill(ctx, label("pre-fill"), clients, queues, parts, cfg.Size, total, int(min(fillBatch, depth)), led, &errs)
	if err != nil {
		return nil, err
	}
	prefilled := led.expected()
	setup := time.Since(started).Seconds()
	fmt.Printf("%-44s set up in %.1f s: %d broker(s) started, %s messages over %s partitions pre-filled in %.1f s (%s msg/s)\n",
		label("point"), setup, l.Brokers, count(prefilled), count(int64(len(parts))), fillSecs, fmtRate(float64(prefilled)/fillSecs))
	figures := func(op string, depthAtStart int64) *ScaleFigures {
		return &ScaleFigures{Dimension: dim, Value: value, Operation: op, Layout: l, Prefilled: prefilled,
			PrefillSeconds: fillSecs, SetupSeconds: setup, DepthAtStart: depthAtStart}
	}

	logs := make([]*groupLog, len(groups))
	for i, g := range groups {
		logs[i] = newGroupLog(g, parts, cfg.Size)
	}
	perGroupConsumers := max(1, cfg.Consumers/len(groups))
	rd := readers{clients: clients, queues: queues, partitions: popParts, turn: new(atomic.Int64)}
	for _, op := range []string{opPopAck, opAutoAck} {
		expect, autoAck := wAck, false
		if op == opAutoAck {
			expect, autoAck = wAck+wAuto, true
		}
		depthAtStart := prefilled - logs[0].count.Load()
		w := startWindow(ctx, t, cfg.Warmup, cfg.Duration)
		stopProgress := startProgress(label(op), w, func() string {
			return fmt.Sprintf("delivered %s  errors %d", count(logs[0].count.Load()), errs.total())
		})
		st := runConsumers(rd, logs, perGroupConsumers, cfg.Batch, autoAck, expect, w, &errs)
		stopProgress()
		r := newResult("scale", label(op), t, cfg)
		w.finish(r)
		r.setRates(st.msgs.Load(), st.reqs.Load())
		r.Latency = percentiles(st.lats...)
		r.Scale = figures(op, depthAtStart)
		r.Scale.PopPartitions = popParts
		if r.Latency.N > 0 {
			r.Scale.MsgPerPop = float64(r.Messages) / float64(r.Latency.N)
		}
		reqsPerCycle := int64(2) // pop and ack
		if autoAck {
			reqsPerCycle = 1
		}
		r.Scale.EmptyPops = st.reqs.Load() - reqsPerCycle*int64(r.Latency.N)
		mode := "queue mode"
		if l.Groups > 0 {
			mode = fmt.Sprintf("%d group(s)", l.Groups)
		}
		r.note("%s, %d consumer(s) each, pops of %d over up to %d partition(s): %.1f messages per pop that brought any, %d pop(s) empty",
			mode, perGroupConsumers, cfg.Batch, popParts, r.Scale.MsgPerPop, r.Scale.EmptyPops)
		if w.endedEarly() {
			r.note("the groups took their %s messages after %.1f s of the %.1f s window: the rate is over that time", count(expect), r.Seconds, cfg.Duration.Seconds())
		}
		out = append(out, r)
	}
	// Every group but the first is checked now, against the pre-fill: the pushes that follow
	// are drained by the first group only, not by fifty.
	fillRows := &ledger{rows: led.rows[:fillProducers]}
	for _, g := range logs[1:] {
		drainAll(ctx, label("verify"), clients[0], queues, g, prefilled, &errs)
		out[len(out)-1].fail(g.check(fillRows)...)
	}

	depthAtPush := prefilled - logs[0].count.Load()
	// On top of what the pops left waiting.
	ps := pushers{clients: clients, queues: queues, parts: parts, size: cfg.Size, batch: cfg.Batch, conns: cfg.Conns, firstID: fillProducers}
	r := ps.measure(ctx, t, newResult("scale", label(opPush), t, cfg), cfg.Warmup, cfg.Duration, led, &errs)
	r.Scale = figures(opPush, depthAtPush)
	out = append([]*Result{r}, out...)

	drainAll(ctx, label("verify"), clients[0], queues, logs[0], led.expected(), &errs)
	fails := logs[0].check(led)
	for _, r := range out {
		r.fail(fails...)
		r.setErrors(&errs)
		if len(fails) == 0 {
			r.note("verified with the point: all %s messages delivered to %s once, intact, in order per partition and producer",
				count(led.expected()), logs[0].name)
		}
		r.done()
	}
	out[0].Scale.Seconds = time.Since(started).Seconds()
	return out, nil
}

// drainAll drains what is left for group g: a single queue until expect, several queues each
// until it answers empty (nothing else consumes them by now). The pops claim as many partitions
// as a batch of 1000 needs at the point's depth.
func drainAll(ctx context.Context, label string, c *client, queues []string, g *groupLog, expect int64, errs *errorCounts) {
	depth := max(1, expect/int64(len(g.partitions)))
	pop := popParams{group: g.group, batch: 1000, autoAck: true, partitions: int(min(1000, (1000+depth-1)/depth))}
	for _, q := range queues {
		pop.queue = q
		until := expect
		if len(queues) > 1 {
			until = g.count.Load()
		}
		drainPops(ctx, label, c, pop, g, until, errs)
	}
}

// ScaleRatio is one of the targets of the scale run: an operation's msg/s at one value of a dimension
// over its msg/s at another.
type ScaleRatio struct {
	Dimension string   `json:"dimension"`
	Operation string   `json:"operation"`
	Value     int      `json:"value"`
	Base      int      `json:"base"`
	Ratio     float64  `json:"ratio"`
	Target    *float64 `json:"target,omitempty"` // at least; nil: "unaffected", shown only
	Met       *bool    `json:"met,omitempty"`
}

// scaleTargets are the ratios the scale run is held to.
var scaleTargets = []struct {
	dim         string
	ops         []string
	value, base int
	target      float64 // 0: no threshold
}{
	{"partitions", []string{opPopAck, opAutoAck}, 10_000, 10, 0.8},
	{"partitions", []string{opPopAck, opAutoAck}, 100_000, 10, 0.6},
	{"backlog", []string{opPush}, 5_000_000, 0, 0},
	{"brokers", []string{opPush, opPopAck, opAutoAck}, 3, 1, 1},
}

// scaleRatios computes the targets the results hold both ends of.
func scaleRatios(results []*Result) []ScaleRatio {
	rate := func(dim, op string, v int) (float64, bool) {
		for _, r := range results {
			if s := r.Scale; s != nil && s.Dimension == dim && s.Operation == op && s.Value == v && r.Verified && r.MsgPerSec > 0 {
				return r.MsgPerSec, true
			}
		}
		return 0, false
	}
	var out []ScaleRatio
	for _, tg := range scaleTargets {
		for _, op := range tg.ops {
			a, okA := rate(tg.dim, op, tg.value)
			b, okB := rate(tg.dim, op, tg.base)
			if !okA || !okB {
				continue
			}
			sr := ScaleRatio{Dimension: tg.dim, Operation: op, Value: tg.value, Base: tg.base, Ratio: a / b}
			if tg.target > 0 {
				target, met := tg.target, a/b >= tg.target
				sr.Target, sr.Met = &target, &met
			}
			out = append(out, sr)
		}
	}
	return out
}

// runScale runs the points of every dimension asked for, each line printed as it completes.
func runScale(ctx context.Context, cfg ScaleConfig) []*Result {
	var out []*Result
	for _, name := range cfg.Dims {
		d, _ := findDim(name)
		values := d.values
		if len(cfg.Values) > 0 {
			values = cfg.Values
		}
		for _, v := range values {
			if ctx.Err() != nil {
				return out
			}
			l := smallestLayout()
			d.set(&l, v)
			rs, err := scalePoint(ctx, cfg, d.name, v, l)
			if err != nil {
				r := &Result{Scenario: "scale", Label: fmt.Sprintf("%s=%s", d.name, short(v))}
				r.fail(err.Error())
				rs = []*Result{r.done()}
			}
			for _, r := range rs {
				printLine(r)
			}
			out = append(out, rs...)
		}
	}
	return out
}

func printRatios(out io.Writer, ratios []ScaleRatio) {
	if len(ratios) == 0 {
		return
	}
	fmt.Fprintln(out, "\ntargets:")
	for _, r := range ratios {
		verdict := "(unaffected: shown only)"
		if r.Target != nil {
			verdict = fmt.Sprintf("target >= %.1f: %s", *r.Target, map[bool]string{true: "met", false: "NOT met"}[*r.Met])
		}
		fmt.Fprintf(out, "  %-10s %-8s %s / %s = %.2f  %s\n", r.Dimension, r.Operation, short(r.Value), short(r.Base), r.Ratio, verdict)
	}
}

// parseValues reads a comma-separated list of counts (100k and 5M allowed).
func parseValues(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			f, mult = strings.TrimSuffix(f, "k"), 1000
		case strings.HasSuffix(f, "M"):
			f, mult = strings.TrimSuffix(f, "M"), 1_000_000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// short formats a dimension's value as it is written on the command line: 100k, 5M.
func short(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
